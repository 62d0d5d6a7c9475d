"""Horizontal cleanup: N independent, structurally identical kernels → ONE Triton kernel with a shared body.

Recommendation models apply the same small op to dozens of feature tensors. After Inductor's own (vertical) fusion
each of them is one scheduler node, and one kernel launch. Here, groups of nodes that are

- independent: no path between any two of them in the dependency graph, and
- structurally identical: the same loop bodies up to buffer names, the size of the outermost loop (the row
  count) and a constant offset into each buffer (the pieces of one split), the same dtypes and reduction sizes,

become one ``MemberTableGroup``. Its kernel is Inductor's own kernel for one member (the one with most rows), with
a prologue that finds the member of the block from the program id and reads that member's row count and tensor
addresses (offset included) from a table (:mod:`optimus_ir.runtime`). The code size does not depend on N, and
members with different row counts (ragged) merge too.

The package, one job a module: :mod:`.structure` (keys), :mod:`.planning` (the grouping policy), :mod:`.merging`
(trying groups against the memory model), :mod:`.memory` (the memory model), :mod:`.allocation` (one allocation
for many members, outputs over saved tensors), :mod:`.group` (the merged node and its codegen), :mod:`.kernel`
(the Triton kernel), :mod:`.tuning` (constants).
"""

from __future__ import annotations

import collections
from typing import Any

import sympy
from torch._inductor.scheduler import FusedMixOrderReductions
from torch._inductor.virtualized import V
from torch.utils._ordered_set import OrderedSet

from optimus_ir import graph_state
from optimus_ir.records import record
from optimus_ir.rule import SchedulerRule
from optimus_ir.scheduler_hooks.horizontal.buffers import BufferBytes
from optimus_ir.scheduler_hooks.horizontal.cost import flat_run_refusal
from optimus_ir.scheduler_hooks.horizontal.group import MemberTableGroup, common_tiles
from optimus_ir.scheduler_hooks.horizontal.memory import planning_worked_out_once
from optimus_ir.scheduler_hooks.horizontal.merging import MemoryCheck, try_class_sets, try_groups
from optimus_ir.scheduler_hooks.horizontal.planning import ClassUnit, class_sets, grouping_policy
from optimus_ir.scheduler_hooks.horizontal.structure import (
    LOOPED,
    PERSISTENT,
    POINTWISE,
    TILED,
    Structure,
    row_reduction_kind,
    structure_of,
    tiling_prefixes,
    triton_backend,
    without_size_symbols,
)
from optimus_ir.scheduler_hooks.horizontal.tuning import MAX_PADDING, RULE, tiled_class_numel
from optimus_ir.scheduler_hooks.piece_groups import member_refusal as piece_member_refusal

_NO_PLAIN_REDUCTION = "a row reduction Inductor may make cooperative or several kernels of"
#: why persistent row reductions of a symbolic row length are no class: a persistent class's block along the row
#: is a constant of its code, and the dispatch kernel's block of rows is picked, when the kernel is made, for the
#: longest row's size hint. Symbolic row counts are fine (the classes' blocks start per call), and so are a looped
#: class's symbolic rows (its loop takes the length it is passed).
_SYMBOLIC_CLASSES = "symbolic sizes: persistent rows of a length known per call only"


class IdenticalKernelsToMemberTableKernel(SchedulerRule):
    """N independent kernels with the same body → one kernel with a shared body and a member table.

    Before (after Inductor's fusion; ``[torch.tanh(x) for x in xs]`` over 128 tensors of different row counts)::

        SchedulerNode(buf0 = tanh(arg0_1))     # kernel 0, xnumel = 131072
        SchedulerNode(buf1 = tanh(arg1_1))     # kernel 1, xnumel = 65536
        ...                                     # 128 launches

    After::

        MemberTableGroup([buf0, buf1, ...])    # one launch:
            xmember = <member whose blocks contain program_id(0)>     (from the table's block starts)
            xnumel = <its numel>; in_ptr0 = <its arg>; out_ptr0 = <its buf>
            <tanh body of one member, unchanged>

    Groups are split, not abandoned, where merging would raise the estimated peak memory, where padding the members
    to whole blocks would more than double the work, or beyond ``MAX_MEMBERS``; they are tried whole first, then
    halved level by level, within ``MAX_ESTIMATED_NODES``. A group whose own inputs and outputs alone are above the
    ceiling of the peak is split without an estimate (``memory.live_while_running``). Then the kernels left,
    merged groups and kernels of their own, pointwise ones, persistent and looped row reductions apart, become one
    kernel of several bodies where they are independent (:class:`~.classes.ClassesGroup`, one class per body), under
    the same memory check. Each decision is in the dump.
    """

    name = RULE
    pass_name = "horizontal"

    def rewrite(self, nodes: list[Any]) -> list[Any]:
        by_key: dict[tuple[Any, ...], list[tuple[Any, Structure]]] = {}
        bytes_of = BufferBytes()
        left_out: dict[str, list[str]] = {}
        first_of: dict[str, str] = {}  # each reason's first detail: which node, which sizes
        # Inductor's codegen of a mix-order reduction removes its readers' split-reduction stage (``removed_ops``):
        # those readers are not the nodes measured here (its combo kernels leave them out too)
        mix_order_outputs = OrderedSet(
            name for node in nodes if isinstance(node, FusedMixOrderReductions) for name in node.get_buffer_names()
        )
        for node in nodes:
            if node.used_buffer_names() & mix_order_outputs:
                left_out.setdefault("reads the output of a mix-order reduction", []).append(node.get_name())
                continue
            structure = structure_of(node)
            if isinstance(structure, Structure):
                by_key.setdefault(structure.key, []).append((node, structure))
            elif not structure.startswith("not a plain kernel"):
                reason, _, detail = structure.partition(": ")
                left_out.setdefault(reason, []).append(node.get_name())
                first_of.setdefault(reason, detail)
        for reason, names in left_out.items():
            detail = f", e.g. {first_of[reason]}" if reason.startswith("symbolic") else ""  # which symbol
            record(RULE, False, names, f"not merged ({reason}{detail}): stock kernels")
        _leave_mixed_piece_groups(nodes, by_key)
        # members alike but for the 0-d CPU tensors they read (the key's last part): why they stay apart
        apart_by_numbers: dict[tuple[Any, ...], list[tuple[Any, ...]]] = {}
        for key in by_key:
            if key[-1]:
                apart_by_numbers.setdefault(key[:-1], []).append(key)
        reported = set()
        for keys in apart_by_numbers.values():
            if len(keys) > 1:
                reported.update(keys)
                record(
                    RULE, False, [node.get_name() for key in keys for node, _ in by_key[key]],
                    f"kept apart ({len(keys)} groups) by the 0-d CPU tensors they read: a kernel is passed those by "
                    "value, not by an address in the member table",
                )
        alone = [(key, m[0][0].get_name()) for key, m in by_key.items() if len(m) == 1 and key not in reported]
        _record_alone(alone)
        to_try = grouping_policy()(list(by_key.values()))
        candidates = {id(node): structure for members in by_key.values() for node, structure in members}
        if not to_try and len(candidates) < 2:
            return nodes
        # the member table's run time and the output split are Python lines of the wrapper: a C++ wrapper
        # (cpp_wrapper, AOTInductor) has no place for them, and an FX one (fx_wrapper) refuses lines of text
        wrapper = "C++ wrapper" if V.graph.cpp_wrapper else "FX wrapper" if V.graph.fx_wrapper else None
        if wrapper:
            for part, _ in to_try:
                record(RULE, False, [m.get_name() for m, _ in part], f"not merged ({wrapper}): stock kernels")
            return nodes
        with planning_worked_out_once(nodes[0].scheduler):
            check = MemoryCheck.of(nodes, bytes_of, graph_state.current().merge_ceiling)
            nodes = try_groups(nodes, to_try, check)
            return try_class_sets(nodes, class_sets(_class_units(nodes, candidates)), check)


def _record_alone(alone: list[tuple[tuple[Any, ...], str]]) -> None:
    """Why the kernels of a body no other one has stay apart: bodies alike but for the size symbols they name (a
    shared body takes one member's size arguments), or bodies of their own."""
    by_shape: dict[Any, list[tuple[str, tuple[Any, ...]]]] = {}
    for key, name in alone:
        shape, symbols = without_size_symbols(key)
        by_shape.setdefault(shape, []).append((name, symbols))
    others = []
    for members in by_shape.values():
        if len(members) == 1:
            others.append(members[0][0])
            continue
        differing = next(i for i, at in enumerate(zip(*(symbols for _, symbols in members))) if len(set(at)) > 1)
        named = ", ".join(str(symbols[differing]) for _, symbols in members[:3])
        record(RULE, False, [name for name, _ in members],
               f"not merged (symbolic sizes: {len(members)} kernels alike but for the size symbols their indices "
               f"name, e.g. {named}; a shared body takes one member's): stock kernels")
    if len(others) > 1:
        record(RULE, False, others, f"not merged by body: {len(others)} kernels, each with a loop body no other one "
               "here has (each a class of its own in a kernel of several bodies, where one is made)")


def _class_units(nodes: list[Any], candidates: dict[int, Structure]) -> list[ClassUnit]:
    """In schedule order, the nodes that can be a class of a kernel of several bodies, with their kind: merged
    groups, and candidates left alone, that are pointwise and may run over their flat index
    (:func:`.cost.flat_run_refusal`) or else in their 2-d tiles (``TILED``, where whole tiles pad them at most
    ``MAX_PADDING`` times), or row reductions of more than one row that Inductor makes one plain kernel of
    (:func:`.structure.row_reduction_kind`) that update nothing in place, persistent ones over rows of a static
    length; that read no 0-d CPU tensor (passed by value, where a class takes only its table) and no buffer their
    structure does not name (one read through another's mutation). Sizes may be symbolic otherwise: the classes'
    blocks start per call (:mod:`.dispatch`)."""
    units, refused, first_of = [], {}, {}
    planned = collections.Counter(structure.key for structure in candidates.values())  # (planning said why)
    for node in nodes:
        if isinstance(node, MemberTableGroup):
            kind = row_reduction_kind(node.members[0]) if node.reduction else POINTWISE
            if node.tiles is not None:
                prefixes = tiling_prefixes(triton_backend(node.members[0]), node.members[0])
                flat = all(flat_run_refusal(prefixes, m, s) is None for m, s in zip(node.members, node.structures))
                kind = POINTWISE if flat else _tiled_kind(node.tiles, node.structures)
            if kind is None:
                continue
            structures = node.structures
        elif id(node) in candidates and node.used_buffer_names() <= set(candidates[id(node)].slots):
            prefixes = tiling_prefixes(triton_backend(node), node)
            if prefixes == ("x", "r0_"):
                kind = row_reduction_kind(node)
                why = None if kind is not None else _NO_PLAIN_REDUCTION
            else:
                kind, why = POINTWISE, flat_run_refusal(prefixes, node, candidates[id(node)])
                tiles = common_tiles([node], [candidates[id(node)]]) if why is not None else None
                if tiles is not None:
                    kind = _tiled_kind(tiles, [candidates[id(node)]])
                    why = None if kind is not None else (
                        f"{why}; in its tiles, padded to whole tiles of every block size, it would do more than "
                        f"{MAX_PADDING:g} times its work"
                    )
            if why is not None:
                if planned[candidates[id(node)].key] == 1:
                    refused.setdefault(why, []).append(node.get_name())
                continue
            structures = [candidates[id(node)]]
        else:
            continue
        if structures[0].reduction and any(s.numel == 1 for s in structures):
            # Inductor's kernel of one row stores it with no mask along x: every block of rows a class's alignment
            # gives the member would store its masked-out rows' value over it
            if planned[structures[0].key] == 1:
                refused.setdefault("one row reduced: stored from every block of rows, unmasked", []).append(
                    node.get_name()
                )
            continue
        # (a reduction's configs are tried by running it: a class's update in place would be applied each time)
        in_place_reduction = kind in (PERSISTENT, LOOPED) and any(s.updates_in_place for s in structures)
        rows = _symbolic_row_length(node) if kind == PERSISTENT else None
        if rows is not None:
            refused.setdefault(_SYMBOLIC_CLASSES, []).append(node.get_name())
            first_of.setdefault(_SYMBOLIC_CLASSES, f"rows of length {rows}")
        elif not any(s.key[-1] for s in structures) and not in_place_reduction:
            units.append((node, structures, kind))
    for why, names in refused.items():
        detail = f", e.g. {first_of[why]}" if why in first_of else ""  # which symbol
        record(RULE, False, names, f"no class of a kernel of several bodies: {why}{detail}")
    return units


def _symbolic_row_length(node: Any) -> sympy.Expr | None:
    """The row length of a row-reduction node (a merged group's members') where it is symbolic, else None."""
    member = node.members[0] if isinstance(node, MemberTableGroup) else node
    _, (_, rnumel) = member.group
    return None if isinstance(rnumel, (int, sympy.Integer)) else rnumel


def _tiled_kind(tiles: dict[str, int], structures: list[Structure]) -> str | None:
    """``TILED`` where members of ``structures`` in 2-d tiles ``tiles`` may be a class kept in them: padded to whole
    tiles of every block size, a member does at most ``MAX_PADDING`` times its work; else None."""
    return TILED if tiled_class_numel(tiles) <= MAX_PADDING * structures[0].numel else None


def _leave_mixed_piece_groups(nodes: list[Any], by_key: dict[tuple[Any, ...], list[tuple[Any, Structure]]]) -> None:
    """Take out of ``by_key`` the progressions of one cat (``PieceGroupToComboKernel``'s groups) whose bodies
    differ and which the piece group takes: a member table would take the progressions of one body, and the others
    would then be kernels of their own, where the piece group makes them all one."""
    state = graph_state.existing()
    if state is None or not state.piece_groups:
        return
    key_of = {id(node): key for key, members in by_key.items() for node, _ in members}
    owner = {name: node for node in nodes for name in node.get_buffer_names()}
    for group in state.piece_groups:
        members = list({id(owner[name]): owner[name] for name in group if name in owner}.values())
        keys = {key_of.get(id(node)) for node in members}
        if len(members) < 2 or len(keys) < 2 or None in keys or any(map(piece_member_refusal, members)):
            continue
        for key in keys:
            by_key[key] = [c for c in by_key[key] if all(c[0] is not node for node in members)]
        record(
            RULE, False, [node.get_name() for node in members],
            f"progressions of one cat with {len(keys)} bodies: left to PieceGroupToComboKernel (one kernel)",
        )
    for key in [key for key, members in by_key.items() if not members]:
        del by_key[key]
