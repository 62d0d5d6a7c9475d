"""Never more kernels than stock: where a graph's code with optimus_ir would launch more kernels than stock
Inductor's, stock's code is the one Inductor loads.

Only a lowering rule that lowers an op to other nodes can make a graph launch more (what fuses changes: a cat's
pieces, ``LoweringRule.may_add_launches``); a view removes copies, and the scheduler rules replace kernels by fewer
(a merge of N is one launch). So for a graph in which such a rule fired and which launches more than one kernel,
``GraphLowering.codegen`` (:mod:`optimus_ir.patches` puts :func:`codegen_hook` there) lowers the same post-grad graph
once more with every rule suspended, compares the launches of one call of the two wrappers, and returns stock's
code where it launches fewer. Stock's wrapper is kept in the graph state for the dump, which then does not lower
the graph a third time.

A graph over ``GUARD_MAX_NODES`` FX nodes is not lowered again, for the compile's time; nor a graph with a C++ or
FX wrapper (its code is not Python text to count), nor one whose stock lowering disagrees on what the compile
already took from ours (output layouts, constants). Each case is one decision in the dump.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from optimus_ir import graph_state
from optimus_ir.codegen_text import parse_wrapper
from optimus_ir.passes import enabled_passes, suspended
from optimus_ir.records import record

__all__ = ["GUARD_MAX_NODES", "RULE", "codegen_hook", "lower_stock"]

RULE = "StockLaunchGuard"
#: FX nodes above which a graph is not lowered a second time (its lowering is the compile's larger part there)
GUARD_MAX_NODES = 3000

log = logging.getLogger("optimus_ir")


def lower_stock(graph: Any) -> tuple[Any, tuple[Any, Any]]:
    """``graph`` (a ``GraphLowering`` being compiled) lowered once more with every rule suspended: the new
    ``GraphLowering`` and what its ``codegen()`` returned (wrapper code, kernel code)."""
    from torch._inductor.graph import GraphLowering
    from torch._inductor.virtualized import V

    stock = GraphLowering(
        graph.orig_gm,
        example_inputs=graph.example_inputs,
        shape_env=graph._shape_env,
        graph_id=graph.graph_id,
        cpp_wrapper=graph.cpp_wrapper,
        aot_mode=graph.aot_mode,
        is_inference=graph.is_inference,
        is_backward=graph.is_backward,
    )
    with suspended(), V.set_graph_handler(stock), V.set_extern_kernel_nodes([]):
        stock.run(*graph.example_inputs)
        code = stock.codegen()
    return stock, code


def codegen_hook(codegen: Callable[[Any], tuple[Any, Any]]) -> Callable[[Any], tuple[Any, Any]]:
    """What ``GraphLowering.codegen`` becomes: ``codegen``, then, for a graph changed by a rule that may add
    launches, stock's code where it launches fewer kernels."""

    def guarded_codegen(graph: Any) -> tuple[Any, Any]:
        code = codegen(graph)
        state = graph_state.existing() if enabled_passes() else None
        if state is None or not state.may_add_launches:
            return code
        ours = len(parse_wrapper(code[0].value).launches)
        if ours <= 1:
            return code  # stock's code could launch fewer only if it computed nothing
        reason = _unguarded(graph)
        if reason:
            record(RULE, False, ["<graph>"], f"not compared with stock: {reason}")
            return code
        try:
            stock, stock_code = lower_stock(graph)
        except Exception as error:  # the guard must never fail a compile
            log.warning("optimus_ir: lowering the graph again for the guard failed", exc_info=True)
            record(RULE, False, ["<graph>"], f"not compared with stock: lowering it again raised {error!r}")
            return code
        state.stock_wrapper = stock_code[0].value
        theirs = len(parse_wrapper(stock_code[0].value).launches)
        if theirs >= ours:
            return code
        if disagreement := _disagreement(graph, stock):
            record(RULE, False, ["<graph>"], f"{ours} launches, stock {theirs}, but ours kept: {disagreement}")
            return code
        record(
            RULE, True, sorted(state.may_add_launches),
            f"{ours} launches per call with these rules, {theirs} without: stock's code kept",
        )
        graph.disable_cudagraphs_reason = graph.disable_cudagraphs_reason or stock.disable_cudagraphs_reason
        return stock_code

    return guarded_codegen


def _unguarded(graph: Any) -> str | None:
    """Why ``graph``'s code is not compared with stock's (None: it is)."""
    import torch._inductor.config as config

    if graph.cpp_wrapper or graph.fx_wrapper or graph.aot_mode:
        return "a C++ or FX wrapper"
    if config.triton.autotune_at_compile_time:
        return "autotune_at_compile_time (the wrapper's tuning block is ours)"
    nodes = len(graph.orig_gm.graph.nodes)
    if nodes > GUARD_MAX_NODES:
        return f"{nodes} FX nodes, over GUARD_MAX_NODES ({GUARD_MAX_NODES}): lowering it again would cost its time"
    return None


def _disagreement(graph: Any, stock: Any) -> str | None:
    """What the compile took from ``graph`` that stock's lowering has otherwise (None: nothing)."""
    if set(graph.constants) != set(stock.constants):
        return "other constants"
    try:
        ours = [(tuple(o.get_size()), tuple(o.get_stride())) for o in graph.graph_outputs]
        theirs = [(tuple(o.get_size()), tuple(o.get_stride())) for o in stock.graph_outputs]
    except (AttributeError, NotImplementedError):
        return "output layouts not comparable"
    return None if ours == theirs else "other output layouts"
