"""IndependentMatmulsToGroupedMatmul, MatmulChainsToGroupedMlp and ``optimus_ir::grouped_mm`` / ``grouped_mlp``:
the kernels' numerics through Triton's
interpreter (dtypes, ragged sizes, members of different K, a shared input, transposed operands), what the rule
groups on the virtual sm_90 device (a depth per launch, forward and backward, symbolic batches), what it leaves
apart and why (large products, the peak), and a compiled model's numerics against eager."""

import contextlib
import re

import pytest
import torch
import torch.nn as nn

import optimus_ir
from optimus_ir import grouped_mm
from optimus_ir.inspect import compile_report
from optimus_ir.interpret import cpu_triton_interpreter
from optimus_ir.records import recording
from optimus_ir.testing.sm90 import compile_kernel_for_sm90

RULE = "IndependentMatmulsToGroupedMatmul"
GROUPED = "torch.ops.optimus_ir.grouped_mm.default"
GROUPED_CAT = "torch.ops.optimus_ir.grouped_mm_cat.default"
CHAIN_RULE = "MatmulChainsToGroupedMlp"
MLP = "torch.ops.optimus_ir.grouped_mlp.default"
MLP_CAT = "torch.ops.optimus_ir.grouped_mlp_cat.default"
#: relative error bounds against fp64, by dtype (fp32 without TF32)
BOUNDS = {torch.float32: 1e-5, torch.float16: 2e-3, torch.bfloat16: 1e-2}


class Towers(nn.Module):
    """Per-feature towers: Linear -> ReLU -> Linear on each feature's own input, outputs side by side."""

    def __init__(self, towers: int = 16, width: int = 32, hidden: int = 64, out: int = 16) -> None:
        super().__init__()
        self.towers = nn.ModuleList(
            nn.Sequential(nn.Linear(width, hidden), nn.ReLU(), nn.Linear(hidden, out)) for _ in range(towers)
        )

    def forward(self, *features: torch.Tensor) -> torch.Tensor:
        return torch.cat([tower(x) for tower, x in zip(self.towers, features)], 1)


def _relative_error(actual: torch.Tensor, expected: torch.Tensor) -> float:
    return ((actual.double() - expected).norm() / expected.norm().clamp_min(1e-30)).item()


@pytest.mark.parametrize("dtype", sorted(BOUNDS, key=str))
@pytest.mark.parametrize("bias, activation", [(True, "relu"), (False, "none")])
def test_kernel_computes_every_member_of_other_sizes_in_the_interpreter(dtype, bias, activation):
    torch.manual_seed(0)
    shared = torch.randn(37, 9, dtype=dtype)
    # (m, n, k): ragged tiles, a member of K other than the others', an empty member; a shared input; a weight
    # read transposed (as nn.Linear's) and a gradient-style transposed left operand
    a = [shared, shared, torch.randn(70, 5, dtype=dtype).t(), torch.randn(0, 33, dtype=dtype),
         torch.randn(64, 64, dtype=dtype)]
    b = [torch.randn(20, 9, dtype=dtype).t(), torch.randn(9, 3, dtype=dtype), torch.randn(70, 17, dtype=dtype),
         torch.randn(33, 8, dtype=dtype), torch.randn(64, 16, dtype=dtype)]
    c = [torch.randn(w.shape[1], dtype=dtype) if bias else None for w in b]
    out = [torch.full((x.shape[0], w.shape[1]), float("nan"), dtype=dtype) for x, w in zip(a, b)]
    with cpu_triton_interpreter():
        grouped_mm.launch(a, b, c, activation, out)
    for x, w, row, y in zip(a, b, c, out, strict=True):
        expected = x.double() @ w.double() + (0 if row is None else row.double())
        expected = expected.relu() if activation == "relu" else expected
        assert not y.isnan().any()
        if y.numel():
            assert _relative_error(y, expected) < BOUNDS[dtype]


@pytest.mark.parametrize("dtype, tf32", [("float32", False), ("float32", True), ("bfloat16", False),
                                         ("float16", False)])
def test_both_kernels_compile_for_sm90(dtype, tf32):
    # Triton's compiler, where the interpreter accepts code it refuses; the blocks the towers' calls take
    common = dict(MEMBERS=16, PAD=16, DTYPE=f"tl.{dtype}", HAS_BIAS=True, RELU=True, TF32=tf32, BLOCK_M=64,
                  BLOCK_K=32)
    mm = {**common, "BLOCK_N": 64}
    mlp = {**common, "HAS_BIAS2": True, "RELU2": False, "BLOCK_H": 64, "BLOCK_N": 16}
    for factory, constexprs in (("optimus_ir.grouped_mm:_kernel", mm), ("optimus_ir.grouped_mm:_mlp_kernel", mlp)):
        signature = {"table": "*i64", **dict.fromkeys(constexprs, "constexpr")}
        assert compile_kernel_for_sm90(factory, signature, constexprs) > 0


@pytest.mark.parametrize("interpreted", [True, False], ids=["interpreter", "aten"])
def test_cat_form_writes_each_member_into_its_columns(interpreted):
    # members of one row count and other widths (one transposed): the output is their cat along the columns
    torch.manual_seed(0)
    a = [torch.randn(37, 9), torch.randn(37, 70), torch.randn(5, 37).t()]
    b = [torch.randn(9, 20), torch.randn(3, 70).t(), torch.randn(5, 17)]
    c = [torch.randn(20), torch.randn(3), torch.randn(17)]
    with cpu_triton_interpreter() if interpreted else contextlib.nullcontext():
        got = grouped_mm.CAT_OP(a, b, c, "relu")
    expected = torch.cat([(x.double() @ w.double() + row.double()).relu() for x, w, row in zip(a, b, c)], 1)
    assert got.shape == (37, 40) and got.is_contiguous()
    assert _relative_error(got, expected) < BOUNDS[torch.float32]


@pytest.mark.parametrize("dtype", sorted(BOUNDS, key=str))
@pytest.mark.parametrize("bias, activation", [(True, "relu"), (False, "none")])
def test_two_layer_kernel_computes_every_member_in_the_interpreter(dtype, bias, activation):
    torch.manual_seed(0)
    # (m, k, hidden, n): ragged row blocks, hidden widths over one chunk and not a multiple of it, a member of K
    # other than the others', an empty member, the widest output; transposed weights and a transposed input
    sizes = [(37, 9, 100, 5), (70, 5, 17, 128), (0, 33, 8, 3), (64, 64, 64, 16)]
    a = [torch.randn(m, k, dtype=dtype) if i != 1 else torch.randn(k, m, dtype=dtype).t()
         for i, (m, k, _, _) in enumerate(sizes)]
    b = [torch.randn(h, k, dtype=dtype).t() for _, k, h, _ in sizes]
    b2 = [torch.randn(n, h, dtype=dtype).t() for _, _, h, n in sizes]
    c = [torch.randn(w.shape[1], dtype=dtype) if bias else None for w in b]
    c2 = [torch.randn(w.shape[1], dtype=dtype) if bias else None for w in b2]
    out = [torch.full((x.shape[0], w.shape[1]), float("nan"), dtype=dtype) for x, w in zip(a, b2)]
    with cpu_triton_interpreter():
        grouped_mm.launch_mlp(a, b, c, "relu", b2, c2, activation, out)
    for x, w, row, w2, row2, y in zip(a, b, c, b2, c2, out, strict=True):
        # the hidden activation rounded to the dtype, as a stored one is
        hidden = (x.double() @ w.double() + (0 if row is None else row.double())).relu().to(dtype).double()
        expected = hidden @ w2.double() + (0 if row2 is None else row2.double())
        expected = expected.relu() if activation == "relu" else expected
        assert not y.isnan().any()
        if y.numel():
            assert _relative_error(y, expected) < BOUNDS[dtype]


@pytest.mark.parametrize("interpreted", [True, False], ids=["interpreter", "aten"])
def test_two_layer_cat_form_writes_each_member_into_its_columns(interpreted):
    torch.manual_seed(0)
    a = [torch.randn(37, 9), torch.randn(37, 70)]
    b, b2 = [torch.randn(9, 20), torch.randn(70, 3)], [torch.randn(20, 7), torch.randn(3, 30)]
    c, c2 = [torch.randn(20), torch.randn(3)], [None, None]
    with cpu_triton_interpreter() if interpreted else contextlib.nullcontext():
        got = grouped_mm.MLP_CAT_OP(a, b, c, "relu", b2, c2, "none")
    hidden = [x.double() @ w.double() + (0 if row is None else row.double()) for x, w, row in zip(a, b, c)]
    expected = torch.cat([h.relu() @ w.double() + (0 if row is None else row.double())
                          for h, w, row in zip(hidden, b2, c2)], 1)
    assert got.shape == (37, 37) and got.is_contiguous()
    assert _relative_error(got, expected) < BOUNDS[torch.float32]
    with pytest.raises(ValueError, match="over 128"):
        grouped_mm.launch_mlp(a, b, c, "relu", [torch.randn(20, 129)] * 2, c2, "none", [torch.empty(37, 129)] * 2)


def test_op_without_the_interpreter_is_atens_products():
    torch.manual_seed(0)
    a, b, c = [torch.randn(8, 4)] * 2, [torch.randn(4, 3), torch.randn(4, 5)], [None, torch.randn(5)]
    got = grouped_mm.OP(a, b, c, "relu")
    torch.testing.assert_close(got[0], (a[0] @ b[0]).relu())
    torch.testing.assert_close(got[1], (a[1] @ b[1] + c[1]).relu())
    with pytest.raises(ValueError, match="activation 'gelu'"):
        grouped_mm.OP(a, b, c, "gelu")


def _inputs(rows: int = 1024) -> tuple[torch.Tensor, ...]:
    torch.manual_seed(1)
    return tuple(torch.randn(rows, 32) for _ in range(16))


def _fired(report) -> list:
    return [r for r in report.rewrites if r.rule == RULE and r.fired]


def test_training_groups_the_products_whose_grouping_keeps_the_estimated_peak():
    torch.manual_seed(0)
    model = Towers()
    stock = compile_report(model, _inputs(), passes=None)
    report = compile_report(model, _inputs(), passes="all")
    forward, backward = report.graphs
    assert len(stock.graphs[0].launches) == 48 and len(stock.graphs[1].launches) == 128
    # the first layers' outputs are saved for the backward either way: one grouped call, bias and relu in it; the
    # second layers' written side by side into the towers' cat, where stock writes each of them
    assert forward.launches == [GROUPED, GROUPED_CAT]
    first, second, *more = _fired(report)
    assert first.detail.startswith("16 products (1024x32@32x64") and "+ bias, relu" in first.detail
    assert second.detail.startswith("16 products (1024x64@64x16")
    assert second.detail.endswith("written into the cat that reads them")
    # the backward: the second layers' weight gradients grouped (their inputs live anyway); the input gradients,
    # and the first layers' weight gradients, would hold every tower's incoming gradient at once
    apart = [r.detail for r in report.rewrites if r.rule == RULE and not r.fired]
    assert apart[0].startswith("16 of 32 products left apart") and "estimated peak" in apart[0]
    assert [r.detail.split(" (")[0] for r in more] == ["16 products"] and "16x1024@1024x64" in more[0].detail
    assert backward.launches.count(GROUPED) == 1 and len(backward.launches) < len(stock.graphs[1].launches)


def test_inference_keeps_stocks_peak_unless_the_tolerance_allows_more(monkeypatch):
    torch.manual_seed(0)
    # outputs too wide for one tile of the two-layer kernel: each depth apart would hold 16 hidden activations at
    # once, or 16 outputs beside the cat they are written into: over 1% of the graph's estimated peak
    model = Towers(out=192).requires_grad_(False)
    report = compile_report(model, _inputs(256), passes="all")
    assert GROUPED not in report.launches and MLP_CAT not in report.launches
    # (the cat, 3 MiB, and a tower's hidden activation; then every tower's)
    assert [r.detail for r in report.rewrites if r.rule == RULE and not r.fired] == [
        "16 of 16 products left apart: with them, the estimated peak 3211264 -> 4194304 bytes, over the tolerance "
        "of 0.01"] * 2
    monkeypatch.setenv("OPTIMUS_IR_PEAK_TOLERANCE", "0.5")
    report = compile_report(model, _inputs(256), passes="all")
    assert report.launches == [GROUPED, GROUPED_CAT]


def test_inference_towers_are_one_launch_their_hidden_activations_never_written():
    torch.manual_seed(0)
    model = Towers().requires_grad_(False)
    stock = compile_report(model, _inputs(), passes=None)
    report = compile_report(model, _inputs(), passes="all")
    assert len(stock.launches) == 48 and report.launches == [MLP_CAT]
    (fired,) = [r for r in report.rewrites if r.rule == CHAIN_RULE and r.fired]
    assert fired.detail == (
        "16 two-layer members (1024x32@32x64@64x16, 1024x32@32x64@64x16, 1024x32@32x64@64x16, 1024x32@32x64@64x16 "
        "and 12 more) + bias, relu, then + bias, none → one grouped_mlp launch, the hidden activations never "
        "written, written into the cat that reads them")
    # a symbolic batch: the same call
    assert compile_report(model, _inputs(), passes="all", dynamic=True).launches == [MLP_CAT]


def test_deeper_stacks_chain_their_first_two_layers_and_group_the_third(monkeypatch):
    # at these sizes a depth's results held at once are a tenth of the peak: a tolerance that lets them be
    monkeypatch.setenv("OPTIMUS_IR_PEAK_TOLERANCE", "0.5")
    torch.manual_seed(0)
    stacks = nn.ModuleList(nn.Sequential(nn.Linear(32, 48), nn.ReLU(), nn.Linear(48, 24), nn.ReLU(),
                                         nn.Linear(24, 8)) for _ in range(4)).requires_grad_(False)

    def fn(*xs):
        return [stack(x) for stack, x in zip(stacks, xs)]

    inputs = tuple(torch.randn(40, 32) for _ in range(4))
    report = compile_report(fn, inputs, passes="all")
    assert report.launches == [MLP, GROUPED]
    assert [r.rule for r in report.rewrites if r.fired and "Matmul" in r.rule] == [CHAIN_RULE, RULE]
    with optimus_ir.enabled(), cpu_triton_interpreter():
        for got, want in zip(torch.compile(fn)(*inputs), fn(*inputs), strict=True):
            torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)


def test_symbolic_batch_groups_the_same_products():
    torch.manual_seed(0)
    model = Towers(towers=4)
    report = compile_report(model, _inputs(), passes="all", dynamic=True)
    assert report.graphs[0].launches.count(GROUPED) == 1 and report.graphs[1].launches.count(GROUPED) == 1
    assert any(re.search(r"\(s\d+x32@32x64", r.detail) for r in _fired(report))  # the batch a symbol


def test_large_products_stay_cublas_calls():
    torch.manual_seed(0)
    model = Towers(towers=2, width=1024, hidden=2048, out=16).requires_grad_(False)
    report = compile_report(model, tuple(torch.randn(4096, 1024) for _ in range(2)), passes="all")
    assert GROUPED not in report.launches
    assert any("a cuBLAS call" in r.detail for r in report.rewrites if r.rule == RULE)


def test_compiled_inference_towers_match_eager_in_the_interpreter():
    torch.manual_seed(0)
    model = Towers(towers=3, width=8, hidden=80, out=4).requires_grad_(False)
    inputs = tuple(torch.randn(24, 8) for _ in range(3))
    with optimus_ir.enabled(), cpu_triton_interpreter(), recording() as records:
        actual = torch.compile(model)(*inputs)
    assert [r.rule for r in records if r.fired and "Matmul" in r.rule] == [CHAIN_RULE]
    torch.testing.assert_close(actual, model(*inputs), rtol=1e-5, atol=1e-5)


def test_compiled_towers_match_eager_in_the_interpreter_forward_and_backward():
    torch.manual_seed(0)
    eager, model = Towers(towers=3, width=8, hidden=16, out=4), Towers(towers=3, width=8, hidden=16, out=4)
    model.load_state_dict(eager.state_dict())
    inputs = tuple(torch.randn(24, 8) for _ in range(3))
    expected = eager(*inputs)
    (expected * torch.arange(expected.numel()).view_as(expected)).sum().backward()
    with optimus_ir.enabled(), cpu_triton_interpreter(), recording() as records:
        actual = torch.compile(model)(*inputs)
        (actual * torch.arange(actual.numel()).view_as(actual)).sum().backward()
    assert any(r.rule == RULE and r.fired for r in records)
    torch.testing.assert_close(actual, expected, rtol=1e-5, atol=1e-5)
    for got, want in zip(model.parameters(), eager.parameters(), strict=True):
        torch.testing.assert_close(got.grad, want.grad, rtol=1e-5, atol=1e-5)


def test_products_a_cat_reads_are_written_into_it():
    # stock writes each product into the cat's buffer (no copy); grouped, one launch writes them all there
    def fn(a, b, w):
        return torch.cat([a @ w, b @ w], 1)

    inputs = (torch.randn(8, 16), torch.randn(8, 16), torch.randn(16, 16))
    stock = compile_report(fn, inputs, passes=None)
    report = compile_report(fn, inputs, passes="all")
    assert stock.launches == ["extern_kernels.mm", "extern_kernels.mm"] and report.launches == [GROUPED_CAT]
    with optimus_ir.enabled(), cpu_triton_interpreter():
        torch.testing.assert_close(torch.compile(fn)(*inputs), fn(*inputs), atol=1e-5, rtol=1e-5)
