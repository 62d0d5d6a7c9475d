"""Scheduler-time merge of the per-progression kernels of one cat into one kernel with block-level dispatch."""

from __future__ import annotations

import math
import unittest.mock
from typing import Any

from optimus_ir.registry import SchedulerRule, record, register
from optimus_ir.scheduler_hooks.node_graph import GroupKernelNode, independent, replace_with_group

#: Ops of a loop body that move data or name constants; the others are the computation each element costs.
_NOT_COMPUTE = frozenset({"load", "store", "output", "constant", "index_expr", "masked", "check_bounds"})
#: Threads of one block of Inductor's combo kernels (``triton_heuristics.foreach``: 8 warps of 32).
_THREADS = 256
#: Ops one thread may unroll before Triton's compile time dominates the first call. Triton unrolls a branch once per
#: element a thread handles (block / 256), and its compile time grows with the unrolled ops: the 12-layer split chain
#: (16 branches, 504 ops) took 12.1 s at Inductor's block of 1024 and 3.5 s at 256 (local sm_90 compile).
OPS_PER_THREAD = 256
#: Ops of one piece-group kernel at most; a heavier group becomes several kernels, which Triton compiles in parallel.
#: Its compile time grows faster than the ops: the 12-layer chain's backward (16 branches, 1356 ops, one element per
#: thread) took 10.9 s, its forward (504 ops) 3.1 s (local sm_90 compiles).
MAX_KERNEL_OPS = 600


def _ops(member: Any) -> int:
    """The computation ops of one element of a scheduler node (loads, stores and constants not counted)."""
    return sum(
        count for node in member.get_nodes() for op, count in node._body.op_counts.items() if op not in _NOT_COMPUTE
    )


def compile_sized_parts(members: list[Any]) -> list[list[Any]]:
    """``members`` in order, cut into ``ceil(ops / MAX_KERNEL_OPS)`` parts of about equal weight: each member goes
    to the part its middle falls into (so a part can pass the limit by half a member at each end)."""
    weights = [_ops(member) for member in members]
    count = max(1, math.ceil(sum(weights) / MAX_KERNEL_OPS))
    if count == 1:  # (also members of no compute ops at all: copies)
        return [members]
    target = sum(weights) / count
    parts: list[list[Any]] = [[] for _ in range(count)]
    before = 0
    for member, ops in zip(members, weights):
        parts[min(count - 1, int((before + ops / 2) // target))].append(member)
        before += ops
    return [part for part in parts if part]


def block_size_for(members: list[Any]) -> int:
    """The block of a piece group's kernel: Inductor's 1024 (4 elements per thread) for light bodies, down to 256
    (one element per thread) as the ops of all branches together approach :data:`OPS_PER_THREAD`."""
    ops = sum(_ops(member) for member in members)
    per_thread = 4
    while per_thread > 1 and ops * per_thread > OPS_PER_THREAD:
        per_thread //= 2
    return _THREADS * per_thread


class PieceGroupKernel(GroupKernelNode):
    """The progressions of one cat as one combo kernel (Inductor's), with a block size chosen by body weight."""

    def __init__(self, members: list[Any]) -> None:
        super().__init__(members)
        self.block_size = block_size_for(members)

    def codegen(self, backend: Any, stock: Any) -> None:
        from torch._inductor.codegen.triton_combo_kernel import ComboKernel

        block_size, stock_init = self.block_size, ComboKernel.__init__

        def init(kernel: ComboKernel, *args: Any, **kwargs: Any) -> None:
            stock_init(kernel, *args, **kwargs)
            kernel.block_size_1d = block_size

        with unittest.mock.patch.object(ComboKernel, "__init__", init):
            stock(backend, self)


@register
class PieceGroupToComboKernel(SchedulerRule):
    """The progressions of one rewritten cat (see ``SplitCatToPointwise``) → one kernel, dispatching by block.

    Before (after Inductor's fusion; ``cat([tanh(x0), sigmoid(x1), tanh(x2), sigmoid(x3), ...])``)::

        SchedulerNode(buf0: tanh of the even pieces, writes cat viewed as [B, N/2, 64] at offset 0)
        SchedulerNode(buf1: sigmoid of the odd pieces, writes cat viewed as [B, N/2, 64] at offset 64)

    After::

        PieceGroupKernel([buf0, buf1])      # one kernel: `if pid < n0: tanh ... elif pid < n1: sigmoid ...`

    Each branch is chosen once per block, so per-element work does not depend on the number of progressions. The
    block shrinks as the branches' bodies grow (:func:`block_size_for`), and a group of more than
    :data:`MAX_KERNEL_OPS` ops becomes several kernels (:func:`compile_sized_parts`), so that Triton's compile time
    stays below stock Inductor's (which compiles one small kernel per piece, in parallel).
    Members that Inductor fused with a neighbour, or that depend on each other, are left out of the group (each
    decision in the dump); a group of fewer than two nodes is left alone.
    """

    name = "PieceGroupToComboKernel"
    pass_name = "splitcat"

    def rewrite(self, nodes: list[Any]) -> list[Any]:
        from torch._inductor.codegen.cuda_combined_scheduling import CUDACombinedScheduling
        from torch._inductor.codegen.simd import SIMDScheduling
        from torch._inductor.virtualized import V

        from optimus_ir.lowering.split_cat import PIECE_GROUPS

        groups = PIECE_GROUPS.pop(V.graph, [])
        if not groups:
            return nodes
        owner = {name: node for node in nodes for name in node.get_buffer_names()}
        for group in groups:
            if not any(name in owner for name in group):
                continue  # the whole cat was removed (DeadFoldedCatElimination)
            if len({id(owner[name]) for name in group if name in owner}) == 1:
                continue  # already one kernel (IdenticalKernelsToMemberTableKernel merged its progressions)
            members: list[Any] = []
            for name in group:
                node = owner.get(name)
                if node is None:
                    record(self.name, False, [name], "no scheduler node writes it (removed)")
                elif node.is_foreach() or len(node.get_buffer_names()) != 1:
                    record(self.name, False, [name], f"fused into {node.get_name()} with other buffers; left there")
                elif node.is_reduction() or node.is_template() or node.is_extern():
                    record(self.name, False, [name], "not a pointwise kernel")
                elif not independent(node, members):
                    record(self.name, False, [name], "depends on another member")
                else:
                    members.append(node)
            if len(members) < 2:
                continue
            backend = members[0].scheduler.get_backend(members[0].get_device())
            if not isinstance(backend, (SIMDScheduling, CUDACombinedScheduling)):
                record(self.name, False, group, f"{type(backend).__name__} emits no combo kernels")
                continue
            parts = compile_sized_parts(members)
            if len(parts) > 1:
                record(
                    self.name, False, [m.get_name() for m in members],
                    f"{sum(map(_ops, members))} ops: {len(parts)} kernels of about equal weight (at most about "
                    f"{MAX_KERNEL_OPS} ops each), which Triton compiles in parallel",
                )
            for part in parts:
                if len(part) > 1:
                    nodes = self._merge(nodes, part)
        return nodes

    def _merge(self, nodes: list[Any], members: list[Any]) -> list[Any]:
        merged = PieceGroupKernel(members)
        ordered = replace_with_group(nodes, members, merged)
        if ordered is None:
            record(self.name, False, [m.get_name() for m in members], "no schedule runs them together")
            return nodes
        merged.scheduler.name_to_fused_node.update({m.get_name(): merged for m in members})
        record(
            self.name, True, [m.get_name() for m in members],
            f"{len(members)} kernels → one kernel, block {merged.block_size}",
        )
        return ordered


@register
class DeadFoldedCatElimination(SchedulerRule):
    """A cat output written through folds that nothing reads any more → removed, with the kernels that wrote it,
    before the scheduler is built.

    When a later piece reads a region of such a cat, ``SplitCatToPointwise`` reads the fold's computation instead
    (layers of split → op → cat become one kernel), so the earlier cat often ends up unread. Inductor's dead-code
    elimination keeps it (a ConcatKernel counts as a user of its own buffer), and the scheduler would trace the
    body of every piece that wrote it (in a chain, layer L's pieces replay the L layers before: most of the
    compile). Before, in ``V.graph.operations``::

        ComputedBuffer(buf0: tanh, writes buf2[:, 0:4])     # no reader of buf2, buf0 or buf1 left
        ComputedBuffer(buf1: relu, writes buf2[:, 4:8])
        ConcatKernel(buf2, inputs=[buf0, buf1])

    After: the three operations are gone (their buffers added to ``V.graph.removed_buffers``). Removing one cat
    can leave an earlier one unread (a piece that loaded it), so this repeats until nothing changes.
    """

    name = "DeadFoldedCatElimination"
    pass_name = "splitcat"
    stage = "pre_scheduler"

    def rewrite(self, nodes: list[Any]) -> list[Any]:
        from torch._inductor import ir
        from torch._inductor.virtualized import V

        from optimus_ir.lowering.split_cat import WRITTEN_BY_FOLDS

        present = {op.get_operation_name() for op in nodes}
        kept = set(V.graph.get_output_names()) | set(V.graph.mutated_buffers)
        writers: dict[str, tuple[str, ...]] = {}  # cat → the operations that write it (its ConcatKernel, pieces)
        buffers: dict[str, set[str]] = {}  # cat → its buffer and its pieces' buffers
        for name in WRITTEN_BY_FOLDS.get(V.graph, {}):
            concat = V.graph.name_to_buffer.get(name)
            if not isinstance(concat, ir.ConcatKernel) or concat.get_operation_name() not in present:
                continue
            buffers[name] = {name} | {piece.get_name() for piece in concat.inputs}
            writers[name] = (concat.get_operation_name(), *(piece.get_operation_name() for piece in concat.inputs))
            if buffers[name] & kept:
                del buffers[name], writers[name]
        if not writers:
            return nodes
        reads = {op.get_operation_name(): set(op.get_read_names()) for op in nodes}
        dead: set[str] = set()
        changed = True
        while changed:
            changed = False
            for name, own in writers.items():
                if set(own) <= dead or any(
                    names & buffers[name] for op, names in reads.items() if op not in own and op not in dead
                ):
                    continue
                dead.update(own)
                changed = True
                V.graph.removed_buffers.update(buffers[name])
                V.graph.removed_operations.update(own)
                record(self.name, True, [name], f"unread after read-through; removed {list(own)}")
        return [op for op in nodes if op.get_operation_name() not in dead]
