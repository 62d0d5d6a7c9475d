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
from optimus_ir.testing.case import run_as_eager_does
from optimus_ir.testing.golden_cases import CASES
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
        run_as_eager_does(case, torch.compile(case.fn, fullgraph=True, dynamic=case.dynamic), "cuda")
    assert set(case.fired) <= {r.rule for r in records if r.fired}
    assert counters["stats"]["unique_graphs"] == 1  # one compile served both sizes
