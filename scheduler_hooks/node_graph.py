"""Dependency questions about scheduler nodes, and the node type of a group, shared by the scheduler rules that
group nodes into one kernel."""

from __future__ import annotations

from typing import Any

from torch._inductor.scheduler import ForeachKernelSchedulerNode


class GroupKernelNode(ForeachKernelSchedulerNode):
    """A group of scheduler nodes one of our rules made into one kernel; it generates its kernel itself.

    Inductor generates a ``ForeachKernelSchedulerNode`` with ``SIMDScheduling.codegen_combo_kernel``; while
    optimus_ir is enabled that method hands nodes of this type to their :meth:`codegen` (other combo kernels: stock;
    :mod:`optimus_ir.patches`).
    """

    def __init__(self, members: list[Any]) -> None:
        super().__init__(members[0].scheduler, members, use_custom_partition_algo=False, enable_autotune=False)

    def codegen(self, backend: Any, stock: Any) -> None:
        """Emit the kernel and its call; ``stock`` is Inductor's ``codegen_combo_kernel``."""
        raise NotImplementedError


def independent(node: Any, others: list[Any]) -> bool:
    """No path between ``node`` and any of ``others`` in the dependency graph.

    ``ancestors`` holds operation names (``op3``), and a fused node has several, so compare those, not node names.
    """
    own = set(node.get_operation_names())
    return all(
        not (own & other.ancestors) and not (set(other.get_operation_names()) & node.ancestors) for other in others
    )


class IndependentSet:
    """Nodes with no path between any two, grown one by one: :meth:`admits` answers :func:`independent` for all
    members at once from the union of their operation names and of their ancestors (linear in the members over a
    whole partition, where asking member by member is quadratic)."""

    def __init__(self) -> None:
        self.members: list[Any] = []
        self._operations: set[str] = set()
        self._ancestors: set[str] = set()

    def admits(self, node: Any) -> bool:
        return self._ancestors.isdisjoint(node.get_operation_names()) and self._operations.isdisjoint(node.ancestors)

    def add(self, node: Any) -> None:
        self.members.append(node)
        self._operations.update(node.get_operation_names())
        self._ancestors.update(node.ancestors)


def replace_with_group(nodes: list[Any], members: list[Any], group: Any) -> list[Any] | None:
    """``nodes`` with ``members`` replaced by ``group``, in a topological order; None if no order exists (a node
    outside the group would have to run both after one member and before another).

    The order is the current one (Inductor's, already arranged for peak memory) with the group where its last
    member was; only what must move (the group's dependencies) moves, ahead of it."""
    scheduler = group.scheduler
    last = max(nodes.index(m) for m in members)
    kept = [group if i == last else n for i, n in enumerate(nodes) if n not in members or i == last]
    ordered = scheduler.topological_sort_schedule(kept)
    written_by = {name: i for i, node in enumerate(ordered) for name in node.get_buffer_names()}
    for i, node in enumerate(ordered):
        if any(written_by.get(dep.name, -1) > i for dep in node.unmet_dependencies):
            return None
    return ordered


def drop_nodes(nodes: list[Any], dead: set[str]) -> list[Any]:
    """``nodes`` without the nodes named in ``dead``, which also stop being users of the buffers they read."""
    if not dead:
        return nodes
    scheduler = nodes[0].scheduler
    for node in nodes:
        if node.get_name() in dead:
            for read in node.read_writes.reads:
                if read.name in scheduler.name_to_buf:
                    buf = scheduler.name_to_buf[read.name]
                    buf.users = [u for u in buf.users if u.get_name() not in dead]
    return [node for node in nodes if node.get_name() not in dead]
