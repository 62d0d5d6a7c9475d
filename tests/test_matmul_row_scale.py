"""RowScaledMatmulInputToScaledProduct: a matmul of a row-scaled input (a mean aggregation, then a Linear) as the
scaled product, what it leaves alone, and the numerics against eager through Triton's interpreter."""

import torch

import optimus_ir
from optimus_ir.inspect import compile_report
from optimus_ir.interpret import cpu_triton_interpreter
from optimus_ir.records import recording

RULE = "RowScaledMatmulInputToScaledProduct"


def mean_then_linear(summed, count, w):
    """Messages summed per node, divided by the node's number of edges, then a Linear without bias and a relu."""
    return torch.relu((summed / count.clamp(min=1)) @ w.t())


def _inputs(requires_grad: bool = False, rows: int = 300, features: int = 64) -> tuple[torch.Tensor, ...]:
    torch.manual_seed(0)
    summed = torch.randn(rows, features, requires_grad=requires_grad)
    count = (torch.rand(rows, 1) * 4).floor()  # zeros among them: clamped
    return summed, count, torch.randn(32, features, requires_grad=requires_grad)


def test_the_mean_is_taken_of_the_product_where_it_is_read():
    stock = compile_report(mean_then_linear, _inputs(), passes=None)
    report = compile_report(mean_then_linear, _inputs(), passes="horizontal")
    assert len(stock.launches) == 3  # the mean, the matmul, the relu
    assert report.launches == ["extern_kernels.mm", report.launches[1]] and "div" in report.launches[1]
    assert "extern_kernels.mm(buf" in stock.wrapper  # the mean, a buffer of its own
    assert "extern_kernels.mm(arg" in report.wrapper  # the sums themselves
    (fired,) = [r for r in report.rewrites if r.rule == RULE]
    assert fired.fired and "(300x64x32)" in fired.detail


def test_numerics_in_the_interpreter_inference_and_training():
    inputs = _inputs(requires_grad=True)
    expected = mean_then_linear(*inputs)
    expected.sum().backward()
    want = [t.grad.clone() for t in inputs if t.requires_grad]
    for t in inputs:
        t.grad = None
    with cpu_triton_interpreter():
        with torch.no_grad(), optimus_ir.enabled("horizontal"), recording() as records:
            torch.testing.assert_close(torch.compile(mean_then_linear)(*inputs), expected.detach())
        assert [r for r in records if r.rule == RULE and r.fired]
        with optimus_ir.enabled("horizontal"):
            torch.compile(mean_then_linear)(*inputs).sum().backward()
    torch.testing.assert_close([t.grad for t in inputs if t.requires_grad], want)


def test_a_column_scale_a_divisor_not_clamped_or_a_mean_read_elsewhere_stays_stock():
    def column_scale(summed, scale, w):
        return (summed / scale.clamp(min=1)) @ w.t()

    def not_clamped(summed, count, w):  # a zero count: nan where the input is divided, inf where the product is
        return (summed / count) @ w.t()

    def mean_read_twice(summed, count, w):
        mean = summed / count.clamp(min=1)
        return mean @ w.t(), mean

    summed, count, w = _inputs()
    cases = ((column_scale, (summed, torch.rand(1, 64) + 1, w)), (not_clamped, (summed, count, w)),
             (mean_read_twice, (summed, count.clamp(min=1), w)))
    for fn, inputs in cases:
        report = compile_report(fn, inputs)
        assert not [r for r in report.rewrites if r.rule == RULE]
        assert "div" in " ".join(report.launches)


def test_symbolic_row_counts_scale_the_product_as_static_ones():
    """A mean over a sampled subgraph: the node count changes every batch, marked dynamic."""
    def inputs():
        made = _inputs()
        for t in made[:2]:
            torch._dynamo.mark_dynamic(t, 0)
        return made

    stock = compile_report(mean_then_linear, inputs(), passes=None)
    static = compile_report(mean_then_linear, _inputs(), passes="horizontal")
    report = compile_report(mean_then_linear, inputs(), passes="horizontal")
    (fired,) = [r for r in report.rewrites if r.rule == RULE]
    assert fired.fired and "(s" in fired.detail and "x64x32)" in fired.detail
    assert "extern_kernels.mm(arg" in report.wrapper  # the sums themselves
    assert len(report.launches) < len(stock.launches) and len(report.launches) <= len(static.launches)


def test_numerics_with_symbolic_sizes_at_two_shapes_in_the_interpreter():
    compiled = torch.compile(mean_then_linear, dynamic=True)
    torch._dynamo.utils.counters.clear()
    with torch.no_grad(), cpu_triton_interpreter(), optimus_ir.enabled("horizontal"), recording() as records:
        for rows, features in ((300, 64), (173, 40)):
            inputs = _inputs(rows=rows, features=features)
            torch.testing.assert_close(compiled(*inputs), mean_then_linear(*inputs))
    assert torch._dynamo.utils.counters["stats"]["unique_graphs"] == 1  # no recompile for the second shape
    (fired,) = [r for r in records if r.rule == RULE]
    assert fired.fired and "(s" in fired.detail
