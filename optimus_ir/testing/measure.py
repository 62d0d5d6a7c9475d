"""What the GPU tests (``tests/gpu``) and the benchmarks both measure with: a cold compile, the CUDA events of a
call, kernels per call, the peak memory of a call, the relative error of outputs. Depends on torch alone."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

import torch

__all__ = ["COLD_COMPILE_CONFIG", "cold_compile", "cuda_events", "kernel_ms_per_call", "kernels_per_call",
           "max_rel_error", "peak_memory_bytes", "steady_events", "tensors_of"]

#: Inductor settings for compile times that compare: no FX-graph cache, no autotuning beyond the default heuristics.
COLD_COMPILE_CONFIG = {
    "fx_graph_cache": False,
    "fx_graph_remote_cache": False,
    "autotune_local_cache": False,
    "max_autotune": False,
    "max_autotune_gemm": False,
    "max_autotune_pointwise": False,
    "coordinate_descent_tuning": False,
}


@contextlib.contextmanager
def cold_compile(reset: bool = True) -> Iterator[None]:
    """Everything compiled inside compiles from scratch, whatever the process compiled before: Dynamo reset, fresh
    (temporary) Inductor and Triton cache directories, no FX-graph or AOTAutograd cache, no max-autotune. Keep
    every call of the compiled code inside too, so that a recompile (or a lazy backward compile) is cold as well.
    With ``reset=False`` Dynamo keeps what it compiled before and after (functions of their own code objects,
    compiled one after another and all called later, are each still compiled from scratch)."""
    import torch._functorch.config
    from torch._inductor.utils import fresh_cache

    if reset:
        torch._dynamo.reset()
    with (
        fresh_cache(),
        torch._inductor.config.patch(COLD_COMPILE_CONFIG),
        torch._functorch.config.patch(enable_autograd_cache=False),
    ):
        yield
    if reset:
        torch._dynamo.reset()


def cuda_events(fn: Callable[[], Any], calls: int = 1) -> list[Any]:
    """The CUDA events (kernels and copies) of ``calls`` calls of ``fn``, from the profiler."""
    torch.cuda.synchronize()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        for _ in range(calls):
            fn()
        torch.cuda.synchronize()
    return [e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]


#: calls before kernels are counted or their time summed: a merged kernel's member table is cached by the addresses
#: of its tensors, and the first calls after a compile give new ones (while the caller holds an earlier call's
#: outputs, until the caching allocator's blocks settle), each a host-to-device copy of a new table. On the H200,
#: counting after a first call kept alive, the CNNs' and Mixtral's inference repeat their addresses from the third
#: call on, Mixtral's training step from the fifth, the hetero GNN's inference from the fifteenth
#: (``benchmarks/probes/call_events.py``)
WARMUP_CALLS = 16


def steady_events(fn: Callable[[], Any], calls: int = 3) -> list[Any]:
    """The CUDA events of ``calls`` calls of ``fn`` after ``WARMUP_CALLS`` calls: a steady state's."""
    for _ in range(WARMUP_CALLS):
        fn()
    return cuda_events(fn, calls)


def kernels_per_call(fn: Callable[[], Any], calls: int = 3) -> float:
    """GPU kernels (and copies) launched per call in a steady state (:func:`steady_events`)."""
    return len(steady_events(fn, calls)) / calls


def kernel_ms_per_call(fn: Callable[[], Any], calls: int = 3) -> float:
    """Milliseconds the GPU spends in kernels (and copies) per call in a steady state (:func:`steady_events`), their
    profiled durations summed: what merging changes on the device, apart from the host's time to launch (which the
    per-call time with CUDA events includes, and which varies from run to run with the host)."""
    return sum(event.time_range.elapsed_us() for event in steady_events(fn, calls)) / calls / 1000


def peak_memory_bytes(fn: Callable[[], Any]) -> int:
    """Peak bytes the GPU held during one ``fn()`` call above what was allocated before it (weights, inputs,
    optimizer state, and whatever earlier variants left alive, which must not count against this one)."""
    torch.cuda.synchronize()
    before = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    fn()
    torch.cuda.synchronize()
    return torch.cuda.max_memory_allocated() - before


def tensors_of(output: Any) -> list[Any]:
    """``output`` (a tensor, or a tuple or list of them) as a list of tensors."""
    return list(output) if isinstance(output, (tuple, list)) else [output]


def max_rel_error(actual: Any, expected: Any) -> float:
    """The largest ``|a - e| / |e|`` (norms, in float64) over the tensors of ``actual`` and ``expected``."""
    worst = 0.0
    for a, e in zip(tensors_of(actual), tensors_of(expected)):
        a64, e64 = a.detach().double(), e.detach().double()
        worst = max(worst, float((a64 - e64).norm() / e64.norm().clamp_min(1e-30)))
    return worst
