"""The Inductor, Dynamo and Triton internals whose names or behaviour differ between the torch releases optimus_ir
supports (:data:`optimus_ir.torch_versions.CHECKED`): each difference is one function here, named for what it
gives, so that rules, patches and the virtual device read the same on every release."""

from __future__ import annotations

import copy
from typing import Any

import torch.fx.experimental.symbolic_shapes as _symbolic_shapes

__all__ = ["can_fuse_before_streams", "symint_hint"]

#: torch 2.11 names it ``size_hint``, later releases ``optimization_hint``
_SYMINT_HINT = getattr(_symbolic_shapes, "optimization_hint", None) or _symbolic_shapes.size_hint


def symint_hint(size: Any, fallback: int | None = None) -> int:
    """A size of a traced graph's value (an int or a SymInt) as an int: its hint where symbolic, ``fallback`` where
    it has none (an unbacked size)."""
    return _SYMINT_HINT(size, fallback)


#: What torch 2.15's Scheduler assigns after its pre-fusion hook, before fusion, and ``can_fuse`` reads (the nodes'
#: streams and memory pools), as it stands before any assignment: every node on the default stream and pool.
_UNASSIGNED_BEFORE_FUSION = {
    "_multi_stream_nodes": False, "node_to_stream": {}, "buff_to_stream": {},
    "_mempool_nodes": False, "node_to_mempool": {}, "buff_to_mempool": {},
}


def can_fuse_before_streams(scheduler: Any, node1: Any, node2: Any) -> bool:
    """``scheduler.can_fuse(node1, node2)`` from a pass that runs before fusion, where torch 2.15 has not yet
    assigned the state its ``can_fuse`` reads (:data:`_UNASSIGNED_BEFORE_FUSION`, lent for the call)."""
    lent = [name for name in _UNASSIGNED_BEFORE_FUSION if not hasattr(scheduler, name)]
    for name in lent:
        setattr(scheduler, name, copy.copy(_UNASSIGNED_BEFORE_FUSION[name]))
    try:
        return scheduler.can_fuse(node1, node2)
    finally:
        for name in lent:
            delattr(scheduler, name)
