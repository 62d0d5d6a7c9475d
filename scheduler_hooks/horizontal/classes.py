"""The merged node of several classes (:class:`ClassesGroup`): independent kernels of different bodies, pointwise
ones (over their flat index or in their 2-d tiles) or row reductions (persistent or looped), each class a
member-table group of one body, generated as one kernel that sends each block to its class (:mod:`.dispatch`)."""

from __future__ import annotations

from typing import Any

from torch.utils._ordered_set import OrderedSet

from optimus_ir.drivers import raise_where_strict
from optimus_ir.records import record
from optimus_ir.scheduler_hooks.horizontal import dispatch
from optimus_ir.scheduler_hooks.horizontal.group import (
    GroupKernel,
    MemberTableGroup,
    TableGroup,
    after_call,
    before_call,
    codegen_member_table_group,
    codegen_one_by_one,
    group_kernel,
)
from optimus_ir.scheduler_hooks.horizontal.kernel import ClassPlacement
from optimus_ir.scheduler_hooks.horizontal.tuning import RULE, tiled_class_numel


class ClassesGroup(TableGroup):
    """Classes of independent kernels, one body each, generated as one kernel: pointwise classes, persistent row
    reductions (DLRM's dense features: a layer norm after a log, a tanh, a sigmoid or a clip, by feature), or looped
    row reductions (sums and maxima of rows too long for one block).

    Before (after the member-table merges; ``[tanh(x) for x in xs] + [sigmoid(y) for y in ys] + [gelu(z)]``)::

        MemberTableGroup([tanh of x0, ..., x15])       # kernel 0
        MemberTableGroup([sigmoid of y0, ..., y7])     # kernel 1
        SchedulerNode(gelu of z)                        # kernel 2

    After::

        ClassesGroup([tanh ×16, sigmoid ×8, gelu ×1])  # one launch: class by block, member by the class's table
    """

    def __init__(self, classes: list[MemberTableGroup], tiled: list[bool]) -> None:
        self.members = [member for group in classes for member in group.members]
        super().__init__(self.members)
        self.classes = classes
        #: by class: whether it keeps its 2-d tiles (a block one tile), else it runs over its flat index
        self.tiled = tiled
        self.reduction = classes[0].reduction
        self.scheduler.name_to_fused_node.update({n: self for m in self.members for n in m.get_operation_names()})
        self.one_allocations = {
            (k, slot): allocation
            for k, group in enumerate(classes)
            for slot, allocation in group.one_allocations.items()
        }
        self.takes_over = {output: saved for group in classes for output, saved in group.takes_over.items()}

    @property
    def symbolic(self) -> bool:
        """Whether a class has members of symbolic sizes: where the classes after it start is known per call only
        (:mod:`.dispatch`)."""
        return any(s.numel_expr is not None for group in self.classes for s in group.structures)

    def table_groups(self) -> list[MemberTableGroup]:
        return self.classes

    def read_through_tables(self) -> OrderedSet[str]:
        return OrderedSet(name for group in self.classes for name in group.read_through_tables())

    def codegen(self, backend: Any, stock: Any) -> None:
        codegen_classes(backend, self)

    def describe(self) -> str:
        sizes = [len(group.members) for group in self.classes]
        kind = "row reduction" if self.reduction else "pointwise"
        tables = sum(not group.direct for group in self.classes)
        given = f"{tables} with a member table" if tables else "tensors as arguments"
        symbolic = ", symbolic sizes, starts per call" if self.symbolic else ""
        return f"{kind}, classes of {min(sizes)}..{max(sizes)} members{symbolic}, {given}"


def codegen_classes(backend: Any, group: ClassesGroup) -> None:
    """Emit one kernel for the classes of ``group``: one per kind of kernel Inductor made of them
    (:func:`.dispatch.kind_of`: planning asked each node, and a class's kernel may still be of another kind; a kind
    of one class is that class's member-table kernel). A class whose kernel cannot
    be made gets its members' stock kernels (each error goes to the dump), and so does every class of a dispatch
    kernel that cannot be made."""
    placement = ClassPlacement.of(
        [
            [tiled_class_numel(c.tiles) if tiled and c.tiles else s.numel for s in c.structures]
            for c, tiled in zip(group.classes, group.tiled, strict=True)
        ],
        group.reduction, max(s.rnumel for c in group.classes for s in c.structures),
        symbolic=group.symbolic,
    )
    by_kind: dict[str, list[tuple[MemberTableGroup, GroupKernel]]] = {}
    apart: list[tuple[MemberTableGroup, Exception]] = []
    for c, tiled in zip(group.classes, group.tiled, strict=True):
        try:
            made = group_kernel(backend, c, placement, tiled)
            by_kind.setdefault(dispatch.kind_of(made.kernel), []).append((c, made))
        except Exception as error:  # a rule must never fail a compile
            raise_where_strict(error)
            apart.append((c, error))
    if len(by_kind) > 1:
        record(
            RULE, False, [m.get_name() for m in group.members],
            f"made as {len(by_kind)} kernels, one per kind of Inductor's kernels of its classes ({', '.join(by_kind)})",
        )
    kernels, alone = [], [made[0][0] for made in by_kind.values() if len(made) == 1]
    for kind, made in [(kind, made) for kind, made in by_kind.items() if len(made) > 1]:
        of_kind = [m.kernel for _, m in made]
        try:
            meta = dispatch.triton_meta(of_kind, kind), dispatch.inductor_meta(of_kind)
            source = dispatch.dispatch_source(of_kind, kind, [m.source for _, m in made], meta)
            kernels.append((made, kind, meta, source))
        except Exception as error:  # a rule must never fail a compile
            raise_where_strict(error)
            apart += [(c, error) for c, _ in made]
    _codegen_apart(backend, group, apart, alone)
    for made, kind, meta, source in kernels:
        schedule = [node for _, m in made for node in m.schedule]
        kernel_name = backend.define_kernel(source, schedule, made[0][1].kernel)
        for c, m in made:
            m.kernel.kernel_name = kernel_name
            before_call(kernel_name, c, m)
        backend.codegen_comment(schedule, kernel_name)
        dispatch.launch(kernel_name, [m.kernel for _, m in made], kind, meta)
        for _, m in made:
            after_call(m)
    backend.free_buffers_in_scheduler()


def _codegen_apart(
    backend: Any, group: ClassesGroup, apart: list[tuple[MemberTableGroup, Exception]], alone: list[MemberTableGroup]
) -> None:
    """Stock kernels for the members of the classes in ``apart``, and a member-table kernel for each class ``alone``
    of its kind, ahead of the group's kernels: the buffers the group is the last to read are freed after those, not
    after these."""
    scheduler = group.scheduler
    held = scheduler.buffer_names_to_free & group.last_usage
    scheduler.buffer_names_to_free -= held
    for c, error in apart:
        codegen_one_by_one(backend, c.members, set(), error)
    for c in alone:
        codegen_member_table_group(backend, c)
    scheduler.buffer_names_to_free |= held
