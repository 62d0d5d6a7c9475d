"""Allocation planning of a merged group: members' buffers made as regions of one allocation, outputs written over
saved tensors the call alone holds, and the wrapper's bookkeeping of those regions."""

from __future__ import annotations

import collections
import dataclasses
import itertools
import math
from collections.abc import Iterator
from typing import Any

import sympy
import torch
from torch._inductor import config, ir
from torch._inductor.scheduler import SchedulerNode
from torch._inductor.virtualized import V
from torch.utils._ordered_set import OrderedSet

from optimus_ir.graph_state import current as graph_state
from optimus_ir.scheduler_hooks.horizontal import buffers
from optimus_ir.scheduler_hooks.horizontal.buffers import InputKind, in_blocks, input_kind, kernel_local
from optimus_ir.scheduler_hooks.horizontal.structure import Structure
from optimus_ir.scheduler_hooks.horizontal.tuning import ALLOCATION_BLOCK

@dataclasses.dataclass(frozen=True)
class OneAllocation:
    """The members' buffers of one slot as regions of one allocation, each starting 16-byte aligned (as Inductor
    assumes of every buffer), in the order of ``names``: end to end along the first dimension (``rows``: the row
    count of each; ``padding``: the rows left unused after each, where a region is not a multiple of 16 bytes),
    or, members of one shape, one region at the start of each row of a ``[N, row]`` allocation (``rows`` None;
    ``region``: their shape; ``region_stride``: their strides, where not contiguous)."""

    names: tuple[str, ...]
    shape: tuple[int, ...]  # of the allocation
    rows: tuple[int, ...] | None
    region: tuple[int, ...]
    starts: tuple[int, ...]  # where each region starts, in bytes
    nbytes: int
    dtype: torch.dtype
    device: torch.device
    padding: tuple[int, ...] | None = None
    region_stride: tuple[int, ...] | None = None  # where not contiguous: one for every region


def one_allocations(members: list[Any], structures: list[Structure]) -> dict[int, OneAllocation]:
    """By slot, the members' buffers that are made as one :class:`OneAllocation` (in the order of ``members``):

    - outputs an inference graph returns: one allocation and one split per call instead of an allocation per
      member (below autograd's view tracking, ``runtime.tensors_of``: the host work per call stops growing per
      member);
    - buffers that other kernels read, each smaller than the CUDA caching allocator's 512-byte block, which it
      would round each of them up to (a split reduction's 16 partial sums: 64 bytes; 12 full sums hold 6 KB of
      blocks for 768 bytes). The allocation lives until the last reader of any of them is done.

    Not a training graph's outputs: what becomes of them is beyond this graph's estimates (a forward's are saved
    for the backward, which frees each after its last use; a backward's gradients are accumulated into the
    parameters' ``.grad`` one by one). Sharing one allocation, even small ones held memory that stock's had freed
    (``docs/design.md``).

    Not under cudagraph trees: there a replay allocates nothing, and returning views of one storage cost more host
    time per call than separate tensors.

    Only the members' own buffers (not an input updated in place, not written at an offset into another buffer), of
    static contiguous layouts and no elements of their own left out (a buffer only its own kernel reads is never
    allocated), where the caching allocator counts the one allocation as no more than the separate ones
    (:func:`.buffers.in_blocks`: six outputs of 2 to 3 MiB are each split from a cached block, 15 MiB together a
    segment of 16 MiB counted whole)."""
    allocations = {}
    for slot, names, member_buffers, layouts, returned in _slots(members, structures):
        if returned and not V.graph.is_inference:
            continue  # see the docstring
        sizes = [layout.dtype.itemsize * math.prod(int(d) for d in layout.size) for layout in layouts]
        if not returned and max(sizes) >= ALLOCATION_BLOCK:
            continue
        if (whole := _one_allocation(names, layouts, any_dense_layout=False)) is not None:
            allocations[slot] = whole
    return allocations


def by_merged_reader(
    members: list[Any], structures: list[Structure], merged: type, taken: OrderedSet[str]
) -> dict[tuple[int, int], OneAllocation]:
    """At code generation, by slot and part: the members' buffers (not ``taken``, not returned) that one node of
    type ``merged`` (a merged kernel, which never writes its outputs over what it reads) alone reads, where it reads
    two or more of a slot, as one allocation of any size, of contiguous layouts or of one dense layout for all
    (each region at the start of a row). Each buffer is freed after that node, as the one allocation is: the
    estimates, which count them as separate buffers, stay exact. The partial sums of split column sums, all read
    by the merged second stage (100 layer norms' weight and bias gradients: ``[64, 16]`` of strides ``(1, 64)``);
    the layer norms' row sums, part by part by the merged scatters of embedding bags' gradients. A buffer that a
    node writes over (a scatter-add into zeros) is not one of them: the readers of its later versions are not among
    its users, and they may be other kernels, long after (a hetero GNN's scatters and the convolutions that read
    their sums: the one allocation outlived its first regions' last reader)."""
    allocations = {}
    scheduler = members[0].scheduler
    mutated, fused = OrderedSet(scheduler.mutation_real_name.values()), scheduler.name_to_fused_node
    for slot, names, member_buffers, layouts, returned in _slots(members, structures):
        if returned or taken.intersection(names):
            continue
        by_reader: dict[int, list[int]] = {}
        for i, buf in enumerate(member_buffers):
            if names[i] in mutated:
                continue
            readers = {fused.get(user.get_name()) for user in buf.users if not user.is_weak}
            if len(readers) == 1 and isinstance(reader := readers.pop(), merged):
                by_reader.setdefault(id(reader), []).append(i)
        for j, part in enumerate(p for p in by_reader.values() if len(p) > 1):
            whole = _one_allocation(tuple(names[i] for i in part), [layouts[i] for i in part], any_dense_layout=True)
            if whole is not None:
                allocations[slot, j] = whole
    return allocations


def _slots(
    members: list[Any], structures: list[Structure]
) -> Iterator[tuple[int, tuple[str, ...], list[Any], list[ir.FixedLayout], bool]]:
    """Each slot whose members' buffers may be one allocation: the slot, their names, buffers and static layouts,
    and whether the graph returns them (all, or none of them)."""
    if len(members) < 2 or structures[0].numel_expr is not None or buffers.cudagraph_trees():
        return  # (one member: its buffer is the allocation)
    scheduler = members[0].scheduler
    outputs = OrderedSet(V.graph.get_output_names())
    for slot in range(len(structures[0].slots)):
        names = tuple(s.slots[slot] for s in structures)
        if any(s.offsets[slot] for s in structures) or not all(
            name in member.get_buffer_names() and name not in V.graph.removed_buffers
            for name, member in zip(names, members)
        ):
            continue
        returned = {name in outputs for name in names}
        member_buffers = [scheduler.name_to_buf[name] for name in names]
        if len(returned) > 1 or returned == {False} and any(
            kernel_local(scheduler, buf, outputs) for buf in member_buffers
        ):
            continue
        layouts = [buf.node.get_output_spec() for buf in member_buffers]
        if not all(type(layout) is ir.FixedLayout and layout.offset == 0 for layout in layouts):
            continue
        if not all(isinstance(d, (int, sympy.Integer)) for layout in layouts for d in (*layout.size, *layout.stride)):
            continue
        if 0 in [math.prod(int(d) for d in layout.size) for layout in layouts]:
            continue
        yield slot, names, member_buffers, layouts, returned == {True}


def _one_allocation(
    names: tuple[str, ...], layouts: list[ir.FixedLayout], any_dense_layout: bool
) -> OneAllocation | None:
    """The buffers ``names`` of static ``layouts`` as regions of one allocation, or None where their layouts do not
    allow it (not contiguous, unless ``any_dense_layout`` and one dense layout for all) or the caching allocator
    would count it as more than the separate ones."""
    shapes = [tuple(int(d) for d in layout.size) for layout in layouts]
    itemsize = layouts[0].dtype.itemsize
    sizes = [math.prod(shape) * itemsize for shape in shapes]
    region_stride = None
    if not all(layout.is_contiguous() for layout in layouts):
        # one dense layout of other strides (a split reduction's partial sums, [C, R] of strides (1, C)): each
        # region at the start of a row, as each is allocated alone
        strides = {tuple(int(d) for d in layout.stride) for layout in layouts}
        if not any_dense_layout or len(set(shapes)) > 1 or len(strides) > 1 or not _dense(
            shapes[0], next(iter(strides))
        ):
            return None
        region_stride = next(iter(strides))
    padding = None
    if region_stride is None and all(
        shape and shape[1:] == shapes[0][1:] and size % 16 == 0 for shape, size in zip(shapes, sizes)
    ):
        rows = tuple(shape[0] for shape in shapes)
        shape, starts = (sum(rows), *shapes[0][1:]), tuple(itertools.accumulate(sizes[:-1], initial=0))
        region, nbytes = shapes[0][1:], sum(sizes)
    elif len(set(shapes)) == 1:
        row = -(-sizes[0] // 16) * 16
        rows, shape, region = None, (len(names), row // itemsize), shapes[0]
        starts, nbytes = tuple(range(0, row * len(names), row)), row * len(names)
    elif region_stride is None and all(shape and shape[1:] == shapes[0][1:] for shape in shapes):
        # rows of different counts (a split reduction's partial sums: 2 to 24 of 4 bytes): each region is
        # followed by the rows that make it a multiple of 16 bytes
        row_bytes = math.prod(shapes[0][1:]) * itemsize
        rows = tuple(shape[0] for shape in shapes)
        padding = tuple(-n % (16 // math.gcd(row_bytes, 16)) for n in rows)
        lengths = [(n + pad) * row_bytes for n, pad in zip(rows, padding)]
        shape = (sum(rows) + sum(padding), *shapes[0][1:])
        region, starts, nbytes = shapes[0][1:], tuple(itertools.accumulate(lengths[:-1], initial=0)), sum(lengths)
    else:
        return None
    if in_blocks(nbytes) > sum(map(in_blocks, sizes)):  # (one segment counted whole: 15 MiB as 16)
        return None
    return OneAllocation(
        names, shape, rows, region, starts, nbytes, layouts[0].dtype, layouts[0].device, padding, region_stride
    )


def _dense(shape: tuple[int, ...], stride: tuple[int, ...]) -> bool:
    """Whether a tensor of ``shape`` and ``stride`` covers its storage exactly once (some order of its dimensions
    is contiguous)."""
    expected = 1
    for size, step in sorted(zip(shape, stride), key=lambda pair: pair[1]):
        if size != 1 and step != expected:
            return False
        expected *= size
    return True


@dataclasses.dataclass(frozen=True)
class ViewsOfOneBuffer:
    """Members' outputs that are views Inductor made of one of its buffers (``NonOwningLayout``: the slices of a
    concatenation that the copies of its inputs write), in the order of ``names``, and where each starts in it."""

    buffer: Any  # the ir.Buffer viewed
    names: tuple[str, ...]
    starts: tuple[int, ...]  # bytes


def views_given_as_buffer(members: list[Any], structures: list[Structure]) -> list[ViewsOfOneBuffer]:
    """The members' outputs, by buffer they view, that a member table takes as that buffer and where each view
    starts in it, making no tensor of them: views nothing reads (a concatenation reads the buffer they view), not
    graph outputs, of a buffer Inductor allocates, at a static offset.

    Stock's wrapper makes a tensor of each such view and deletes it after its kernel: the seed of issue 33 (the
    weights and biases of 48 pieces × 4 layers concatenated per layer) made 384 per call. Before::

        buf100 = empty_strided_cuda((1536, ), (1, ), torch.float32)
        buf52 = reinterpret_tensor(buf100, (32, ), (1, ), 0)  # alias
        buf53 = reinterpret_tensor(buf100, (32, ), (1, ), 32)  # alias
        table_now = table(..., buf52, buf53, ...)
        del buf52
        del buf53

    After (the table's byte offsets 0, 128, ...)::

        buf100 = empty_strided_cuda((1536, ), (1, ), torch.float32)
        table_now = table(..., buf100, ...)
    """
    scheduler = members[0].scheduler
    outputs = OrderedSet(V.graph.get_output_names())
    by_buffer: dict[str, tuple[Any, list[str], list[int]]] = {}
    for member, structure in zip(members, structures, strict=True):
        for name in structure.slots:
            if name not in member.get_buffer_names() or name in outputs or name in V.graph.removed_buffers:
                continue
            layout = V.graph.get_buffer(name).get_output_spec()
            view = getattr(layout, "view", None)
            if not isinstance(layout, ir.NonOwningLayout) or not isinstance(view, ir.ReinterpretView):
                continue
            box = view.data
            offset = view.get_layout().offset
            if not (isinstance(box, ir.StorageBox) and isinstance(box.data, ir.Buffer) and box.data.should_allocate()
                    and box.data.get_name() not in V.graph.removed_buffers
                    and isinstance(offset, (int, sympy.Integer))):
                continue
            if any(_reads_as_tensor(user, name) for user in scheduler.name_to_buf[name].users):
                continue
            base = box.data.get_name()
            entry = by_buffer.setdefault(base, (box.data, [], []))
            entry[1].append(name)
            entry[2].append(int(offset) * layout.dtype.itemsize)
    return [ViewsOfOneBuffer(buffer, tuple(names), tuple(starts)) for buffer, names, starts in by_buffer.values()]


def _reads_as_tensor(user: Any, name: str) -> bool:
    """Whether ``user`` of buffer ``name`` reads it as a tensor of its own. A view's users include those of the
    buffer it views (which read that buffer) and the graph's output where that buffer is returned."""
    from torch._inductor.scheduler import NopKernelSchedulerNode, OutputNode

    if user.is_weak or isinstance(user.node, (NopKernelSchedulerNode, OutputNode)):
        return False
    return name in {dep.name for dep in user.node.read_writes.reads}


def saved_tensors_to_take_over(members: list[Any], allocations: dict[int, OneAllocation]) -> dict[str, str]:
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
    if buffers.cudagraph_trees() or not config.inplace_buffers or config.memory_planning:
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
                    or kernel_local(member.scheduler, buf, outputs)
                ):
                    continue
                for dep in snode.read_writes.reads:
                    value = V.graph.graph_inputs.get(dep.name)
                    if (
                        isinstance(value, ir.TensorBox) and dep.name not in taken.values() and accesses[dep.name] == 1
                        and input_kind(dep.name) is InputKind.FREED
                        and dep.name not in outputs and dep.name not in V.graph.mutated_inputs
                        and readers.get(dep.name, OrderedSet()) <= own and snode.can_inplace(dep)
                        and _same_layout(value.get_output_spec(), layout)
                    ):
                        taken[name] = dep.name
                        break
    return taken


def _readers_of_inputs(scheduler: Any) -> dict[str, OrderedSet[str]]:
    """By graph input: the names of the scheduler nodes (unfused) that read it, worked out once per graph."""
    state = graph_state()
    if state.input_readers is None:
        readers: dict[str, OrderedSet[str]] = collections.defaultdict(OrderedSet)
        for node in scheduler.nodes:
            for snode in node.get_nodes():
                for dep in snode.read_writes.reads:
                    if dep.name in V.graph.graph_inputs:
                        readers[dep.name].add(snode.get_name())
        state.input_readers = dict(readers)
    return state.input_readers


def _same_layout(saved: Any, output: ir.Layout) -> bool:
    """Whether a saved tensor's layout is one an output can be written over: the same dtype, device, sizes,
    strides and offset."""
    return (
        isinstance(saved, ir.Layout) and saved.dtype == output.dtype and saved.device == output.device
        and list(saved.size) == list(output.size) and list(saved.stride) == list(output.stride)
        and saved.offset == output.offset
    )


class RegionsOfAllocations:
    """The regions of one allocation (:func:`one_allocations`) in one graph's wrapper code.

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

    A call then makes no tensor per member, reads no address per member and frees no tensor per member.

    Regions are never reused: each is freed by a plain ``del`` at its last use, where Inductor's wrapper would keep
    it for a later allocation of its size (``AllocateLine.plan``) or a kernel would write its output over it
    (``decide_inplace_update``). A buffer that took a region over would hold the whole allocation: a training
    forward's loss, a 0-d output, kept the whole allocation alive into the backward where stock's kept one block.
    ``V.graph.never_reuse_buffers`` keeps them from both, and from being freed at all: ``codegen_free`` of this
    graph's wrapper frees them here instead.

    The views of a buffer of Inductor's that only member tables take (:func:`views_given_as_buffer`) are regions
    too, of that buffer, which Inductor allocates and frees: they are never tensors (:meth:`add_views`)."""

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
        #: Inductor's buffers whose views are regions (:meth:`add_views`)
        self.views_of: OrderedSet[str] = OrderedSet()

    @classmethod
    def of(cls, wrapper: Any) -> RegionsOfAllocations:
        """The wrapper's regions, made on first use; the graph's state keeps them, and the wrapper's frees of its
        regions come here (``codegen_free``, replaced by :mod:`optimus_ir.patches`)."""
        regions = graph_state().regions
        if wrapper not in regions:
            regions[wrapper] = cls(wrapper)
        return regions[wrapper]

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

    def add_views(self, views: ViewsOfOneBuffer) -> None:
        """Register ``views`` (:func:`views_given_as_buffer`): the buffer they view is allocated, and stays
        Inductor's to free; they are regions of it that are never tensors."""
        storage = views.buffer.get_name()
        self.wrapper.codegen_allocation(views.buffer)
        V.graph.never_reuse_buffers.update(views.names)
        self.wrapper.allocated.update(views.names)
        self.storage_of.update(dict.fromkeys(views.names, storage))
        self.starts.setdefault(storage, {}).update(zip(views.names, views.starts))
        self.alive.add(storage)
        self.views_of.add(storage)

    def runs(self, names: list[str]) -> list[tuple[str, list[int], str | None]]:
        """The tensors a member table is given for ``names``, in order: for each run of consecutive regions of one
        allocation, one tensor (the allocation while its name is alive, else the run's first region), where each
        region starts from it (bytes) and the allocation; any other name as itself (start 0, no allocation)."""
        runs: list[tuple[str, list[int], str | None]] = []
        for storage, run in itertools.groupby(names, key=self.storage_of.get):
            run = list(run)
            if storage is None:
                runs.extend((name, [0], None) for name in run)
                continue
            starts = self.starts[storage]
            base = storage if storage in self.alive else run[0]
            runs.append((base, [starts[name] - (0 if base == storage else starts[run[0]]) for name in run], storage))
        return runs

    def after_table(self, storage: str) -> None:
        """After a line that gives ``storage`` to a kernel's table: delete it where its regions are tensors, which
        hold it (not a buffer of Inductor's whose views are regions: Inductor frees it)."""
        if storage in self.alive and storage not in self.not_tensors and storage not in self.views_of:
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
        if storage in self.views_of:  # (never a tensor: nothing to delete)
            return True
        if storage not in self.not_tensors:
            self.wrapper.writeline(FreeLine(self.wrapper, buffer))
            return True
        self.done.add(name)
        if all(region in self.done or region in V.graph.removed_buffers for region in self.starts[storage]):
            self.wrapper.writeline(f"del {storage}")
            self.alive.discard(storage)
        return True
