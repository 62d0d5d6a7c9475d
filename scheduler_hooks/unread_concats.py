"""Before fusion: a ConcatKernel that nothing reads any more, once its slices read its inputs, is removed."""

from __future__ import annotations

from typing import Any

from optimus_ir.graph_state import current as graph_state
from optimus_ir.records import record
from optimus_ir.rule import SchedulerRule, Stage
from optimus_ir.scheduler_hooks.node_graph import drop_nodes


class UnreadConcatElimination(SchedulerRule):
    """A ConcatKernel whose slices now read its inputs (the rules above) and that nothing reads any more → removed,
    with the copies that filled it.

    Inductor's dead-code elimination keeps a ConcatKernel: it counts as a user of its own buffer. Before fusion
    (``torch.cat([a, b, c], 1).split([4, 4, 8, 8], 1)``, each piece read from a or b or c directly)::

        SchedulerNode(buf0: copy a into buf3[:, 0:8])          # or one foreach kernel of the copies on a GPU
        SchedulerNode(buf1: copy b into buf3[:, 8:16])
        SchedulerNode(buf2: copy c into buf3[:, 16:24])
        NopKernelSchedulerNode(buf3 = ConcatKernel([buf0, buf1, buf2]))     # no reader of buf3 left

    After: the four nodes are gone (their buffers added to ``V.graph.removed_buffers``). A cat that is returned,
    still read, or whose inputs are read by something else (an input computed straight into the cat) is kept, and
    noted for the stock guard (``GraphState.may_raise_peak``): the readers of its pieces no longer wait for the
    whole cat, and a schedule that runs them early can hold several such cats at once.
    """

    pass_name = "splitcat"
    stage = Stage.PRE_FUSION

    def rewrite(self, nodes: list[Any]) -> list[Any]:
        from torch._inductor.virtualized import V

        state = graph_state()
        names, state.redirected_cats = state.redirected_cats, set()
        if not names or not nodes:
            return nodes
        scheduler = nodes[0].scheduler
        outputs = set(V.graph.get_output_names())
        present = {node.get_name() for node in nodes}
        dead: set[str] = set()  # scheduler node names to drop
        for name in sorted(names):
            concat = scheduler.name_to_buf.get(name)
            if concat is None or name in V.graph.removed_buffers:
                continue
            removable = self._removable(scheduler, concat, outputs, present)
            if isinstance(removable, str):
                record(self.name, False, [name], removable)
                state.note_peak_raise(self.name, name)
                continue
            holders, removed_ops, members = removable
            dead.update(holders)
            V.graph.removed_buffers.update([name, *members])
            V.graph.removed_operations.update(removed_ops)
            record(self.name, True, [name], f"unread after its slices read its inputs; removed {sorted(removed_ops)}")
        return drop_nodes(nodes, dead)

    @staticmethod
    def _removable(
        scheduler: Any, concat: Any, outputs: set[str], present: set[str]
    ) -> tuple[set[str], set[str], list[str]] | str:
        """The scheduler nodes, operations and member buffers that go with ``concat``, or why it stays."""
        from torch._inductor.scheduler import ForeachKernelSchedulerNode

        concat_op = concat.defining_op.get_name()
        if concat.get_name() in outputs:
            return "returned from the graph"
        readers = sorted({u.get_name() for u in concat.users if not u.is_weak} - {concat_op})
        if readers:
            return f"still read by {readers}"
        members = [scheduler.name_to_buf[dep.name] for dep in concat.defining_op.read_writes.reads
                   if dep.name in scheduler.name_to_buf]
        busy = [m.get_name() for m in members
                if m.get_name() in outputs or any(not u.is_weak and u.get_name() != concat_op for u in m.users)]
        if busy:
            return f"inputs {busy} are read by other nodes (computed into the cat)"
        removed_ops = {concat_op} | {m.defining_op.get_name() for m in members}
        holders = {scheduler.name_to_fused_node.get(op, scheduler.name_to_node.get(op)) for op in removed_ops}
        if any(h is None or h.get_name() not in present for h in holders):
            return "a writer of the cat is not among the scheduler's nodes"
        partial = [h.get_name() for h in holders if isinstance(h, ForeachKernelSchedulerNode)
                   and not set(h.get_operation_names()) <= removed_ops]
        if partial:
            return f"its copies are grouped with other work in {partial}"
        if any(h.has_side_effects() for h in holders):
            return "a writer of the cat has side effects"
        return {h.get_name() for h in holders}, removed_ops, [m.get_name() for m in members]
