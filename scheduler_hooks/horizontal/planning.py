"""The grouping policy: which candidate kernels are tried together, and in which groups. One replaceable function
(:func:`set_grouping_policy`), as Inductor's ``set_custom_combo_kernel_horizontal_partition``."""

from __future__ import annotations

import collections
from collections.abc import Callable
from typing import Any, TypeVar

from optimus_ir.records import record
from optimus_ir.scheduler_hooks.horizontal.cost import flat_run_refusal
from optimus_ir.scheduler_hooks.horizontal.structure import (
    POINTWISE,
    Structure,
    dispatched_as,
    tiles_key,
    tiling_prefixes,
    triton_backend,
)
from optimus_ir.scheduler_hooks.horizontal.tuning import (
    MAX_CLASSES,
    MAX_EMPTY_BLOCKS,
    MAX_MEMBERS,
    MAX_PADDING,
    RULE,
    block_alignment,
)
from optimus_ir.scheduler_hooks.node_graph import IndependentSet, independent

#: A candidate: a scheduler node and its structure. A group: candidates to merge, and whether it is a row
#: reduction (else pointwise).
Candidate = tuple[Any, Structure]
Group = tuple[list[Candidate], bool]
GroupingPolicy = Callable[[list[list[Candidate]]], list[Group]]
#: A class of a kernel of several bodies, or part of one: a node (a merged group, or a kernel left alone), its
#: members' structures, and its kind (``structure.POINTWISE``, ``TILED``, ``PERSISTENT`` or ``LOOPED``).
ClassUnit = tuple[Any, list[Structure], str]
T = TypeVar("T")


def default_grouping(classes: list[list[Candidate]]) -> list[Group]:
    """For each class of candidates of one structure (in schedule order): its row-reduction kernels; its pointwise
    kernels that may run over their flat index (1-d ones; 2-d tiled ones where the cost model says so); of the 2-d
    tiled ones that may not, those of the same tiles (one kernel in those tiles serves them). Each cut into sets
    with no path between two members, each cut by size where padding to whole blocks costs too much. Each candidate
    left out is recorded with the reason."""
    groups: list[Group] = []
    for candidates in classes:
        if len(candidates) < 2:
            continue
        largest = max(candidates, key=lambda c: c[1].numel)[0]
        prefixes = tiling_prefixes(triton_backend(largest), largest)
        reduction = prefixes == ("x", "r0_")
        sets = [candidates]
        if not reduction:
            flat, refused = _runnable_flat(prefixes, candidates)
            sets = [flat, *_in_same_tiles([candidate for candidate, _ in refused])]
            in_tiles = {id(node) for found in sets[1:] for node, _ in found}
            by_reason: dict[str, list[str]] = {}
            for (node, _), why in refused:
                if id(node) not in in_tiles:
                    by_reason.setdefault(why, []).append(node.get_name())
            for why, names in by_reason.items():
                record(RULE, False, names, why)
        for found in sets:
            for group in _independent_groups(found):
                groups.extend((part, reduction) for part in _size_classes(group, reduction))
    return groups


def _runnable_flat(
    prefixes: tuple[str, ...], candidates: list[Candidate]
) -> tuple[list[Candidate], list[tuple[Candidate, str]]]:
    """The candidates a merged kernel may run over their flat index, where Inductor tiles the largest by
    ``prefixes`` (:func:`.cost.flat_run_refusal`), and the others, each with the reason."""
    runnable, refused = [], []
    for node, structure in candidates:
        why = flat_run_refusal(prefixes, node, structure)
        if why is None:
            runnable.append((node, structure))
        else:
            refused.append(((node, structure), why))
    return runnable, refused


def _in_same_tiles(candidates: list[Candidate]) -> list[list[Candidate]]:
    """Of pointwise ``candidates`` (in schedule order), the sets of at least two of one :func:`.structure.tiles_key`
    (one kernel in those tiles serves each)."""
    by_tiles: dict[Any, list[Candidate]] = {}
    for candidate in candidates:
        key = tiles_key(*candidate)
        if key is not None:
            by_tiles.setdefault(key, []).append(candidate)
    return [found for found in by_tiles.values() if len(found) > 1]


_policy: GroupingPolicy = default_grouping


def set_grouping_policy(policy: GroupingPolicy | None) -> None:
    """Use ``policy`` to plan the groups of every later compile (None: :func:`default_grouping`)."""
    global _policy
    _policy = policy or default_grouping


def grouping_policy() -> GroupingPolicy:
    return _policy


def class_sets(units: list[ClassUnit]) -> list[list[ClassUnit]]:
    """Which classes one kernel runs (:class:`ClassesGroup`), in schedule order: sets of classes of one kind
    (pointwise ones, flat or in 2-d tiles; persistent or looped row reductions) of at most ``MAX_CLASSES`` with no path between two of them and
    at most ``MAX_MEMBERS`` members of one body, each cut by size where padding every member to the blocks of the
    largest costs too much (``MAX_PADDING``, as for one class)."""
    sets: list[list[ClassUnit]] = []
    for unit in units:
        for kept in sets:
            if (
                len(kept) < MAX_CLASSES and dispatched_as(kept[0][2]) == dispatched_as(unit[2]) and _fits(unit, kept)
                and independent(unit[0], [node for node, _, _ in kept])
            ):
                kept.append(unit)
                break
        else:
            sets.append([unit])
    parts = [
        part for kept in sets
        for part in _cut_by_padding(kept, dispatched_as(kept[0][2]) != POINTWISE, lambda unit: unit[1])
    ]
    return [part for part in parts if len(part) > 1]


def _fits(unit: ClassUnit, kept: list[ClassUnit]) -> bool:
    """Whether ``unit`` joins ``kept`` with no class (the members of one body) above ``MAX_MEMBERS``."""
    members = collections.Counter(s.key for _, structures, _ in kept for s in structures)
    members.update(s.key for s in unit[1])
    return max(members.values()) <= MAX_MEMBERS


def _independent_groups(candidates: list[tuple[Any, Structure]]) -> list[list[tuple[Any, Structure]]]:
    """Greedy partition, in schedule order, into sets with no path between any two members."""
    groups: list[tuple[IndependentSet, list[tuple[Any, Structure]]]] = []
    for candidate in candidates:
        for nodes, group in groups:
            if len(group) < MAX_MEMBERS and nodes.admits(candidate[0]):
                nodes.add(candidate[0])
                group.append(candidate)
                break
        else:
            groups.append((IndependentSet(), [candidate]))
            groups[-1][0].add(candidate[0])
    for _, group in groups[1:]:
        record(
            RULE, False, [m.get_name() for m, _ in group],
            f"depend on members of the group of {groups[0][1][0][0].get_name()} (or over {MAX_MEMBERS}); own group",
        )
    return [g for _, g in groups if len(g) > 1]


def _size_classes(group: list[tuple[Any, Structure]], reduction: bool) -> list[list[tuple[Any, Structure]]]:
    """Split by size where padding members to whole blocks costs more than a launch (``MAX_PADDING``).

    Members start at multiples of a block size set by the group's largest member; smallest first, a member
    that would make the group too padded starts the next group.
    """
    parts = _cut_by_padding(group, reduction, lambda candidate: [candidate[1]])
    if len(parts) > 1:
        record(
            RULE, False, [m.get_name() for m, _ in group],
            f"sizes too different to pad to whole blocks: split into {len(parts)} groups by size",
        )
    return [p for p in parts if len(p) > 1]


def _cut_by_padding(items: list[T], reduction: bool, structures: Callable[[T], list[Structure]]) -> list[list[T]]:
    """``items`` (candidates, or classes of several members), smallest first, cut where padding every member to the
    blocks of the largest would cost more than a launch: an item that would make its part too padded starts the
    next part."""
    parts: list[list[T]] = []
    padding = _Padding(reduction)
    for item in sorted(items, key=lambda item: max(s.numel for s in structures(item))):
        numels = [s.numel for s in structures(item)]
        if not parts or padding.too_much_with(numels):
            parts.append([])
            padding = _Padding(reduction)
        parts[-1].append(item)
        padding.add(numels)
    return parts


class _Padding:
    """A part's members padded to whole blocks of its largest member's alignment (``MAX_PADDING``), kept as members
    join smallest first: the padded sum is redone only when a new largest member changes the alignment, so a part
    of thousands of members of a few sizes costs linear time, not quadratic."""

    def __init__(self, reduction: bool) -> None:
        self.reduction = reduction
        self.numels: list[int] = []
        self.largest = 0
        self.real = 0
        self.align = 0
        self.padded = 0  # the members' numels rounded up to ``align``, summed

    def _aligned(self, largest: int) -> int:
        align = block_alignment(largest, self.reduction)
        if align != self.align:
            self.align, self.padded = align, sum(-(-n // align) * align for n in self.numels)
        return align

    def too_much_with(self, numels: list[int]) -> bool:
        """Whether the part with members of ``numels`` added costs more than a split would (see ``MAX_PADDING``)."""
        align = self._aligned(max(self.largest, *numels))
        real = self.real + sum(numels)
        padding = self.padded + sum(-(-n // align) * align for n in numels) - real
        empty_blocks = padding if self.reduction else padding / 1024
        return (real + padding) > MAX_PADDING * real and empty_blocks > MAX_EMPTY_BLOCKS

    def add(self, numels: list[int]) -> None:
        align = self._aligned(max(self.largest, *numels))
        self.largest = max(self.largest, *numels)
        self.numels.extend(numels)
        self.real += sum(numels)
        self.padded += sum(-(-n // align) * align for n in numels)
