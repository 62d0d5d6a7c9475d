"""What the CUDA tests share: the marks that skip them without a GPU, a cold compile, kernels per call, errors."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import pytest
import torch

from optimus_ir.testing.measure import (  # noqa: F401  (the tests import them from here)
    cold_compile,
    cuda_events,
    kernels_per_call,
    max_rel_error,
    peak_memory_bytes,
)

#: every module of tests/gpu: ``pytestmark = CUDA`` (the ``cuda`` marker; skipped without a CUDA GPU)
CUDA = [pytest.mark.cuda, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]

MERGE_RULE = "IdenticalKernelsToMemberTableKernel"


@contextlib.contextmanager
def fresh_compile() -> Iterator[None]:
    """Compiled from scratch inside (Dynamo reset, fresh caches), in the settings the mode gives."""
    from torch._inductor.utils import fresh_cache

    torch._dynamo.reset()
    with fresh_cache(), torch._inductor.config.patch(fx_graph_cache=False):
        yield
    torch._dynamo.reset()


def merges(records: list) -> int:
    """The merges among a compile's records (not the horizontal pass's other decisions)."""
    return sum(r.fired and "→ one kernel" in r.detail for r in records if r.rule == MERGE_RULE)


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
