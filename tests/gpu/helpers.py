"""What the CUDA tests share: the marks that skip them without a GPU, a cold compile, kernels per call, errors."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import torch

#: every module of tests/gpu: ``pytestmark = CUDA`` (the ``cuda`` marker; skipped without a CUDA GPU)
CUDA = [pytest.mark.cuda, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]

MERGE_RULE = "IdenticalKernelsToMemberTableKernel"


def merges(records: list) -> int:
    """The merges among a compile's records (not the horizontal pass's other decisions)."""
    return sum(r.fired and "→ one kernel" in r.detail for r in records if r.rule == MERGE_RULE)


@contextlib.contextmanager
def cold_compile() -> Iterator[None]:
    """Everything compiled inside compiles from scratch: Dynamo reset, fresh Inductor and Triton caches, no FX-graph
    or AOTAutograd cache, no max-autotune."""
    import torch._functorch.config
    from torch._inductor.utils import fresh_cache

    torch._dynamo.reset()
    with (
        fresh_cache(),
        torch._inductor.config.patch(fx_graph_cache=False, fx_graph_remote_cache=False, autotune_local_cache=False,
                                     max_autotune=False, max_autotune_gemm=False, max_autotune_pointwise=False,
                                     coordinate_descent_tuning=False),
        torch._functorch.config.patch(enable_autograd_cache=False),
    ):
        yield
    torch._dynamo.reset()


def cuda_events(call: Callable[[], Any], calls: int = 1) -> list[Any]:
    """The CUDA events (kernels and copies) of ``calls`` calls of ``call``, from the profiler."""
    torch.cuda.synchronize()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        for _ in range(calls):
            call()
        torch.cuda.synchronize()
    return [e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]


def kernels_per_call(call: Callable[[], Any], calls: int = 3) -> float:
    """CUDA kernels (and copies) one call launches, counted with the profiler after one call."""
    call()
    return len(cuda_events(call, calls)) / calls


def peak_memory_bytes(call: Callable[[], Any]) -> int:
    """Peak bytes the GPU held during one ``call()`` above what was allocated before it."""
    torch.cuda.synchronize()
    before = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    call()
    torch.cuda.synchronize()
    return torch.cuda.max_memory_allocated() - before


def _tensors(output: Any) -> list[Any]:
    return list(output) if isinstance(output, (tuple, list)) else [output]


def max_rel_error(actual: Any, expected: Any) -> float:
    """The largest ``|a - e| / |e|`` (norms, in float64) over the tensors of ``actual`` and ``expected``."""
    worst = 0.0
    for a, e in zip(_tensors(actual), _tensors(expected)):
        a64, e64 = a.detach().double(), e.detach().double()
        worst = max(worst, float((a64 - e64).norm() / e64.norm().clamp_min(1e-30)))
    return worst


def worst(actual: tuple, expected: tuple, atol: float, rtol: float) -> float:
    """The largest ``|a - e| / (atol + rtol * |e|)`` over the floating-point tensors (below 1: within the
    tolerance; integers and bools: 0 where equal, inf where not)."""
    result = 0.0
    for a, e in zip(actual, expected, strict=True):
        if a.dtype != e.dtype or a.shape != e.shape:
            return float("inf")
        if not a.dtype.is_floating_point:
            result = max(result, 0.0 if torch.equal(a, e) else float("inf"))
            continue
        a64, e64 = a.detach().double(), e.detach().double()
        result = max(result, float(((a64 - e64).abs() / (atol + rtol * e64.abs())).max()) if a.numel() else 0.0)
    return result


def seeds(variable: str, default: range) -> range:
    """The seeds a random test checks: ``default``, or those of the environment variable ``variable``
    (``FIRST-LAST``, e.g. ``24-223``: beyond CI's seeds)."""
    import os

    text = os.environ.get(variable)
    if not text:
        return default
    first, _, last = text.partition("-")
    return range(int(first), int(last or first) + 1)
