"""One line per compiled graph: its kernel launches per call, stock Inductor's where the compile lowered the graph
both ways, and the rule decisions that fired for it.

A user who set ``OPTIMUS_IR=1`` and nothing else sees the process's first line (a WARNING on the ``optimus_ir``
logger, which Python prints to stderr where no logging is configured); every line is logged at INFO
(``TORCH_LOGS="optimus_ir"``); ``OPTIMUS_IR_QUIET=1`` keeps the first at INFO too. The counters add up the same:
``counters["optimus_ir"]["graphs"]``, ``["launches"]`` and, over the graphs whose stock count is known,
``["stock_launches"]``.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from typing import Any

from optimus_ir import graph_state
from optimus_ir.codegen_text import parse_wrapper
from optimus_ir.passes import enabled_passes
from optimus_ir.records import RewriteRecord

__all__ = ["QUIET_ENV", "SINCE_LAST_LINE", "quiet", "summarized"]

QUIET_ENV = "OPTIMUS_IR_QUIET"
log = logging.getLogger("optimus_ir")
_state = {"shown": False}  # whether the process's first line was shown
#: the decisions since the last line (a listener of :mod:`optimus_ir.records` while the hooks are installed)
SINCE_LAST_LINE: list[RewriteRecord] = []


def quiet() -> bool:
    """``OPTIMUS_IR_QUIET`` set (to anything but 0): optimus_ir's lines that show by default are logged at INFO."""
    return os.environ.get(QUIET_ENV, "").strip() not in ("", "0")


def summarized(codegen: Callable[[Any], tuple[Any, Any]]) -> Callable[[Any], tuple[Any, Any]]:
    """What ``GraphLowering.codegen`` becomes: ``codegen``, then the graph's line."""

    def codegen_with_summary(graph: Any) -> tuple[Any, Any]:
        code = codegen(graph)
        state = graph_state.existing()
        # (a stock compile, or a graph the stock guard lowers again, has no line)
        if enabled_passes() and (state is None or not state.peak_wanted):
            summarize(graph, code[0].value, state)
        return code

    return codegen_with_summary


def summarize(graph: Any, wrapper: str, state: graph_state.GraphState | None) -> str:
    """Log the graph's line (see the module docstring) and add it to the counters; the line."""
    from torch._dynamo.utils import counters

    ours = len(parse_wrapper(wrapper).launches)
    stock = None if state is None or state.stock_wrapper is None else len(parse_wrapper(state.stock_wrapper).launches)
    fired = sum(r.fired for r in SINCE_LAST_LINE)
    SINCE_LAST_LINE.clear()
    counters["optimus_ir"]["graphs"] += 1
    counters["optimus_ir"]["launches"] += ours
    if stock is not None:
        counters["optimus_ir"]["stock_launches"] += stock
    kind = "backward" if graph.is_backward else "inference" if graph.is_inference else "forward"
    launches = f"{ours} kernel launch{'' if ours == 1 else 'es'} per call"
    if stock is not None:
        launches = f"{stock} -> {launches} (stock Inductor -> optimus_ir)"
    line = (f"optimus_ir: {kind} graph compiled: {launches}, {fired} rule decision{'' if fired == 1 else 's'} "
            "fired (each decision: TORCH_LOGS=optimus_ir; the code: OPTIMUS_IR_DUMP=DIR)")
    if _state["shown"] or quiet():
        log.info("%s", line)
    else:
        _state["shown"] = True
        log.warning("%s (once per process; %s=1 keeps it quiet)", line, QUIET_ENV)
    return line
