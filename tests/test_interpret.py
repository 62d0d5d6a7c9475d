"""Numerics of Inductor's Triton kernels run on CPU by Triton's interpreter (optimus_ir.interpret)."""

import contextlib
import math
import os
import re

import pytest
import torch
import torch.nn.functional as F
import triton
import triton.language as tl
from torch._inductor.runtime import triton_helpers
from torch._inductor.utils import run_and_get_code
from triton.language.extra import libdevice
from triton.runtime import interpreter

from optimus_ir.interpret import INTERPRETER_LIBDEVICE, cpu_triton_interpreter

PERSISTENT = (37, 129)  # not powers of two: masks on both axes; rows fit in one block
LOOPED = (7, 5000)  # rows longer than a block: looped reductions


@contextlib.contextmanager
def _interpreted_launches():
    """Yields the names of the kernels that Triton's interpreter launches inside the block."""
    names = []
    launch = interpreter.GridExecutor.__call__

    def counting_launch(self, *args, **kwargs):
        names.append(self.fn.__name__)
        return launch(self, *args, **kwargs)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(interpreter.GridExecutor, "__call__", counting_launch)
        yield names


def _check(fn, *args, expect=(), reference=None, **tolerances):
    """Compiles ``fn`` under the interpreter, checks it against eager (``reference``, default ``fn``), that every
    Triton kernel in the generated code was run by the interpreter, and that the code contains each string of
    ``expect``. Returns the code."""
    with cpu_triton_interpreter(), _interpreted_launches() as launched:
        actual, (code,) = run_and_get_code(torch.compile(fn, fullgraph=True), *args)
    kernels = re.findall(r"^def (triton_\w+)\(", code, re.MULTILINE)
    assert "@triton.jit" in code and kernels, code
    assert set(kernels) <= set(launched), (kernels, launched)
    for fragment in expect:
        assert fragment in code, f"{fragment!r} not in:\n{code}"
    torch.testing.assert_close(actual, (reference or fn)(*args), equal_nan=True, **tolerances)
    return code


def _in_float32(fn):
    """Eager reference for a bfloat16 ``fn`` as Inductor computes it: in fp32, rounded to bf16 once at the end (eager
    bf16 kernels may round intermediates, which near zero exceeds assert_close's bf16 tolerance)."""
    return lambda x: fn(x.float()).bfloat16()


def _randn(shape, dtype=torch.float32):
    return torch.randn(shape, generator=torch.Generator().manual_seed(0)).to(dtype)


def _with_nonfinite(x):
    x = x.clone()
    x.view(-1)[::7] = math.nan
    x.view(-1)[3::11] = math.inf
    x.view(-1)[5::13] = -math.inf
    return x


POINTWISE = {
    "relu": (torch.relu, ()),
    "tanh": (torch.tanh, ("libdevice.tanh",)),
    "sigmoid": (torch.sigmoid, ()),
    "gelu": (F.gelu, ("libdevice.erf",)),
    "rsqrt": (lambda x: torch.rsqrt(x.abs() + 0.5), ("libdevice.rsqrt",)),
    "log1p": (lambda x: torch.log1p(x.abs()), ("libdevice.log1p",)),
    "pow": (lambda x: torch.pow(x.abs() + 0.5, x.flip(0)), ("libdevice.pow",)),
    "nan_to_num": (lambda x: torch.nan_to_num(_with_nonfinite(x), nan=0.5, posinf=2.0, neginf=-3.0),
                   ("libdevice.isnan",)),
    "atan2": (lambda x: torch.atan2(x, x.flip(1)), ("libdevice.atan2",)),
}


@pytest.mark.parametrize("name", POINTWISE)
def test_pointwise(name):
    fn, expect = POINTWISE[name]
    _check(fn, _randn(PERSISTENT), expect=expect)


@pytest.mark.parametrize("name", ["gelu", "tanh"])
def test_pointwise_bfloat16(name):
    fn, expect = POINTWISE[name]
    _check(fn, _randn(PERSISTENT, torch.bfloat16), expect=expect, reference=_in_float32(fn))


def test_bfloat16_rounding():
    """fp32 -> bf16 rounds to nearest even, as compiled Triton and eager do (the stock interpreter truncates)."""
    _check(lambda x: (x * 3).bfloat16(), _randn(PERSISTENT) * 10, rtol=0, atol=0)


def _layer_norm(x):
    weight = torch.linspace(0.5, 1.5, x.shape[-1], dtype=x.dtype)
    bias = torch.linspace(-1.0, 1.0, x.shape[-1], dtype=x.dtype)
    return F.layer_norm(x, x.shape[-1:], weight, bias)


REDUCTIONS = {
    "sum": (lambda x: x.sum(1), ()),
    "mean": (lambda x: x.mean(1), ()),
    "max": (lambda x: x.max(1), ("triton_helpers.max2", "triton_helpers.max_with_index")),
    "argmax": (lambda x: x.argmax(1), ("triton_helpers.max_with_index",)),
    "min_argmin": (lambda x: (x.amin(1), x.argmin(1)), ("triton_helpers.min2", "triton_helpers.min_with_index")),
    "var": (lambda x: x.var(1), ()),
    "layer_norm": (_layer_norm, ("libdevice.rsqrt",)),
    "softmax": (lambda x: x.softmax(1), ("triton_helpers.max2", "libdevice.exp")),
    "log_softmax": (lambda x: x.log_softmax(1), ("triton_helpers.max2",)),
    "full_sum": (lambda x: x.sum(), ()),
}


@pytest.mark.parametrize("shape", [PERSISTENT, LOOPED], ids=["persistent", "looped"])
@pytest.mark.parametrize("name", REDUCTIONS)
def test_reduction(name, shape):
    fn, expect = REDUCTIONS[name]
    code = _check(fn, _randn(shape), expect=expect)
    assert ("for r0_offset in" in code) == (shape == LOOPED or name == "full_sum")


@pytest.mark.parametrize("shape", [PERSISTENT, LOOPED], ids=["persistent", "looped"])
def test_welford(shape):
    """var and layer norm of long rows use Welford's algorithm (triton_helpers.welford_reduce / welford)."""
    code = _check(lambda x: (x.var(1), _layer_norm(x)), _randn(shape))
    assert ("triton_helpers.welford_reduce" in code) == (shape == LOOPED)


@pytest.mark.parametrize("shape", [PERSISTENT, LOOPED], ids=["persistent", "looped"])
@pytest.mark.parametrize("name", ["sum", "softmax", "layer_norm"])
def test_reduction_bfloat16(name, shape):
    fn, expect = REDUCTIONS[name]
    _check(fn, _randn(shape, torch.bfloat16), expect=expect, reference=_in_float32(fn))


def test_argmax_argmin_nan():
    """NaN wins max/min and its first index is returned (``not`` on blocks in triton_helpers.*_with_index)."""
    x = _randn(PERSISTENT)
    x[3, 7] = x[5, 100] = x[5, 3] = math.nan
    _check(lambda x: (x.max(1), x.min(1)), x, expect=("triton_helpers.max_with_index",))


def _online_softmax_kernel(x_ptr, max_ptr, sum_ptr, rnumel, RBLOCK: tl.constexpr):
    """Row max and sum of exp(x - max) by triton_helpers' online softmax, as Inductor emits it for CUDA and XPU."""
    row = tl.program_id(0)
    r = tl.arange(0, RBLOCK)[None, :]
    acc_max = tl.full([1, RBLOCK], float("-inf"), tl.float32)
    acc_sum = tl.zeros([1, RBLOCK], tl.float32)
    for offset in tl.range(0, rnumel, RBLOCK):
        mask = offset + r < rnumel
        x = tl.load(x_ptr + row * rnumel + offset + r, mask, other=float("-inf"))
        new_max, new_sum = triton_helpers.online_softmax_combine(acc_max, acc_sum, x, False)
        acc_max = tl.where(mask, new_max, acc_max)
        acc_sum = tl.where(mask, new_sum, acc_sum)
    row_max, row_sum = triton_helpers.online_softmax_reduce(acc_max, acc_sum, 1, False)
    tl.store(max_ptr + row + tl.arange(0, 1), row_max)
    tl.store(sum_ptr + row + tl.arange(0, 1), row_sum)


def test_online_softmax_helpers():
    """Inductor emits online softmax only for CUDA/XPU (post_grad.prepare_softmax_extra_check); its helpers run here."""
    x = _randn(LOOPED)
    row_max, row_sum = torch.empty(LOOPED[0]), torch.empty(LOOPED[0])
    with cpu_triton_interpreter():
        triton.jit(_online_softmax_kernel)[(LOOPED[0],)](x, row_max, row_sum, LOOPED[1], RBLOCK=1024)
    torch.testing.assert_close(row_max, x.amax(1))
    torch.testing.assert_close(row_sum, (x - x.amax(1, keepdim=True)).exp().sum(1))


@pytest.mark.parametrize("shape", [PERSISTENT, LOOPED], ids=["persistent", "looped"])
def test_reduction_non_contiguous(shape):
    x = _randn(shape[::-1]).t()  # reduce over the strided axis
    assert not x.is_contiguous()
    _check(lambda x: (x * 2).sum(1), x)


def test_backward_writing_over_a_donated_0d_saved_tensor():
    """The backward of ``x.sum() ** 2`` writes its 0-d gradient over the saved sum, a donated graph input: passed by
    address (as on a GPU), not by value (Inductor's rule for 0-d CPU inputs made the kernel ``tmp1 = in_out_ptr0``,
    which does not compile)."""

    def step(x):
        x = x.detach().requires_grad_()
        (x.sum() ** 2).backward()
        return x.grad

    x = _randn(PERSISTENT)
    with cpu_triton_interpreter():
        compiled = torch.compile(lambda x: x.sum() ** 2)
        x_compiled = x.clone().requires_grad_()
        compiled(x_compiled).backward()
    torch.testing.assert_close(x_compiled.grad, step(x))


def test_normal_compile_after_exit():
    """Leaving the context restores the C++ CPU backend and the interpreter, and compiled functions recompile."""
    def fn(x):
        return torch.rsqrt(x.abs() + 1)

    compiled = torch.compile(fn)
    x = _randn(PERSISTENT)
    interpret_env = os.environ.get("TRITON_INTERPRET")
    original_rsqrt = libdevice.rsqrt
    with cpu_triton_interpreter():
        _, (code,) = run_and_get_code(compiled, x)
        assert "libdevice.rsqrt" in code
    assert os.environ.get("TRITON_INTERPRET") == interpret_env
    assert libdevice.rsqrt is original_rsqrt
    assert torch._inductor.config.cpu_backend == "cpp"
    actual, (code,) = run_and_get_code(compiled, x)
    assert "@triton.jit" not in code and "cpp_fused" in code
    torch.testing.assert_close(actual, fn(x))


# libdevice: name -> (torch reference, argument domains). Domains: "any" in (-4, 4), "unit" in (-0.95, 0.95),
# "pos" in (0.1, 8.1), "ge1" in (1, 9), "int" int32 in [-8, 8], "special" nonfinite, zeros and ordinary values.
LIBDEVICE_REFERENCES = {
    "acos": (torch.acos, "unit"),
    "acosh": (torch.acosh, "ge1"),
    "asin": (torch.asin, "unit"),
    "asinh": (torch.asinh, "any"),
    "atan": (torch.atan, "any"),
    "atan2": (torch.atan2, "any any"),
    "atanh": (torch.atanh, "unit"),
    "ceil": (torch.ceil, "any"),
    "copysign": (torch.copysign, "any any"),
    "cos": (torch.cos, "any"),
    "cosh": (torch.cosh, "any"),
    "cyl_bessel_i0": (torch.special.i0, "any"),
    "cyl_bessel_i1": (torch.special.i1, "any"),
    "erf": (torch.erf, "any"),
    "erfc": (torch.erfc, "any"),
    "erfcx": (torch.special.erfcx, "any"),
    "erfinv": (torch.erfinv, "unit"),
    "exp": (torch.exp, "any"),
    "exp2": (torch.exp2, "any"),
    "expm1": (torch.expm1, "any"),
    "floor": (torch.floor, "any"),
    "fma": (lambda a, b, c: (a.double() * b + c).float(), "any any any"),
    "fmod": (torch.fmod, "any pos"),
    "hypot": (torch.hypot, "any any"),
    "ilogb": (lambda x: torch.frexp(x).exponent - 1, "any"),
    "isinf": (torch.isinf, "special"),
    "isnan": (torch.isnan, "special"),
    "j0": (torch.special.bessel_j0, "any"),
    "j1": (torch.special.bessel_j1, "any"),
    "ldexp": (lambda x, e: torch.ldexp(x, e).float(), "any int"),
    "lgamma": (torch.lgamma, "pos"),
    "llrint": (lambda x: torch.round(x).long(), "any"),
    "log": (torch.log, "pos"),
    "log10": (torch.log10, "pos"),
    "log1p": (torch.log1p, "pos"),
    "log2": (torch.log2, "pos"),
    "mul_rn": (torch.mul, "any any"),
    "nearbyint": (torch.round, "any"),
    "nextafter": (torch.nextafter, "any any"),
    "pow": (torch.pow, "pos any"),
    "rint": (torch.round, "any"),
    "rsqrt": (torch.rsqrt, "pos"),
    "signbit": (lambda x: torch.signbit(x).int(), "special"),
    "sin": (torch.sin, "any"),
    "sinh": (torch.sinh, "any"),
    "sqrt": (torch.sqrt, "pos"),
    "tan": (torch.tan, "any"),
    "tanh": (torch.tanh, "any"),
    "trunc": (torch.trunc, "any"),
    "y0": (torch.special.bessel_y0, "pos"),
    "y1": (torch.special.bessel_y1, "pos"),
}


def _domain(kind, n, seed):
    u = torch.rand(n, generator=torch.Generator().manual_seed(seed))
    if kind == "int":
        return (u * 17 - 8).floor().int()
    if kind == "special":
        return torch.tensor([math.nan, math.inf, -math.inf, 0.0, -0.0, -2.5, 3.0, 1e-30, -1e30] * 8)[:n]
    low, high = {"any": (-4, 4), "unit": (-0.95, 0.95), "pos": (0.1, 8.1), "ge1": (1, 9)}[kind]
    return low + (high - low) * u


def _libdevice_kernel(a_ptr, b_ptr, c_ptr, out_ptr, n, NAME: tl.constexpr, NARGS: tl.constexpr, BLOCK: tl.constexpr):
    offsets = tl.arange(0, BLOCK)
    mask = offsets < n
    args = (tl.load(a_ptr + offsets, mask), tl.load(b_ptr + offsets, mask), tl.load(c_ptr + offsets, mask))
    tl.store(out_ptr + offsets, getattr(libdevice, NAME)(*args[:NARGS]), mask)


def test_libdevice_references_cover_supported_functions():
    assert set(LIBDEVICE_REFERENCES) == INTERPRETER_LIBDEVICE


@pytest.mark.parametrize("name", sorted(INTERPRETER_LIBDEVICE))
def test_libdevice(name):
    reference, domains = LIBDEVICE_REFERENCES[name]
    n = 61
    args = [_domain(kind, n, seed) for seed, kind in enumerate(domains.split())]
    expected = reference(*args)
    padded = args + [torch.zeros(n)] * (3 - len(args))
    out = torch.empty_like(expected)
    with cpu_triton_interpreter():
        triton.jit(_libdevice_kernel)[(1,)](*padded, out, n, NAME=name, NARGS=len(args), BLOCK=64)
    torch.testing.assert_close(out, expected, equal_nan=True)
