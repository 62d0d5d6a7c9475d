"""The merged node (:class:`MemberTableGroup`) and its codegen: one kernel for every member, its allocations and its
wrapper lines, or each member's stock kernel where that kernel cannot be made."""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import math
import re
from collections.abc import Iterator
from typing import Any

import sympy
from torch._inductor import config
from torch._inductor.codegen.simd_kernel_features import SIMDKernelFeatures
from torch._inductor.virtualized import V
from torch.utils._ordered_set import OrderedSet

from optimus_ir import index_math, segment_sum
from optimus_ir.drivers import raise_where_strict
from optimus_ir.loop_body import replay
from optimus_ir.records import record
from optimus_ir.scheduler_hooks.alignment_in_tables import check_alignment_again
from optimus_ir.scheduler_hooks.horizontal import allocation
from optimus_ir.scheduler_hooks.horizontal.allocation import OneAllocation, RegionsOfAllocations, one_allocations
from optimus_ir.scheduler_hooks.horizontal.kernel import ClassPlacement, MemberTableKernel
from optimus_ir.scheduler_hooks.horizontal.structure import FLAT_INDEX, Structure, body_blocks, indirect_indexing, tiles_key
from optimus_ir.scheduler_hooks.horizontal.tuning import MAX_DIRECT_MEMBERS, RULE
from optimus_ir.scheduler_hooks.node_graph import GroupKernelNode

log = logging.getLogger("optimus_ir")

class TableGroup(GroupKernelNode):
    """A merged node whose kernel reads its members' buffers through member tables: what the memory model and the
    input checks ask of one."""

    #: the members' buffers made as one allocation (for the memory estimates)
    one_allocations: dict[Any, OneAllocation]
    #: by output: the saved tensor it is written over where the call alone holds that tensor
    takes_over: dict[str, str]

    def read_through_tables(self) -> OrderedSet[str]:
        """The buffers its kernel reads through a member table (:class:`~optimus_ir.runtime.MemberTable`)."""
        raise NotImplementedError

    def table_groups(self) -> list[MemberTableGroup]:
        """The groups of structurally identical members its kernel runs, each by a table of its own."""
        raise NotImplementedError


class MemberTableGroup(TableGroup):
    """Structurally identical, independent nodes, generated as one shared-body kernel (see the rule above)."""

    def __init__(self, members: list[Any], structures: list[Structure], reduction: bool) -> None:
        super().__init__(members)
        self.members, self.structures, self.reduction = members, structures, reduction
        self.scheduler.name_to_fused_node.update({n: self for m in members for n in m.get_operation_names()})
        self.one_allocations = one_allocations(members, structures)  # by slot
        self.takes_over = allocation.saved_tensors_to_take_over(members, self.one_allocations)
        #: the 2-d tiles of Inductor's kernel where every member has the same ones (and the same divisors): the
        #: kernel keeps them, its members one after another along y (:class:`MemberTableKernel`)
        self.tiles = None if reduction else common_tiles(members, structures)

    @property
    def direct(self) -> bool:
        """Its kernel takes its members' tensors as arguments, not a member table (:data:`.tuning.MAX_DIRECT_MEMBERS`):
        static bounds of loaded indices; for several members, static row lengths and no buffers made as one
        allocation (a table takes those as one tensor). Symbolic sizes are size arguments, as Inductor's kernel
        takes them (``MemberTableKernel.member_sizes``)."""
        if not index_math.is_static([b for s in self.structures for b in s.indirect_sizes]):  # known per call
            return False
        if len(self.members) == 1:
            return True
        if len(self.members) > MAX_DIRECT_MEMBERS:
            return False
        return index_math.is_static([s.rnumel_expr or 0 for s in self.structures]) and not self.one_allocations

    def table_groups(self) -> list[MemberTableGroup]:
        return [self]

    def read_through_tables(self) -> OrderedSet[str]:
        if self.direct:
            return OrderedSet()
        return OrderedSet(dep.name for member in self.members for dep in member.read_writes.reads)

    def codegen(self, backend: Any, stock: Any) -> None:
        codegen_member_table_group(backend, self)

    def describe(self) -> str:
        numels = sorted({s.numel for s in self.structures})
        sizes = f"ragged: {len(numels)} sizes" if len(numels) > 1 else f"{numels[0]} each"
        if self.tiles is not None:
            sizes = f"{self.tiles['y']} × {self.tiles['x']} in 2-d tiles each"
        if self.structures[0].numel_expr is not None:
            sizes = "symbolic sizes, starts per call"
        divisors = len(varying_divisors(self.structures))
        divisors_text = f", {divisors} divisor(s) per member" if divisors else ""
        symbolic_lengths = {s.rnumel_expr for s in self.structures if s.rnumel_expr is not None}
        lengths = sorted({s.rnumel for s in self.structures})
        if len(symbolic_lengths) > 1:
            divisors_text += f", rows of {len(symbolic_lengths)} symbolic lengths"
        elif len(lengths) > 1:
            divisors_text += f", rows of {len(lengths)} lengths ({lengths[0]}..{lengths[-1]})"
        given = "tensors as arguments" if self.direct else "member table"
        return f"{'row reduction' if self.reduction else 'pointwise'}, {sizes}{divisors_text}, {given}"


@dataclasses.dataclass
class GroupKernel:
    """A group's kernel before it is defined: the kernel, its source, its node schedule, and the members and their
    structures in the kernel's order (largest first)."""

    kernel: MemberTableKernel
    source: str
    schedule: list[Any]
    members: list[Any]
    structures: list[Structure]


def codegen_member_table_group(backend: Any, group: MemberTableGroup) -> None:
    """Emit one kernel for the group: Inductor's kernel for its largest member, made to serve every member.

    If making that kernel's source fails, each member gets its stock kernel instead (the error goes to the dump).
    """
    try:
        made = group_kernel(backend, group)
    except Exception as error:  # a rule must never fail a compile
        raise_where_strict(error)
        codegen_one_by_one(backend, group.members, set(group.last_usage), error)
        return
    kernel_name = backend.define_kernel(made.source, made.schedule, made.kernel)
    made.kernel.kernel_name = kernel_name
    before_call(kernel_name, group, made)
    backend.codegen_comment(made.schedule, kernel_name)
    made.kernel.call_kernel(kernel_name)
    after_call(made)
    backend.free_buffers_in_scheduler()


def group_kernel(
    backend: Any, group: MemberTableGroup, placement: ClassPlacement | None = None, tiled: bool = False
) -> GroupKernel:
    """Inductor's kernel for the group's largest member, made to serve every member (placed by ``placement`` where
    the group is one class of a kernel of several bodies, in its 2-d tiles where ``tiled``)."""
    order = sorted(range(len(group.members)), key=lambda i: (-group.structures[i].numel, -group.structures[i].rnumel))
    members = [group.members[i] for i in order]
    structures = [group.structures[i] for i in order]
    rep = members[0]
    nodes = list(rep.get_nodes())
    _, (numel, rnumel) = rep.group
    divisors = varying_divisors(structures)
    sizes = varying_indirect_sizes(structures)
    symbolic = structures[0].numel_expr is not None
    schedule = backend.generate_node_schedule(nodes, numel, rnumel)
    tiling = backend.select_tiling(schedule, numel, rnumel)
    if tiled and group.tiles is None:
        raise NotImplementedError("a class in 2-d tiles whose members' tiles differ")
    tiles = group.tiles if placement is None or tiled else None
    # else a pointwise member Inductor tiles in 2-d runs over its flat index (planning weighed what that costs)
    flat = not group.reduction and not tiles and any(p not in ("x", "r0_") and n != 1 for p, n in tiling.items())
    if flat:
        tiling = backend.create_tiling([numel], [rnumel])
    if tiles and sizes:
        raise NotImplementedError("members in 2-d tiles whose loaded indices have other bounds")
    with (
        _over_flat_index(rep, structures[0], divisors, always=flat or (symbolic and not group.reduction)),
        _indirect_sizes_as_symbols(rep, sizes),
    ):
        kernel = MemberTableKernel(
            tiling, features=SIMDKernelFeatures(schedule, numel, rnumel), structures=structures,
            reduction=group.reduction, call_site=rep.get_first_name(), member_values={**divisors, **sizes},
            placement=placement, tiles=tiles, direct=group.direct,
        )
        with config.patch(inplace_buffers=False):  # each member writes its own outputs
            backend.codegen_node_schedule_with_kernel(schedule, kernel)
        with V.set_kernel_handler(kernel):
            source = kernel.codegen_kernel()
    _check_shared_size_symbols(kernel, structures[0])
    if kernel.persistent_reduction and kernel.rnumels and any(s.rnumel_expr is not None for s in structures):
        # its one block of a row fits the first member's hint, not the longest row of a call
        raise NotImplementedError("a persistent reduction over rows of symbolic lengths")
    kernel.check_slots()
    return GroupKernel(kernel, source, schedule, members, structures)


def before_call(kernel_name: str, group: MemberTableGroup, made: GroupKernel) -> None:
    """Once the kernel is defined: the wrapper's allocations of the group's buffers, and its members marked run."""
    _allocate_together(kernel_name, group, made.members, made.structures)
    _write_over_saved_tensors(kernel_name, group)
    if not group.direct:
        regions = RegionsOfAllocations.of(V.graph.wrapper_code)
        for views in allocation.views_given_as_buffer(made.members, made.structures):
            regions.add_views(views)
    with V.set_kernel_handler(made.kernel):
        for member in made.members:
            for node in member.get_nodes():
                node.mark_run()


def after_call(made: GroupKernel) -> None:
    """What the kernel found it needs not write for its member (buffers used only inside it), for every member."""
    kernel, structures = made.kernel, made.structures
    for structure in structures[1:]:
        rename = dict(zip(structures[0].slots, structure.slots))
        V.graph.removed_buffers |= {rename.get(name, name) for name in kernel.removed_buffers}
    V.graph.removed_buffers |= kernel.removed_buffers


def _check_shared_size_symbols(kernel: Any, structure: Structure) -> None:
    """Raise unless every size symbol the kernel takes as an argument is one all members use: one that their
    (equal) structure names. A member's own sizes (its row count, its numel) come from the table instead, or, in a
    ``direct`` kernel, from the size arguments made for them (``MemberTableKernel.member_sizes``)."""
    shared = set(re.findall(r"\b[a-z]+\d+\b", str(structure.key)))
    given = {name for names in kernel.member_sizes or () for name in names}
    own = {symbol.name for expr, name in kernel.args.sizevars.items() if name not in given
           for symbol in expr.free_symbols} - shared
    if own:
        raise NotImplementedError(f"the kernel reads sizes of one member only: {sorted(own)}")


def common_tiles(members: list[Any], structures: list[Structure]) -> dict[str, int] | None:
    """The 2-d tiles of the members' kernels where every member has the same :func:`.structure.tiles_key` (one
    kernel in those tiles, its indices unchanged, serves them all), else None."""
    key = tiles_key(members[0], structures[0])
    if key is None or any(tiles_key(m, s) != key for m, s in zip(members[1:], structures[1:], strict=True)):
        return None
    return dict(key[0])


def varying_divisors(structures: list[Structure]) -> dict[sympy.Symbol, list[int]]:
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


def varying_indirect_sizes(structures: list[Structure]) -> dict[sympy.Symbol, list[int]]:
    """The bounds of loaded indices (``Structure.indirect_sizes``) that differ between members: symbol → the
    value of each member, in order."""
    varying = {}
    for i in range(len(structures[0].indirect_sizes)):
        values = [s.indirect_sizes[i] for s in structures]
        if len(set(values)) > 1:
            varying[index_math.indirect_size_symbol(i)] = values
    return varying


@contextlib.contextmanager
def _indirect_sizes_as_symbols(node: Any, sizes: dict[sympy.Symbol, list[int]]) -> Iterator[None]:
    """Within the block, the node's loaded indices are checked against (and wrapped by) the symbols of ``sizes``,
    which the kernel's prologue reads from the member table, not by the representative's numbers (in the order of
    ``structure.member_bounds``).

    Before: ``set_indirect0`` calls ``ops.indirect_indexing(tmp, 1000)``; ``segment_sum(..., ('arg2_1', 0, 8192),
    ('arg3_1', 1000, 64, 0), ...)``. After: ``ops.indirect_indexing(tmp, irows0)``; ``segment_sum(..., ('arg2_1', 0,
    irows2), ('arg3_1', irows1, 64, 0), ...)`` (where the ids' counts differ too).
    """
    saved_shims, saved_args = [], []
    try:
        position = 0
        for snode in node.get_nodes() if sizes else ():
            body = snode._body
            for var, _, flags, in_table in indirect_indexing(body):
                if not in_table:
                    continue
                symbol, position = index_math.indirect_size_symbol(position), position + 1
                if symbol in sizes:
                    name = f"set_{var}"
                    saved_shims.append((body.submodules, name, body.submodules[name]))
                    body.submodules[name] = body.bind_set_indirect_shim(var, symbol, *flags)
            for call, bounds in [call for block in body_blocks(body) for call in segment_sum.member_bounds(block)]:
                symbols = [index_math.indirect_size_symbol(position + i) for i in range(len(bounds))]
                position += len(bounds)
                if any(symbol in sizes for symbol in symbols):
                    saved_args.append((call, call.args))
                    call.args = segment_sum.with_bounds(
                        call, *(symbol if symbol in sizes else n for symbol, n in zip(symbols, bounds))
                    )
        yield
    finally:
        for submodules, name, shim in saved_shims:
            submodules[name] = shim
        for call, args in saved_args:
            call.args = args


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

    fixed = {index_math.divisor_symbol(i): sympy.Integer(value) for i, value in enumerate(structure.divisors)}
    for symbol in divisors:
        del fixed[symbol]
    numel = structure.numel if structure.numel_expr is None else structure.numel_expr
    # a body that loads an index was traced with its own divisors (no abstract ones): its flat indices are its own
    flat_indices = structure.flat_indices or [
        {name: index_math.flatten_loops(expr, snode._body.var_ranges, FLAT_INDEX)
         for name, expr in snode._body.indexing_exprs.items()}
        for snode in node.get_nodes()
    ]
    saved = []
    try:
        for snode, indices in zip(node.get_nodes(), flat_indices, strict=True):
            (variables,), ranges = dependencies.index_vars_no_squeeze([numel], prefix="p")
            flat = {name: expr.xreplace({**fixed, FLAT_INDEX: variables[0]}) for name, expr in indices.items()}
            body = LoopBody(
                lambda *_, old=snode._body, flat=flat: replay(old, flat), [variables, []], ranges, variables, []
            )
            saved.append((snode, snode._body, snode._sizes))
            snode._body, snode._sizes = body, ([numel], [])
        yield
    finally:
        for snode, body, sizes in saved:
            snode._body, snode._sizes = body, sizes


def _allocate_together(
    kernel_name: str, group: MemberTableGroup, members: list[Any], structures: list[Structure]
) -> None:
    """Allocate the members' buffers that are one allocation (:func:`one_allocations`, and now that every group is
    merged, :func:`.allocation.by_merged_reader`), as regions of it (:class:`RegionsOfAllocations`)."""
    wrapper = V.graph.wrapper_code
    regions = RegionsOfAllocations.of(wrapper)
    allocations: dict[Any, OneAllocation] = one_allocations(members, structures)
    taken = OrderedSet(name for whole in allocations.values() for name in whole.names)
    allocations.update(allocation.by_merged_reader(members, structures, TableGroup, taken))
    every_region = OrderedSet(name for whole in allocations.values() for name in whole.names)
    for key, whole in allocations.items():
        part = "_".join(map(str, key)) if isinstance(key, tuple) else key  # (slot, part of its members)
        storage = f"{kernel_name}_{members[0].get_first_name()}_out{part}"  # a kernel may serve several groups
        stride = [math.prod(whole.shape[i + 1 :]) for i in range(len(whole.shape))]
        wrapper.writeline(wrapper.make_allocation(storage, whole.device, whole.dtype, whole.shape, stride))
        if whole.padding is not None:
            function, arguments = "tensors_of_padded_rows", f"{whole.rows!r}, {whole.padding!r}"
        elif whole.rows is not None:
            function, arguments = "tensors_of", repr(whole.rows)
        else:
            function, arguments = "tensors_of_each_row", repr(whole.region)
            if whole.region_stride is not None:
                arguments += f", {whole.region_stride!r}"
        regions.add(
            storage, whole, function, f"{', '.join(whole.names)}, = {function}({storage}, {arguments})",
            as_tensors=not _read_only_by_member_tables(group.scheduler, whole.names, every_region),
        )


def _write_over_saved_tensors(kernel_name: str, group: MemberTableGroup) -> None:
    """The wrapper's lines that give each output of ``group.takes_over`` its saved tensor's storage where the call
    alone holds that tensor, and an allocation of its own where not (:func:`saved_tensors_to_take_over`)."""
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
        RULE, True, list(group.takes_over),
        f"{len(group.takes_over)} output(s) written over the saved tensor each reads, where the call alone holds it "
        "(allocated where not)",
    )


def _read_only_by_member_tables(scheduler: Any, names: tuple[str, ...], regions: OrderedSet[str]) -> bool:
    """Whether every reader of the regions ``names`` is a merged kernel that reads, in each slot that holds one of
    them, only ``regions`` (of this group's allocations: the partial sums of a layer norm's weight and bias, one
    allocation each, alternate in the slot of the merged second stage) and writes none (its table can then be given
    the allocations, see :meth:`RegionsOfAllocations.runs`), and none of them is a graph output."""
    if set(names) & set(V.graph.get_output_names()):
        return False
    for name in names:
        for user in scheduler.name_to_buf[name].users:
            if user.is_weak:
                continue
            node = scheduler.name_to_fused_node.get(user.get_name())
            if not isinstance(node, TableGroup):
                return False
            for group in node.table_groups():
                if any(name in {dep.name for dep in member.read_writes.writes} for member in group.members):
                    return False
                for slot in range(len(group.structures[0].slots)):
                    in_slot = {structure.slots[slot] for structure in group.structures}
                    if name in in_slot and not in_slot <= regions:
                        return False
    return True


def codegen_one_by_one(backend: Any, members: list[Any], last_usage: set[str], error: Exception) -> None:
    """Stock kernels for ``members``, in order, each freeing the buffers of ``last_usage`` (those their group is the
    last to read) that it is the last to read: where making their kernel failed with ``error`` (recorded for the
    dump; logged as a warning unless it is a ``NotImplementedError``, a case the kernel says it cannot serve)."""
    if isinstance(error, NotImplementedError):  # a case the kernel says it cannot serve: a reason, not a defect
        record(RULE, False, [m.get_name() for m in members], f"not made as one kernel ({error}): stock kernels")
    else:
        log.warning("optimus_ir: member-table kernel failed; stock kernels instead", exc_info=error)
        record(RULE, False, [m.get_name() for m in members], f"internal error in codegen {error!r}; stock kernels")
    scheduler = members[0].scheduler
    used = set().union(*(m.used_buffer_names() for m in members))
    RegionsOfAllocations.of(V.graph.wrapper_code).make_tensors(used)
    check_alignment_again(used)
    scheduler.buffer_names_to_free -= last_usage
    for i, member in enumerate(members):
        later = set().union(*(m.used_or_aliased_buffer_names() for m in members[i + 1 :]))
        scheduler.buffer_names_to_free |= (last_usage & member.used_or_aliased_buffer_names()) - later
        backend.codegen_node(member)
