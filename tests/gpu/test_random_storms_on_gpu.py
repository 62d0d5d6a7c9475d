"""On a real GPU: the random storms and odd cases of tests/test_horizontal_random.py, their tensors on CUDA (0-d
tensors stay on the CPU), through the horizontal pass against stock Inductor and eager.

The interpreter that runs them in CI does not fault on a misaligned address or race between blocks; the GPU does,
and the cases include inputs at odd offsets (sliced, split, offset views). Each must be within the tolerance of
stock's result (1e-5 relative in fp32 and float64: a merged reduction may take another config, so another order of
additions; one 16-bit rounding step otherwise) and of eager's (test_horizontal_random's tolerances, or stock's own
distance from eager where that is larger: a long sum in bf16 can be beyond the tolerance for stock too), and no
decision may report an internal error. Seeds: the test's, or ``OPTIMUS_IR_GPU_STORM_SEEDS=24-223`` and
``OPTIMUS_IR_GPU_ODD_SEEDS=...`` (beyond CI's).
"""

import pytest

from tests.gpu.helpers import CUDA, seeds, worst
from tests.test_horizontal_random import ODD_CASES, STORMS, low_precision, odd_case, run_compiled, run_eager, storm

pytestmark = CUDA


def check(case: str, seed: int) -> None:
    fn, inputs, description = (storm if case == "storm" else odd_case)(seed, "cuda")
    dynamic, backward = description["kind"] == "dynamic", description["kind"] == "training"
    actual, actual_inputs, records = run_compiled(fn, inputs, True, dynamic, backward)
    stock, stock_inputs, _ = run_compiled(fn, inputs, False, dynamic, backward)
    eager, eager_inputs = run_eager(fn, inputs, backward)
    sixteen_bit = low_precision(description)
    stock_tolerance = (1e-2, 1e-2) if sixteen_bit else (1e-6, 1e-5)
    eager_tolerance = (2e-2, 2e-2) if sixteen_bit else (1e-4, 1e-4)
    versus_stock = max(worst(actual, stock, *stock_tolerance), worst(actual_inputs, stock_inputs, *stock_tolerance))
    versus_eager = max(worst(actual, eager, *eager_tolerance), worst(actual_inputs, eager_inputs, *eager_tolerance))
    stock_versus_eager = max(worst(stock, eager, *eager_tolerance), worst(stock_inputs, eager_inputs, *eager_tolerance))
    merged = " ".join(str(len(r.nodes)) for r in records if r.fired)
    summary = f"{description}; merged groups (members each): {merged or 'none'}"
    assert not [r.detail for r in records if "internal error" in r.detail], summary
    assert versus_stock < 1, f"{versus_stock:.3g} x the tolerance from stock: {summary}"
    # no further from eager than stock is, where stock too is beyond the tolerance (a long bf16 sum)
    assert versus_eager < max(1.0, stock_versus_eager * (1 + 1e-9)), f"{versus_eager:.3g} from eager: {summary}"


@pytest.mark.parametrize("seed", seeds("OPTIMUS_IR_GPU_STORM_SEEDS", STORMS))
def test_random_storm_on_the_gpu(seed):
    check("storm", seed)


@pytest.mark.parametrize("seed", seeds("OPTIMUS_IR_GPU_ODD_SEEDS", ODD_CASES))
def test_random_odd_case_on_the_gpu(seed):
    check("odd", seed)
