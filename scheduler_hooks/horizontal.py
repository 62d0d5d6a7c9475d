"""Horizontal cleanup: N independent, structurally identical kernels → ONE Triton kernel with a shared body.

Recommendation models apply the same small op to dozens of feature tensors. After Inductor's own (vertical) fusion
each of them is one scheduler node, and one kernel launch. Here, groups of nodes that are

- independent: no path between any two of them in the dependency graph, and
- structurally identical: the same loop bodies up to buffer names, the size of the outermost loop (the row
  count) and a constant offset into each buffer (the pieces of one split), the same dtypes and reduction sizes,

become one :class:`MemberTableGroup`. Its kernel is Inductor's own kernel for one member (the one with most rows),
with a prologue that finds the member of the block from the program id and reads that member's row count and
tensor addresses (offset included) from a table (:mod:`optimus_ir.runtime`). The code size does not depend on N,
and members with different row counts (ragged) merge too.
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import itertools
import logging
import math
import operator
import re
from collections.abc import Callable, Iterator
from typing import Any

import sympy
import torch
from torch._inductor import config, ir, memory
from torch._inductor.codegen.common import IndentedBuffer, TensorArg
from torch._inductor.codegen.cuda_combined_scheduling import CUDACombinedScheduling
from torch._inductor.codegen.segmented_tree import SegmentedTree
from torch._inductor.codegen.simd_kernel_features import SIMDKernelFeatures
from torch._inductor.codegen.triton import TritonKernel, TritonScheduling
from torch._inductor.codegen.triton_utils import is_unaligned_buffer
from torch._inductor.dependencies import StarDep
from torch._inductor.runtime.hints import TRITON_MAX_BLOCK
from torch._inductor.scheduler import FusedMixOrderReductions, FusedSchedulerNode, SchedulerNode
from torch._inductor.utils import is_nonfreeable_buffers, sympy_product
from torch._inductor.virtualized import V
from torch.utils._ordered_set import OrderedSet
from torch.utils._sympy.functions import FloorDiv
from torch.utils._sympy.symbol import SymT, symbol_is_type

from optimus_ir import index_math
from optimus_ir.registry import SchedulerRule, record, register
from optimus_ir.scheduler_hooks.node_graph import GroupKernelNode, independent, replace_with_group

log = logging.getLogger("optimus_ir")

#: The largest block Inductor's heuristics pick along x (``TRITON_MAX_BLOCK["X"]``): pointwise members are padded
#: to a multiple of it, so that no block spans two members whatever block size autotuning picks.
_MAX_XBLOCK = 4096
#: Bytes each thread of a pointwise member-table kernel loads per tensor, at least. A program first loads its
#: member's addresses from the table, then its data: more bytes per program hide more of that. H200, hand-written
#: table kernels (``member_table_blocks.md``): 128 × tanh [256, 512] bf16 22.1 µs per launch with 1024 elements on 4
#: warps (16 bytes per thread), 20.2 with 2048 (32). fp32 is best at 1024 on 4 warps (32 bytes), which it keeps;
#: the other config Inductor's autotuning tries becomes 2048 on 8 warps (35.1 µs) instead of 512 on 8 (42.4).
_BYTES_PER_THREAD = 32
#: More members than this are split into several groups (the kernel loads one table row per member per block).
MAX_MEMBERS = 1024
#: The largest block of rows Inductor's reduction heuristics pick for rows of at least ``_MIN_RNUMEL_FOR_TOTAL_HINT``
#: elements on CUDA (``outer_config_opt``'s 256; persistent reductions' ``xblock_vals`` and ``4096 // rnumel``):
#: members of a row-reduction group start at multiples of the next power of two of their row count, capped here.
_MAX_REDUCTION_XBLOCK = 256
#: Below this row width a reduction config may take more rows per block than ``_MAX_REDUCTION_XBLOCK`` (a tiny
#: config's ``2 * (256 // rnumel)``, a persistent one's ``4096 // rnumel``), so such groups keep a member's size hint.
_MIN_RNUMEL_FOR_TOTAL_HINT = 16
#: Cost model of padding: members start at block boundaries, so a group launches some blocks that find no work and
#: exit (~1-2 ns of scheduling each on an H200; a launch costs ~4 us). A group is split by size only where its
#: padded work is more than ``MAX_PADDING`` times its real work AND the empty blocks exceed ``MAX_EMPTY_BLOCKS``
#: (counted pessimistically: one row per block for reductions, 1024 elements per block for pointwise kernels).
MAX_PADDING = 2.0
MAX_EMPTY_BLOCKS = 2048
#: What one graph may spend on memory estimates for trying merges, in scheduler nodes estimated (each estimate is
#: Inductor's reordering and memory planning over the whole schedule: ~0.03 s for 50 nodes, ~0.2 s for a DLRM
#: backward's 190, on this project's CI machine). Groups are tried whole first, then halves, level by level, so the
#: estimates go to the largest merges; what is left untried keeps its stock kernels, with the reason in the dump.
MAX_ESTIMATED_NODES = 32768
#: The CUDA caching allocator rounds every allocation up to a multiple of this many bytes.
_ALLOCATION_BLOCK = 512


@dataclasses.dataclass
class Structure:
    """What a candidate node computes, with buffer names replaced by slots numbered in order of first use."""

    key: tuple[Any, ...]
    slots: list[str]  # buffer names, by slot
    numel: int  # the x extent (rows of a reduction, elements of a pointwise kernel)
    offsets: list[int]  # by slot: the constant (in elements) this member adds to every address of that buffer
    updates_in_place: bool = False  # stores into a buffer it does not own (an input's update, a scatter)
    #: pointwise members: the divisors of their flat indices (``index_math.abstract_divisors``), by symbol number;
    #: members whose values differ read them from the member table
    divisors: tuple[int, ...] = ()
    #: pointwise members: per subnode, each index as a function of ``_FLAT_INDEX`` with the divisors as symbols
    flat_indices: tuple[dict[str, sympy.Expr], ...] = ()
    #: a pointwise member of symbolic size (dynamic shapes): its numel as an expression of size symbols (``numel``
    #: is then its size hint, for the cost and memory estimates)
    numel_expr: sympy.Expr | None = None
    #: the reduction extent (elements reduced per row; 1 for pointwise; its size hint where symbolic). Part of the
    #: key (a symbolic one as its expression), except for reductions of one row (a full sum, or a split reduction's
    #: second stage): members reducing different counts merge there
    rnumel: int = 1


_ADDRESSING_OPS = ("load", "store", "store_reduction")

#: the flat index of a pointwise kernel, over which members' indices are compared
_FLAT_INDEX = sympy.Symbol("x_flat", integer=True, nonnegative=True)


def _addressed_buffers(blocks: list[Any]) -> dict[str, set[str] | None]:
    """For each index name of a loop body, the buffers it addresses; None if it is also used as a value."""
    addressed: dict[str, set[str] | None] = {}
    for block in blocks:
        for node in block.graph.nodes:
            if node.op != "call_module" or node.target != "get_index":
                continue
            name = node.args[0]
            for user in node.users:
                if user.op == "call_method" and user.target in _ADDRESSING_OPS and user.args[2] is node:
                    if addressed.get(name, set()) is not None:
                        addressed.setdefault(name, set()).add(user.args[1])
                else:
                    addressed[name] = None
    return addressed


def _graph_key(
    graph: Any,
    slot_of: dict[str, int],
    index_text: Callable[[str], str],
    address_offset: Callable[[str, str], int],
) -> tuple[Any, ...]:
    """An FX graph of ``ops.*`` calls as a tuple: buffer names replaced by their slots, index names by their
    expressions (without the constant a member adds to a buffer's addresses), each load/store with the constant its
    index adds beyond that."""
    position = {node: i for i, node in enumerate(graph.nodes)}

    def arg_key(arg: Any) -> Any:
        if isinstance(arg, str) and arg in slot_of:
            return ("slot", slot_of[arg])
        if isinstance(arg, (tuple, list)):
            return tuple(arg_key(a) for a in arg)
        if hasattr(arg, "op") and arg in position:
            return ("node", position[arg])
        return repr(arg)

    keys: list[Any] = []
    for node in graph.nodes:
        if node.op == "call_module" and node.target == "get_index":
            keys.append(("get_index", index_text(node.args[0])))
            continue
        entry = (node.op, str(node.target), arg_key(node.args), arg_key(tuple(sorted(node.kwargs.items()))))
        if node.op == "call_method" and node.target in _ADDRESSING_OPS:
            entry += (address_offset(node.args[2].args[0], node.args[1]),)
        keys.append(entry)
    return tuple(keys)


def structure_of(node: Any) -> Structure | str:
    """The :class:`Structure` of a scheduler node, or why it cannot be a member of a group (``"category: detail"``)."""

    if type(node) not in (SchedulerNode, FusedSchedulerNode):
        return f"not a plain kernel: {type(node).__name__}"
    if _triton_backend(node) is None:  # Inductor's C++ kernels on CPU: other loop groups, no member tables
        return f"no Triton backend on its device: {node.get_device()}"
    scheduler = node.scheduler
    subnodes = list(node.get_nodes())
    op_names = node.get_operation_names()
    slot_of: dict[str, int] = {}
    traced: list[Any] = []
    constants: dict[str, list[int]] = {}  # buffer → the constants of the indices that address it
    # a pointwise node's divisors are values of the member (a bias of width 64 or 96: one body), where no body
    # loads an index (an embedding row) that a re-traced body would have to load again
    abstract = all(
        isinstance(snode, SchedulerNode) and isinstance(snode.node, ir.ComputedBuffer) and not snode.is_reduction()
        and not any(
            symbol_is_type(symbol, SymT.INDIRECT)
            for expr in snode._body.indexing_exprs.values() for symbol in expr.free_symbols
        )
        for snode in subnodes
    )
    divisors: dict[int, sympy.Symbol] = {}  # value → symbol (index_math.abstract_divisors)
    by_value: set[str] = set()  # 0-d CPU tensors read as numbers: members merge only where they read the same ones
    flat_indices: list[dict[str, sympy.Expr]] = []
    for snode in subnodes:
        if not isinstance(snode, SchedulerNode) or not isinstance(snode.node, ir.ComputedBuffer):
            return f"not a computed buffer: {snode.get_name()}"
        iter_sizes, reduce_sizes = snode._sizes
        sizes = [*iter_sizes, *reduce_sizes]
        # symbolic sizes (dynamic shapes): pointwise nodes are compared over the flat index, whose expressions then
        # name the size symbols they use (members merge only where those are the same symbols); row reductions by
        # their sizes but the row count, as expressions (a symbolic row length merges with the same symbol's);
        # pointwise nodes that load an index only where the row count is the one symbolic size
        symbolic = not all(isinstance(s, (int, sympy.Integer)) for s in sizes)
        if symbolic and not abstract and not node.is_reduction() and not all(
            isinstance(s, (int, sympy.Integer)) for s in sizes[1:]
        ):
            return f"symbolic sizes: {snode.get_name()} has {sizes}"
        body = snode._body
        allowed = (SymT.INDIRECT, SymT.SIZE, SymT.PRECOMPUTED_SIZE) if symbolic else (SymT.INDIRECT,)
        if any(
            not symbol_is_type(symbol, allowed)  # a loaded index (embedding rows): data, fine
            for expr in body.indexing_exprs.values()
            for symbol in expr.free_symbols - set(body.var_ranges)
        ):
            return f"symbolic index: {snode.get_name()} indexes with symbols other than its loop variables"
        names = {dep.name for dep in (*snode.read_writes.reads, *snode.read_writes.writes)}
        names |= set(snode.get_buffer_names())
        # a 0-d CPU tensor that a Triton kernel reads is passed by value (``.item()``), not as an address the table
        # could hold per member: the merged kernel gets the first member's number, so it is part of the structure
        by_value.update(name for name in names if V.graph.is_unspec_arg(name))
        blocks = [body.root_block, *body.subblocks.values()]
        for block in blocks:  # slots in order of first use
            for fx_node in block.graph.nodes:
                for arg in fx_node.args:
                    if isinstance(arg, str) and arg in names:
                        slot_of.setdefault(arg, len(slot_of))
        addressed = _addressed_buffers(blocks)
        # a pointwise kernel runs over the flat index: compare its indices as functions of that, not of the shape
        flat = not snode.is_reduction()
        exprs = {}
        if abstract:
            flat_indices.append({})
        for name, expr in body.indexing_exprs.items():
            if flat:
                expr = index_math.flatten_loops(expr, body.var_ranges, _FLAT_INDEX)
            if abstract:
                expr = flat_indices[-1][name] = index_math.abstract_divisors(expr, divisors)
            buffers = addressed.get(name)
            rest, constant = index_math.split_constant(expr) if buffers else (expr, 0)
            exprs[name] = (rest, constant)  # compared structurally (sympy); str() of every index cost more
            for buffer in buffers or ():
                constants.setdefault(buffer, []).append(constant)
        # an in-place update (optimizer steps, scatters) stores into the buffer it mutates: that buffer gets a slot
        # too, and which slot each member mutates is part of the structure
        mutated = {name: scheduler.mutation_real_name.get(name, name) for name in snode.get_buffer_names()}
        if snode.is_reduction() and any(real != name for name, real in mutated.items()):
            return f"in-place update in a reduction: {snode.get_name()} updates {sorted(mutated.values())}"
        for real in mutated.values():
            slot_of.setdefault(real, len(slot_of))
        written = tuple(
            (name, scheduler.can_buffer_be_removed_through_fusion(name, op_names), mutated[name])
            for name in snode.get_buffer_names()
        )
        traced.append((snode, iter_sizes, reduce_sizes, blocks, exprs, written))
    # a member may add its own constant to every address of a buffer (x.split(8, 1)[i] reads x at +8*i): it goes
    # into that buffer's address in the member table; what each index adds beyond it stays in the key
    base = {buffer: min(values) for buffer, values in constants.items()}
    _, (numel, rnumel) = node.group
    # one row reduced over one dimension: no index can depend on the row's length (there is no row stride), so
    # members of different lengths share a body; the kernel reads each member's length from the table
    one_row = numel == 1 and all(len(reduce_sizes) <= 1 for _, _, reduce_sizes, *_ in traced)
    parts = []
    for snode, iter_sizes, reduce_sizes, blocks, exprs, written in traced:
        graphs = tuple(
            _graph_key(
                block.graph,
                slot_of,
                lambda name, exprs=exprs: exprs[name][0],
                lambda name, buffer, exprs=exprs: exprs[name][1] - base.get(buffer, 0),
            )
            for block in blocks
        )
        parts.append(
            (
                "reduction" if snode.is_reduction() else "pointwise",
                () if not snode.is_reduction() else tuple(sympy.sympify(s) for s in iter_sizes[1:]),
                len(reduce_sizes) if one_row else tuple(sympy.sympify(s) for s in reduce_sizes),
                graphs,
                tuple((slot_of.get(name), removable, slot_of[real]) for name, removable, real in written),
            )
        )
    slots = sorted(slot_of, key=slot_of.__getitem__)
    dtypes = tuple(str(V.graph.get_dtype(name)) for name in slots)
    numel_expr = None
    if not isinstance(numel, (int, sympy.Integer)):
        numel_expr, numel = numel, V.graph.sizevars.size_hint(numel)
    if one_row and not isinstance(rnumel, (int, sympy.Integer)):
        # (members of different lengths read theirs from the table: a number, not a symbol)
        return f"symbolic sizes: one row of symbolic length {rnumel}"
    numbers = tuple(sorted((slot_of[name], name) for name in by_value))
    extent = "one row, any length" if one_row and rnumel != 1 else sympy.sympify(rnumel)
    key = (str(node.get_device()), extent, dtypes, tuple(parts), numel_expr is not None, numbers)
    in_place = any(real != name for *_, written in traced for name, _, real in written)
    return Structure(
        key, slots, int(numel), [base.get(name, 0) for name in slots], in_place, tuple(divisors), tuple(flat_indices),
        numel_expr, int(V.graph.sizevars.size_hint(rnumel)),
    )


def _triton_backend(node: Any) -> Any:
    """The Triton scheduling of the node's device, or None."""

    backend = node.scheduler.get_backend(node.get_device())
    if isinstance(backend, CUDACombinedScheduling):
        backend = backend._triton_scheduling
    return backend if isinstance(backend, TritonScheduling) else None


def _tiling_prefixes(backend: Any, node: Any) -> tuple[str, ...]:
    """The dimensions of Inductor's tiling for the node's kernel: ``("x",)``, ``("x", "r0_")``, ``("y", "x")``..."""
    nodes = list(node.get_nodes())
    _, (numel, rnumel) = node.group
    schedule = backend.generate_node_schedule(nodes, numel, rnumel)
    tiling = backend.select_tiling(schedule, numel, rnumel)
    return tuple(prefix for prefix, extent in tiling.items() if prefix == "x" or extent != 1)


@register
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
    peak before is split without an estimate (:func:`_live_while_running`). Each decision is in the dump.
    """

    name = "IdenticalKernelsToMemberTableKernel"
    pass_name = "horizontal"

    def rewrite(self, nodes: list[Any]) -> list[Any]:
        by_key: dict[tuple[Any, ...], list[tuple[Any, Structure]]] = {}
        bytes_of = BufferBytes()
        to_try: collections.deque[tuple[list[tuple[Any, Structure]], bool]] = collections.deque()
        left_out: dict[str, list[str]] = {}
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
                left_out.setdefault(structure.split(":")[0], []).append(node.get_name())
        for reason, names in left_out.items():
            record(self.name, False, names, f"not merged ({reason}): stock kernels")
        # members alike but for the 0-d CPU tensors they read (the key's last part): why they stay apart
        apart_by_numbers: dict[tuple[Any, ...], list[tuple[Any, ...]]] = {}
        for key in by_key:
            if key[-1]:
                apart_by_numbers.setdefault(key[:-1], []).append(key)
        for keys in apart_by_numbers.values():
            if len(keys) > 1:
                record(
                    self.name, False, [node.get_name() for key in keys for node, _ in by_key[key]],
                    f"kept apart ({len(keys)} groups) by the 0-d CPU tensors they read: a kernel is passed those by "
                    "value, not by an address in the member table",
                )
        for candidates in list(by_key.values()):
            if len(candidates) < 2:
                continue
            names = [node.get_name() for node, _ in candidates]
            prefixes = _tiling_prefixes(_triton_backend(candidates[0][0]), max(candidates, key=lambda c: c[1].numel)[0])
            if prefixes not in (("x",), ("x", "r0_")):
                record(self.name, False, names, f"tiling {prefixes}: only 1-d (x) and row-reduction (x, r0_) kernels")
                continue
            reduction = prefixes == ("x", "r0_")
            for group in self._independent_groups(candidates):
                to_try.extend((part, reduction) for part in self._size_classes(group, reduction))
        if not to_try:
            return nodes
        # the member table's run time and the output split are Python lines of the wrapper: a C++ wrapper
        # (cpp_wrapper, AOTInductor) has no place for them, and an FX one (fx_wrapper) refuses lines of text
        wrapper = "C++ wrapper" if V.graph.cpp_wrapper else "FX wrapper" if V.graph.fx_wrapper else None
        if wrapper:
            for part, _ in to_try:
                record(self.name, False, [m.get_name() for m, _ in part], f"not merged ({wrapper}): stock kernels")
            return nodes
        with _planning_worked_out_once(nodes[0].scheduler):
            return self._try_groups(nodes, to_try, bytes_of)

    def _try_groups(
        self, nodes: list[Any], to_try: collections.deque[tuple[list[tuple[Any, Structure]], bool]],
        bytes_of: BufferBytes,
    ) -> list[Any]:
        """Merge each group of ``to_try`` (whole, then halves) where the estimated peak memory stays.

        Merging a group makes its small buffers one allocation (:func:`_one_allocations`), which can make room for
        the group that reads them, and the other way round. So a group rejected while a group still to try is linked
        to it that way (:meth:`_GroupsToTry.linked`) waits: once a linked group merges, it is tried again; once none
        is left to try, it is split. A group rejected while a linked group waits is tried together with it: the two
        stages of 48 full sums each raise the peak alone (the other stage's 48 buffers take a 512-byte block each),
        and lower it together."""
        # before any group: a group takes over its members' operation names
        estimate, estimated = _peak_memory(nodes, bytes_of), len(nodes)  # scheduler nodes estimated so far
        groups = _GroupsToTry(to_try)
        waiting: list[tuple[list[tuple[Any, Structure]], bool, str]] = []
        tried_again: set[int] = set()  # ids of the parts in ``groups`` that are there for a second try

        def split(part: list[tuple[Any, Structure]], reduction: bool, why: str) -> None:
            record(self.name, False, [m.get_name() for m, _ in part], f"{why}: split in two")
            for half in _halves(part):
                groups.push(half, reduction)

        def merged(parts: list[list[tuple[Any, Structure]]]) -> None:
            for item in [item for item in waiting if any(groups.linked(item[0], part) for part in parts)]:
                waiting.remove(item)
                tried_again.add(id(item[0]))
                groups.push(item[0], item[1])

        def rejected(part: list[tuple[Any, Structure]], reduction: bool, why: str) -> None:
            nonlocal nodes, estimate, estimated
            partner = next((item for item in waiting if groups.linked(item[0], part)), None)
            if partner is not None and estimated + len(nodes) <= MAX_ESTIMATED_NODES:
                waiting.remove(partner)
                estimated += len(nodes)
                nodes, estimate, jointly = self._merge(nodes, [partner[:2], (part, reduction)], estimate, bytes_of)
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
            own, own_tangents = _live_while_running(members, groups.touches(part).one_allocations, bytes_of)
            if own > estimate.peak or own + own_tangents > estimate.peak_tangents_freed:
                above = (
                    f"{own} bytes of their own inputs and outputs, above the peak before ({estimate.peak})"
                    if own > estimate.peak
                    else f"{own + own_tangents} bytes of their own inputs, outputs and incoming gradients, above the "
                    f"peak before where incoming gradients are freed after their last reader "
                    f"({estimate.peak_tangents_freed})"
                )
                rejected(part, reduction, f"live while one kernel runs them: {above}")
            elif estimated + len(nodes) > MAX_ESTIMATED_NODES:
                record(
                    self.name, False, [m.get_name() for m in members],
                    f"not tried: the memory estimates' budget ({MAX_ESTIMATED_NODES} nodes) is spent; stock kernels",
                )
            else:
                estimated += len(nodes)
                nodes, estimate, why = self._merge(nodes, [(part, reduction)], estimate, bytes_of)
                if why is None:
                    merged([part])
                else:
                    rejected(part, reduction, why)
        return nodes

    def _independent_groups(self, candidates: list[tuple[Any, Structure]]) -> list[list[tuple[Any, Structure]]]:
        """Greedy partition, in schedule order, into sets with no path between any two members."""
        groups: list[list[tuple[Any, Structure]]] = []
        for candidate in candidates:
            for group in groups:
                if len(group) < MAX_MEMBERS and independent(candidate[0], [m for m, _ in group]):
                    group.append(candidate)
                    break
            else:
                groups.append([candidate])
        for group in groups[1:]:
            record(
                self.name, False, [m.get_name() for m, _ in group],
                f"depend on members of the group of {groups[0][0][0].get_name()} (or over {MAX_MEMBERS}); own group",
            )
        return [g for g in groups if len(g) > 1]

    def _size_classes(self, group: list[tuple[Any, Structure]], reduction: bool) -> list[list[tuple[Any, Structure]]]:
        """Split by size where padding members to whole blocks costs more than a launch (``MAX_PADDING``).

        Members start at multiples of a block size set by the group's largest member; smallest first, a member
        that would make the group too padded starts the next group.
        """
        parts: list[list[tuple[Any, Structure]]] = []
        for candidate in sorted(group, key=lambda c: c[1].numel):
            if parts and not _too_padded(parts[-1] + [candidate], reduction):
                parts[-1].append(candidate)
            else:
                parts.append([candidate])
        if len(parts) > 1:
            record(
                self.name, False, [m.get_name() for m, _ in group],
                f"sizes too different to pad to whole blocks: split into {len(parts)} groups by size",
            )
        return [p for p in parts if len(p) > 1]

    def _merge(
        self, nodes: list[Any], parts: list[tuple[list[tuple[Any, Structure]], bool]], before: MemoryEstimate,
        bytes_of: BufferBytes,
    ) -> tuple[list[Any], MemoryEstimate, str | None]:
        """Merge each of ``parts`` (a group and whether it is a row reduction), all or none, unless the estimated peak
        memory would rise (or no schedule runs a group together). ``before`` is the estimate of ``nodes``; returns
        the nodes, their estimate and why they did not merge (None where they did; a rejected merge leaves the nodes
        and estimate as they were, so they are not estimated again before they change)."""
        candidate, made = nodes, []
        for part, reduction in parts:
            members = [m for m, _ in part]
            made.append((MemberTableGroup(members, [s for _, s in part], reduction), members))
            candidate = replace_with_group(candidate, members, made[-1][0])
            if candidate is None:
                break
        after = None if candidate is None else _peak_memory(candidate, bytes_of)
        if after is not None and after.no_higher_than(before):
            jointly = f", together with the group of {parts[0][0][0][0].get_name()}" if len(parts) > 1 else ""
            for merged, members in made:
                record(
                    self.name, True, [m.get_name() for m in members],
                    f"{len(members)} kernels → one kernel ({merged.describe()}{jointly})",
                )
            return candidate, after, None
        for merged, members in reversed(made):
            _forget(merged, members)
        if after is None:
            return nodes, before, "no schedule runs them together"
        return nodes, before, f"estimated peak memory {after.versus(before)}"


def _reads(part: list[tuple[Any, Structure]]) -> list[str]:
    """The buffers the members of ``part`` read."""
    return [name for member, _ in part for name in member.used_buffer_names()]


@dataclasses.dataclass
class _WhatMergingTouches:
    """Of one part (a group to try): what its members read, and the buffers that merging it makes one allocation."""

    part: list[tuple[Any, Structure]]  # kept, so that no other part takes its id
    reads: OrderedSet[str]
    in_one_allocation: OrderedSet[str]
    one_allocations: dict[int, OneAllocation]  # :func:`_one_allocations` of its members


class _GroupsToTry:
    """The groups still to try, in order, and how many of them read each buffer and write it into one allocation
    (:func:`_one_allocations`). Both are worked out once per part, and kept until the pass is done: the parts that
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
            allocations = _one_allocations([m for m, _ in part], [s for _, s in part])
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


def _too_padded(group: list[tuple[Any, Structure]], reduction: bool) -> bool:
    """Whether padding the members to whole blocks costs more than a split would (see ``MAX_PADDING``)."""
    align = _align(max(s.numel for _, s in group), reduction)
    real = sum(s.numel for _, s in group)
    padding = sum(-(-s.numel // align) * align for _, s in group) - real
    empty_blocks = padding if reduction else padding / 1024
    return (real + padding) > MAX_PADDING * real and empty_blocks > MAX_EMPTY_BLOCKS


def _align(max_numel: int, reduction: bool) -> int:
    """Members start at multiples of this: a power of two no smaller than any block the heuristics can pick (the
    kernel's size hint along x is capped at it where it is below the largest block)."""
    return min(_MAX_REDUCTION_XBLOCK if reduction else _MAX_XBLOCK, 1 << (max_numel - 1).bit_length())


def _forget(merged: Any, members: list[Any]) -> None:
    for member in members:
        for name in member.get_operation_names():
            merged.scheduler.name_to_fused_node[name] = member


@dataclasses.dataclass
class MemoryEstimate:
    """Bytes live at the peak of a schedule, and across each ATen fallback call in it (by node name): a fallback's
    own temporary memory is only guessed (``_fallback_workspace``), so a merge may not raise what is live across
    one (the flash-attention backward's peak on the GPU) even where the estimated peak stays.

    A backward's incoming gradients (``tangents_*``) count twice: Inductor's planning holds them for the whole call
    (``peak``), but where the caller holds no other reference, as AOTAutograd's contiguous copies of them, each is
    freed after its last reader (``peak_tangents_freed``: a merge that reads them all in one kernel keeps them all
    alive until it has allocated every output, which one kernel per member does not). A merge may raise neither."""

    peak: int
    peak_tangents_freed: int
    at_fallbacks: dict[str, int]

    def no_higher_than(self, before: MemoryEstimate) -> bool:
        return (
            self.peak <= before.peak
            and self.peak_tangents_freed <= before.peak_tangents_freed
            and all(live <= before.at_fallbacks.get(name, live) for name, live in self.at_fallbacks.items())
        )

    def versus(self, before: MemoryEstimate) -> str:
        raised = [
            f"{before.at_fallbacks[name]} → {live} bytes across {name}"
            for name, live in self.at_fallbacks.items()
            if live > before.at_fallbacks.get(name, live)
        ]
        if self.peak <= before.peak and self.peak_tangents_freed > before.peak_tangents_freed:
            raised.insert(
                0, f"{before.peak_tangents_freed} → {self.peak_tangents_freed} bytes where the incoming gradients "
                "are freed after their last reader",
            )
        return "; ".join([f"{before.peak} → {self.peak} bytes", *raised[:1]])


def _peak_memory(nodes: list[Any], bytes_of: BufferBytes) -> MemoryEstimate:
    """Bytes live at the peak when ``nodes`` run in the order Inductor will run them (its reordering for peak memory
    comes after this pass: tower by tower, say, which a group can prevent): a buffer is allocated by the first node
    that writes it or a view of it (a cat's output, when its first input is written into it) and freed after the
    last reader of it or of its views (graph outputs never); buffers read only inside their own kernel are never
    allocated; an output that Inductor writes in place of an input that dies there takes over its storage, as does
    an output of a merged group written over a saved tensor (:func:`_saved_tensors_to_take_over`).
    Graph inputs belong to the caller, but for those Inductor's wrapper frees (a backward's saved tensors, as
    Inductor's own memory planning decides with ``is_nonfreeable_buffers``): live until their last reader; a
    backward's incoming gradients both ways (see :class:`MemoryEstimate`). An ATen fallback call peaks at what is
    live across it plus its guessed workspace."""
    scheduler = nodes[0].scheduler
    inputs, outputs = OrderedSet(V.graph.graph_inputs), OrderedSet(V.graph.get_output_names())
    planning = (nodes, scheduler.name_to_buf, scheduler.name_to_fused_node, inputs, outputs)
    if config.reorder_for_peak_memory:
        nodes = memory.reorder_for_peak_memory(*planning)
    else:
        memory.prepare_planning_info(*planning)  # for ``memory.estimate_peak_memory``
    first_write: dict[str, int] = {}  # by storage
    last_read: dict[str, int] = {}
    storage_of: dict[str, str] = {}
    sizes: dict[str, int] = {}
    taken: set[str] = set()  # buffers whose storage an output took over in place
    in_place: set[str] = set()  # outputs written in place of such a buffer
    for step, node in enumerate(nodes):
        for dep in node.read_writes.reads:
            last_read[dep.name] = step
    # a backward's saved tensors that AOTAutograd donates: storages an output can take over in place
    for name in scheduler.name_to_donated_buffer:
        value = V.graph.graph_inputs.get(name)
        if (
            name in last_read and not _is_tangent(name) and isinstance(value, ir.TensorBox)
            and not is_nonfreeable_buffers(StarDep(name))
        ):
            storage_of[name] = name
            sizes[name] = bytes_of.allocated(name, value.get_output_spec(), own_elements=True)
            first_write[name] = 0
    # and those a merged group's outputs are written over where the call alone holds them
    for node in nodes:
        for name in node.takes_over.values() if isinstance(node, MemberTableGroup) else ():
            storage_of[name] = name
            sizes[name] = bytes_of.allocated(name, V.graph.graph_inputs[name].get_output_spec(), own_elements=True)
            first_write[name] = 0
    for step, node in enumerate(nodes):
        regions = _regions_of_one_allocation(node)
        takes_over = node.takes_over if isinstance(node, MemberTableGroup) else {}
        for snode in node.get_nodes():
            for buf in snode.get_outputs():
                name = buf.get_name()
                if name in V.graph.removed_buffers:
                    continue
                layout = buf.node.get_output_spec()
                if name in regions:
                    storage, nbytes = regions[name]
                    storage_of[name], sizes[storage] = storage, nbytes
                elif name in takes_over:
                    storage_of[name] = takes_over[name]
                    in_place.add(name)
                elif isinstance(layout, ir.NonOwningLayout) and not _kernel_local(scheduler, buf, outputs):
                    storage_of[name] = layout.view.data.get_name()
                elif isinstance(layout, ir.Layout) and not isinstance(layout, ir.MutationLayoutSHOULDREMOVE):
                    # in place: also through a buffer only its own kernel reads (layer norm: x → x - mean → out)
                    source = _in_place_source(
                        node, snode, bytes_of.allocated(name, layout), step, last_read, storage_of, sizes, taken,
                        in_place, outputs,
                    )
                    if source is not None:
                        storage_of[name] = storage_of[source]
                        in_place.add(name)
                    elif _kernel_local(scheduler, buf, outputs):
                        continue
                    else:
                        storage_of[name] = name
                        sizes[name] = bytes_of.allocated(name, layout)
                else:
                    continue  # no storage (a tuple of outputs, nothing)
                first_write.setdefault(storage_of[name], step)
    views: dict[str, list[str]] = {}
    for name, storage in storage_of.items():
        views.setdefault(storage, []).append(name)
    allocs: dict[int, int] = {}
    frees: dict[int, int] = {}
    tangents_live = 0
    tangent_frees: dict[int, int] = {}
    for name, value in V.graph.graph_inputs.items():  # a backward's saved tensors: live until their last reader
        layout = value.get_output_spec() if isinstance(value, ir.TensorBox) else None
        if name not in last_read or not isinstance(layout, ir.Layout) or name in sizes:
            continue
        # its own elements, not its storage's: saved views of one buffer (the halves of a split, a weight's
        # transpose) would count that storage once each, a constant that hid where the real peak is
        size = bytes_of.allocated(name, layout, own_elements=True)
        if _is_tangent(name):
            tangents_live += size
            tangent_frees[last_read[name]] = tangent_frees.get(last_read[name], 0) + size
        elif not is_nonfreeable_buffers(StarDep(name)):
            allocs[0] = allocs.get(0, 0) + size
            frees[last_read[name]] = frees.get(last_read[name], 0) + size
    last_use = {
        storage: None if any(name in outputs for name in views[storage])
        else max(first_write[storage], *[last_read.get(name, 0) for name in views[storage]])
        for storage in sizes
    }
    taken_over = _taken_over_by_reuse(nodes, inputs, outputs, sizes, first_write, last_use, bytes_of)
    takers = set(taken_over.values())
    for storage, size in sizes.items():
        if storage not in takers:
            allocs[first_write[storage]] = allocs.get(first_write[storage], 0) + size
        if storage not in taken_over and last_use[storage] is not None:
            frees[last_use[storage]] = frees.get(last_use[storage], 0) + size
    live = peak = peak_tangents_freed = 0
    at_fallbacks = {}
    for step, node in enumerate(nodes):
        live += allocs.get(step, 0)
        workspace = _fallback_workspace(node, bytes_of)
        if workspace:
            at_fallbacks[node.get_name()] = live
        peak = max(peak, live + workspace)
        peak_tangents_freed = max(peak_tangents_freed, live + tangents_live + workspace)
        live -= frees.get(step, 0)
        tangents_live -= tangent_frees.get(step, 0)
    return MemoryEstimate(peak, peak_tangents_freed, at_fallbacks)


def _regions_of_one_allocation(node: Any) -> dict[str, tuple[str, int]]:
    """For a merged group: its buffers that are regions of one allocation (:func:`_one_allocations`), each with the
    allocation's name in the estimates and its bytes."""
    if not isinstance(node, MemberTableGroup):
        return {}
    return {
        name: (f"one allocation of {allocation.names[0]}", _in_blocks(allocation.nbytes))
        for allocation in node.one_allocations.values()
        for name in allocation.names
    }


@contextlib.contextmanager
def _planning_worked_out_once(scheduler: Any) -> Iterator[None]:
    """Inside, Inductor's memory planning reuses what this pass's estimates would make it work out again each time.

    Each estimate is Inductor's reordering for peak memory, whose planning works out every buffer's size (a sympy
    evaluation each) and the graph inputs the schedule may free, over the whole graph. A merge changes which nodes
    run together, never a buffer: the sizes (``memory.compute_size_for_scheduler_buffer``) are worked out once for
    the pass. The freeable inputs depend on the set of nodes only, and both the reordering and
    :func:`_taken_over_by_reuse` ask for those of one set: worked out once per estimate
    (``memory.get_freeable_input_buf``). Together about 30% of the pass's time (the layer-norm storm's training
    step, without a GPU). Inductor's own reordering after the pass works everything out anew."""
    stock_sizes, stock_freeable = memory.compute_size_for_scheduler_buffer, memory.get_freeable_input_buf
    sizes: dict[str, tuple[int, int]] = {}
    last_freeable: list[Any] = [None, None, None]  # the node set and inputs asked for, the answer, the nodes

    def compute_size_for_scheduler_buffer(name_to_buf: dict[str, Any]) -> dict[str, tuple[int, int]]:
        if name_to_buf is not scheduler.name_to_buf:
            return stock_sizes(name_to_buf)
        if not sizes:
            sizes.update(stock_sizes(name_to_buf))
        return sizes

    def get_freeable_input_buf(nodes: list[Any], graph_inputs: OrderedSet[str]) -> dict[str, Any]:
        key = (frozenset(map(id, nodes)), tuple(graph_inputs))
        if last_freeable[0] != key:  # (the nodes are kept, so that no other node can take one's id)
            last_freeable[:] = [key, stock_freeable(nodes, graph_inputs), list(nodes)]
        return last_freeable[1]

    memory.compute_size_for_scheduler_buffer = compute_size_for_scheduler_buffer
    memory.get_freeable_input_buf = get_freeable_input_buf
    try:
        yield
    finally:
        memory.compute_size_for_scheduler_buffer, memory.get_freeable_input_buf = stock_sizes, stock_freeable


def _live_while_running(
    members: list[Any], allocations: dict[int, OneAllocation], bytes_of: BufferBytes
) -> tuple[int, int]:
    """Bytes that :func:`_peak_memory` finds live while one kernel runs ``members``, in any order of the rest: their
    outputs that get storage of their own (those of ``allocations`` one allocation each), and what they read that
    the graph frees (another kernel's output of its own storage, a graph input the wrapper frees), then the
    incoming gradients (``tangents_*``) they read. A lower bound of the estimate after merging them, with no
    estimate: where it is above the peak before, the merge raises it (a backward's pointwise kernels that each
    write 16 MiB, under a peak of 19 MB)."""
    scheduler = members[0].scheduler
    outputs = OrderedSet(V.graph.get_output_names())
    written: set[str] = set()
    tangents = 0

    def own_storage(buf: Any) -> ir.Layout | None:
        layout = buf.node.get_output_spec()
        if (
            buf.get_name() in V.graph.removed_buffers
            or not isinstance(layout, ir.Layout)
            or isinstance(layout, (ir.NonOwningLayout, ir.MutationLayoutSHOULDREMOVE))
            or _kernel_local(scheduler, buf, outputs)
        ):
            return None
        return layout

    in_one_allocation = {name for allocation in allocations.values() for name in allocation.names}
    no_storage_of_their_own = in_one_allocation | set(_saved_tensors_to_take_over(members, allocations))
    own = sum(_in_blocks(allocation.nbytes) for allocation in allocations.values())
    for member in members:
        for snode in member.get_nodes():
            for buf in snode.get_outputs():
                written.add(buf.get_name())
                if buf.get_name() not in no_storage_of_their_own and (layout := own_storage(buf)) is not None:
                    own += bytes_of.allocated(buf.get_name(), layout)
    for name in OrderedSet(dep.name for member in members for dep in member.read_writes.reads):
        if name in written:
            continue
        value = V.graph.graph_inputs.get(name)
        if value is not None:
            layout = value.get_output_spec() if isinstance(value, ir.TensorBox) else None
            if not isinstance(layout, ir.Layout):
                continue
            size = bytes_of.allocated(name, layout, own_elements=True)
            if _is_tangent(name):
                tangents += size
            elif not is_nonfreeable_buffers(StarDep(name)):
                own += size
        elif name in scheduler.name_to_buf and (layout := own_storage(scheduler.name_to_buf[name])) is not None:
            own += bytes_of.allocated(name, layout)
    return own, tangents


def _is_tangent(name: str) -> bool:
    """Whether graph input ``name`` is one of a backward's incoming gradients."""
    return name.removeprefix(f"{V.graph.name}_" if V.graph.name else "").startswith("tangents")


def _taken_over_by_reuse(
    nodes: list[Any], inputs: OrderedSet[str], outputs: OrderedSet[str], sizes: dict[str, int],
    first_write: dict[str, int], last_use: dict[str, int | None], bytes_of: BufferBytes,
) -> dict[str, str]:
    """Which dead storages Inductor's wrapper keeps for a later allocation, as its buffer-reuse planning decides
    (``AllocateLine.plan``): a storage freed after step ``i`` goes to a pool (by dtype and size); an allocation at
    step ``j`` takes the last one freed of its kind where ``i + 1 == j``, or where holding it until ``j`` stays
    within Inductor's own peak estimate (``should_reuse_buffer``, over ``memory.estimate_peak_memory``). Returns
    ``{storage kept: storage that takes it over}``: the kept one is not freed, the taker not allocated. Without
    this, merging two towers' layer norms looked free where the buffers the wrapper kept for the next towers met
    the final cat's output, which their kernels allocate early."""
    if not config.allow_buffer_reuse:
        return {}
    freeable = memory.get_freeable_input_buf(nodes, inputs)
    overall, at_node = memory.estimate_peak_memory(nodes, freeable, outputs)
    estimate = SegmentedTree(at_node, operator.add, max, 0)
    name_to_buf = nodes[0].scheduler.name_to_buf
    kind = {storage: bytes_of.reuse_kind(name_to_buf[storage]) for storage in sizes if storage in name_to_buf}
    allocated_at: dict[int, list[str]] = {}
    freed_at: dict[int, list[str]] = {}
    for storage, step in first_write.items():
        if storage in kind:
            allocated_at.setdefault(step, []).append(storage)
            if last_use[storage] is not None:
                freed_at.setdefault(last_use[storage], []).append(storage)
    pool: dict[Any, list[tuple[int, str]]] = {}
    taker: dict[str, str] = {}
    for step in range(len(nodes)):
        for storage in allocated_at.get(step, ()):
            key, size, wrapper_allocates = kind[storage]
            if not wrapper_allocates or not pool.get(key):
                continue
            freed, held = pool[key][-1]
            if freed + 1 == step or size + estimate.summarize_range(freed + 1, step - 1) <= overall:
                pool[key].pop()
                taker[held] = storage
                if freed + 1 != step:
                    estimate.update_range(freed + 1, step - 1, size)
        for storage in freed_at.get(step, ()):
            pool.setdefault(kind[storage][0], []).append((step, storage))
    return taker


def _fallback_workspace(node: Any, bytes_of: BufferBytes) -> int:
    """Bytes an ATen fallback kernel may allocate while it runs, beyond its outputs, taken to be as many as its
    outputs (the flash-attention backward accumulates the query gradient in fp32): memory live across such a call
    counts at that height. Matmuls (cuBLAS keeps its workspace) and Triton kernels allocate nothing."""
    fallback = getattr(node, "node", None)
    if not isinstance(fallback, ir.FallbackKernel):
        return 0
    outputs = [o for o in getattr(fallback, "outputs", ()) if isinstance(getattr(o, "layout", None), ir.Layout)]
    return sum(bytes_of.allocated(o.get_name(), o.layout) for o in outputs)


def _in_place_source(
    node: Any, snode: Any, size: int, step: int, last_read: dict[str, int], storage_of: dict[str, str],
    sizes: dict[str, int], taken: set[str], in_place: set[str], outputs: OrderedSet[str],
) -> str | None:
    """The buffer whose storage an output of ``snode`` (``size`` bytes) takes over, as Inductor's in-place reuse
    gives it (``decide_inplace_update``: the kernel is the buffer's last reader and reads it at the index it
    writes, ``NodeUser.can_inplace``; the sizes match; not a graph output, not a view, not a graph input but a saved
    tensor AOTAutograd donates), or None. Never in a merged group's kernel, whose outputs are its own: without this,
    merging in-place layer norms looked free where it allocated their outputs (and merging the backward of six
    ``x.sum() ** 2``, whose stock kernels write each 0-d gradient over the donated saved tensor it reads)."""
    if isinstance(node, MemberTableGroup) or not isinstance(snode, SchedulerNode) or not config.inplace_buffers:
        return None
    for dep in snode.read_writes.reads:
        name = dep.name
        storage = storage_of.get(name)
        if (
            storage is None  # a graph input the caller holds
            or (storage != name and name not in in_place)  # a view
            or name in taken
            or name in outputs
            or last_read.get(name) != step
            or sizes.get(storage) != size
        ):
            continue
        scheduler = snode.scheduler
        buf = scheduler.name_to_buf.get(name) or scheduler.name_to_donated_buffer.get(name)
        if buf is not None and any(user.node is snode and user.can_inplace for user in buf.users):
            taken.add(name)
            return name
    return None


def _cudagraph_trees() -> bool:
    """Whether this compile's graphs run under cudagraph trees (``mode="reduce-overhead"``)."""
    return bool(config.triton.cudagraphs and config.triton.cudagraph_trees)


def _in_blocks(nbytes: int) -> int:
    """What the CUDA caching allocator hands out for an allocation of ``nbytes``: whole 512-byte blocks."""
    return -(-nbytes // _ALLOCATION_BLOCK) * _ALLOCATION_BLOCK


class BufferBytes:
    """Sizes of the graph's buffers by name, each worked out once per pass (a sympy evaluation): every memory
    estimate asks for them again."""

    def __init__(self) -> None:
        self._allocated: dict[tuple[str, bool], int] = {}
        self._reuse_kinds: dict[str, tuple[Any, int, bool]] = {}

    def allocated(self, name: str, layout: ir.Layout, own_elements: bool = False) -> int:
        """What the CUDA caching allocator hands out for buffer ``name`` of this layout (or, ``own_elements``, for
        its elements alone): whole blocks (:func:`_in_blocks`)."""
        key = (name, own_elements)
        if key not in self._allocated:
            numel = sympy_product(layout.size) if own_elements else layout.storage_size()
            size = V.graph.sizevars.size_hint(numel, fallback=0) * layout.dtype.itemsize
            self._allocated[key] = _in_blocks(size)
        return self._allocated[key]

    def reuse_kind(self, buf: Any) -> tuple[Any, int, bool]:
        """A scheduler buffer's key in the wrapper's reuse pool (``buffer_reuse_key``: dtype and storage size), its
        bytes, and whether the wrapper allocates it (an ATen fallback's outputs come allocated, but go to the
        pool)."""
        node = buf.node
        if node.get_name() not in self._reuse_kinds:
            elements = V.graph.sizevars.size_hint(V.graph.get_allocation_storage_size(node), fallback=0)
            key = (node.get_dtype(), elements, node.get_name() not in V.graph.unaligned_buffers)
            allocated_by_wrapper = not isinstance(node, (ir.ExternKernelAlloc, ir.MultiOutput))
            self._reuse_kinds[node.get_name()] = (key, elements * node.get_dtype().itemsize, allocated_by_wrapper)
        return self._reuse_kinds[node.get_name()]


def _kernel_local(scheduler: Any, buf: Any, outputs: OrderedSet[str]) -> bool:
    """Whether every reader of ``buf`` is in the kernel that writes it and it is not among the graph's ``outputs``
    (Inductor then never allocates it)."""
    own = scheduler.name_to_fused_node[buf.defining_op_name()]
    return all(
        user.is_weak or scheduler.name_to_fused_node.get(user.get_name()) is own for user in buf.users
    ) and buf.get_name() not in outputs


class MemberTableGroup(GroupKernelNode):
    """Structurally identical, independent nodes, generated as one shared-body kernel (see the rule above)."""

    def __init__(self, members: list[Any], structures: list[Structure], reduction: bool) -> None:
        super().__init__(members)
        self.members, self.structures, self.reduction = members, structures, reduction
        self.scheduler.name_to_fused_node.update({n: self for m in members for n in m.get_operation_names()})
        #: by slot: the members' buffers made as one allocation (for the memory estimates)
        self.one_allocations = _one_allocations(members, structures)
        #: by output: the saved tensor it is written over where the call alone holds that tensor
        self.takes_over = _saved_tensors_to_take_over(members, self.one_allocations)

    def codegen(self, backend: Any, stock: Any) -> None:
        codegen_member_table_group(backend, self)

    def describe(self) -> str:
        numels = sorted({s.numel for s in self.structures})
        sizes = f"ragged: {len(numels)} sizes" if len(numels) > 1 else f"{numels[0]} each"
        if self.structures[0].numel_expr is not None:
            sizes = "symbolic sizes, starts per call"
        divisors = len(_varying_divisors(self.structures))
        divisors_text = f", {divisors} divisor(s) per member" if divisors else ""
        lengths = sorted({s.rnumel for s in self.structures})
        if len(lengths) > 1:
            divisors_text += f", rows of {len(lengths)} lengths ({lengths[0]}..{lengths[-1]})"
        return f"{'row reduction' if self.reduction else 'pointwise'}, {sizes}{divisors_text}, member table"


# ------------------------------------------------------------------------------------------------------- codegen


def codegen_member_table_group(backend: Any, group: MemberTableGroup) -> None:
    """Emit one kernel for the group: Inductor's kernel for its largest member, made to serve every member.

    If making that kernel's source fails, each member gets its stock kernel instead (the error goes to the dump).
    """
    order = sorted(range(len(group.members)), key=lambda i: (-group.structures[i].numel, -group.structures[i].rnumel))
    members = [group.members[i] for i in order]
    structures = [group.structures[i] for i in order]
    rep = members[0]
    nodes = list(rep.get_nodes())
    _, (numel, rnumel) = rep.group
    divisors = _varying_divisors(structures)
    symbolic = structures[0].numel_expr is not None
    try:
        schedule = backend.generate_node_schedule(nodes, numel, rnumel)
        tiling = backend.select_tiling(schedule, numel, rnumel)
        with _over_flat_index(rep, structures[0], divisors, always=symbolic and not group.reduction):
            kernel = MemberTableKernel(
                tiling, features=SIMDKernelFeatures(schedule, numel, rnumel), structures=structures,
                reduction=group.reduction, call_site=rep.get_first_name(), divisors=divisors,
            )
            with config.patch(inplace_buffers=False):  # each member writes its own outputs
                backend.codegen_node_schedule_with_kernel(schedule, kernel)
            with V.set_kernel_handler(kernel):
                src_code = kernel.codegen_kernel()
        _check_shared_size_symbols(kernel, structures[0])
    except Exception as error:  # a rule must never fail a compile
        log.warning("optimus_ir: member-table kernel failed; stock kernels instead", exc_info=True)
        record(
            IdenticalKernelsToMemberTableKernel.name, False, [m.get_name() for m in members],
            f"internal error in codegen {error!r}; stock kernels",
        )
        _codegen_one_by_one(backend, group)
        return
    kernel_name = backend.define_kernel(src_code, schedule, kernel)
    kernel.kernel_name = kernel_name
    _allocate_together(kernel_name, group, members, structures)
    _write_over_saved_tensors(kernel_name, group)
    with V.set_kernel_handler(kernel):
        for member in members:
            for node in member.get_nodes():
                node.mark_run()
    backend.codegen_comment(schedule, kernel_name)
    kernel.call_kernel(kernel_name)
    # what the kernel found it needs not write for its member (buffers used only inside it), for every member
    for structure in structures[1:]:
        rename = dict(zip(structures[0].slots, structure.slots))
        V.graph.removed_buffers |= {rename.get(name, name) for name in kernel.removed_buffers}
    V.graph.removed_buffers |= kernel.removed_buffers
    backend.free_buffers_in_scheduler()


def _check_shared_size_symbols(kernel: Any, structure: Structure) -> None:
    """Raise unless every size symbol the kernel takes as an argument is one all members use: one that their
    (equal) structure names. A member's own sizes (its row count, its numel) come from the table instead."""
    shared = set(re.findall(r"\b[a-z]+\d+\b", str(structure.key)))
    own = {symbol.name for expr in kernel.args.sizevars for symbol in expr.free_symbols} - shared
    if own:
        raise NotImplementedError(f"the kernel reads sizes of one member only: {sorted(own)}")


def _varying_divisors(structures: list[Structure]) -> dict[sympy.Symbol, list[int]]:
    """The divisors (``index_math.abstract_divisors``) whose values differ between members: symbol → the value of
    each member, in order."""
    rep = structures[0]
    if not rep.flat_indices:
        return {}
    varying = {}
    for i in range(len(rep.divisors)):
        values = [s.divisors[i] for s in structures]
        if len(set(values)) > 1:
            varying[index_math.divisor_symbol(i)] = values
    return varying


@contextlib.contextmanager
def _over_flat_index(
    node: Any, structure: Structure, divisors: dict[sympy.Symbol, list[int]], always: bool = False
) -> Iterator[None]:
    """Within the block, the node's subnodes loop over one flat index, their indices those of ``structure``
    (``Structure.flat_indices``) with the symbols of ``divisors`` left as symbols (read from the member table by
    the kernel's prologue) and the other divisors put back as numbers. Nothing changes without ``divisors``,
    unless ``always`` (members of symbolic sizes: the kernel must not use the size symbols of one member's loops).

    Before: ``_sizes = ([16, 64], [])``, ``load(bias, p1)``. After: ``_sizes = ([1024], [])``,
    ``load(bias, ModularIndexing(p0, 1, idivisor0))``.
    """
    if not divisors and not always:
        yield
        return
    from torch._inductor import dependencies
    from torch._inductor.loop_body import LoopBody

    from optimus_ir.lowering.split_cat import replay

    fixed = {index_math.divisor_symbol(i): sympy.Integer(value) for i, value in enumerate(structure.divisors)}
    for symbol in divisors:
        del fixed[symbol]
    numel = structure.numel if structure.numel_expr is None else structure.numel_expr
    saved = []
    try:
        for snode, indices in zip(node.get_nodes(), structure.flat_indices, strict=True):
            (variables,), ranges = dependencies.index_vars_no_squeeze([numel], prefix="p")
            flat = {name: expr.xreplace({**fixed, _FLAT_INDEX: variables[0]}) for name, expr in indices.items()}
            body = LoopBody(
                lambda *_, old=snode._body, flat=flat: replay(old, flat), [variables, []], ranges, variables, []
            )
            saved.append((snode, snode._body, snode._sizes))
            snode._body, snode._sizes = body, ([numel], [])
        yield
    finally:
        for snode, body, sizes in saved:
            snode._body, snode._sizes = body, sizes


@dataclasses.dataclass(frozen=True)
class OneAllocation:
    """The members' buffers of one slot as regions of one allocation, each starting 16-byte aligned (as Inductor
    assumes of every buffer), in the order of ``names``: end to end along the first dimension (``rows``: the row
    count of each; ``padding``: the rows left unused after each, where a region is not a multiple of 16 bytes),
    or, members of one shape, one region at the start of each row of a ``[N, row]`` allocation (``rows`` None;
    ``region``: their shape)."""

    names: tuple[str, ...]
    shape: tuple[int, ...]  # of the allocation
    rows: tuple[int, ...] | None
    region: tuple[int, ...]
    starts: tuple[int, ...]  # where each region starts, in bytes
    nbytes: int
    dtype: torch.dtype
    device: torch.device
    padding: tuple[int, ...] | None = None


def _one_allocations(members: list[Any], structures: list[Structure]) -> dict[int, OneAllocation]:
    """By slot, the members' buffers that are made as one :class:`OneAllocation` (in the order of ``members``):

    - outputs an inference graph returns: one allocation and one split per call instead of an allocation per
      member (below autograd's view tracking, ``runtime.tensors_of``: the host work per call stops growing by ~3 us
      per member);
    - buffers that other kernels read, each smaller than the CUDA caching allocator's 512-byte block, which it
      would round each of them up to (a split reduction's 16 partial sums: 64 bytes; 12 full sums hold 6 KB of
      blocks for 768 bytes). The allocation lives until the last reader of any of them is done.

    Not a training graph's outputs: what becomes of them is beyond this graph's estimates (a forward's are saved
    for the backward, which frees each after its last use; a backward's gradients are accumulated into the
    parameters' ``.grad`` one by one). Sharing one allocation, even small ones held memory that stock's had freed:
    H200, gelu storm small training step, 14 bias gradients of 256 bytes: peak of the step 5120 bytes above what
    was allocated before it, against stock's 1536 (``suite_small_training_outputs_shared.md``).

    Not under cudagraph trees: there a replay allocates nothing, and returning views of one storage cost more host
    time per call than separate tensors (H200, 128 × tanh under ``mode="reduce-overhead"``: 989 µs with views
    against stock's 323, 468 µs without against stock's 257 in a later run; ``reduce_overhead_probe*.txt`` of
    2026-11-30).

    Only the members' own buffers (not an input updated in place, not written at an offset into another buffer), of
    static contiguous layouts and no elements of their own left out (a buffer only its own kernel reads is never
    allocated)."""
    if structures[0].numel_expr is not None or _cudagraph_trees():
        return {}
    scheduler = members[0].scheduler
    outputs = OrderedSet(V.graph.get_output_names())
    allocations = {}
    for slot in range(len(structures[0].slots)):
        names = tuple(s.slots[slot] for s in structures)
        if any(s.offsets[slot] for s in structures) or not all(
            name in member.get_buffer_names() and name not in V.graph.removed_buffers
            for name, member in zip(names, members)
        ):
            continue
        returned = {name in outputs for name in names}
        buffers = [scheduler.name_to_buf[name] for name in names]
        if len(returned) > 1 or returned == {False} and any(_kernel_local(scheduler, buf, outputs) for buf in buffers):
            continue
        if returned == {True} and not V.graph.is_inference:
            continue  # see the docstring
        layouts = [buf.node.get_output_spec() for buf in buffers]
        if not all(
            type(layout) is ir.FixedLayout and layout.is_contiguous() and layout.offset == 0 for layout in layouts
        ):
            continue
        if not all(isinstance(d, (int, sympy.Integer)) for layout in layouts for d in layout.size):
            continue
        shapes = [tuple(int(d) for d in layout.size) for layout in layouts]
        itemsize = layouts[0].dtype.itemsize
        sizes = [math.prod(shape) * itemsize for shape in shapes]
        if 0 in sizes or returned == {False} and max(sizes) >= _ALLOCATION_BLOCK:
            continue
        padding = None
        if all(shape and shape[1:] == shapes[0][1:] and size % 16 == 0 for shape, size in zip(shapes, sizes)):
            rows = tuple(shape[0] for shape in shapes)
            shape, starts = (sum(rows), *shapes[0][1:]), tuple(itertools.accumulate(sizes[:-1], initial=0))
            region, nbytes = shapes[0][1:], sum(sizes)
        elif len(set(shapes)) == 1:
            row = -(-sizes[0] // 16) * 16
            rows, shape, region = None, (len(names), row // itemsize), shapes[0]
            starts, nbytes = tuple(range(0, row * len(names), row)), row * len(names)
        elif all(shape and shape[1:] == shapes[0][1:] for shape in shapes):
            # rows of different counts (a split reduction's partial sums: 2 to 24 of 4 bytes): each region is
            # followed by the rows that make it a multiple of 16 bytes
            row_bytes = math.prod(shapes[0][1:]) * itemsize
            rows = tuple(shape[0] for shape in shapes)
            padding = tuple(-n % (16 // math.gcd(row_bytes, 16)) for n in rows)
            lengths = [(n + pad) * row_bytes for n, pad in zip(rows, padding)]
            shape = (sum(rows) + sum(padding), *shapes[0][1:])
            region, starts, nbytes = shapes[0][1:], tuple(itertools.accumulate(lengths[:-1], initial=0)), sum(lengths)
        else:
            continue
        allocations[slot] = OneAllocation(
            names, shape, rows, region, starts, nbytes, layouts[0].dtype, layouts[0].device, padding
        )
    return allocations


def _saved_tensors_to_take_over(members: list[Any], allocations: dict[int, OneAllocation]) -> dict[str, str]:
    """By output of a member: the backward's saved tensor that the output is written over, where the call alone
    holds that tensor (``runtime.sole_holders``, at run time); where not, the output is allocated as before.

    Stock kernels free each saved tensor after its last reader, and write an output over a saved tensor that
    AOTAutograd donates (``decide_inplace_update``). A merged kernel allocates all its members' outputs before any
    saved tensor is freed: for the backward of 128 ``tanh`` (each reads its saved output and writes a gradient of
    that size) 127 gradients more at once. Where the saved tensors are not donated (the forward returned them: the
    caller may hold them through the backward, or not), the memory check kept such groups apart. Written over what
    it reads, the merged kernel holds no more than stock's in either case: where the call alone holds a saved
    tensor, stock frees it after its kernel, and the merged kernel writes over it; where the caller holds it,
    stock's frees nothing, and the merged kernel allocates, as stock's does.

    Before (a member's lines in the wrapper)::

        buf3 = empty_strided_cuda((256, 512), (512, 1), torch.float32)

    After::

        triton_poi_0_sole = sole_holders((tanh_3, ...))
        buf3 = tanh_3 if triton_poi_0_sole[0] else empty_strided_cuda((256, 512), (512, 1), torch.float32)

    A saved tensor qualifies as Inductor's donated ones do (its one reader is this member, which reads it at the
    index where it writes the output, ``SchedulerNode.can_inplace``, once; the layouts match; not a graph output,
    not updated in place), and not where the wrapper allocates nothing itself: under cudagraph trees, where a
    replay would write over whoever holds it then, in one allocation of the members' outputs, or under Inductor's
    memory planning (``config.memory_planning``, which plans every allocation line itself)."""
    if _cudagraph_trees() or not config.inplace_buffers or config.memory_planning:
        return {}
    readers = _readers_of_inputs(members[0].scheduler)
    outputs = OrderedSet(V.graph.get_output_names())
    in_one_allocation = {name for allocation in allocations.values() for name in allocation.names}
    taken: dict[str, str] = {}
    for member in members:
        own = OrderedSet(snode.get_name() for snode in member.get_nodes())
        accesses = collections.Counter(
            dep.name for dep in OrderedSet(
                dep for snode in member.get_nodes() for dep in snode.read_writes.reads_and_writes()
            )
        )
        for snode in member.get_nodes():
            if not isinstance(snode, SchedulerNode):
                continue
            for buf in snode.get_outputs():
                node, name = buf.node, buf.get_name()
                layout = node.get_output_spec()
                if (
                    name in in_one_allocation or name in V.graph.removed_buffers or type(layout) is not ir.FixedLayout
                    or not node.should_allocate() or node.get_inputs_that_alias_output() or node.get_mutation_names()
                    or _kernel_local(member.scheduler, buf, outputs)
                ):
                    continue
                for dep in snode.read_writes.reads:
                    value = V.graph.graph_inputs.get(dep.name)
                    if (
                        isinstance(value, ir.TensorBox) and dep.name not in taken.values() and accesses[dep.name] == 1
                        and not _is_tangent(dep.name) and not is_nonfreeable_buffers(StarDep(dep.name))
                        and dep.name not in outputs and dep.name not in V.graph.mutated_inputs
                        and readers.get(dep.name, OrderedSet()) <= own and snode.can_inplace(dep)
                        and _same_layout(value.get_output_spec(), layout)
                    ):
                        taken[name] = dep.name
                        break
    return taken


def _readers_of_inputs(scheduler: Any) -> dict[str, OrderedSet[str]]:
    """By graph input: the names of the scheduler nodes (unfused) that read it, worked out once per graph."""
    if getattr(V.graph, "optimus_ir_input_readers", None) is None:
        readers: dict[str, OrderedSet[str]] = collections.defaultdict(OrderedSet)
        for node in scheduler.nodes:
            for snode in node.get_nodes():
                for dep in snode.read_writes.reads:
                    if dep.name in V.graph.graph_inputs:
                        readers[dep.name].add(snode.get_name())
        V.graph.optimus_ir_input_readers = dict(readers)
    return V.graph.optimus_ir_input_readers


def _same_layout(saved: Any, output: ir.Layout) -> bool:
    """Whether a saved tensor's layout is one an output can be written over: the same dtype, device, sizes,
    strides and offset."""
    return (
        isinstance(saved, ir.Layout) and saved.dtype == output.dtype and saved.device == output.device
        and list(saved.size) == list(output.size) and list(saved.stride) == list(output.stride)
        and saved.offset == output.offset
    )


def _allocate_together(
    kernel_name: str, group: MemberTableGroup, members: list[Any], structures: list[Structure]
) -> None:
    """Allocate the members' buffers that are one allocation (:func:`_one_allocations`), as regions of it
    (:class:`RegionsOfAllocations`)."""
    wrapper = V.graph.wrapper_code
    regions = RegionsOfAllocations.of(wrapper)
    for slot, allocation in _one_allocations(members, structures).items():
        storage = f"{kernel_name}_{members[0].get_first_name()}_out{slot}"  # a kernel may serve several groups
        stride = [math.prod(allocation.shape[i + 1 :]) for i in range(len(allocation.shape))]
        wrapper.writeline(
            wrapper.make_allocation(storage, allocation.device, allocation.dtype, allocation.shape, stride)
        )
        if allocation.padding is not None:
            function, arguments = "tensors_of_padded_rows", f"{allocation.rows!r}, {allocation.padding!r}"
        elif allocation.rows is not None:
            function, arguments = "tensors_of", repr(allocation.rows)
        else:
            function, arguments = "tensors_of_each_row", repr(allocation.region)
        regions.add(
            storage, allocation, function, f"{', '.join(allocation.names)}, = {function}({storage}, {arguments})",
            as_tensors=not _read_only_by_member_tables(group.scheduler, allocation.names),
        )


def _write_over_saved_tensors(kernel_name: str, group: MemberTableGroup) -> None:
    """The wrapper's lines that give each output of ``group.takes_over`` its saved tensor's storage where the call
    alone holds that tensor, and an allocation of its own where not (:func:`_saved_tensors_to_take_over`)."""
    if not group.takes_over:
        return
    wrapper = V.graph.wrapper_code
    sole = f"{kernel_name}_{group.members[0].get_first_name()}_sole"  # a kernel may serve several groups
    wrapper.add_import_once("from optimus_ir.runtime import sole_holders")
    wrapper.writeline(f"{sole} = sole_holders(({', '.join(group.takes_over.values())},))")
    for i, (output, saved) in enumerate(group.takes_over.items()):
        allocation = wrapper.make_buffer_allocation(V.graph.get_buffer(output)).partition(" = ")[2]
        wrapper.writeline(f"{output} = {saved} if {sole}[{i}] else {allocation}")
        wrapper.allocated.add(output)
    record(
        IdenticalKernelsToMemberTableKernel.name, True, list(group.takes_over),
        f"{len(group.takes_over)} output(s) written over the saved tensor each reads, where the call alone holds it "
        "(allocated where not)",
    )


def _read_only_by_member_tables(scheduler: Any, names: tuple[str, ...]) -> bool:
    """Whether every reader of the regions ``names`` is a merged kernel that reads, in each slot that holds one of
    them, only regions of this allocation and writes none (its table can then be given the allocation, see
    :meth:`RegionsOfAllocations.one_tensor`), and none of them is a graph output."""
    regions = set(names)
    if regions & set(V.graph.get_output_names()):
        return False
    for name in names:
        for user in scheduler.name_to_buf[name].users:
            if user.is_weak:
                continue
            group = scheduler.name_to_fused_node.get(user.get_name())
            if not isinstance(group, MemberTableGroup):
                return False
            if any(name in {dep.name for dep in member.read_writes.writes} for member in group.members):
                return False
            for slot in range(len(group.structures[0].slots)):
                in_slot = {structure.slots[slot] for structure in group.structures}
                if name in in_slot and not in_slot <= regions:
                    return False
    return True


class RegionsOfAllocations:
    """The regions of one allocation (:func:`_one_allocations`) in one graph's wrapper code.

    The allocation is one line (``out1 = empty_strided_cuda((32, ), ...)``). Its regions become tensors of their
    own (``buf0, buf2, = tensors_of(out1, (16, 16))``) only where code needs them as tensors: a graph
    output, a stock kernel, anything but a merged kernel whose table reads all its members of that slot from this
    allocation. Where merged kernels are their only readers (a split reduction's partial sums, read by the merged
    second stages), the readers' tables are given the allocation and where each member's region starts in it, and
    the allocation is deleted after the last region's last use::

        out1 = empty_strided_cuda((32, ), (1, ), torch.float32)      out1 = empty_strided_cuda((32, ), ...)
        buf0, buf2, = tensors_of(out1, (16, 16))                      first_now = first(x, y, out1)
        first_now = first(x, y, out1)                          ->     ...
        del out1                                                      second_now = second(out1, ...)
        ...                                                           del out1
        second_now = second(buf0, buf2, ...)
        del buf0
        del buf2

    A call then makes no tensor per member, reads no address per member and frees no tensor per member (this
    machine's CPU, 48 partial sums: 17 µs for the split and the addresses; ragged rows, 33 µs).

    Regions are never reused: each is freed by a plain ``del`` at its last use, where Inductor's wrapper would keep
    it for a later allocation of its size (``AllocateLine.plan``) or a kernel would write its output over it
    (``decide_inplace_update``). A buffer that took a region over would hold the whole allocation: a training
    forward's loss, a 0-d output, kept 1536 bytes alive into the backward where stock's kept 512 (H200, tanh storm
    small training step: peak 6144 bytes above its start, stock's 5120; ``peak_trace_before_regions_unreused.md``).
    ``V.graph.never_reuse_buffers`` keeps them from both, and from being freed at all: ``codegen_free`` of this
    graph's wrapper frees them here instead."""

    def __init__(self, wrapper: Any) -> None:
        self.wrapper = wrapper
        #: region -> its allocation's name
        self.storage_of: dict[str, str] = {}
        #: allocation -> where each of its regions starts in it (bytes)
        self.starts: dict[str, dict[str, int]] = {}
        #: allocations whose regions are not tensors (yet) -> the function of ``optimus_ir.runtime`` and the line
        #: that would make them
        self.not_tensors: dict[str, tuple[str, str]] = {}
        #: regions not tensors that are past their last use
        self.done: OrderedSet[str] = OrderedSet()
        #: allocations whose names the code still holds
        self.alive: OrderedSet[str] = OrderedSet()

    @classmethod
    def of(cls, wrapper: Any) -> RegionsOfAllocations:
        """The wrapper's regions (made on first use, with its ``codegen_free`` routing regions here)."""
        if not hasattr(wrapper, "optimus_ir_regions"):
            wrapper.optimus_ir_regions = regions = cls(wrapper)
            stock_free = wrapper.codegen_free
            wrapper.codegen_free = lambda buffer: regions.free(buffer) or stock_free(buffer)
        return wrapper.optimus_ir_regions

    def add(self, storage: str, allocation: OneAllocation, function: str, make_tensors: str, as_tensors: bool) -> None:
        """Register ``allocation`` (just allocated as ``storage``); ``make_tensors`` is the line that makes its
        regions tensors by ``function``, written now where ``as_tensors``."""
        V.graph.never_reuse_buffers.update(allocation.names)
        self.wrapper.allocated.update(allocation.names)
        self.storage_of.update(dict.fromkeys(allocation.names, storage))
        self.starts[storage] = dict(zip(allocation.names, allocation.starts))
        self.not_tensors[storage] = (function, make_tensors)
        self.alive.add(storage)
        if as_tensors:
            self._make_tensors(storage, keep_storage=True)

    def one_tensor(self, names: list[str]) -> tuple[str, dict[str, int]] | None:
        """Where ``names`` are all regions of one allocation: a tensor that a member table can be given instead of
        them (the allocation while its name is alive, else the first region) and where each region starts from it
        (bytes)."""
        storages = {self.storage_of.get(name) for name in names}
        if len(storages) != 1 or None in storages:
            return None
        storage = storages.pop()
        starts = self.starts[storage]
        if storage in self.alive:
            return storage, {name: starts[name] for name in names}
        return names[0], {name: starts[name] - starts[names[0]] for name in names}

    def after_table(self, storage: str) -> None:
        """After a line that gives ``storage`` to a kernel's table: delete it where its regions are tensors, which
        hold it."""
        if storage in self.alive and storage not in self.not_tensors:
            self.wrapper.writeline(f"del {storage}")
            self.alive.discard(storage)

    def make_tensors(self, names: OrderedSet[str]) -> None:
        """Make the regions among ``names`` tensors, with all other regions of their allocations (a stock kernel
        reads them: the merged kernel that was to read them failed to generate)."""
        for storage in OrderedSet(self.storage_of[name] for name in names if name in self.storage_of):
            if storage in self.not_tensors:
                self._make_tensors(storage, keep_storage=False)

    def _make_tensors(self, storage: str, keep_storage: bool) -> None:
        function, line = self.not_tensors.pop(storage)
        self.wrapper.add_import_once(f"from optimus_ir.runtime import {function}")
        self.wrapper.writeline(line)
        for name in self.starts[storage]:
            if name in self.done:
                self.wrapper.writeline(f"del {name}")
        if not keep_storage:
            self.wrapper.writeline(f"del {storage}")
            self.alive.discard(storage)

    def free(self, buffer: Any) -> bool:
        """``codegen_free`` of a region (True); False for any other buffer."""
        from torch._inductor.codegen.wrapper import FreeLine

        name = buffer.get_name()
        if name not in self.storage_of:
            return False
        if name in self.wrapper.freed or name in V.graph.removed_buffers:  # as stock's plan: no line
            return True
        self.wrapper.freed.add(name)
        storage = self.storage_of[name]
        if storage not in self.not_tensors:
            self.wrapper.writeline(FreeLine(self.wrapper, buffer))
            return True
        self.done.add(name)
        if all(region in self.done or region in V.graph.removed_buffers for region in self.starts[storage]):
            self.wrapper.writeline(f"del {storage}")
            self.alive.discard(storage)
        return True


def _codegen_one_by_one(backend: Any, group: MemberTableGroup) -> None:
    """Stock kernels for the members, in order, each freeing the buffers it is the last to read."""
    # imported here: that module's rule must register after this one's (it reads the groups this one makes)
    from optimus_ir.scheduler_hooks.input_checks import check_alignment_again

    scheduler = group.scheduler
    RegionsOfAllocations.of(V.graph.wrapper_code).make_tensors(group.used_buffer_names())
    check_alignment_again(group.used_buffer_names())
    last_usage = set(group.last_usage)
    scheduler.buffer_names_to_free -= last_usage
    for i, member in enumerate(group.members):
        later = set().union(*(m.used_or_aliased_buffer_names() for m in group.members[i + 1 :]))
        scheduler.buffer_names_to_free |= (last_usage & member.used_or_aliased_buffer_names()) - later
        backend.codegen_node(member)


_TRITON_DTYPE = {
    "fp64": "float64", "fp32": "float32", "fp16": "float16", "bf16": "bfloat16", "fp8e4nv": "float8e4nv",
    "fp8e5": "float8e5", "i64": "int64", "i32": "int32", "i16": "int16", "i8": "int8", "i1": "int1",
    "u64": "uint64", "u32": "uint32", "u16": "uint16", "u8": "uint8",
}


class MemberTableKernel(TritonKernel):
    """Inductor's Triton kernel for one member, with a prologue that makes it serve every member of a group.

    Member ``m`` owns the blocks ``[starts[m], starts[m] + padded numel) / XBLOCK``. Every tensor argument
    receives the table; the prologue replaces it by the member's address, and ``xnumel`` by its numel (and
    ``r0_numel`` by its row length, where one-row members reduce different lengths: ``Structure.rnumel``).
    """

    def __init__(
        self,
        *args: Any,
        structures: list[Structure],
        reduction: bool,
        call_site: str,
        divisors: dict[sympy.Symbol, list[int]],
        **kwargs: Any,
    ) -> None:
        self.structures = structures
        lengths = [s.rnumel for s in structures]
        #: each member's row length, where they differ (the kernel is the longest row's, its masks kept)
        self.rnumels = lengths if len(set(lengths)) > 1 else None
        #: the name the prologue gives each value of the members → each member's value: the table rows after the
        #: numels (the divisors, then the row lengths)
        self.member_values = {str(symbol): values for symbol, values in divisors.items()}
        if self.rnumels:
            self.member_values["r0_numel"] = self.rnumels
        #: names this call's member table: Inductor gives groups whose kernel sources are equal one kernel (and
        #: name), but their members, sizes and addresses differ
        self.call_site = call_site
        numels = [s.numel for s in structures]  # size hints where symbolic
        #: members of symbolic sizes: where each starts is known per call only (the table is filled then), and
        #: any block size the autotuner picks for the size hint must fit (members start at the largest one)
        self.symbolic = structures[0].numel_expr is not None
        largest_block = _MAX_REDUCTION_XBLOCK if reduction else _MAX_XBLOCK
        self.align = largest_block if self.symbolic else _align(numels[0], reduction)
        padded = [-(-n // self.align) * self.align for n in numels]
        self.starts = [sum(padded[:i]) for i in range(len(padded))]
        self.total = sum(padded)
        self.uniform = len(set(numels)) == 1 and not self.symbolic
        self.pad_to = 1 << (len(numels) - 1).bit_length()
        super().__init__(*args, **kwargs)  # writes the range-tree header, which asks the members' masks
        self.size_hint_x = self._size_hint_x(reduction)

    def _size_hint_x(self, reduction: bool) -> int:
        """The kernel's size hint along x, from which Inductor's heuristics pick its configs: the members' blocks
        end to end (what the launch covers, as for one tensor of all their rows) where no block the heuristics or
        the autotuner can pick is larger than ``align`` (pointwise members padded to the largest block; row
        reductions padded to ``_MAX_REDUCTION_XBLOCK`` rows of at least ``_MIN_RNUMEL_FOR_TOTAL_HINT`` elements).
        Elsewhere ``align``, which bounds every block the heuristics pick (they never exceed the hint).

        Row reductions of 64 × [256, 512]: a hint of 256 rows gives Inductor's one-row, four-warp config (for
        "few" rows); the total, 16384, its two-row, one-warp one, as for one tensor of all rows. H200 replay: 36 → 29
        us (stock's kernel on one tensor of all rows: 25 us; ``horizontal_reduction_size_hint.md``).
        """
        total = 1 << (self.total - 1).bit_length()
        if not reduction:
            return total if self.align == _MAX_XBLOCK else self.align
        rnumel = math.prod(int(n) if isinstance(n, (int, sympy.Integer)) else 0
                           for prefix, n in self.numels.items() if prefix != "x")
        wide_rows = self.align == _MAX_REDUCTION_XBLOCK and rnumel >= _MIN_RNUMEL_FOR_TOTAL_HINT
        return total if wide_rows and torch.version.hip is None else self.align

    def _has_constant_mask(self, tree: Any) -> bool:
        if tree.prefix == "x" and (self.symbolic or any(s.numel % self.align for s in self.structures)):
            return False
        if tree.prefix == "r0_" and self.rnumels:
            return False
        return super()._has_constant_mask(tree)


    def iteration_ranges_get_pid(self, entry: Any) -> str:
        if entry.prefix == "x":
            return "xblock"
        return super().iteration_ranges_get_pid(entry)

    def codegen_kernel(self, name: str | None = None) -> str:
        numel = self.numels["x"]
        self.numels["x"] = self.size_hint_x
        # the autotuner benchmarks configs by running the kernel, after cloning the arguments it mutates; it cannot
        # clone what the table points to, so a kernel that updates buffers in place gets one config, run once
        one_config = (
            {"triton.autotune_pointwise": False, "max_autotune": False, "max_autotune_pointwise": False,
             "coordinate_descent_tuning": False}
            if any(s.updates_in_place for s in self.structures) else {}
        )
        if min(self.size_hint_x, TRITON_MAX_BLOCK["X"]) > self.align:  # coordinate descent grows blocks up to that
            one_config["coordinate_descent_tuning"] = False
        if not self.inside_reduction:
            self.min_elem_per_thread = max(self.min_elem_per_thread, self._min_elements_per_thread())
        try:
            with config.patch(one_config):
                return super().codegen_kernel(name)
        finally:
            self.numels["x"] = numel

    def _min_elements_per_thread(self) -> int:
        """Elements per thread for ``_BYTES_PER_THREAD`` of the widest tensor dtype: the floor Inductor's pointwise
        configs take (``triton_config``'s ``min_elem_per_thread``), which otherwise give 16-bit kernels half the
        bytes per thread of fp32 ones (1024 elements on 4 warps)."""
        _, _, _, arg_types = self.args.python_argdefs()
        widest = max((t.itemsize for t in arg_types if isinstance(t, torch.dtype)), default=4)
        return max(1, _BYTES_PER_THREAD // widest)

    def codegen_static_numels(self, code: Any) -> None:
        stock = IndentedBuffer()
        super().codegen_static_numels(stock)
        for line in stock.getvalue().splitlines():
            if not line.startswith("xnumel = ") and not (self.rnumels and line.startswith("r0_numel = ")):
                code.writeline(line)
        n = len(self.structures)
        small = self.index_dtype == "tl.int32" and self.total < 2**31 and not self.symbolic
        pid = "tl.program_id(0)" if small else "tl.program_id(0).to(tl.int64)"
        code.writeline(f"xstart = {pid} * XBLOCK")
        tensor_args = self._tensor_args()
        code.writeline(f"xtable = {tensor_args[0][0]}.to(tl.pointer_type(tl.int64))")
        if self.uniform:
            padded = self.total // n
            code.writeline(f"xmember = xstart // {padded}")
            code.writeline(f"xblock = (xstart - xmember * {padded}) // XBLOCK")
            code.writeline(f"xnumel = {self.structures[0].numel}")
        else:
            code.writeline(f"xmembers = tl.arange(0, {self.pad_to})")
            code.writeline("xmember = tl.sum((tl.load(xtable + xmembers) <= xstart).to(tl.int32), 0) - 1")
            code.writeline("xblock = (xstart - tl.load(xtable + xmember)) // XBLOCK")
            code.writeline(f"xnumel = tl.load(xtable + {self.pad_to} + xmember)")
        for j, symbol in enumerate(self.member_values):
            row = self.pad_to + n * (1 + j)
            code.writeline(f"{symbol} = tl.load(xtable + ({row} + xmember)).to({self.index_dtype})")
        aligned = self._aligned_args()
        for slot, (arg, dtype) in enumerate(tensor_args):
            row = self.pad_to + n * (1 + len(self.member_values) + slot)
            address = f"tl.load(xtable + ({row} + xmember)).to(tl.pointer_type(tl.{dtype}))"
            code.writeline(f"{arg} = {f'tl.multiple_of({address}, 16)' if arg in aligned else address}")

    def _aligned_args(self) -> set[str]:
        """The tensor arguments whose address is 16-byte aligned for every member, by the rule Inductor applies to a
        stock kernel's pointer arguments (``tt.divisibility``: a buffer it allocated, or a graph input it checks and
        copies when misaligned) and the member's constant offset. The prologue says so to Triton, which then loads
        and stores 16 bytes per instruction: an address loaded from the table has no known alignment otherwise
        (H200, 128 × tanh bf16: 2-byte loads and stores)."""
        if not config.triton.divisible_by_16:
            return set()
        argdefs, call_args, _, _ = self.args.python_argdefs()
        aligned = set()
        for argdef, outer in zip(argdefs, call_args):
            if outer not in self.structures[0].slots:
                continue
            if all(
                offset % 16 == 0 and not is_unaligned_buffer(TensorArg(argdef.name, name, V.graph.get_dtype(name)))
                for name, offset in self._members_of_slot(outer)
            ):
                aligned.add(argdef.name)
        return aligned

    def _members_of_slot(self, outer: str) -> list[tuple[str, int]]:
        """For the representative's buffer ``outer``: each member's buffer in that slot, and the bytes its address
        adds to the representative's offset (which the shared body adds)."""
        rep = self.structures[0]
        slot = rep.slots.index(outer)
        itemsize = V.graph.get_dtype(outer).itemsize
        return [(s.slots[slot], (s.offsets[slot] - rep.offsets[slot]) * itemsize) for s in self.structures]

    def _tensor_args(self) -> list[tuple[str, str]]:
        signature = self.triton_meta["signature"]
        return [
            (arg, _TRITON_DTYPE[kind[1:]])
            for arg, kind in signature.items()
            if isinstance(kind, str) and kind.startswith("*")
        ]

    def call_kernel(self, name: str, node: Any = None, deallocate_ws: bool = True) -> None:
        wrapper = V.graph.wrapper_code
        wrapper.write_triton_header_once()
        argdefs, call_args, _, arg_types = self.args.python_argdefs()
        argdefs = [a.name for a in argdefs]
        tensor_args = {arg for arg, _ in self._tensor_args()}
        table = f"{name}_members_{self.call_site}"
        regions = RegionsOfAllocations.of(wrapper)
        aligned_args = self._aligned_args()
        by_slot, byte_offsets, spans, storages, aligned = [], [], [], OrderedSet(), []
        for arg_name, outer in zip(argdefs, call_args):
            if arg_name in tensor_args:
                members = self._members_of_slot(outer)
                one = regions.one_tensor([name for name, _ in members])
                if one is None:
                    if arg_name in aligned_args:  # the graph's inputs among them: the table checks their alignment
                        aligned.extend(len(by_slot) + i for i, (name, _) in enumerate(members)
                                       if name in V.graph.graph_inputs)
                    by_slot.extend(name for name, _ in members)
                    spans.extend([1] * len(members))
                    byte_offsets.extend(offset for _, offset in members)
                else:  # each member's buffer a region of one allocation: one tensor, and where each region starts
                    tensor, starts = one
                    by_slot.append(tensor)
                    spans.append(len(members))
                    byte_offsets.extend(starts[name] + offset for name, offset in members)
                    storages.add(regions.storage_of[tensor] if tensor in regions.storage_of else tensor)
        numels = [s.numel for s in self.structures]
        options = f", byte_offsets={byte_offsets!r}" if any(byte_offsets) else ""
        if len(spans) < len(byte_offsets):
            options += f", spans={spans!r}"
        call_options, total = "", str(self.total)
        if self.symbolic:  # where members start is known per call: the table is filled from their numels
            exprs = [s.numel_expr for s in self.structures]
            options += f", align={self.align}"
            call_options = f", numels=({''.join(wrapper.codegen_python_sizevar(e) + ', ' for e in exprs)})"
            total = wrapper.codegen_python_sizevar(
                sum(FloorDiv(e + self.align - 1, self.align) * self.align for e in exprs)
            )
            numels = None
        if self.member_values:
            options += f", values={[v for values in self.member_values.values() for v in values]!r}"
        if aligned:
            options += f", aligned={aligned!r}"
        if _cudagraph_trees():  # the table must not live in a graph's memory pool
            options += ", outside_graph_pools=True"
        wrapper.add_import_once("from optimus_ir.runtime import MemberTable")
        starts = None if self.symbolic else self.starts
        wrapper.header.writeline(f"{table} = MemberTable({starts!r}, {numels!r}, {self.pad_to}{options})")
        wrapper.writeline(f"{table}_now = {table}({', '.join(by_slot)}{call_options})")
        for storage in storages:
            regions.after_table(storage)
        call_args = [f"{table}_now" if a in tensor_args else c for a, c in zip(argdefs, call_args)]
        first_numel = len(call_args)
        self.add_numel_to_call_args(name, call_args, arg_types)
        call_args[first_numel] = total  # x: the members' blocks, end to end (the grid)
        wrapper.generate_kernel_call(
            name, call_args, triton=True, arg_types=arg_types,
            triton_meta=self.triton_meta, inductor_meta=self.inductor_meta,
        )
        wrapper.writeline(f"del {table}_now")
