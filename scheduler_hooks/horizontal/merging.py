"""Trying the planned groups: each merged where the graph's estimated peak memory stays within the tolerance of
the peak before any merge (``OPTIMUS_IR_PEAK_TOLERANCE``), else split in halves and tried again, within a budget of
memory estimates."""

from __future__ import annotations

import collections
import dataclasses
import logging
from typing import Any

from torch.utils._ordered_set import OrderedSet

from optimus_ir import settings
from optimus_ir.records import record
from optimus_ir.scheduler_hooks.horizontal.allocation import OneAllocation, one_allocations
from optimus_ir.scheduler_hooks.horizontal.buffers import BufferBytes
from optimus_ir.scheduler_hooks.horizontal.classes import ClassesGroup
from optimus_ir.scheduler_hooks.horizontal.group import MemberTableGroup
from optimus_ir.scheduler_hooks.horizontal.memory import MemoryEstimate, live_while_running, peak_memory
from optimus_ir.scheduler_hooks.horizontal.planning import ClassUnit
from optimus_ir.scheduler_hooks.horizontal.structure import POINTWISE, TILED, Structure, dispatched_as, tiles_key
from optimus_ir.scheduler_hooks.horizontal.tuning import MAX_ESTIMATED_NODES, RULE
from optimus_ir.scheduler_hooks.node_graph import replace_with_group

log = logging.getLogger("optimus_ir")


@dataclasses.dataclass
class MemoryCheck:
    """The memory estimates of one graph's merges: the estimate of the nodes as they are now, the ceiling every
    merge keeps to (the estimate before any merge, raised by ``OPTIMUS_IR_PEAK_TOLERANCE``), and the scheduler
    nodes estimated so far, within ``MAX_ESTIMATED_NODES``."""

    bytes_of: BufferBytes
    estimate: MemoryEstimate
    ceiling: MemoryEstimate
    estimated: int
    #: the sets of members whose merge was rejected, by their names: not tried again another way
    rejected: set[frozenset[str]] = dataclasses.field(default_factory=set)

    @classmethod
    def of(cls, nodes: list[Any], bytes_of: BufferBytes, lower: MemoryEstimate | None = None) -> MemoryCheck:
        """The check of a graph's merges; ``lower``: a ceiling the merges keep to where it is below their own."""
        estimate = peak_memory(nodes, bytes_of)
        ceiling = estimate.raised_by(settings.peak_tolerance())
        if lower is not None:
            ceiling = MemoryEstimate(min(ceiling.peak, lower.peak),
                                     min(ceiling.peak_tangents_freed, lower.peak_tangents_freed))
        return cls(bytes_of, estimate, ceiling, len(nodes))

    def affordable(self, nodes: list[Any]) -> bool:
        """Whether one more estimate of ``nodes`` is within the budget."""
        return self.estimated + len(nodes) <= MAX_ESTIMATED_NODES

    def merge(self, nodes: list[Any], made: list[tuple[Any, list[Any]]]) -> tuple[list[Any], str | None]:
        """``nodes`` with the top-level nodes of each of ``made`` (a group node and what it replaces) replaced by
        the group, all or none, unless the estimated peak memory would pass the ceiling (or no schedule runs a
        group together); returns the nodes and why they were not replaced (None where they were). A rejected
        merge leaves the nodes and estimate as they were, so they are not estimated again before they change."""
        self.estimated += len(nodes)
        candidate = nodes
        for group, replaced in made:
            candidate = replace_with_group(candidate, replaced, group)
            if candidate is None:
                break
        after = None if candidate is None else peak_memory(candidate, self.bytes_of)
        log.debug(
            "%s: %d group(s) of %s: estimated %s", RULE, len(made), made[0][1][0].get_name(),
            "no schedule" if after is None else after.versus(self.estimate, self.ceiling),
        )
        if after is not None and after.within(self.ceiling):
            self.estimate = after
            return candidate, None
        for group, replaced in reversed(made):
            _forget(group, replaced)
            self.rejected.add(frozenset(m.get_name() for m in group.members))
        if after is None:
            return nodes, "no schedule runs them together"
        return nodes, f"estimated peak memory {after.versus(self.estimate, self.ceiling)}"


def try_groups(
    nodes: list[Any], to_try: collections.abc.Iterable[tuple[list[tuple[Any, Structure]], bool]],
    check: MemoryCheck,
) -> list[Any]:
    """Merge each group of ``to_try`` (whole, then halves) where the graph's estimated peak memory stays within
    the ceiling of ``check``.

    Merging a group makes its small buffers one allocation (:func:`one_allocations`), which can make room for
    the group that reads them, and the other way round. So a group rejected while a group still to try is linked
    to it that way (:meth:`GroupsToTry.linked`) waits: once a linked group merges, it is tried again; once none
    is left to try, it is split. A group rejected while a linked group waits is tried together with it: the two
    stages of 48 full sums each raise the peak alone (the other stage's 48 buffers take a 512-byte block each),
    and lower it together."""
    groups = GroupsToTry(to_try)
    waiting: list[tuple[list[tuple[Any, Structure]], bool, str]] = []
    tried_again: set[int] = set()  # ids of the parts in ``groups`` that are there for a second try
    ceiling = check.ceiling

    def split(part: list[tuple[Any, Structure]], reduction: bool, why: str) -> None:
        record(RULE, False, [m.get_name() for m, _ in part], f"{why}: split in two")
        for half in _halves(part):
            groups.push(half, reduction)

    def merged(parts: list[list[tuple[Any, Structure]]]) -> None:
        for item in [item for item in waiting if any(groups.linked(item[0], part) for part in parts)]:
            waiting.remove(item)
            tried_again.add(id(item[0]))
            groups.push(item[0], item[1])

    def rejected(part: list[tuple[Any, Structure]], reduction: bool, why: str) -> None:
        nonlocal nodes
        partner = next((item for item in waiting if groups.linked(item[0], part)), None)
        if partner is not None and check.affordable(nodes):
            waiting.remove(partner)
            nodes, jointly = _merge(nodes, [partner[:2], (part, reduction)], check)
            if jointly is None:
                merged([partner[0], part])
                return
            split(*partner)
            split(part, reduction, why)
        elif id(part) not in tried_again and groups.linked_to(part):
            waiting.append((part, reduction, why))
        else:
            split(part, reduction, why)

    while groups or waiting:
        for item in [item for item in waiting if not groups.linked_to(item[0])]:
            waiting.remove(item)
            split(*item)
        if not groups:
            continue
        part, reduction = groups.pop()
        members = [m for m, _ in part]
        own, own_tangents = live_while_running(members, groups.touches(part).one_allocations, check.bytes_of)
        if own > ceiling.peak or own + own_tangents > ceiling.peak_tangents_freed:
            above = (
                f"{own} bytes of their own inputs and outputs, above the ceiling of the peak ({ceiling.peak})"
                if own > ceiling.peak
                else f"{own + own_tangents} bytes of their own inputs, outputs and incoming gradients, above the "
                f"ceiling of the peak where incoming gradients are freed after their last reader "
                f"({ceiling.peak_tangents_freed})"
            )
            check.rejected.add(frozenset(m.get_name() for m in members))
            rejected(part, reduction, f"live while one kernel runs them: {above}")
        elif not check.affordable(nodes):
            record(
                RULE, False, [m.get_name() for m in members],
                f"not tried: the memory estimates' budget ({MAX_ESTIMATED_NODES} nodes) is spent; stock kernels",
            )
        else:
            nodes, why = _merge(nodes, [(part, reduction)], check)
            if why is None:
                merged([part])
            else:
                rejected(part, reduction, why)
    return nodes


def try_class_sets(nodes: list[Any], sets: list[list[ClassUnit]], check: MemoryCheck) -> list[Any]:
    """Merge each set of classes (a node: a merged group, or a kernel left alone; and its
    members' structures) into one kernel of several bodies (:class:`ClassesGroup`), whole, then halves, where the
    graph's estimated peak memory stays within the ceiling of ``check``."""
    queue = collections.deque(sets)
    while queue:
        units = queue.popleft()
        replaced = [node for node, _, _ in units]
        names = [member.get_name() for node in replaced for member in _members(node)]
        halves = [half for half in (units[: len(units) // 2], units[len(units) // 2 :]) if len(half) > 1]
        if frozenset(names) in check.rejected:
            queue.extend(halves)
            continue
        if not check.affordable(nodes):
            left = [member.get_name() for units in [units, *queue] for node, _, _ in units for member in _members(node)]
            record(RULE, False, left, f"not tried as kernels of several bodies: the memory estimates' budget "
                   f"({MAX_ESTIMATED_NODES} nodes) is spent")
            break
        reduction = dispatched_as(units[0][2]) != POINTWISE
        bodies = _classes(units)
        classes = [MemberTableGroup([m for m, _ in c], [s for _, s in c], reduction) for c, _ in bodies]
        # one body (the halves of a group the member-table merges split, put together another way): one class
        group = classes[0] if len(classes) == 1 else ClassesGroup(classes, [tiled for _, tiled in bodies])
        nodes, why = check.merge(nodes, [(group, replaced)])
        bodies = f"{len(group.members)} kernels of {len(classes)} bod{'y' if len(classes) == 1 else 'ies'}"
        if why is None:
            record(RULE, True, names, f"{bodies} → one kernel ({group.describe()})")
        else:
            record(RULE, False, names, f"{bodies} in one kernel: {why}: split in two")
            queue.extend(halves)
    return nodes


def _classes(units: list[ClassUnit]) -> list[tuple[list[tuple[Any, Structure]], bool]]:
    """The classes of a kernel of several bodies, one per body (and per tiles, for those kept in 2-d tiles), and
    whether each keeps its tiles: the members of ``units`` (merged groups, or kernels of their own) with the same
    structure key are one class (a group split by the memory check, and its halves put together again here, are
    one body); kept in tiles, those of the same tiles are."""
    by_class: dict[tuple[Any, ...], list[tuple[Any, Structure]]] = {}
    for node, structures, kind in units:
        for member, structure in zip(_members(node), structures, strict=True):
            key = (structure.key, tiles_key(member, structure)) if kind == TILED else (structure.key, None)
            by_class.setdefault(key, []).append((member, structure))
    return [(members, tiles is not None) for (_, tiles), members in by_class.items()]


def _merge(
    nodes: list[Any], parts: list[tuple[list[tuple[Any, Structure]], bool]], check: MemoryCheck
) -> tuple[list[Any], str | None]:
    """Merge each of ``parts`` (a group and whether it is a row reduction), all or none (:meth:`MemoryCheck.merge`);
    each merge is recorded."""
    made = [
        (MemberTableGroup([m for m, _ in part], [s for _, s in part], reduction), [m for m, _ in part])
        for part, reduction in parts
    ]
    nodes, why = check.merge(nodes, made)
    if why is None:
        jointly = f", together with the group of {parts[0][0][0][0].get_name()}" if len(parts) > 1 else ""
        for merged, members in made:
            record(
                RULE, True, [m.get_name() for m in members],
                f"{len(members)} kernels → one kernel ({merged.describe()}{jointly})",
            )
    return nodes, why


def _reads(part: list[tuple[Any, Structure]]) -> list[str]:
    """The buffers the members of ``part`` read."""
    return [name for member, _ in part for name in member.used_buffer_names()]


@dataclasses.dataclass
class _WhatMergingTouches:
    """Of one part (a group to try): what its members read, and the buffers that merging it makes one allocation."""

    part: list[tuple[Any, Structure]]  # kept, so that no other part takes its id
    reads: OrderedSet[str]
    in_one_allocation: OrderedSet[str]
    one_allocations: dict[int, OneAllocation]  # :func:`one_allocations` of its members


class GroupsToTry:
    """The groups still to try, in order, and how many of them read each buffer and write it into one allocation
    (:func:`one_allocations`). Both are worked out once per part, and kept until the pass is done: the parts that
    wait are asked about again and again."""

    def __init__(self, groups: collections.abc.Iterable[tuple[list[tuple[Any, Structure]], bool]]) -> None:
        self._groups: collections.deque[tuple[list[tuple[Any, Structure]], bool]] = collections.deque()
        self._reads: collections.Counter[str] = collections.Counter()
        self._in_one_allocation: collections.Counter[str] = collections.Counter()
        self._touches: dict[int, _WhatMergingTouches] = {}  # by id of a part
        for part, reduction in groups:
            self.push(part, reduction)

    def __bool__(self) -> bool:
        return bool(self._groups)

    def touches(self, part: list[tuple[Any, Structure]]) -> _WhatMergingTouches:
        """What merging ``part`` touches, worked out the first time it is asked for."""
        if id(part) not in self._touches:
            allocations = one_allocations([m for m, _ in part], [s for _, s in part])
            in_one_allocation = OrderedSet(name for allocation in allocations.values() for name in allocation.names)
            reads = OrderedSet(_reads(part))
            self._touches[id(part)] = _WhatMergingTouches(part, reads, in_one_allocation, allocations)
        return self._touches[id(part)]

    def push(self, part: list[tuple[Any, Structure]], reduction: bool) -> None:
        self._groups.append((part, reduction))
        touches = self.touches(part)
        self._reads.update(touches.reads)
        self._in_one_allocation.update(touches.in_one_allocation)

    def pop(self) -> tuple[list[tuple[Any, Structure]], bool]:
        part, reduction = self._groups.popleft()
        touches = self.touches(part)
        self._reads.subtract(touches.reads)
        self._in_one_allocation.subtract(touches.in_one_allocation)
        return part, reduction

    def linked(self, part: list[tuple[Any, Structure]], other: list[tuple[Any, Structure]]) -> bool:
        """Whether one of the groups reads buffers that merging the other makes one allocation."""
        one, two = self.touches(part), self.touches(other)
        return not one.in_one_allocation.isdisjoint(two.reads) or not one.reads.isdisjoint(two.in_one_allocation)

    def linked_to(self, part: list[tuple[Any, Structure]]) -> bool:
        """Whether a group still to try is :meth:`linked` to ``part``."""
        touches = self.touches(part)
        return any(self._reads[name] > 0 for name in touches.in_one_allocation) or any(
            self._in_one_allocation[name] > 0 for name in touches.reads
        )


def _halves(part: list[tuple[Any, Structure]]) -> list[list[tuple[Any, Structure]]]:
    """The two halves of a group that did not merge, those of more than one member: each is tried later."""
    half = len(part) // 2
    return [piece for piece in (part[:half], part[half:]) if len(piece) > 1]


def _members(node: Any) -> list[Any]:
    """The scheduler nodes a top-level node stands for: a merged group's members, or the node itself."""
    return node.members if isinstance(node, MemberTableGroup) else [node]


def _forget(merged: Any, members: list[Any]) -> None:
    for member in members:
        for name in member.get_operation_names():
            merged.scheduler.name_to_fused_node[name] = member
