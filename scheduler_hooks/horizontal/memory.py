"""The memory model: the bytes live at the peak of a schedule, as Inductor's wrapper will allocate and free them,
so that a merge is made only where it keeps that peak within the tolerance (``OPTIMUS_IR_PEAK_TOLERANCE``)."""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import operator
from collections.abc import Iterator
from typing import Any

from torch._inductor import config, ir, memory
from torch._inductor.codegen.segmented_tree import SegmentedTree
from torch._inductor.scheduler import SchedulerNode
from torch._inductor.virtualized import V
from torch.utils._ordered_set import OrderedSet

from optimus_ir import graph_state
from optimus_ir.drivers import raise_where_strict
from optimus_ir.patching import PATCHES
from optimus_ir.scheduler_hooks.horizontal import allocation
from optimus_ir.scheduler_hooks.horizontal.allocation import OneAllocation
from optimus_ir.scheduler_hooks.horizontal.buffers import (
    BufferBytes,
    InputKind,
    graph_input_bytes,
    in_blocks,
    kernel_local,
)
from optimus_ir.scheduler_hooks.horizontal.group import TableGroup

log = logging.getLogger("optimus_ir")

@dataclasses.dataclass(frozen=True)
class MemoryEstimate:
    """The estimated peak of a schedule: the most bytes live at any step, an ATen fallback's guessed workspace
    (``fallback_workspace``) counted as one more point of that maximum.

    A backward's incoming gradients (``tangents_*``) are counted two ways: Inductor's planning holds them for the
    whole call (``peak``), but where the caller holds no other reference, as AOTAutograd's contiguous copies of
    them, each is freed after its last reader (``peak_tangents_freed``: a merge that reads them all in one kernel
    keeps them all alive until it has allocated every output, which one kernel per member does not). A merge is
    judged by both (:meth:`within`)."""

    peak: int
    peak_tangents_freed: int

    def within(self, ceiling: MemoryEstimate) -> bool:
        return self.peak <= ceiling.peak and self.peak_tangents_freed <= ceiling.peak_tangents_freed

    def raised_by(self, tolerance: float) -> MemoryEstimate:
        """The ceiling of every merge in a graph whose estimate before any merge is this one: ``1 + tolerance``
        times each peak (a bound on the sum of the merges' rises, not on each one)."""
        return MemoryEstimate(int(self.peak * (1 + tolerance)), int(self.peak_tangents_freed * (1 + tolerance)))

    def versus(self, before: MemoryEstimate, ceiling: MemoryEstimate) -> str:
        if self.peak > ceiling.peak or self.peak_tangents_freed <= ceiling.peak_tangents_freed:
            return f"{before.peak} → {self.peak} bytes (at most {ceiling.peak})"
        return (
            f"{before.peak_tangents_freed} → {self.peak_tangents_freed} bytes where the incoming gradients are freed "
            f"after their last reader (at most {ceiling.peak_tangents_freed})"
        )


def peak_memory(nodes: list[Any], bytes_of: BufferBytes) -> MemoryEstimate:
    """Bytes live at the peak when ``nodes`` run in the order Inductor will run them (its reordering for peak memory
    comes after this pass: tower by tower, say, which a group can prevent): a buffer is allocated by the first node
    that writes it or a view of it (a cat's output, when its first input is written into it) and freed after the
    last reader of it or of its views (graph outputs never); buffers read only inside their own kernel are never
    allocated; an output that Inductor writes in place of an input that dies there takes over its storage, as does
    an output of a merged group written over a saved tensor (:func:`saved_tensors_to_take_over`).
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
    first_write, last_read, storage_of, sizes = _storages(nodes, outputs, bytes_of)
    views: dict[str, list[str]] = {}
    for name, storage in storage_of.items():
        views.setdefault(storage, []).append(name)
    allocs: dict[int, int] = {}
    frees: dict[int, int] = {}
    tangents_live = 0
    tangent_frees: dict[int, int] = {}
    for name in V.graph.graph_inputs:  # a backward's saved tensors: live until their last reader
        counted = graph_input_bytes(name, bytes_of)
        if name not in last_read or counted is None or name in sizes:
            continue
        kind, size = counted
        if kind is InputKind.TANGENT:
            tangents_live += size
            tangent_frees[last_read[name]] = tangent_frees.get(last_read[name], 0) + size
        elif kind is InputKind.FREED:
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
    for step, node in enumerate(nodes):
        live += allocs.get(step, 0)
        workspace = fallback_workspace(node, bytes_of)
        peak = max(peak, live + workspace)
        peak_tangents_freed = max(peak_tangents_freed, live + tangents_live + workspace)
        live -= frees.get(step, 0)
        tangents_live -= tangent_frees.get(step, 0)
    return MemoryEstimate(peak, peak_tangents_freed)


def estimate_for_the_guard(nodes: list[Any]) -> None:
    """The finished schedule's estimate (``GraphState.estimated_peak``), for a graph the stock guard will compare
    with another lowering of it: one a rule that may raise the peak or add launches changed, or one the guard
    lowered again. An estimate that fails leaves None (the guard then keeps the code as it is)."""
    state = graph_state.existing()
    if state is None or not nodes or not (state.peak_wanted or state.may_add_launches or state.may_raise_peak):
        return
    try:
        state.estimated_peak = peak_memory(nodes, BufferBytes())
    except Exception as error:  # the estimate must never fail a compile
        raise_where_strict(error)
        log.warning("optimus_ir: estimating the peak memory of the schedule failed", exc_info=True)


def _storages(
    nodes: list[Any], outputs: OrderedSet[str], bytes_of: BufferBytes
) -> tuple[dict[str, int], dict[str, int], dict[str, str], dict[str, int]]:
    """For :func:`peak_memory`, over ``nodes`` in order: the step that first writes each storage, the step that
    last reads each buffer, the storage each buffer lives in, and each storage's bytes."""
    scheduler = nodes[0].scheduler
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
        counted = graph_input_bytes(name, bytes_of)
        if name in last_read and counted is not None and counted[0] is InputKind.FREED:
            storage_of[name], sizes[name], first_write[name] = name, counted[1], 0
    # and those a merged group's outputs are written over where the call alone holds them
    for node in nodes:
        for name in node.takes_over.values() if isinstance(node, TableGroup) else ():
            storage_of[name], sizes[name], first_write[name] = name, graph_input_bytes(name, bytes_of)[1], 0
    for step, node in enumerate(nodes):
        regions = _regions_of_one_allocation(node)
        takes_over = node.takes_over if isinstance(node, TableGroup) else {}
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
                elif isinstance(layout, ir.NonOwningLayout) and not kernel_local(scheduler, buf, outputs):
                    storage_of[name] = layout.view.data.get_name()
                elif isinstance(layout, ir.MutationLayoutSHOULDREMOVE):
                    # an in-place update (a scatter into its zero fill): the updated buffer's storage, which lives
                    # until the last reader of the update (without this, merging GraphSAGE's fills looked free)
                    real = scheduler.mutation_real_name.get(name, name)
                    if real not in storage_of:
                        continue  # a graph input's update: the caller's
                    storage_of[name] = storage_of[real]
                elif isinstance(layout, ir.Layout) and not isinstance(layout, ir.MutationLayoutSHOULDREMOVE):
                    # in place: also through a buffer only its own kernel reads (layer norm: x → x - mean → out)
                    source = _in_place_source(
                        node, snode, bytes_of.allocated(name, layout), step, last_read, storage_of, sizes, taken,
                        in_place, outputs,
                    )
                    if source is not None:
                        storage_of[name] = storage_of[source]
                        in_place.add(name)
                    elif kernel_local(scheduler, buf, outputs):
                        continue
                    else:
                        storage_of[name] = name
                        sizes[name] = bytes_of.allocated(name, layout)
                else:
                    continue  # no storage (a tuple of outputs, nothing)
                first_write.setdefault(storage_of[name], step)
    return first_write, last_read, storage_of, sizes


def _regions_of_one_allocation(node: Any) -> dict[str, tuple[str, int]]:
    """For a merged group: its buffers that are regions of one allocation (:func:`one_allocations`), each with the
    allocation's name in the estimates and its bytes."""
    if not isinstance(node, TableGroup):
        return {}
    return {
        name: (f"one allocation of {allocation.names[0]}", in_blocks(allocation.nbytes))
        for allocation in node.one_allocations.values()
        for name in allocation.names
    }


@contextlib.contextmanager
def planning_worked_out_once(scheduler: Any) -> Iterator[None]:
    """Inside, Inductor's memory planning reuses what this pass's estimates would make it work out again each time.

    Each estimate is Inductor's reordering for peak memory, whose planning works out every buffer's size (a sympy
    evaluation each) and the graph inputs the schedule may free, over the whole graph. A merge changes which nodes
    run together, never a buffer: the sizes (``memory.compute_size_for_scheduler_buffer``) are worked out once for
    the pass. The freeable inputs depend on the set of nodes only, and both the reordering and
    :func:`_taken_over_by_reuse` ask for those of one set: worked out once per estimate
    (``memory.get_freeable_input_buf``). Inductor's own reordering after the pass works everything out anew."""
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

    with PATCHES.scoped(memory, "compute_size_for_scheduler_buffer", lambda _: compute_size_for_scheduler_buffer), \
            PATCHES.scoped(memory, "get_freeable_input_buf", lambda _: get_freeable_input_buf):
        yield


def live_while_running(
    members: list[Any], allocations: dict[int, OneAllocation], bytes_of: BufferBytes
) -> tuple[int, int]:
    """Bytes that :func:`peak_memory` finds live while one kernel runs ``members``, in any order of the rest: their
    outputs that get storage of their own (those of ``allocations`` one allocation each), and what they read that
    the graph frees (another kernel's output of its own storage, a graph input the wrapper frees), then the
    incoming gradients (``tangents_*``) they read. A lower bound of the estimate after merging them, with no
    estimate: where it is above the ceiling of the merges, the merge would pass it (a backward's pointwise kernels
    that each write 16 MiB, under a peak of 19 MB)."""
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
            or kernel_local(scheduler, buf, outputs)
        ):
            return None
        return layout

    in_one_allocation = {name for allocation in allocations.values() for name in allocation.names}
    no_storage_of_their_own = in_one_allocation | set(allocation.saved_tensors_to_take_over(members, allocations))
    own = sum(in_blocks(allocation.nbytes) for allocation in allocations.values())
    for member in members:
        for snode in member.get_nodes():
            for buf in snode.get_outputs():
                written.add(buf.get_name())
                if buf.get_name() not in no_storage_of_their_own and (layout := own_storage(buf)) is not None:
                    own += bytes_of.allocated(buf.get_name(), layout)
    for name in OrderedSet(dep.name for member in members for dep in member.read_writes.reads):
        if name in written:
            continue
        if name in V.graph.graph_inputs:
            counted = graph_input_bytes(name, bytes_of)
            if counted is None:
                continue
            kind, size = counted
            if kind is InputKind.TANGENT:
                tangents += size
            elif kind is InputKind.FREED:
                own += size
        elif name in scheduler.name_to_buf and (layout := own_storage(scheduler.name_to_buf[name])) is not None:
            own += bytes_of.allocated(name, layout)
    return own, tangents


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


def fallback_workspace(node: Any, bytes_of: BufferBytes) -> int:
    """Bytes an ATen fallback kernel may allocate while it runs, beyond its outputs, taken to be as many as its
    outputs (the flash-attention backward accumulates the query gradient in fp32): the peak counts what is live
    across such a call at that height. Matmuls (cuBLAS keeps its workspace) and Triton kernels allocate nothing."""
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
    if isinstance(node, TableGroup) or not isinstance(snode, SchedulerNode) or not config.inplace_buffers:
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
