"""Sums of matmuls (the node's own features and its mean messages in a hetero GNN's per-type sum): small ones as one
reduction (SummedSmallMatmulsToOneReduction), larger ones of a shared left operand as one matmul
(SharedOperandMatmulsToOneMatmul), what both leave alone, and the numerics against eager through Triton's
interpreter."""

import re

import pytest
import torch
import torch._inductor.config as inductor_config
import torch.nn as nn

import optimus_ir
from optimus_ir import stock_guard
from optimus_ir.inspect import compile_report
from optimus_ir.interpret import cpu_triton_interpreter
from optimus_ir.lowering import matmul_sum
from optimus_ir.records import recording
from optimus_ir.testing.wrapper_memory import peak_bytes

RULE = "SharedOperandMatmulsToOneMatmul"
REDUCTION = "SummedSmallMatmulsToOneReduction"


class TwoConvsIntoOneType(nn.Module):
    """Two SAGE-like convolutions summed into one node type: a Linear of each mean message, a Linear of the
    node's own features ``x`` per convolution (as torch_geometric's ``to_hetero`` writes them)."""

    def __init__(self, features: int = 64, out: int = 32, bias: bool = True) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.messages = nn.ModuleList(nn.Linear(features, out, bias=bias) for _ in range(2))
        self.roots = nn.ModuleList(nn.Linear(features, out, bias=False) for _ in range(2))

    def forward(self, x, s1, c1, s2, c2):
        first, second = ((message(s / c.clamp(min=1)) + root(x))
                         for (s, c), message, root in zip(((s1, c1), (s2, c2)), self.messages, self.roots))
        return torch.relu(first + second)


def _inputs(requires_grad: bool = False, rows: int = 300, features: int = 64) -> tuple[torch.Tensor, ...]:
    torch.manual_seed(1)
    x, s1, s2 = (torch.randn(rows, features, requires_grad=requires_grad) for _ in range(3))
    return x, s1, torch.rand(rows, 1) * 3, s2, torch.rand(rows, 1) * 3


def test_a_small_sum_of_matmuls_is_one_reduction_its_reader_fused():
    with torch.no_grad():
        stock = compile_report(TwoConvsIntoOneType(), _inputs(), passes=None)
        report = compile_report(TwoConvsIntoOneType(), _inputs(), passes="horizontal")
    assert stock.launches.count("extern_kernels.mm") == 4
    # the four products, the means' divisions, the biases and the relu: one Triton kernel
    assert len(report.launches) == 1 and not report.launches[0].startswith("extern")
    (fired,) = [r for r in report.rewrites if r.rule == REDUCTION]
    assert fired.fired and fired.detail.startswith("4 matmuls (300x64x32 each) and 2 other terms →")
    (kernel,) = report.kernels
    assert "tl.sum(" in kernel.source and kernel.source.count(" / ") >= 2  # the means divided where they are read


def test_larger_products_of_one_left_operand_are_one_matmul():
    """Above ``MAX_REDUCTION_PRODUCTS`` the products stay cuBLAS's: the node's features through one matmul."""
    inputs = _inputs(rows=2048, features=512)
    assert 2048 * 512 * 512 * 4 > matmul_sum.MAX_REDUCTION_PRODUCTS
    with torch.no_grad():
        report = compile_report(TwoConvsIntoOneType(512, 512), inputs, passes="horizontal")
    assert report.launches.count("extern_kernels.mm") == 3
    assert report.wrapper.count("extern_kernels.mm(arg0_1,") == 1  # x, the node's features: read by one matmul
    assert not [r for r in report.rewrites if r.rule == REDUCTION and r.fired]
    (fired,) = [r for r in report.rewrites if r.rule == RULE]
    assert fired.fired and fired.detail.startswith("2 matmuls of 1 left operand(s) (2048x512) → 1,")


def test_on_the_cpu_a_sum_inductor_folded_into_addmms_is_one_reduction_too():
    """Inductor's post-grad passes fold the sum's adds into addmms on the CPU (an addmm of each message's Linear,
    whose bias is the rest of the sum): the last one is the sum, of two products and the addmms' values."""
    eager = TwoConvsIntoOneType(16, 8)
    inputs = _inputs(rows=24, features=16)
    with torch.no_grad(), optimus_ir.enabled("horizontal"), cpu_triton_interpreter(), recording() as records:
        actual = torch.compile(TwoConvsIntoOneType(16, 8))(*inputs)
    (fired,) = [r for r in records if r.rule in (RULE, REDUCTION) and r.fired]
    assert fired.rule == REDUCTION and fired.detail.startswith("2 matmuls (24x16x8 each)")
    torch.testing.assert_close(actual, eager(*inputs))


@pytest.mark.parametrize("grad", [False, True], ids=["inference", "training"])
def test_numerics_of_the_reduction_in_the_interpreter(grad):
    """Without Inductor's pattern passes the CPU keeps the sums of matmuls. The messages' Linears without bias are
    matmuls of the means, which ``RowScaledMatmulInputToScaledProduct`` scales after the product in inference: the
    reduction divides them where it reads them. In training the forward's and the backward's sums are reductions."""
    eager = TwoConvsIntoOneType(16, 8, bias=False)  # (small: the interpreter runs each block in Python)
    inputs = _inputs(grad, rows=24, features=16)
    expected = eager(*inputs)
    if grad:
        upstream = torch.randn_like(expected)
        expected.backward(upstream)
        want = [t.grad.clone() for t in inputs if t.requires_grad] + [p.grad.clone() for p in eager.parameters()]
        for t in inputs:
            t.grad = None
    model = TwoConvsIntoOneType(16, 8, bias=False)
    with torch.set_grad_enabled(grad), inductor_config.patch(pattern_matcher=False), \
            optimus_ir.enabled("horizontal"), cpu_triton_interpreter(), recording() as records:
        actual = torch.compile(model)(*inputs)
        if grad:
            actual.backward(upstream)
    fired = [r.detail for r in records if r.rule == REDUCTION and r.fired]
    assert fired[0].startswith("4 matmuls (24x16x8 each) and 0 other terms")
    assert len(fired) == (2 if grad else 1)  # training: the features' gradient, g @ v1 + g @ v2, too
    scaled = [r for r in records if r.rule == "RowScaledMatmulInputToScaledProduct" and r.fired]
    assert len(scaled) == (0 if grad else 2)  # training saves the means: their divisions stay
    torch.testing.assert_close(actual, expected.detach(), atol=1e-5, rtol=1e-5)
    if grad:
        got = [t.grad for t in inputs if t.requires_grad] + [p.grad for p in model.parameters()]
        torch.testing.assert_close(got, want, atol=1e-4, rtol=1e-4)


def test_products_of_other_left_operands_are_one_reduction_and_a_product_read_twice_stays_stock():
    w1, w2 = torch.randn(32, 64), torch.randn(32, 64)

    def product_read_twice(x):
        p = x @ w1.t()
        return p + x @ w2.t(), p

    def other_operands(x, y):  # (an add that is the output Inductor folds into an addmm on the GPU too)
        return torch.relu(x @ w1.t() + y @ w2.t())

    x, y = torch.randn(16, 64), torch.randn(16, 64)
    twice = compile_report(product_read_twice, (x,))
    assert not [r for r in twice.rewrites if r.rule in (RULE, REDUCTION)]
    assert len([name for name in twice.launches if name.startswith("extern_kernels.")]) == 2
    other = compile_report(other_operands, (x, y))
    assert [r.fired for r in other.rewrites if r.rule == REDUCTION] == [True]
    assert not [name for name in other.launches if name.startswith("extern_kernels.")]


def test_a_term_computed_inline_is_refused_with_the_reason():
    w1, w2 = torch.randn(32, 64), torch.randn(32, 64)

    def fn(x, y):
        return x @ w1.t() + x @ w2.t() + y * 2

    report = compile_report(fn, (torch.randn(16, 64), torch.randn(16, 32)))
    for rule in (REDUCTION, RULE):
        (rejected,) = [r for r in report.rewrites if r.rule == rule]
        assert not rejected.fired and "computed inline" in rejected.detail
    assert report.launches.count("extern_kernels.mm") == 2


class MeanConvsPerNodeType(nn.Module):
    """A hetero GNN in plain torch, as torch_geometric's ``to_hetero`` of SAGE convolutions writes it: node types in
    a ring, each the destination of two edge types (from one and from three types back); per layer and edge type
    the mean of the neighbours' features (``scatter_add_``, the edge counts, a division) through a Linear plus a
    Linear of the node's own features, summed per destination type."""

    def __init__(self, types: int = 4, widths: tuple[int, ...] = (64, 64, 32)) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.types = types
        self.layers = nn.ModuleList(
            nn.ModuleList(nn.ModuleList([nn.Linear(i, o), nn.Linear(i, o, bias=False)]) for _ in range(2 * types))
            for i, o in zip(widths, widths[1:]))

    def forward(self, xs, edges):
        for layer in self.layers:
            outs = []
            for d in range(self.types):
                terms = []
                for r, hop in enumerate((1, 3)):
                    src, dst = edges[2 * d + r]
                    msg = xs[(d - hop) % self.types].index_select(0, src)
                    index = dst.view(-1, 1).expand_as(msg)
                    summed = msg.new_zeros(xs[d].shape[0], msg.shape[1]).scatter_add_(0, index, msg)
                    count = msg.new_zeros(xs[d].shape[0]).scatter_add_(0, dst, msg.new_ones(dst.shape[0]))
                    lin_l, lin_r = layer[2 * d + r]
                    terms += [lin_l(summed / count.clamp(min=1).view(-1, 1)), lin_r(xs[d])]
                outs.append((terms[0] + terms[1] + terms[2] + terms[3]).relu())
            xs = outs
        return xs


def _graph(types: int = 4, rows: int = 300, edges: int = 2000, width: int = 64):
    g = torch.Generator().manual_seed(0)
    counts = [rows + rows * i // 2 for i in range(types)]
    xs = [torch.randn(n, width, generator=g) for n in counts]
    ends = [(torch.randint(0, counts[(d - hop) % types], (edges,), generator=g),
             torch.randint(0, counts[d], (edges,), generator=g)) for d in range(types) for hop in (1, 3)]
    return xs, ends


def test_a_hetero_gnn_has_no_matmul_left_within_stocks_peak():
    """Each destination's sum of its two convolutions is one reduction (stock: four extern calls) and the reductions
    merge."""
    with torch.no_grad():
        stock = compile_report(MeanConvsPerNodeType(), _graph(), passes=None)
        report = compile_report(MeanConvsPerNodeType(), _graph())
    assert stock.launches.count("extern_kernels.mm") == 32
    assert not [name for name in report.launches if name.startswith("extern_kernels.")]
    assert len(report.launches) * 4 <= len(stock.launches)
    assert len([r for r in report.rewrites if r.rule == REDUCTION and r.fired]) == 8
    (decision,) = [r for r in report.rewrites if r.rule == stock_guard.PEAK_RULE]
    assert not decision.fired and decision.detail.endswith("ours kept")
    assert peak_bytes(report.wrapper) <= peak_bytes(stock.wrapper)


def test_a_hetero_gnn_computes_eagers_values_in_the_interpreter():
    model = MeanConvsPerNodeType(widths=(8, 8, 4))
    inputs = _graph(rows=12, edges=40, width=8)
    with torch.no_grad():
        expected = model(*inputs)
        with inductor_config.patch(pattern_matcher=False), optimus_ir.enabled("horizontal"), \
                cpu_triton_interpreter(), recording() as records:
            actual = torch.compile(model)(*inputs)
    assert len([r for r in records if r.rule == REDUCTION and r.fired]) == 8
    torch.testing.assert_close(actual, expected, atol=1e-5, rtol=1e-5)


def _rows_dynamic(inputs: tuple[torch.Tensor, ...]) -> tuple[torch.Tensor, ...]:
    """The inputs with their rows (a sampled subgraph's node count) symbolic, as Dynamo makes them once they change."""
    for t in inputs:
        torch._dynamo.mark_dynamic(t, 0)
    return inputs


@pytest.mark.parametrize("rule, rows, features, out, detail", [
    (REDUCTION, 300, 64, 32, r"4 matmuls \(s\d+x64x32 each\) and 2 other terms"),
    (RULE, 2048, 512, 512, r"2 matmuls of 1 left operand\(s\) \(s\d+x512\) → 1,"),
], ids=["small", "larger"])
def test_symbolic_row_counts_are_merged_as_static_ones(rule, rows, features, out, detail):
    """The node count changes every batch, the features stay: with the rows symbolic each rule fires as with them
    static (the larger products, above ``MAX_REDUCTION_PRODUCTS`` at the size hint, through one matmul)."""
    model = TwoConvsIntoOneType(features, out)
    with torch.no_grad():
        stock = compile_report(model, _rows_dynamic(_inputs(rows=rows, features=features)), passes=None)
        static = compile_report(model, _inputs(rows=rows, features=features), passes="horizontal")
        report = compile_report(model, _rows_dynamic(_inputs(rows=rows, features=features)), passes="horizontal")
    (fired,) = [r for r in report.rewrites if r.rule in (REDUCTION, RULE) and r.fired]
    assert fired.rule == rule and re.match(detail, fired.detail), fired.detail
    assert len(report.launches) < len(stock.launches) and len(report.launches) <= len(static.launches)


def test_a_symbolic_inner_size_is_taken_where_its_range_bounds_it_and_refused_naming_it_where_not():
    def fn(x, y, w):
        return torch.relu(x @ w + y @ w)

    def inputs(inner: int = 64, **bound: int) -> tuple[torch.Tensor, ...]:
        made = torch.randn(16, inner), torch.randn(16, inner), torch.randn(inner, 32)
        for t, dim in zip(made, (1, 1, 0)):  # the inner dimension
            torch._dynamo.mark_dynamic(t, dim, **bound)
        return made

    bound = {"min": 2, "max": matmul_sum.MAX_REDUCTION_INNER}
    bounded = compile_report(fn, inputs(**bound))
    assert [r.fired for r in bounded.rewrites if r.rule == REDUCTION] == [True]
    assert not [name for name in bounded.launches if name.startswith("extern_kernels.")]
    unbounded = compile_report(fn, inputs())
    (rejected,) = [r for r in unbounded.rewrites if r.rule == REDUCTION]
    assert not rejected.fired and rejected.detail.startswith("the inner size s") and "not proven at most 512" in (
        rejected.detail)
    assert unbounded.launches.count("extern_kernels.mm") + unbounded.launches.count("extern_kernels.addmm") == 2

    compiled = torch.compile(fn)
    torch._dynamo.utils.counters.clear()
    with inductor_config.patch(pattern_matcher=False), optimus_ir.enabled("horizontal"), cpu_triton_interpreter(), \
            recording() as records:
        for inner in (64, 40):  # the reduction a loop over the symbolic K
            x, y, w = inputs(inner, **bound)
            torch.testing.assert_close(compiled(x, y, w), fn(x, y, w))
    assert torch._dynamo.utils.counters["stats"]["unique_graphs"] == 1
    assert [r.fired for r in records if r.rule == REDUCTION] == [True]


@pytest.mark.parametrize("grad", [False, True], ids=["inference", "training"])
@pytest.mark.parametrize("rule", [REDUCTION, RULE])
def test_numerics_with_symbolic_row_counts_at_two_shapes_in_the_interpreter(rule, grad, monkeypatch):
    """Compiled once with symbolic sizes (``dynamic=True``), called at two node counts without a recompile. Below
    ``MAX_REDUCTION_PRODUCTS`` the sum is one reduction; with the bound at 0 the shared operand's products one
    matmul. In training the backward's sums too."""
    if rule == RULE:
        monkeypatch.setattr(matmul_sum, "MAX_REDUCTION_PRODUCTS", 0)
    model = TwoConvsIntoOneType(16, 4, bias=False)  # (small: the interpreter runs each block in Python)
    compiled = torch.compile(model, dynamic=True)
    torch._dynamo.utils.counters.clear()
    with torch.set_grad_enabled(grad), inductor_config.patch(pattern_matcher=False), \
            optimus_ir.enabled("horizontal"), cpu_triton_interpreter(), recording() as records:
        for rows in (6, 11):
            inputs = _inputs(grad, rows=rows, features=16)
            actual, expected = compiled(*inputs), model(*inputs)
            torch.testing.assert_close(actual, expected, atol=1e-5, rtol=1e-5)
            if grad:
                upstream = torch.randn_like(expected)
                wrt = [*(t for t in inputs if t.requires_grad), *model.parameters()]
                torch.testing.assert_close(torch.autograd.grad(actual, wrt, upstream),
                                           torch.autograd.grad(expected, wrt, upstream), atol=1e-4, rtol=1e-4)
    assert torch._dynamo.utils.counters["stats"]["unique_graphs"] == 1  # no recompile for the second shape
    fired = [r for r in records if r.rule in (REDUCTION, RULE) and r.fired]
    assert {r.rule for r in fired} == {rule} and all("(s" in r.detail for r in fired)
    assert len(fired) == 1 + grad  # training: the features' gradient, g @ v1 + g @ v2, too
