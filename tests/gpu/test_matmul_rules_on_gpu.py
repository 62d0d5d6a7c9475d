"""On a real GPU: a small sum of matmuls as one reduction (SummedSmallMatmulsToOneReduction), larger matmuls of one
left operand summed as one matmul (SharedOperandMatmulsToOneMatmul), and a mean's division moved onto the product
(RowScaledMatmulInputToScaledProduct). Numerics against eager and the peak against
stock Inductor's, in inference and in a training step whose loss is computed outside the compiled module."""

import pytest
import torch

import optimus_ir
from optimus_ir.records import recording
from optimus_ir.settings import DEFAULT_PEAK_TOLERANCE
from tests.gpu.helpers import CUDA, cold_compile, peak_memory_bytes
from tests.test_matmul_row_scale import RULE as ROW_SCALE
from tests.test_matmul_sum import REDUCTION, RULE, TwoConvsIntoOneType

pytestmark = CUDA


def _inputs(grad: bool, features: int) -> tuple[torch.Tensor, ...]:
    generator = torch.Generator(device="cuda").manual_seed(0)
    x, s1, s2 = (torch.randn(3000, features, device="cuda", generator=generator, requires_grad=grad)
                 for _ in range(3))
    c1, c2 = (torch.rand(3000, 1, device="cuda", generator=generator) * 3 for _ in range(2))
    return x, s1, c1, s2, c2


def _step(passes, grad: bool, features: int, compile_it: bool = True):
    """Output, gradients (training), the rule's records and the peak bytes of one call, compiled cold (or eager)."""
    torch.cuda.empty_cache()
    model = TwoConvsIntoOneType(features).cuda()
    inputs = _inputs(grad, features)
    upstream = torch.randn(3000, 32, device="cuda", generator=torch.Generator(device="cuda").manual_seed(1))

    def call():
        for t in (*inputs, *model.parameters()):
            t.grad = None
        with torch.set_grad_enabled(grad):
            out = compiled(*inputs)
        if grad:
            out.backward(upstream)
        return out.detach(), [t.grad for t in (*inputs, *model.parameters()) if t.grad is not None]

    with cold_compile(), optimus_ir.enabled(passes), recording() as records:
        compiled = torch.compile(model) if compile_it else model
        call()
        result = call()
        peak = peak_memory_bytes(call)
    return result, {r.rule for r in records if r.fired}, peak


@pytest.mark.parametrize(("features", "rule"), [(64, REDUCTION), (512, RULE)])
def test_inference_and_training_fire_compute_eagers_values_within_stocks_peak(features, rule):
    for grad in (False, True):
        (out, grads), fired, peak = _step("all", grad, features)
        _, _, stock_peak = _step(None, grad, features)
        (eager_out, eager_grads), _, _ = _step(None, grad, features, compile_it=False)
        assert rule in fired
        assert ROW_SCALE in fired or grad  # a training step saves the mean for the weights' gradient
        torch.testing.assert_close(out, eager_out, atol=1e-4, rtol=1e-4)
        for got, want in zip(grads, eager_grads, strict=True):
            torch.testing.assert_close(got, want, atol=1e-4, rtol=1e-4)
        assert peak <= stock_peak * (1 + DEFAULT_PEAK_TOLERANCE)
