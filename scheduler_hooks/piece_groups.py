"""Scheduler-time merge of the per-progression kernels of one cat into one kernel with block-level dispatch."""

from __future__ import annotations

from typing import Any

from optimus_ir.registry import SchedulerRule, record, register
from optimus_ir.scheduler_hooks.node_graph import drop_nodes, independent, replace_with_group


@register
class PieceGroupToComboKernel(SchedulerRule):
    """The progressions of one rewritten cat (see ``SplitCatToPointwise``) → one kernel, dispatching by block.

    Before (after Inductor's fusion; ``cat([tanh(x0), sigmoid(x1), tanh(x2), sigmoid(x3), ...])``)::

        SchedulerNode(buf0: tanh of the even pieces, writes cat viewed as [B, N/2, 64] at offset 0)
        SchedulerNode(buf1: sigmoid of the odd pieces, writes cat viewed as [B, N/2, 64] at offset 64)

    After::

        ForeachKernelSchedulerNode([buf0, buf1])      # one kernel: `if pid < n0: tanh ... elif pid < n1: sigmoid ...`

    Each branch is chosen once per block, so per-element work does not depend on the number of progressions.
    Members that Inductor fused with a neighbour, or that depend on each other, are left out of the group (each
    decision in the dump); a group of fewer than two nodes is left alone.
    """

    name = "PieceGroupToComboKernel"
    pass_name = "splitcat"

    def rewrite(self, nodes: list[Any]) -> list[Any]:
        from torch._inductor.codegen.cuda_combined_scheduling import CUDACombinedScheduling
        from torch._inductor.codegen.simd import SIMDScheduling
        from torch._inductor.scheduler import ForeachKernelSchedulerNode
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
            merged = ForeachKernelSchedulerNode(
                members[0].scheduler, members, use_custom_partition_algo=False, enable_autotune=False
            )
            ordered = replace_with_group(nodes, members, merged)
            if ordered is None:
                record(self.name, False, [m.get_name() for m in members], "no schedule runs them together")
                continue
            merged.scheduler.name_to_fused_node.update({m.get_name(): merged for m in members})
            nodes = ordered
            record(self.name, True, [m.get_name() for m in members], f"{len(members)} kernels → one kernel")
        return nodes


@register
class DeadFoldedCatElimination(SchedulerRule):
    """A cat output written through folds that nothing reads any more → removed, with the kernels that wrote it.

    When a later piece reads a region of such a cat, ``SplitCatToPointwise`` reads the fold's computation instead
    (layers of split → op → cat become one kernel), so the earlier cat often ends up unread. Inductor's dead-code
    elimination keeps it (a ConcatKernel counts as a user of its own buffer). Before fusion::

        SchedulerNode(buf0: tanh, writes buf6[:, 0:4])     # no reader of buf6 left
        SchedulerNode(buf1: relu, writes buf6[:, 4:8])
        NopKernelSchedulerNode(buf6 = ConcatKernel([buf0, buf1]))

    After: the three nodes are gone (their buffers added to ``V.graph.removed_buffers``).
    """

    name = "DeadFoldedCatElimination"
    pass_name = "splitcat"
    stage = "pre_fusion"

    def rewrite(self, nodes: list[Any]) -> list[Any]:
        from torch._inductor.virtualized import V

        from optimus_ir.lowering.split_cat import WRITTEN_BY_FOLDS

        written = WRITTEN_BY_FOLDS.get(V.graph, {})
        if not written:
            return nodes
        scheduler = nodes[0].scheduler
        outputs = set(V.graph.get_output_names())
        dead: set[str] = set()
        for name in written:
            concat = scheduler.name_to_buf.get(name)
            if concat is None or name in outputs:
                continue
            concat_node = concat.defining_op
            if any(user.get_name() != concat_node.get_name() for user in concat.users):
                continue
            members = [scheduler.name_to_buf[dep.name] for dep in concat_node.read_writes.reads]
            if any(user.get_name() != concat_node.get_name() for member in members for user in member.users):
                continue
            removed = [concat_node.get_name()] + [member.defining_op.get_name() for member in members]
            dead.update(removed)
            V.graph.removed_buffers.update([name] + [member.get_name() for member in members])
            V.graph.removed_operations.update(removed)
            record(self.name, True, [name], f"unread after read-through; removed {removed}")
        return drop_nodes(nodes, dead)
