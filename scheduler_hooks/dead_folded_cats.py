"""Before the scheduler is built: cats written through folds that nothing reads any more are removed."""

from __future__ import annotations

from typing import Any

from optimus_ir.graph_state import current as graph_state
from optimus_ir.records import record
from optimus_ir.rule import SchedulerRule, Stage


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

    pass_name = "splitcat"
    stage = Stage.PRE_SCHEDULER

    def rewrite(self, nodes: list[Any]) -> list[Any]:
        from torch._inductor import ir
        from torch._inductor.virtualized import V

        present = {op.get_operation_name() for op in nodes}
        kept = set(V.graph.get_output_names()) | set(V.graph.mutated_buffers)
        writers: dict[str, tuple[str, ...]] = {}  # cat → the operations that write it (its ConcatKernel, pieces)
        buffers: dict[str, set[str]] = {}  # cat → its buffer and its pieces' buffers
        for name in graph_state().written_by_folds:
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
