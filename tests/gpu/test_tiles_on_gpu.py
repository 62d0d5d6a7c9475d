"""On a real GPU: kernels Inductor tiles in 2-d (transposes, a channel split's pieces laid out for channels-last
convolutions) merged into one kernel that keeps those tiles. Launches per call, values against eager, and the peak
memory of a call against stock Inductor's."""

import pytest
import torch

import optimus_ir
from optimus_ir.records import recording
from optimus_ir.settings import DEFAULT_PEAK_TOLERANCE
from tests.gpu.helpers import CUDA, MERGE_RULE, cold_compile, kernels_per_call, peak_memory_bytes

pytestmark = CUDA

#: calls before launches are counted (member tables are cached by address; see test_classes_on_gpu)
WARM_CALLS = 3


def transposes(*xs):
    return [(x.t() * 2).contiguous() for x in xs]


def split_to_channels_last(x):
    return [piece.contiguous(memory_format=torch.channels_last) for piece in torch.chunk(torch.sigmoid(x), 4, 1)]


def _measure(passes, fn, inputs):
    """Kernels per call, the outputs of one call, its peak bytes and the horizontal pass's merges, compiled cold."""
    with cold_compile(), optimus_ir.enabled(passes), recording() as records:
        compiled = torch.compile(fn)
        call = lambda: compiled(*inputs)  # noqa: E731
        for _ in range(WARM_CALLS):
            call()
        kernels = kernels_per_call(call)
        return kernels, call(), peak_memory_bytes(call), [r for r in records if r.rule == MERGE_RULE and r.fired]


CASES = {
    "transposes of one size": (transposes, lambda dtype: [torch.randn(640, 784, device="cuda", dtype=dtype)
                                                           for _ in range(5)]),
    "transposes over the y and z grid": (transposes, lambda dtype: [torch.randn(4, 1000, device="cuda", dtype=dtype)
                                                                    for _ in range(70)]),
    "a channel split laid out for channels-last": (
        split_to_channels_last, lambda dtype: [torch.randn(8, 320, 28, 28, device="cuda", dtype=dtype)]
    ),
}


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("case", list(CASES))
def test_members_of_the_same_2d_tiles_run_as_one_kernel_in_those_tiles(case, dtype):
    fn, make = CASES[case]
    inputs = make(dtype)
    with torch.no_grad():
        expected = fn(*inputs)
        stock_kernels, _, stock_peak, _ = _measure(None, fn, inputs)
        kernels, actual, peak, merges = _measure("all", fn, inputs)
    assert any("in 2-d tiles each" in r.detail for r in merges)
    assert kernels <= stock_kernels - len(expected) + 1
    torch.testing.assert_close(actual, expected)
    assert peak <= stock_peak * (1 + DEFAULT_PEAK_TOLERANCE)
