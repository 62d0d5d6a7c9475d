"""Running an Inductor loop body under other index expressions (shared by the split/cat folds and the merged
kernels over a flat index)."""

from __future__ import annotations

from typing import Any

import sympy

__all__ = ["replay"]


def replay(body: Any, indexing: dict[str, sympy.Expr]) -> Any:
    """Run a LoopBody's ops under the current ops handler with the given index expressions.

    This is ``LoopBody.__call__`` with the index expressions given directly instead of by variable substitution.
    """
    saved = body.indexing
    body.indexing = indexing
    try:
        return body.root_block()
    finally:
        body.indexing = saved
