"""MatvecToRowReduction: a matmul to one output column as a Triton row reduction that its bias and reader fuse
into, what it leaves alone, and the numerics against eager through Triton's interpreter."""

import pytest
import torch
import torch.nn.functional as F

import optimus_ir
from optimus_ir.inspect import compile_report
from optimus_ir.interpret import cpu_triton_interpreter
from optimus_ir.records import recording

RULE = "MatvecToRowReduction"


def logit(x, w, b):
    """A ranker's last Linear to one logit, then its probability."""
    return torch.sigmoid(F.linear(x, w, b))


def _inputs(dtype: torch.dtype = torch.float32, requires_grad: bool = False) -> tuple[torch.Tensor, ...]:
    torch.manual_seed(0)
    return tuple(torch.randn(*shape, dtype=dtype, requires_grad=requires_grad) for shape in ((300, 96), (1, 96), (1,)))


def test_the_logit_is_one_reduction_kernel_with_its_bias_and_sigmoid():
    stock = compile_report(logit, _inputs(), passes=None)
    report = compile_report(logit, _inputs(), passes="horizontal")
    assert "extern_kernels.mm" in stock.launches or "extern_kernels.addmm" in stock.launches
    assert len(report.launches) == 1 and report.launches[0].startswith("triton_per_")
    (kernel,) = report.graphs[0].kernels
    assert "tl.sum(" in kernel.source and "tl.sigmoid(" in kernel.source
    (fired,) = [r for r in report.rewrites if r.rule == RULE]
    assert fired.fired and "(300x96x1)" in fired.detail


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_numerics_in_the_interpreter_inference_and_training(dtype):
    inputs = _inputs(dtype, requires_grad=True)
    expected = logit(*inputs)
    expected.float().sum().backward()
    want = [t.grad.clone() for t in inputs]
    for t in inputs:
        t.grad = None
    tolerance = {} if dtype == torch.float32 else {"atol": 1e-2, "rtol": 1e-2}
    with cpu_triton_interpreter(), optimus_ir.enabled("horizontal"), recording() as records:
        actual = torch.compile(logit)(*inputs)
        actual.float().sum().backward()
    assert [r for r in records if r.rule == RULE and r.fired]
    torch.testing.assert_close(actual, expected, **tolerance)
    torch.testing.assert_close([t.grad for t in inputs], want, **tolerance)


def test_several_columns_a_scaled_product_or_fp64_stay_stock():
    x, w, b = _inputs()

    def two_columns(x, w, b):
        return F.linear(x, torch.cat([w, w * 2]), None)

    def scaled(x, w, b):
        return torch.addmm(b, x, w.t(), beta=0.5)

    def in_fp64(x, w, b):
        return torch.mm(x.double(), w.t().double()).float()

    for fn in (two_columns, scaled, in_fp64):
        report = compile_report(fn, (x, w, b), passes="horizontal")
        assert not [r for r in report.rewrites if r.rule == RULE and r.fired], fn.__name__
        assert any(launch.startswith("extern_kernels") for launch in report.launches), fn.__name__


def _shaped(rows: int, inner: int, requires_grad: bool = False) -> tuple[torch.Tensor, ...]:
    torch.manual_seed(0)
    return tuple(torch.randn(*shape, requires_grad=requires_grad) for shape in ((rows, inner), (1, inner), (1,)))


def test_symbolic_rows_and_inner_size_are_one_reduction_kernel_too():
    """Every size symbolic (``dynamic=True``) but the one column, which Dynamo keeps 1: a looped reduction over the
    symbolic ``K``, its bias and sigmoid fused."""
    stock = compile_report(logit, _inputs(), passes=None, dynamic=True)
    static = compile_report(logit, _inputs(), passes="horizontal")
    report = compile_report(logit, _inputs(), passes="horizontal", dynamic=True)
    (fired,) = [r for r in report.rewrites if r.rule == RULE]
    assert fired.fired and "x1) → a row reduction" in fired.detail and "(s" in fired.detail
    assert report.launches[0].startswith("triton_red_") and "tl.sigmoid(" in report.graphs[0].kernels[0].source
    assert len(report.launches) < len(stock.launches) and len(report.launches) <= len(static.launches)


@pytest.mark.parametrize("grad", [False, True], ids=["inference", "training"])
def test_numerics_with_symbolic_sizes_at_two_shapes_in_the_interpreter(grad):
    compiled = torch.compile(logit, dynamic=True)
    torch._dynamo.utils.counters.clear()
    with torch.set_grad_enabled(grad), cpu_triton_interpreter(), optimus_ir.enabled("horizontal"), \
            recording() as records:
        for rows, inner in ((300, 96), (173, 40)):
            inputs = _shaped(rows, inner, grad)
            actual, expected = compiled(*inputs), logit(*inputs)
            torch.testing.assert_close(actual, expected)
            if grad:
                upstream = torch.randn_like(expected)
                torch.testing.assert_close(torch.autograd.grad(actual, inputs, upstream),
                                           torch.autograd.grad(expected, inputs, upstream))
    assert torch._dynamo.utils.counters["stats"]["unique_graphs"] == 1  # no recompile for the second shape
    (fired,) = [r for r in records if r.rule == RULE]
    assert fired.fired and "(s" in fired.detail
