"""The on/off switch: which optimus_ir passes are enabled.

Users enable optimus_ir without touching their program::

    OPTIMUS_IR=1 python train.py                    # every pass
    OPTIMUS_IR=splitcat python train.py             # a subset (comma list of pass names)
    OPTIMUS_IR=all,-SplitCatToPointwise python ...  # every rule but one (rules named one by one: optimus_ir.passes)
    OPTIMUS_IR=0 python train.py                    # off (the same as unset)

This works because ``import torch`` calls every entry point of the ``torch.backends`` group, and ours is
:func:`_autoload`. From Python the same is :func:`enable`, :func:`disable` and the :func:`enabled` context manager.

Nothing is imported or patched while no pass is enabled. Enabling installs the config hooks once
``torch._inductor.config`` is imported (lazily, so ``import torch`` stays as fast as without us); what they are,
and everything else optimus_ir changes in Inductor, is in :mod:`optimus_ir.patches`. :func:`disable` undoes all
of it.
"""

from __future__ import annotations

import contextlib
import os
import sys
import warnings
from collections.abc import Iterable, Iterator

from optimus_ir.after_import import after_import
from optimus_ir.passes import (
    OFF_WORDS, PASSES, Switch, configured, enabled_passes, parse_passes, parse_switch, set_enabled,
)
from optimus_ir.records import warn_once
from optimus_ir.torch_versions import CHECKED, unchecked_torch

__all__ = ["PASSES", "enable", "disable", "enabled", "enabled_passes", "for_this_torch", "parse_passes"]

_ENV = "OPTIMUS_IR"


def enable(passes: str | Iterable[str] | Switch = "all") -> None:
    """Enable ``passes`` ("all", pass names, rule names: :func:`optimus_ir.passes.parse_switch`) for every later
    compile, and only those; on a torch optimus_ir is not checked with (:mod:`optimus_ir.torch_versions`), none, with
    one warning."""
    chosen = for_this_torch(parse_switch(passes))
    set_enabled(chosen)
    if chosen.passes:
        after_import("torch._inductor.config", _install_config_hooks)
    elif "optimus_ir.patches" in sys.modules:
        sys.modules["optimus_ir.patches"].uninstall()


def for_this_torch(chosen: Switch) -> Switch:
    """``chosen``, or no pass (with one warning) on a torch optimus_ir is not checked with."""
    if chosen.passes and (version := unchecked_torch()) is not None:
        warn_once(("torch", version), "optimus_ir: torch %s is not a release optimus_ir is checked with (%s); "
                  "optimus_ir stays off and Inductor compiles as shipped", version, ", ".join(CHECKED))
        return Switch()
    return chosen


def disable() -> None:
    """Disable every pass and undo every patch, as if optimus_ir was never enabled."""
    enable(())


@contextlib.contextmanager
def enabled(passes: str | Iterable[str] | Switch | None = "all") -> Iterator[frozenset[str]]:
    """Within the block exactly ``passes`` are enabled (None: none); the previous state is restored after."""
    previous = configured()
    enable(passes or ())
    try:
        yield configured().passes
    finally:
        enable(previous)


def _autoload() -> None:
    """Entry point of the ``torch.backends`` group: called by ``import torch``. Reads ``OPTIMUS_IR``.

    It must never break ``import torch``: a bad value is reported as a warning and leaves optimus_ir off.
    """
    spec = os.environ.get(_ENV)
    if spec is None or spec.strip().lower() in OFF_WORDS:
        return
    try:
        enable(spec)
    except ValueError as error:
        warnings.warn(f"optimus_ir: ignoring {_ENV}={spec!r}: {error}", stacklevel=2)


def _install_config_hooks() -> None:
    if not configured().passes:
        return  # disabled again before torch._inductor.config was imported
    from optimus_ir import patches

    patches.install_config_hooks()
