"""Seeded random storms through the horizontal pass, run on CPU by Triton's interpreter.

Each case is a seed. Its outputs, in-place updates and gradients must equal stock Inductor's (the same kernels
unmerged) to float rounding, and eager's to the precision of their dtype wherever stock's are that close. The generator mixes what the pass meets
in models: ragged row counts and widths that differ, transposed, sliced and split inputs, an input two members
share, fp32/bf16/fp16, pointwise ops, row reductions, layer norm, softmax, results returned as a tuple, a cat or a
sum each, in-place updates of inputs; and, in the odd cases, integer, bool and float64 tensors, expanded and
offset views, reductions over the first dimension, scans, argmax, 0-d CPU tensors, training and dynamic shapes.
"""

import contextlib
import functools
import random

import pytest
import torch
import torch.nn.functional as F

import optimus_ir
from optimus_ir.interpret import cpu_triton_interpreter
from optimus_ir.records import recording

RULE = "IdenticalKernelsToMemberTableKernel"
STORMS = range(24)
ODD_CASES = range(16)

POINTWISE = {
    "tanh": torch.tanh,
    "gelu": F.gelu,
    "silu": F.silu,
    "affine": lambda x: x * 1.5 + 0.25,
    "sqrt_abs": lambda x: torch.sqrt(x.abs() + 1),
}
ROW_WISE = {
    "sum": lambda x: x.sum(-1),
    "amax": lambda x: x.amax(-1),
    "var": lambda x: x.var(-1),
    "softmax": lambda x: torch.softmax(x, -1),
    "log_softmax": lambda x: F.log_softmax(x, -1),
    "layer_norm": lambda x: F.layer_norm(x, x.shape[-1:]),
    "rms_norm": lambda x: x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6),
}


def storm(seed: int, device: str = "cpu"):
    """``(fn, inputs, description)``: 2-6 members, each one op on its own input (or a shared one), on ``device``."""
    rng = random.Random(seed)
    generator = torch.Generator().manual_seed(seed)
    count = rng.randint(2, 6)
    kind = rng.choice(["pointwise", "row_wise", "weighted"])
    op = rng.choice(list(POINTWISE if kind == "pointwise" else ROW_WISE if kind == "row_wise" else ["mul", "add"]))
    dtype = rng.choice([torch.float32, torch.float32, torch.bfloat16, torch.float16])
    rows = [rng.choice([1, 3, 17, 64, 130]) for _ in range(count)]
    if rng.random() < 0.5:
        rows = rows[:1] * count
    width = rng.choice([8, 32, 100, 256])
    widths = [width if kind != "pointwise" or rng.random() < 0.6 else rng.choice([8, 32]) for _ in range(count)]
    layouts = [rng.choice(["plain", "plain", "transposed", "sliced", "split", "shared"]) for _ in range(count)]
    layouts[0] = "plain"
    returns = rng.choice(["tuple", "tuple", "sum_each", "in_place", "cat"])

    def randn(*shape):
        return torch.randn(*shape, generator=generator).to(device, dtype)

    inputs = [randn(sum(rows), max(widths) + 4)]  # the tensor the "split" members are pieces of
    inputs += [randn(w) for w in widths]  # a weight each
    sources = []
    for i, (r, w, layout) in enumerate(zip(rows, widths, layouts)):
        if layout == "shared" and (r, w) == (rows[0], widths[0]):
            sources.append(("shared", 0))
        elif layout in ("transposed", "sliced"):
            inputs.append(randn(w, r) if layout == "transposed" else randn(r, w + 3))
            sources.append((layout, len(inputs) - 1))
        elif layout == "split":
            sources.append(("split", sum(rows[:i])))
        else:
            inputs.append(randn(r, w))
            sources.append(("plain", len(inputs) - 1))

    def fn(*args):
        xs = []
        for i, (layout, at) in enumerate(sources):
            if layout == "split":
                xs.append(args[0][at : at + rows[i], : widths[i]])
            elif layout == "shared":
                xs.append(xs[at])
            elif layout == "transposed":
                xs.append(args[at].t())
            elif layout == "sliced":
                xs.append(args[at][:, 1 : 1 + widths[i]])
            else:
                xs.append(args[at])
        outs = []
        for i, x in enumerate(xs):
            if returns == "in_place" and sources[i][0] == "plain":
                outs.append(x.mul_(0.5).add_(1.0))
            elif kind == "pointwise":
                outs.append(POINTWISE[op](x))
            elif kind == "row_wise":
                outs.append(ROW_WISE[op](x))
            else:
                outs.append(x * args[1 + i] + 1 if op == "mul" else torch.tanh(x + args[1 + i]))
        if returns == "sum_each":
            return tuple(o.float().sum() for o in outs)
        if returns == "cat" and len({o.shape[1:] for o in outs}) == 1:
            return torch.cat(outs)
        return tuple(outs)

    return fn, inputs, dict(kind=kind, op=op, dtype=dtype, rows=rows, widths=widths, layouts=layouts, returns=returns)


def odd_case(seed: int, device: str = "cpu"):
    """``(fn, inputs, description)``: 2-5 members of an odd kind (see the module's docstring), on ``device`` (0-d
    tensors on the CPU)."""
    rng = random.Random(10_000 + seed)
    generator = torch.Generator().manual_seed(seed)
    count, rows, width = rng.randint(2, 5), rng.choice([3, 17, 64]), rng.choice([8, 32, 100])
    kind = list(_ODD_KINDS)[seed % len(_ODD_KINDS)]
    make_inputs, member = _ODD_KINDS[kind]

    def randn(*shape, dtype=torch.float32, requires_grad=False):
        return torch.randn(*shape, generator=generator, dtype=dtype).to(device).requires_grad_(requires_grad)

    inputs = make_inputs(randn, count, rows, width, rng)
    if kind in ("training", "dynamic"):
        op = rng.choice(["layer_norm", "tanh", "softmax"])

        def fn(*xs):
            outs = tuple(member(x, w, op) for x, w in zip(xs[:count], xs[count:]))
            return sum((o * o).mean() for o in outs) if kind == "training" else outs

    elif kind == "0d_cpu_tensors":

        def fn(*xs):
            return tuple(x * number for x, number in zip(xs[:count], xs[count:]))

    else:

        def fn(*xs):
            return tuple(member(x, i) for i, x in enumerate(xs))

    return fn, inputs, dict(kind=kind, count=count, rows=rows, width=width)


def _weighted_member(x, w, op):
    if op == "layer_norm":
        return F.layer_norm(x, x.shape[-1:], w)
    return torch.tanh(x * w) if op == "tanh" else torch.softmax(x * w, -1)


def _plain(randn, count, rows, width, rng):
    return [randn(rows, width) for _ in range(count)]


def _with_weights(requires_grad):
    def make(randn, count, rows, width, rng):
        xs = [randn(rng.choice([3, 17, 64]), width, requires_grad=requires_grad) for _ in range(count)]
        return xs + [randn(width, requires_grad=requires_grad) for _ in range(count)]

    return make


#: kind: (inputs of ``count`` members, what a member computes)
_ODD_KINDS = {
    "int": (
        lambda randn, count, rows, width, rng: [(randn(rows, width) * 20).long() for _ in range(count)],
        lambda x, i: (x * 3 + 1) // 2,
    ),
    "bool": (_plain, lambda x, i: (x > 0) & (x < 1)),
    "float64": (
        lambda randn, count, rows, width, rng: [randn(rows, width, dtype=torch.float64) for _ in range(count)],
        lambda x, i: torch.tanh(x).sum(-1),
    ),
    "expanded": (
        lambda randn, count, rows, width, rng: [randn(1, width).expand(rows, width) for _ in range(count)],
        lambda x, i: torch.sigmoid(x) * torch.arange(x.shape[0], device=x.device)[:, None],
    ),
    "offset_view": (
        lambda randn, count, rows, width, rng: [randn(rows * width + 7)[3 + i :].view(-1)[: rows * width]
                                                .view(rows, width) for i in range(count)],
        lambda x, i: torch.tanh(x),
    ),
    "first_dim_sum": (_plain, lambda x, i: x.sum(0)),
    "cumsum": (_plain, lambda x, i: torch.cumsum(x, -1)),
    "argmax": (_plain, lambda x, i: x.argmax(-1)),
    "0d_cpu_tensors": (
        lambda randn, count, rows, width, rng: _plain(randn, count, rows, width, rng)
        + [torch.tensor(rng.choice([0.5, 2.0, rng.random()])) for _ in range(count)],
        None,
    ),
    "mixed_dtypes": (
        lambda randn, count, rows, width, rng: [randn(rows, width).to(rng.choice([torch.float32, torch.bfloat16]))
                                                for _ in range(count)],
        lambda x, i: F.gelu(x).float(),
    ),
    "training": (_with_weights(True), _weighted_member),
    "dynamic": (_with_weights(False), _weighted_member),
}


def run_compiled(fn, inputs, horizontal: bool, dynamic: bool = False, backward: bool = False):
    """Compile ``fn`` (with the horizontal pass or stock) and call it on fresh copies of ``inputs``, on CPU in the
    interpreter: ``(outputs or gradients, inputs after, the pass's records)``."""
    inputs = [x.detach().clone().requires_grad_(x.requires_grad) for x in inputs]
    torch._dynamo.reset()
    on_cpu = all(x.device.type == "cpu" for x in inputs)
    interpreter = cpu_triton_interpreter() if on_cpu else contextlib.nullcontext()
    with optimus_ir.enabled("horizontal" if horizontal else None), interpreter, recording() as records:
        out = torch.compile(fn, dynamic=dynamic or None)(*inputs)
        if backward:
            out.backward()
            out = tuple(x.grad for x in inputs)
    return (out if isinstance(out, tuple) else (out,)), inputs, [r for r in records if r.rule == RULE]


def run_eager(fn, inputs, backward: bool = False):
    """``fn`` in eager mode on fresh copies of ``inputs``: ``(outputs or gradients, inputs after)``."""
    inputs = [x.detach().clone().requires_grad_(x.requires_grad) for x in inputs]
    out = fn(*inputs)
    if backward:
        out.backward()
        out = tuple(x.grad for x in inputs)
    return (out if isinstance(out, tuple) else (out,)), inputs


def low_precision(description) -> bool:
    """Whether eager rounds the case's intermediate results to a 16-bit dtype where Inductor's kernels keep fp32
    (the case's dtype; mixed: gelu of bf16 before the cast)."""
    return description.get("dtype") in (torch.bfloat16, torch.float16) or description["kind"] == "mixed_dtypes"


def _assert_same(actual, stock, eager, eager_tolerance):
    for a, s, e in zip(actual, stock, eager, strict=True):
        assert a.dtype == s.dtype == e.dtype and a.shape == s.shape == e.shape
        if not a.dtype.is_floating_point:
            assert torch.equal(a, s) and torch.equal(a, e)
            continue
        torch.testing.assert_close(a, s, atol=1e-6, rtol=1e-5)  # the same kernels, merged
        if torch.allclose(s.double(), e.double(), **eager_tolerance):  # (a long 16-bit sum may be beyond it)
            torch.testing.assert_close(a, e, **eager_tolerance)


@functools.cache
def _checked(case: str, seed: int) -> bool:
    """Check one case; whether the pass merged any of its kernels."""
    fn, inputs, description = (storm if case == "storm" else odd_case)(seed)
    dynamic, backward = description["kind"] == "dynamic", description["kind"] == "training"
    eager_tolerance = dict(atol=2e-2, rtol=2e-2) if low_precision(description) else dict(atol=1e-4, rtol=1e-4)
    actual, actual_inputs, records = run_compiled(fn, inputs, True, dynamic, backward)
    stock, stock_inputs, _ = run_compiled(fn, inputs, False, dynamic, backward)
    eager, eager_inputs = run_eager(fn, inputs, backward)
    _assert_same(actual, stock, eager, eager_tolerance)
    _assert_same(actual_inputs, stock_inputs, eager_inputs, eager_tolerance)  # in-place updates
    assert not [r for r in records if "internal error" in r.detail], records
    return any(r.fired for r in records)


@pytest.mark.parametrize("seed", STORMS)
def test_random_storm_computes_what_stock_and_eager_compute(seed):
    _checked("storm", seed)


@pytest.mark.parametrize("seed", ODD_CASES)
def test_random_odd_case_computes_what_stock_and_eager_compute(seed):
    _checked("odd", seed)


def test_random_storms_do_merge():
    # the checks above would pass if nothing merged: most storms must, and odd cases of plain float members too
    merged = [seed for seed in STORMS if _checked("storm", seed)]
    assert len(merged) >= len(STORMS) // 2, merged
    assert _checked("odd", list(_ODD_KINDS).index("first_dim_sum"))
