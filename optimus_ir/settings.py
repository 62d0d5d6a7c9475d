"""The user's settings other than the passes, read from the environment when a graph is compiled.

Each setting changes the code a compile makes, so each is part of Inductor's cache keys (:func:`cache_key`). A value
that cannot be read falls back to the default, with a warning that says so: a setting never fails a compile.
"""

from __future__ import annotations

import os

from optimus_ir.records import warn_once

__all__ = ["PEAK_TOLERANCE_ENV", "DEFAULT_PEAK_TOLERANCE", "cache_key", "peak_tolerance"]


#: How much a merge may raise a graph's estimated peak memory, as a fraction of the peak before any merge.
PEAK_TOLERANCE_ENV = "OPTIMUS_IR_PEAK_TOLERANCE"
DEFAULT_PEAK_TOLERANCE = 0.01


def peak_tolerance() -> float:
    """``OPTIMUS_IR_PEAK_TOLERANCE``: a fraction of at least 0 (0: no merge may raise the estimated peak)."""
    text = os.environ.get(PEAK_TOLERANCE_ENV, "").strip()
    if not text:
        return DEFAULT_PEAK_TOLERANCE
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not 0 <= value < float("inf"):
        warn_once((PEAK_TOLERANCE_ENV, text), "optimus_ir: %s=%r is not a fraction of at least 0; %s used",
                  PEAK_TOLERANCE_ENV, text, DEFAULT_PEAK_TOLERANCE)
        return DEFAULT_PEAK_TOLERANCE
    return value


def cache_key() -> tuple[tuple[str, float], ...]:
    return ((PEAK_TOLERANCE_ENV, peak_tolerance()),)
