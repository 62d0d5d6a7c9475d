"""The Inductor, Dynamo and Triton internals whose names or behaviour differ between the torch releases optimus_ir
supports (:data:`optimus_ir.torch_versions.CHECKED`): each difference is one function here, named for what it
gives, so that rules, patches and the virtual device read the same on every release."""

from __future__ import annotations

from typing import Any

import torch.fx.experimental.symbolic_shapes as _symbolic_shapes

__all__ = ["symint_hint"]

#: torch 2.11 names it ``size_hint``, later releases ``optimization_hint``
_SYMINT_HINT = getattr(_symbolic_shapes, "optimization_hint", None) or _symbolic_shapes.size_hint


def symint_hint(size: Any, fallback: int | None = None) -> int:
    """A size of a traced graph's value (an int or a SymInt) as an int: its hint where symbolic, ``fallback`` where
    it has none (an unbacked size)."""
    return _SYMINT_HINT(size, fallback)
