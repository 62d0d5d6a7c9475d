"""Scheduler-time merge of the per-progression kernels of one cat into one kernel with block-level dispatch."""

from __future__ import annotations

import math
from typing import Any

from optimus_ir.graph_state import current as graph_state
from optimus_ir.patching import PATCHES
from optimus_ir.records import record
from optimus_ir.rule import SchedulerRule
from optimus_ir.scheduler_hooks.node_graph import GroupKernelNode, independent, replace_with_group

#: Ops of a loop body that move data or name constants; the others are the computation each element costs.
_NOT_COMPUTE = frozenset({"load", "store", "output", "constant", "index_expr", "masked", "check_bounds"})
#: Threads of one block of Inductor's combo kernels (``triton_heuristics.foreach``: 8 warps of 32).
_THREADS = 256
#: Ops one thread may unroll before Triton's compile time dominates the first call. Triton unrolls a branch once per
#: element a thread handles (block / 256), and its compile time grows with the unrolled ops.
OPS_PER_THREAD = 256
#: Ops of one piece-group kernel at most; a heavier group becomes several kernels, which Triton compiles in parallel.
#: Its compile time grows faster than the ops.
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


def member_refusal(node: Any) -> str | None:
    """Why the scheduler node that writes a piece of a cat cannot be a member of its piece group, or None."""
    if node.is_foreach() or len(node.get_buffer_names()) != 1:
        return f"fused into {node.get_name()} with other buffers; left there"
    if node.is_reduction() or node.is_template() or node.is_extern():
        return "not a pointwise kernel"
    return None


class PieceGroupKernel(GroupKernelNode):
    """The progressions of one cat as one combo kernel (Inductor's), with a block size chosen by body weight."""

    def __init__(self, members: list[Any]) -> None:
        super().__init__(members)
        self.block_size = block_size_for(members)

    def codegen(self, backend: Any, stock: Any) -> None:
        from torch._inductor.codegen.triton_combo_kernel import ComboKernel

        block_size = self.block_size

        def with_block_size(stock_init: Any) -> Any:
            def init(kernel: ComboKernel, *args: Any, **kwargs: Any) -> None:
                stock_init(kernel, *args, **kwargs)
                kernel.block_size_1d = block_size

            return init

        with PATCHES.scoped(ComboKernel, "__init__", with_block_size):
            stock(backend, self)


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

    pass_name = "splitcat"

    def rewrite(self, nodes: list[Any]) -> list[Any]:
        from torch._inductor.codegen.cuda_combined_scheduling import CUDACombinedScheduling
        from torch._inductor.codegen.simd import SIMDScheduling

        state = graph_state()
        groups, state.piece_groups = state.piece_groups, []
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
                why = None if node is None else member_refusal(node)
                if node is None:
                    record(self.name, False, [name], "no scheduler node writes it (removed)")
                elif why is not None:
                    record(self.name, False, [name], why)
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
