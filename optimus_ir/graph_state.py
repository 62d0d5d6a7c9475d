"""Everything the rules pass between stages of one graph's compile, in one typed object.

A lowering rule learns things that a scheduler rule needs later (which kernels to group, which cats were written
through folds), and a scheduler rule things its kernel's codegen and the wrapper need. They all go through the
:class:`GraphState` of the graph being compiled, made the first time a rule asks for it and dropped with the graph:
the one map below is weak in Inductor's ``GraphLowering`` object, and nothing is stored on Inductor's objects.
"""

from __future__ import annotations

import dataclasses
import weakref
from typing import Any

__all__ = ["GraphState", "current", "existing", "state_of"]


@dataclasses.dataclass
class GraphState:
    """The per-graph facts one rule leaves for another (the producer and the consumer of each named below)."""

    #: ``CatOfTilingSlicesToView`` → the slice rules: each FX cat node's lowered inputs
    cat_inputs: dict[Any, list[Any]] = dataclasses.field(default_factory=dict)
    #: the slice rules → ``UnreadConcatElimination``: cats whose slices now read the cat's inputs
    redirected_cats: set[str] = dataclasses.field(default_factory=set)
    #: the view rules, once per graph: each FX node some op may write into → that op
    written_nodes: dict[Any, Any] | None = None
    #: ``SplitCatToPointwise`` → ``PieceGroupToComboKernel``: buffer names to put in one kernel, per cat
    piece_groups: list[tuple[str, ...]] = dataclasses.field(default_factory=list)
    #: ``SplitCatToPointwise`` → later pieces, ``CatConsumerIntoPieces``, ``DeadFoldedCatElimination``: the cat
    #: outputs written through folds, buffer name → (folds, size, stride, cat dim)
    written_by_folds: dict[str, tuple[list[Any], list[Any], list[Any], int]] = dataclasses.field(default_factory=dict)
    #: the horizontal merges, once per graph: each graph input → the names of the (unfused) nodes that read it
    input_readers: dict[str, Any] | None = None
    #: ``InputAlignmentCheckedByMemberTables`` → the merged kernels' codegen: inputs whose alignment the member
    #: tables check, by their index among the graph's inputs
    alignment_in_tables: dict[str, int] = dataclasses.field(default_factory=dict)
    #: the merged kernels' codegen → the wrapper's frees: by wrapper, its regions of one allocation
    #: (``scheduler_hooks.horizontal.allocation.RegionsOfAllocations``)
    regions: dict[Any, Any] = dataclasses.field(default_factory=dict)
    #: the lowering driver → later lowering rules: each FX node a lowering rule lowered → the value it returned (a
    #: rule reading a value the interpreter has freed finds it here, where no buffer of its own holds it)
    rule_values: dict[Any, Any] = dataclasses.field(default_factory=dict)
    #: ``RowScaledMatmulInputToScaledProduct`` at a div → itself at the matmul that reads it: the div's operands
    row_scaled: dict[Any, tuple[Any, Any]] = dataclasses.field(default_factory=dict)
    #: ``RepeatedComputationToFirstValue``, from one node to the next: the first FX node of each computation
    first_by_computation: dict[Any, Any] = dataclasses.field(default_factory=dict)
    #: the lowering driver → the stock guard: the rules fired that can make the graph launch more than stock
    #: (``LoweringRule.may_add_launches``)
    may_add_launches: set[str] = dataclasses.field(default_factory=set)
    #: ``UnreadConcatElimination``, ``RepeatedComputationToFirstValue`` and ``SummedSmallMatmulsToOneReduction`` →
    #: the stock guard: by rule, what it keeps alive longer (names): cats whose slices read their inputs, so that the
    #: readers of their pieces may run before the whole cat is written; a value read again where it was computed
    #: again; a sum whose matmuls' operands are read at the sum
    may_raise_peak: dict[str, set[str]] = dataclasses.field(default_factory=dict)
    #: the stock guard → the rules' drivers, in a graph it lowers again: rules that leave it to stock there
    suspended_rules: frozenset[str] = frozenset()
    #: the stock guard → the post-fusion stage: the guard compares this graph's peak (one it lowered again)
    peak_wanted: bool = False
    #: the stock guard → the horizontal merges, in a graph it lowers again: stock's peak raised by the tolerance
    #: (``scheduler_hooks.horizontal.memory.MemoryEstimate``), where it is below the graph's own
    merge_ceiling: Any = None
    #: the post-fusion stage → the stock guard: the finished schedule's estimated peak memory
    #: (``scheduler_hooks.horizontal.memory.MemoryEstimate``), where the guard compares it
    estimated_peak: Any = None
    #: the stock guard → the dump: the graph's wrapper code lowered with every rule suspended
    stock_wrapper: str | None = None

    def note_peak_raise(self, rule: str, name: str) -> None:
        """``rule`` keeps ``name`` alive longer than stock would (``may_raise_peak``)."""
        self.may_raise_peak.setdefault(rule, set()).add(name)


_STATES: weakref.WeakKeyDictionary[Any, GraphState] = weakref.WeakKeyDictionary()


def state_of(graph: Any) -> GraphState:
    """The state of ``graph`` (Inductor's ``GraphLowering``, or an FX graph where none is being lowered)."""
    state = _STATES.get(graph)
    if state is None:
        state = _STATES[graph] = GraphState()
    return state


def current() -> GraphState:
    """The state of the graph Inductor is compiling now (``V.graph``)."""
    from torch._inductor.virtualized import V

    return state_of(V.graph)


def existing() -> GraphState | None:
    """The state of the graph Inductor is compiling now, where a rule made one."""
    from torch._inductor.virtualized import V

    return _STATES.get(V.graph)
