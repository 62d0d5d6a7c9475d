"""On a real GPU, every golden case: the kernels generated for the real device are the golden ones (which CI checks
are those of the virtual sm_90 device), and compiled with optimus_ir on CUDA tensors it computes what eager does,
gradients included, with the rules that must fire fired."""

import difflib

import pytest
import torch
from torch._dynamo.utils import counters

import optimus_ir
from optimus_ir.inspect import compile_report
from optimus_ir.records import recording
from optimus_ir.testing.golden_cases import CASES, backward_with_same_grads
from tests.golden import GOLDEN_DIR, render
from tests.gpu.helpers import CUDA

pytestmark = CUDA


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_real_device_kernels_are_the_golden_kernels(case):
    real = compile_report(case.fn, case.make_inputs(), passes="all", dynamic=case.dynamic)  # the real device
    stock = compile_report(case.fn, case.make_inputs(), passes=None, dynamic=case.dynamic)
    assert (len(stock.launches), len(real.launches)) == (case.stock_launches, case.launches)
    text = render(real, stock)
    golden = (GOLDEN_DIR / f"{case.name}.txt").read_text()
    diff = "".join(difflib.unified_diff(golden.splitlines(True), text.splitlines(True), "golden", "real"))
    assert text == golden, diff[:4000]


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_numerics_on_the_gpu(case):
    torch.manual_seed(0)
    torch._dynamo.reset()
    counters.clear()
    with optimus_ir.enabled(), recording() as records:
        compiled = torch.compile(case.fn, fullgraph=True, dynamic=case.dynamic)
        for make_inputs in (case.make_inputs, case.other_sizes)[: 1 + case.dynamic]:  # (other sizes: no recompile)
            inputs = tuple(x.detach().cuda().requires_grad_(x.requires_grad) for x in make_inputs())
            eager_inputs = tuple(x.detach().clone().requires_grad_(x.requires_grad) for x in inputs)
            expected = case.fn(*eager_inputs)
            actual = compiled(*inputs)
            backward_with_same_grads(actual, expected)
            torch.testing.assert_close(actual, expected, atol=case.atol, rtol=case.rtol)
            for x, x_eager in zip(inputs, eager_inputs):
                if x.requires_grad:
                    torch.testing.assert_close(x.grad, x_eager.grad, atol=case.atol, rtol=case.rtol)
    assert set(case.fired) <= {r.rule for r in records if r.fired}
    assert counters["stats"]["unique_graphs"] == 1  # one compile served both sizes
