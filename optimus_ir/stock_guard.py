"""Never more kernels than stock, never a higher peak: where a graph's code with optimus_ir would launch more
kernels than stock Inductor's, or peak higher than stock's beyond ``OPTIMUS_IR_PEAK_TOLERANCE``, the code Inductor
loads is another lowering of the same graph.

Only a lowering rule that lowers an op to other nodes can make a graph launch more (what fuses changes: a cat's
pieces, ``LoweringRule.may_add_launches``); a view removes copies, and the scheduler rules replace kernels by fewer
(a merge of N is one launch). A view can raise the peak, though: a cat kept allocated whose slices now read its
inputs (``GraphState.may_raise_peak``) no longer makes the readers of its pieces wait for the whole cat, and
Inductor's fusion of each piece with its reader then holds the cats of a backward's layers all at once. The
horizontal merges keep to the tolerance over the graph they are given, not over stock's.

So for a graph in which such a rule fired, ``GraphLowering.codegen`` (:mod:`optimus_ir.patches` puts
:func:`codegen_hook` there) lowers the same post-grad graph once more with every rule suspended and compares:

- launches of one call of the two wrappers (``StockLaunchGuard``): stock's code where it launches fewer;
- the two finished schedules' estimated peaks (``StockPeakGuard``, the memory model of the horizontal merges,
  ``GraphState.estimated_peak``): where ours is above stock's raised by the tolerance (its merges kept to the
  tolerance over the graph they were given, which a lowering rule may have raised), the graph is lowered again
  with its merges kept under stock's peak raised by the tolerance (``GraphState.merge_ceiling``), then, where that
  is still above, without one of the rules that noted they may raise it (``GraphState.may_raise_peak``), or all of
  them, then without the split/cat pass; the first code whose estimate is within and launches no more than
  stock's, else stock's.

Stock's wrapper is kept in the graph state for the dump, which then does not lower the graph again.

A graph over ``GUARD_MAX_NODES`` FX nodes is not lowered again, for the compile's time; nor a graph with a C++ or
FX wrapper (its code is not Python text to count), nor one whose other lowering disagrees on what the compile
already took from ours (output layouts, constants). Each case is one decision in the dump.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from typing import Any

from optimus_ir import graph_state, settings
from optimus_ir.codegen_text import parse_wrapper
from optimus_ir.drivers import raise_where_strict
from optimus_ir.passes import PASSES, enabled_passes, suspended
from optimus_ir.records import record

__all__ = ["GUARD_MAX_NODES", "PEAK_RULE", "RULE", "codegen_hook", "lower_again"]

RULE = "StockLaunchGuard"
PEAK_RULE = "StockPeakGuard"
#: FX nodes above which a graph is not lowered a second time (its lowering is the compile's larger part there)
GUARD_MAX_NODES = 3000
#: the pass the guard lowers a graph without when ours peaks too high (the views that let pieces run early)
PEAK_RAISING_PASS = "splitcat"

log = logging.getLogger("optimus_ir")


def lower_again(
    graph: Any, without: Iterable[str] = PASSES, ceiling: Any = None, rules: Iterable[str] = ()
) -> tuple[Any, tuple[Any, Any]]:
    """``graph`` (a ``GraphLowering`` being compiled) lowered once more with the passes ``without`` and the
    ``rules`` suspended (by default every pass: stock's lowering), its merges kept under ``ceiling`` where given
    (``GraphState.merge_ceiling``): the new ``GraphLowering``, whose schedule's peak is estimated
    (``GraphState.estimated_peak``), and what its ``codegen()`` returned (wrapper code, kernel code)."""
    from torch._inductor.graph import GraphLowering
    from torch._inductor.virtualized import V

    again = GraphLowering(
        graph.orig_gm,
        example_inputs=graph.example_inputs,
        shape_env=graph._shape_env,
        graph_id=graph.graph_id,
        cpp_wrapper=graph.cpp_wrapper,
        aot_mode=graph.aot_mode,
        is_inference=graph.is_inference,
        is_backward=graph.is_backward,
    )
    graph_state.state_of(again).peak_wanted = True
    graph_state.state_of(again).merge_ceiling = ceiling
    graph_state.state_of(again).suspended_rules = frozenset(rules)
    with suspended(without), V.set_graph_handler(again), V.set_extern_kernel_nodes([]):
        again.run(*graph.example_inputs)
        code = again.codegen()
    return again, code


def codegen_hook(codegen: Callable[[Any], tuple[Any, Any]]) -> Callable[[Any], tuple[Any, Any]]:
    """What ``GraphLowering.codegen`` becomes: ``codegen``, then, for a graph changed by a rule that may add
    launches or raise the peak, the code of another lowering of it where ours launches more or peaks higher."""

    def guarded_codegen(graph: Any) -> tuple[Any, Any]:
        code = codegen(graph)
        state = graph_state.existing() if enabled_passes() else None
        if state is None or state.peak_wanted:  # (a graph the guard lowers again is not guarded again)
            return code
        ours = len(parse_wrapper(code[0].value).launches)
        # stock's code could launch fewer only where ours launches more than one
        launches_at_stake = bool(state.may_add_launches) and ours > 1
        if not launches_at_stake and not state.may_raise_peak:
            return code
        reason = _unguarded(graph)
        if reason:
            record(RULE, False, ["<graph>"], f"not compared with stock: {reason}")
            return code
        stock = _lowered_again(graph, PASSES)
        if stock is None:
            return code
        state.stock_wrapper = stock[1][0].value
        theirs = len(parse_wrapper(stock[1][0].value).launches)
        if theirs < ours:
            if disagreement := _disagreement(graph, stock[0]):
                record(RULE, False, ["<graph>"], f"{ours} launches, stock {theirs}, but ours kept: {disagreement}")
            else:
                record(
                    RULE, True, sorted(state.may_add_launches),
                    f"{ours} launches per call with these rules, {theirs} without: stock's code kept",
                )
                return _taken(graph, stock)
        return _within_stocks_peak(graph, state, code, stock)

    return guarded_codegen


def _lowered_again(
    graph: Any, without: Iterable[str], ceiling: Any = None, rules: Iterable[str] = ()
) -> tuple[Any, tuple[Any, Any]] | None:
    """:func:`lower_again`, or None (recorded) where it raised."""
    try:
        return lower_again(graph, without, ceiling, rules)
    except Exception as error:  # the guard must never fail a compile
        raise_where_strict(error)
        log.warning("optimus_ir: lowering the graph again for the guard failed", exc_info=True)
        record(RULE, False, ["<graph>"], f"not compared with stock: lowering it again raised {error!r}")
        return None


def _taken(graph: Any, other: tuple[Any, tuple[Any, Any]]) -> tuple[Any, Any]:
    """The code of ``other`` (a lowering of ``graph`` and its code), for ``graph``'s compile to load."""
    graph.disable_cudagraphs_reason = graph.disable_cudagraphs_reason or other[0].disable_cudagraphs_reason
    return other[1]


def _within_stocks_peak(
    graph: Any, state: graph_state.GraphState, code: tuple[Any, Any], stock: tuple[Any, tuple[Any, Any]]
) -> tuple[Any, Any]:
    """``code`` where its schedule's estimated peak is within stock's raised by the tolerance; else the code of
    the graph lowered without the split/cat pass, where that is within; else stock's."""
    ours, theirs = state.estimated_peak, graph_state.state_of(stock[0]).estimated_peak
    if ours is None or theirs is None:
        record(PEAK_RULE, False, ["<graph>"], "not compared with stock: a schedule was not estimated")
        return code
    cats = sorted(set().union(*state.may_raise_peak.values())) or ["<graph>"]
    ceiling = theirs.raised_by(settings.peak_tolerance())
    peaks = f"estimated peak, stock's → ours: {ours.versus(theirs, ceiling)}"
    if ours.within(ceiling):
        if state.may_raise_peak:  # (a graph lowered again for its launches alone says nothing here)
            record(PEAK_RULE, False, cats, f"{peaks}: ours kept")
        return code
    if disagreement := _disagreement(graph, stock[0]):
        record(PEAK_RULE, False, cats, f"{peaks}, but ours kept: {disagreement}")
        return code
    # ours again, its merges under stock's ceiling; then without one of the rules that noted they may raise the
    # peak, or without all of them; then without the split/cat pass's views, where another pass is left
    raising = sorted(state.may_raise_peak)
    retries = [((), (), "its merges kept under stock's ceiling")]
    for rules in [[name] for name in raising] + ([raising] if len(raising) > 1 else []):
        retries.append(((), rules, f"lowered without {', '.join(rules)}"))
    if PEAK_RAISING_PASS in enabled_passes() and enabled_passes() - {PEAK_RAISING_PASS}:
        retries.append(((PEAK_RAISING_PASS,), (), f"lowered without the {PEAK_RAISING_PASS} pass"))
    for without, rules, how in retries:
        other = _lowered_again(graph, without, ceiling, rules)
        estimate = None if other is None else graph_state.state_of(other[0]).estimated_peak
        if (
            estimate is not None and estimate.within(ceiling) and not _disagreement(graph, other[0])
            and len(parse_wrapper(other[1][0].value).launches) <= len(parse_wrapper(stock[1][0].value).launches)
        ):
            record(PEAK_RULE, True, cats, f"{peaks}: the code {how} kept ({estimate.peak} bytes)")
            return _taken(graph, other)
    record(PEAK_RULE, True, cats, f"{peaks}: stock's code kept")
    return _taken(graph, stock)


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


def _disagreement(graph: Any, other: Any) -> str | None:
    """What the compile took from ``graph`` that ``other``, a lowering of the same graph, has otherwise (None:
    nothing)."""
    if set(graph.constants) != set(other.constants):
        return "other constants"
    try:
        ours, theirs = _output_layouts(graph), _output_layouts(other)
    except (AttributeError, NotImplementedError):
        return "output layouts not comparable"
    return None if ours == theirs else "other output layouts"


def _output_layouts(graph: Any) -> list[tuple[Any, ...]]:
    """Each output's size and stride; an output that has none (a backward's None gradient) by its kind."""
    from torch._inductor import ir

    return [
        (type(o).__name__,) if isinstance(o, (ir.NoneAsConstantBuffer, ir.ShapeAsConstantBuffer))
        else (tuple(o.get_size()), tuple(o.get_stride()))
        for o in graph.graph_outputs
    ]
