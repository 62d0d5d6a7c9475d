"""On real devices: members on different devices are never one group (the horizontal issue's "mixed devices").

Each case is one graph of copies of one op whose tensors are on several devices, compiled with optimus_ir and
compared with eager; the merged groups and the CUDA kernels one call launches on each GPU must be:

- ``cpu + cuda:0``: 4 copies on CUDA tensors and 4 on CPU tensors. The CUDA ones merge into one kernel; the CPU ones
  are Inductor's C++ kernels (no Triton backend there: never merged).
- ``cuda:0 + cuda:1`` (a machine of two GPUs): 4 copies on each GPU: one merged kernel per GPU, none across them.
- ``cuda:0 × 0-d cpu``: 4 CUDA tensors each scaled by a 0-d CPU tensor, which the kernel is passed by value: a
  number each (never one kernel: it would read the first member's number), and one number for all (one kernel).
"""

from collections import Counter

import pytest
import torch
import torch.nn.functional as F

import optimus_ir
from optimus_ir.records import recording
from tests.gpu.helpers import CUDA, MERGE_RULE, cuda_events, max_rel_error

pytestmark = CUDA


def tanh_each(*xs):
    return [torch.tanh(x) for x in xs]


def layer_norm_each(*xs):
    return [F.layer_norm(x, x.shape[-1:]) for x in xs]


def scaled_each(*args):
    n = len(args) // 2
    return [x * s + 1 for x, s in zip(args[:n], args[n:])]


def check(fn, inputs: list[torch.Tensor]) -> tuple[list[int], dict[int, int]]:
    """The members of each merged group, and the CUDA kernels one call launches by GPU; the outputs are eager's."""
    expected = fn(*inputs)
    torch._dynamo.reset()
    with optimus_ir.enabled(), recording() as records:
        run = torch.compile(fn)
        actual = run(*inputs)
    assert max_rel_error(actual, expected) < 1e-5
    run(*inputs)
    kernels = Counter(e.device_index for e in cuda_events(lambda: run(*inputs)))
    return [len(r.nodes) for r in records if r.rule == MERGE_RULE and r.fired], dict(sorted(kernels.items()))


def _ragged(device: str) -> list[torch.Tensor]:
    return [torch.randn(256 + 32 * i, 512, device=device) for i in range(4)]


@pytest.mark.parametrize("fn", [tanh_each, layer_norm_each], ids=lambda f: f.__name__)
def test_cpu_and_cuda_members_merge_apart(fn):
    assert check(fn, _ragged("cpu") + _ragged("cuda:0")) == ([4], {0: 1})


@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs two GPUs")
@pytest.mark.parametrize("fn", [tanh_each, layer_norm_each], ids=lambda f: f.__name__)
def test_members_of_two_gpus_merge_per_gpu(fn):
    assert check(fn, _ragged("cuda:0") + _ragged("cuda:1")) == ([4, 4], {0: 1, 1: 1})


def test_members_reading_different_0d_cpu_tensors_do_not_merge():
    assert check(scaled_each, _ragged("cuda:0") + [torch.tensor(float(i + 2)) for i in range(4)]) == ([], {0: 4})


def test_members_reading_one_0d_cpu_tensor_merge():
    assert check(scaled_each, _ragged("cuda:0") + [torch.tensor(3.0)] * 4) == ([4], {0: 1})
