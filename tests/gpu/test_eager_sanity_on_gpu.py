"""On a real GPU: each suite workload at the small size, in eager mode alone (a forward in fp32 and bf16, two
training steps in fp32), raises no CUDA error: where the suite reports one, this tells whether eager alone raises it
(run with ``CUDA_LAUNCH_BLOCKING=1`` to see where)."""

import pytest
import torch

from optimus_ir.testing.workloads import WORKLOADS, make_optimizer, train_step
from tests.gpu.helpers import CUDA

pytestmark = CUDA


@pytest.mark.parametrize("dtype, mode", [(torch.float32, "inference"), (torch.float32, "training"),
                                         (torch.bfloat16, "inference")], ids=["fp32-inference", "fp32-training",
                                                                              "bf16-inference"])
@pytest.mark.parametrize("name", list(WORKLOADS))
def test_eager_runs(name, dtype, mode):
    model, inputs = WORKLOADS[name].make("small", dtype, "cuda")
    if mode == "inference":
        model.eval()
        with torch.no_grad():
            for _ in range(2):
                model(*inputs)
    else:
        optimizer = make_optimizer(model)
        for _ in range(2):
            train_step(model, optimizer, inputs)
    torch.cuda.synchronize()
