"""The pass names, and which passes the rules must apply right now.

This is state of the process, not of a graph: :mod:`optimus_ir.switch` sets it, every rule driver reads it.
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterable, Iterator

__all__ = ["PASSES", "active_passes", "compiling_with", "enabled_passes", "parse_passes", "set_enabled", "suspended"]

#: Every pass, by the name users give in ``OPTIMUS_IR`` / :func:`optimus_ir.enable`.
PASSES: tuple[str, ...] = ("splitcat", "horizontal")

ON_WORDS = frozenset({"1", "all", "on", "true", "yes"})
OFF_WORDS = frozenset({"", "0", "none", "off", "false", "no"})

_enabled: frozenset[str] = frozenset()
#: the passes of the compile in progress, where it came through ``backend="optimus_ir"``
_compiling: contextvars.ContextVar[frozenset[str]] = contextvars.ContextVar(
    "optimus_ir_compiling", default=frozenset()
)
_suspended: contextvars.ContextVar[frozenset[str]] = contextvars.ContextVar(
    "optimus_ir_suspended", default=frozenset()
)


def parse_passes(spec: str | Iterable[str] | None) -> frozenset[str]:
    """Turn ``"all"``, ``"0"``, ``"splitcat,horizontal"``, a list of names, or None into a set of pass names.

    Raises ValueError for an unknown pass name.
    """
    if spec is None:
        return frozenset()
    if isinstance(spec, str):
        word = spec.strip().lower()
        if word in ON_WORDS:
            return frozenset(PASSES)
        if word in OFF_WORDS:
            return frozenset()
        spec = [name.strip() for name in word.split(",") if name.strip()]
    names = frozenset(spec)
    unknown = sorted(names - set(PASSES))
    if unknown:
        raise ValueError(f"unknown optimus_ir pass(es) {unknown}; known: {list(PASSES)}")
    return names


def set_enabled(passes: frozenset[str]) -> None:
    global _enabled
    _enabled = passes


def configured_passes() -> frozenset[str]:
    """The passes enabled by the switch (also inside :func:`suspended`)."""
    return _enabled


def active_passes() -> frozenset[str]:
    """The passes of the compile in progress: those the switch enabled and those its backend asked for (also inside
    :func:`suspended`; what Inductor's cache keys hold)."""
    return _enabled | _compiling.get()


def enabled_passes() -> frozenset[str]:
    """The passes the rules must apply right now (:func:`active_passes`, less those :func:`suspended`)."""
    return active_passes() - _suspended.get()


@contextlib.contextmanager
def compiling_with(names: frozenset[str]) -> Iterator[None]:
    """Within the block the passes ``names`` apply too, whatever the switch says: one compile's own passes."""
    token = _compiling.set(names)
    try:
        yield
    finally:
        _compiling.reset(token)


@contextlib.contextmanager
def suspended(names: Iterable[str] = PASSES) -> Iterator[None]:
    """Within the block the rules of the passes ``names`` (default: every pass) fall back to stock Inductor; hooks
    stay installed, nothing is reconfigured.

    Used to lower a graph once more in the middle of a compile: stock (the dump's "without" side, the guard's
    comparison), or without the split/cat pass (the guard's way back under stock's peak).
    """
    token = _suspended.set(_suspended.get() | frozenset(names))
    try:
        yield
    finally:
        _suspended.reset(token)
