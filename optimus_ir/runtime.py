"""Run-time support of the code optimus_ir generates: the per-call member table of a shared-body kernel, and the
inputs' size and stride checks of a graph in one call (:class:`InputChecks`).

A kernel made by ``IdenticalKernelsToMemberTableKernel`` serves N members. Where each member's blocks start, how many
elements it has, and the address of each of its tensors are read from one int64 table on the kernel's device::

    [ block starts of the members, padded to a power of two with INT64_MAX ]   (constant*)
    [ numel of each member ]                                                     (constant*)
    [ value 0 of each member ] [ value 1 of each member ] ...                    (constant: divisors, row lengths)
    [ address of slot 0 of each member ] [ address of slot 1 of each member ] ...   (per call)

    * per call for members of symbolic sizes (dynamic shapes): from the numels the call gives, and the values
      where one is a symbol (the ids' count of a jagged embedding bag)

An address includes the member's constant offset into that buffer where the shared body does not add it (pieces
of one split read the same buffer at different offsets). Where every member's buffer of a slot is a region of one
allocation (outputs an inference graph returns, split by :func:`tensors_of`; a split reduction's partial sums, which
the merged second stages read and nothing else, so no tensor is made of each), the call passes that allocation once
(``spans``) and each member's address is its start plus the member's offset: one address read per slot, not one
per member.

The addresses change only when the tensors do, so tables are cached by the addresses: a steady-state call costs a
``data_ptr()`` per tensor and one dict lookup, not a host-to-device copy. A new table checks that the graph inputs
its kernel takes as 16-byte aligned are (``aligned``), where Inductor's check before each call is left out for them
(``InputAlignmentCheckedByMemberTables``), and copies one that is not, for that call. Where they change every call (a training
step's activations and gradients can take new addresses each step), a miss rewrites the slot of the least recently
used table: the next row of one page-locked host buffer (once the copy that last read that row is done: an event),
then its device table, by an asynchronous copy queued behind the kernels that read the old table. A thread's first
miss makes the device tables of all its slots, as rows of one block, and the page-locked rows: no later miss
allocates, on the device or the host, so a call whose addresses are new (while the allocator's addresses settle, or
each training step) holds no memory stock's call does not.

Threads: each thread that calls a compiled graph has table slots of its own (``_ThreadSlots``), so one thread's miss
never rewrites a table that another thread's call has looked up and not launched yet (nor two threads' misses the
same new slot). The page-locked rows are the
table's, taken in turn by every thread's misses under a lock: a thread's end leaves no page-locked memory behind.

CUDA graphs: a graph's addresses are those of its capture (a graph is replayed with new data copied into its own
input buffers), so a table made while a graph is captured is one of a few device buffers made outside any capture
(on the first call) and never written or freed again. It is filled at capture time by a copy outside the graph: a
helper thread whose capture mode is relaxed (``cuThreadExchangeStreamCaptureMode``) copies and synchronizes on a
stream of its own (made by the driver: never one of PyTorch's pool, which a graph may be captured on). So a replay
runs the kernel alone, not a copy before it. Where the mode cannot be relaxed (no CUDA driver library), the copy
is captured, from page-locked host memory kept as long as the graph may replay it.

Cudagraph trees (``mode="reduce-overhead"``) route every allocation of the thread that warms up or records a graph
to that graph's memory pool, and refuse a graph whose pool holds tensors that are not its outputs. For those
compiles (``outside_graph_pools=True``) the tables and buffers are made on a helper thread, outside the pools, with
blocking copies; their recordings capture in thread-local mode, so buffer pairs are made as recordings need them.
"""

from __future__ import annotations

import array
import collections
import ctypes
import functools
import itertools
import math
import operator
import sys
import threading
from collections.abc import Callable
from typing import TypeVar

import torch
from torch._C._dynamo.guards import TensorGuards as _TensorGuards
from torch._C._dynamo.guards import assert_size_stride as _assert_size_stride
from torch._inductor.utils import ALIGNMENT, clone_preserve_strides

from optimus_ir.member_table import MemberTableLayout

__all__ = [
    "InputChecks", "MemberTable", "sole_holders", "tensors_of", "tensors_of_each_row", "tensors_of_padded_rows",
]

_data_ptr = torch.Tensor.data_ptr
_untyped_storage = torch.Tensor.untyped_storage
_use_count = torch.Tensor._use_count
_cdata = operator.attrgetter("_cdata")
_storage_use_count = torch._C._storage_Use_Count
#: ``torch.cuda.is_current_stream_capturing`` without its Python frame (only ever called for CUDA tables)
_capturing = getattr(torch._C, "_cuda_isCurrentStreamCapturing", lambda: False)

_T = TypeVar("_T")

#: The distance between two slots' tables in a thread's block of tables (``MemberTable._allocate_slots``).
_ROW_BYTES = 64


#: Host and device buffers a captured CUDA graph may read from at replay: never freed (a few KB per merged kernel),
#: since a graph can outlive the compiled code that captured it.
_KEPT_FOR_GRAPHS: list[tuple[torch.Tensor, torch.Tensor]] = []
#: Every page-locked host buffer made by ``_registered_host_buffer`` (a few KB per merged kernel).
_REGISTERED: list[torch.Tensor] = []


def _registered_host_buffer(size: int) -> torch.Tensor:
    """A page-locked int64 host buffer that is NOT from PyTorch's caching host allocator.

    A copy from caching-allocator pinned memory records the copying stream on the block; a stream recorded while a
    graph was being captured makes the allocator's later event bookkeeping fail ("CUDA error:
    invalid argument" in unrelated later work). Memory registered with ``cudaHostRegister`` is page-locked (so the
    captured copy is a real asynchronous copy) but unknown to that allocator. It is never freed (kept in
    ``_REGISTERED``): registered memory must not go back to the CPU allocator.
    """
    buffer = torch.empty(size, dtype=torch.int64, device="cpu")
    error = torch.cuda.cudart().cudaHostRegister(buffer.data_ptr(), buffer.numel() * buffer.element_size(), 0)
    if int(error) != 0:
        raise RuntimeError(f"optimus_ir: cudaHostRegister failed with CUDA error {int(error)}")
    _REGISTERED.append(buffer)
    return buffer


def _on_helper_thread(make: Callable[[], _T]) -> _T:
    """``make()`` run on a new thread: its CUDA allocations are not routed to the pool of a graph that this thread
    is warming up or recording."""
    results: list[_T] = []
    errors: list[BaseException] = []

    def target() -> None:
        try:
            results.append(make())
        except BaseException as error:  # re-raised on the calling thread
            errors.append(error)

    thread = threading.Thread(target=target, name="optimus_ir-member-table")
    thread.start()
    thread.join()
    if errors:
        raise errors[0]
    return results[0]


_CU_STREAM_CAPTURE_MODE_RELAXED = 2
_CU_STREAM_NON_BLOCKING = 1
#: Per device, the stream that fills tables outside a capture: a stream of our own, never one that a graph is being
#: captured on (``torch.cuda.Stream()`` hands out the 32 streams of PyTorch's pool in turn, so it can return the
#: capturing stream, and synchronizing that one invalidates the capture).
_FILL_STREAMS: dict[torch.device, torch.cuda.ExternalStream] = {}


@functools.cache
def _libcuda() -> ctypes.CDLL | None:
    try:
        return ctypes.CDLL("libcuda.so.1")
    except OSError:
        return None


def _relax_capture_mode_of_this_thread() -> bool:
    """Let this thread make calls that a capture in global mode forbids (a synchronous copy): the driver's
    ``cuThreadExchangeStreamCaptureMode``, which PyTorch does not expose. False where it cannot be called."""
    libcuda = _libcuda()
    mode = ctypes.c_int(_CU_STREAM_CAPTURE_MODE_RELAXED)
    return libcuda is not None and libcuda.cuThreadExchangeStreamCaptureMode(ctypes.byref(mode)) == 0


def _fill_stream(device: torch.device) -> torch.cuda.ExternalStream | None:
    """This process's non-blocking stream for filling tables on ``device`` (made on first use), or None where the
    driver cannot make one."""
    stream = _FILL_STREAMS.get(device)
    if stream is None:
        torch.cuda.set_device(device)  # the device's primary context, current on this thread for the driver call
        handle = ctypes.c_void_p()
        if _libcuda().cuStreamCreate(ctypes.byref(handle), _CU_STREAM_NON_BLOCKING) != 0:
            return None
        stream = _FILL_STREAMS[device] = torch.cuda.ExternalStream(handle.value, device=device)
    return stream


def _copy_outside_capture(table: torch.Tensor, host: torch.Tensor) -> bool:
    """Copy ``host`` into ``table`` now, while this thread captures a CUDA graph, without putting the copy in the
    graph: on a helper thread in relaxed capture mode, on a stream never captured, synchronized before it returns.
    False where the mode cannot be relaxed or the stream not made."""

    def copy() -> bool:
        stream = _fill_stream(table.device) if _relax_capture_mode_of_this_thread() else None
        if stream is None:
            return False
        with torch.cuda.stream(stream):
            table.copy_(host)
        stream.synchronize()
        return True

    return _on_helper_thread(copy)


def tensors_of(whole: torch.Tensor, rows: tuple[int, ...]) -> tuple[torch.Tensor, ...]:
    """The members' outputs in their one allocation ``whole``, ``rows[i]`` rows each along its first dimension
    (``whole.split_with_sizes(rows)``), made below autograd's view tracking (``_AutoDispatchBelowADInplaceOrView``).
    They share ``whole``'s storage, each in a region of its own, but autograd sees tensors of their own, as it sees
    stock Inductor's separate allocations (a version counter each): autograd views made by the graph's call, which
    runs in no-grad mode, would refuse what stock's outputs allow (an in-place op in grad mode: "A view was created
    in no_grad mode and is being modified inplace with grad mode enabled"; ``detach_()``). It also takes less host
    time than ``unbind`` into autograd views."""
    with torch._C._AutoDispatchBelowADInplaceOrView():
        return whole.split_with_sizes(rows)


def tensors_of_padded_rows(
    whole: torch.Tensor, rows: tuple[int, ...], padding: tuple[int, ...]
) -> tuple[torch.Tensor, ...]:
    """The members' buffers in their one allocation ``whole``, ``rows[i]`` rows each along its first dimension,
    each followed by ``padding[i]`` rows that no member uses (so that every region starts 16-byte aligned: a split
    reduction's partial sums, 2 to 24 of 4 bytes), below autograd's view tracking as in :func:`tensors_of`: one
    ``split_with_sizes`` into regions and paddings, whatever N is, then every other piece."""
    with torch._C._AutoDispatchBelowADInplaceOrView():
        return whole.split_with_sizes([n for pair in zip(rows, padding) for n in pair])[::2]


def tensors_of_each_row(
    whole: torch.Tensor, shape: tuple[int, ...], strides: tuple[int, ...] | None = None
) -> tuple[torch.Tensor, ...]:
    """The members' buffers of one ``shape`` (and ``strides``, contiguous if None) in their one allocation ``whole``
    (``[N, row]``), one at the start of each row (rows are padded to 16 bytes: 0-d sums, 64-byte partial sums),
    below autograd's view tracking as in :func:`tensors_of`: one ``as_strided`` and one ``unbind``, whatever N is."""
    if strides is None:
        strides = tuple(math.prod(shape[i + 1 :]) for i in range(len(shape)))
    with torch._C._AutoDispatchBelowADInplaceOrView():
        return whole.as_strided((whole.shape[0], *shape), (whole.stride(0), *strides)).unbind(0)


#: A tensor that nothing holds but this name: what :func:`sole_holders` sees of it is what it sees of a tensor that
#: nothing holds but its caller's name, less the reference of the tuple the caller passes. Seen in the same call,
#: not worked out once: what the frames of a call hold differs by context (this module imported while Inductor
#: compiles saw two references more to a tensor than the same lines at run time, on CPython 3.11).
_REFERENCE = torch.empty(1)


def sole_holders(tensors: tuple[torch.Tensor, ...]) -> list[bool]:
    """For each tensor, whether the caller's name for it (and ``tensors``) is all that holds it and its memory: no
    other Python reference, no other C++ tensor (a view, a tensor of the same storage, autograd's saved variable),
    no one else's reference to its storage. A backward's saved tensor that its call alone holds dies after its last
    reader, so that reader may write its output over it, as Inductor does over the saved tensors AOTAutograd
    donates; one held elsewhere (the forward's output, which the caller may still hold) must not be written. Never
    while a CUDA graph is captured: a replay would write over what the tensor holds then, whoever holds it.

    The tensors come as one tuple, not as arguments: CPython passes more than 30 arguments of a call in a tuple of
    its own, which holds each of them once more while the call runs."""
    if tensors and tensors[0].is_cuda and torch.cuda.is_current_stream_capturing():
        return [False] * len(tensors)
    every = (_REFERENCE, *tensors)
    storages = tuple(map(_untyped_storage, every))
    # per tensor: the references to its Python object, to its C++ tensor, to the Python object of its storage, and
    # to the C++ storage; by ``map``s, so that no Python code runs per tensor
    holders = zip(
        map(sys.getrefcount, every), map(_use_count, every), map(sys.getrefcount, storages),
        map(_storage_use_count, map(_cdata, storages)),
    )
    reference = next(holders)
    sole = (reference[0] + 1, *reference[1:])  # each tensor is also in ``tensors``
    return list(map(sole.__eq__, holders))


class InputChecks:
    """Inductor's ``assert_size_stride`` of a graph's inputs, all in one call where they pass as before.

    ``check(*inputs)`` is one C++ call over all the inputs (Dynamo's ``TensorGuards``, made from the inputs of a
    call that passed): True only where each input has the dtype, device and dispatch keys of that call's inputs and
    exactly the sizes and strides ``expected`` gives. A size or stride that is a symbol (``None`` in ``expected``)
    is left to the wrapper, which compares all of them with the call's symbols in one tuple. Where either is False
    (the first call; other strides, dtypes or dispatch keys: ``inference_mode``), ``assert_size_stride(*inputs,
    symbols=...)`` runs stock's asserts one by one, each symbolic entry the call's value of it, which raise stock's
    errors; then makes the one-call check from these inputs (at most ``_REMADE_AT_MOST`` times: inputs that take
    turns at two layouts pay stock's asserts and the failed check, never a new check each call as well).
    """

    _REMADE_AT_MOST = 8

    def __init__(self, expected: list[tuple[tuple[int | None, ...], tuple[int | None, ...]]]) -> None:
        #: each input's size and stride, as stock's asserts have them; None where stock's is a symbolic expression
        self.expected = expected
        self._remade = 0
        self.check: Callable[..., bool] = self._nothing_checked_yet

    @staticmethod
    def _nothing_checked_yet(*inputs: torch.Tensor) -> bool:
        return False

    def assert_size_stride(self, *inputs: torch.Tensor, symbols: tuple[int, ...] = ()) -> None:
        """Stock's asserts of ``inputs``; ``symbols``: the call's values of the None entries of ``expected``, in
        order (each input's sizes, then its strides)."""
        values = iter(symbols)
        for tensor, (size, stride) in zip(inputs, self.expected, strict=True):
            size = tuple(next(values) if s is None else s for s in size)
            stride = tuple(next(values) if s is None else s for s in stride)
            _assert_size_stride(tensor, size, stride)
        if self._remade < self._REMADE_AT_MOST:
            self._remade += 1
            # each input's own sizes and strides, which passed (a dimension of size 1 passes any stride), less its
            # symbolic ones
            pairs = list(zip(inputs, self.expected))
            self.check = _TensorGuards(
                *inputs,
                dynamic_dims_sizes=[_but_symbolic(t.size(), size) for t, (size, _) in pairs],
                dynamic_dims_strides=[_but_symbolic(t.stride(), stride) for t, (_, stride) in pairs],
            ).check


def _but_symbolic(actual: tuple[int, ...], expected: tuple[int | None, ...]) -> list[int | None]:
    return [None if e is None else a for a, e in zip(actual, expected)]


class _ThreadSlots(threading.local):
    """The tables of one :class:`MemberTable` that one thread's calls made, cached by their addresses."""

    def __init__(self) -> None:
        #: addresses (and device, numels) -> the slot of their table; slots 0 .. len - 1 are in use
        self.recent: collections.OrderedDict[tuple[object, ...], int] = collections.OrderedDict()
        self.tables: list[torch.Tensor] = []
        self.streams: list[torch.cuda.Stream | None] = []  # on a GPU: the stream of each slot's last copy


class MemberTable:
    """The member table of one shared-body kernel: its constant part, and a cache of full tables by addresses
    (per thread)."""

    def __init__(
        self,
        starts: list[int] | None,
        numels: list[int] | None,
        pad_to: int,
        byte_offsets: list[int] | None = None,
        spans: list[int] | None = None,
        values: list[int] | None = None,
        align: int | None = None,
        aligned: list[int] | None = None,
        cache_size: int = 16,
        capture_buffers: int = 4,
        outside_graph_pools: bool = False,
    ) -> None:
        """``starts`` and ``numels`` None: members of symbolic sizes, whose numels each call gives (``numels=``);
        each member then starts at the next multiple of ``align`` after the one before.

        ``aligned``: the positions of a call's tensors (graph inputs) whose addresses the kernel takes as
        ``ALIGNMENT``-byte aligned, where Inductor's own check of them before each call is left out (see
        :meth:`__call__`)."""
        #: the members' values that differ (their divisors, their row lengths), row after row
        self.values = list(values or ())
        self.pad_to = pad_to
        self.align = align
        self.starts, self.numels = starts, numels
        self.constant = None if numels is None else self._constant(starts, numels)
        #: added to each member's address: a member may read its buffer at an offset the shared body does not add
        self.byte_offsets = byte_offsets
        #: how many members' addresses each tensor of a call gives (its address repeated; ``byte_offsets`` tell
        #: them apart): N for one allocation of a slot's N members, 1 for a member's own tensor; None: all 1
        self.spans = spans
        self.aligned = aligned or []
        self.cache_size = cache_size
        self.capture_buffers = capture_buffers
        #: the compile uses cudagraph trees: tensors are made on a helper thread (see the module docstring)
        self.outside_graph_pools = outside_graph_pools
        self._slots = _ThreadSlots()
        #: on a GPU: the page-locked rows the tables are copied from, taken in turn (``_next_row``), and per row
        #: the event of its last copy; they and the capture buffers are shared by the threads (``_lock``)
        self._host: torch.Tensor | None = None
        self._copied: list[torch.cuda.Event] = []
        self._next_row = 0
        self._lock = threading.Lock()
        self._captured: dict[tuple[object, ...], torch.Tensor] = {}
        self._unused_capture_buffers: list[tuple[torch.Tensor, torch.Tensor]] | None = None
        #: the tables are on a CUDA device (known from the first call, a miss): a call may be captured in a graph
        self._on_cuda = False

    def _constant(self, starts: list[int], numels: list[int]) -> list[int]:
        return MemberTableLayout.constant(self.pad_to, starts, numels, self.values)

    def __call__(
        self, *tensors: torch.Tensor, numels: tuple[int, ...] | None = None, values: tuple[int, ...] | None = None,
        byte_offsets: tuple[int, ...] | None = None,
    ) -> torch.Tensor:
        """The table for one call: ``tensors`` are slot 0 of every member (or one allocation of them all, see
        ``spans``), then slot 1 of every member, ...;
        ``numels``: the members' numels, for a table made without them (symbolic sizes); ``values``: the members'
        values, for a table made without them (one of them is a symbol); ``byte_offsets``: the members' offsets,
        for a table made without them (regions of one allocation whose sizes are symbols).

        The ``aligned`` tensors' addresses are checked where a table is made for them (a call that finds its table
        checks nothing: the same addresses passed before). One that is not aligned is copied to memory that is, as
        Inductor's check before the call would have (``copy_misaligned_inputs``); such a table is made for this
        call only, and the copies live as long as the table returned (the wrapper's ``del`` after the launch)."""
        key = ((numels, values, byte_offsets), *map(_data_ptr, tensors))  # map: ~25% less host time than a comprehension
        if self._on_cuda and _capturing():
            return self._for_capture_locked(key, tensors)
        slots = self._slots
        slot = slots.recent.get(key)
        if slot is not None:
            slots.recent.move_to_end(key)
            return slots.tables[slot]
        return self._missed(slots, key, tensors)

    def _missed(self, slots: _ThreadSlots, key: tuple[object, ...], tensors: tuple[torch.Tensor, ...]) -> torch.Tensor:
        """The table for a call whose addresses this thread's cache does not hold (a thread's first call among
        them: where the table's device, and on CUDA the capture buffers, are first known)."""
        device = tensors[0].device
        if device.type == "cuda":
            if self._unused_capture_buffers is None:
                with self._lock:
                    if self._unused_capture_buffers is None:
                        size = len(self._constant_for(key[0])) + self._addresses(len(tensors))
                        self._make_capture_buffers(device, size)
            self._on_cuda = True
            if _capturing():
                return self._for_capture_locked(key, tensors)
        copies = self._aligned_copies(tensors, key)
        addresses = key[1:] if copies is None else tuple(map(_data_ptr, copies))
        slot = self._free_slot(slots)
        self._write(slots, slot, [*self._constant_for(key[0]), *self._shifted(addresses, key[0][2])], device)
        if copies is not None:  # this call's alone: not cached
            return self._holding(slots.tables[slot], copies)
        slots.recent[key] = slot
        return slots.tables[slot]

    def _for_capture_locked(self, key: tuple[object, ...], tensors: tuple[torch.Tensor, ...]) -> torch.Tensor:
        with self._lock:
            return self._for_capture(key, tensors)

    def _free_slot(self, slots: _ThreadSlots) -> int:
        """A slot for a new table: the next unused one, else the least recently used one's (forgotten)."""
        if len(slots.recent) < self.cache_size:
            return len(slots.recent)
        return slots.recent.popitem(last=False)[1]

    def _aligned_copies(self, tensors: tuple[torch.Tensor, ...], key: tuple[object, ...]) -> list[torch.Tensor] | None:
        """``tensors`` with each ``aligned`` one whose address is not aligned replaced by an aligned copy; None
        where all are aligned."""
        misaligned = [i for i in self.aligned if key[1 + i] % ALIGNMENT]
        if not misaligned:
            return None
        copies = list(tensors)
        for i in misaligned:
            copies[i] = clone_preserve_strides(tensors[i])
        return copies

    @staticmethod
    def _holding(table: torch.Tensor, copies: list[torch.Tensor]) -> torch.Tensor:
        """``table`` as a tensor of its own that keeps ``copies`` alive as long as it is."""
        table = table.view(table.shape)
        table.optimus_ir_copies = copies
        return table

    def _constant_for(self, sizes: tuple[tuple[int, ...] | None, ...]) -> list[int]:
        """The constant part of a call's table, from the call's ``(numels, values, byte_offsets)`` where it gives
        them."""
        numels, values, _ = sizes
        if numels is None and values is None:
            return self.constant
        values = self.values if values is None else list(values)
        if numels is None:
            return MemberTableLayout.constant(self.pad_to, self.starts, self.numels, values)
        padded = [-(-n // self.align) * self.align for n in numels]
        return MemberTableLayout.constant(self.pad_to, [0, *itertools.accumulate(padded[:-1])], list(numels), values)

    def _write(self, slots: _ThreadSlots, slot: int, values: list[int], device: torch.device) -> None:
        """Make ``values`` the table of this thread's ``slot`` (a new slot where ``slot`` is the number of its slots
        so far)."""
        if device.type == "cpu" or self.outside_graph_pools:
            # explicit device: under cudagraph trees (and `with torch.device(...)`) the default device may be cuda
            table = torch.tensor(values, dtype=torch.int64, device="cpu")
            if device.type != "cpu":
                table = _on_helper_thread(lambda: table.to(device))  # pageable memory: done when it returns
            slots.tables[slot : slot + 1] = [table]
            return
        if not slots.tables:
            self._allocate_slots(slots, len(values), device)
        stream = torch.cuda.current_stream(device)
        if slots.streams[slot] not in (None, stream):
            stream.wait_stream(slots.streams[slot])  # its kernels that read this slot's last table
        packed = array.array("q", values)
        with self._lock:
            if self._host is None:
                self._host = _registered_host_buffer(self.cache_size * len(values)).view(self.cache_size, len(values))
                self._copied = [torch.cuda.Event() for _ in range(self.cache_size)]
            row, self._next_row = self._next_row, (self._next_row + 1) % self.cache_size
            host, copied = self._host[row], self._copied[row]
            copied.synchronize()  # the copy that last read this row (at once where there was none)
            ctypes.memmove(host.data_ptr(), packed.buffer_info()[0], len(values) * packed.itemsize)
            # asynchronous (the row is page-locked), and queued behind the kernels that read this slot's last table
            slots.tables[slot].copy_(host, non_blocking=True)
            copied.record(stream)
        slots.streams[slot] = stream

    def _allocate_slots(self, slots: _ThreadSlots, size: int, device: torch.device) -> None:
        """Every slot of this thread's cache as a row of one device block, made on its first miss: a later miss,
        which a call whose addresses are new makes while its own buffers are alive, allocates nothing. Rows are
        ``_ROW_BYTES`` apart, so each table starts as aligned as the kernel declares it (16 bytes)."""
        row = -(-size * 8 // _ROW_BYTES) * _ROW_BYTES // 8
        block = torch.empty(self.cache_size, row, dtype=torch.int64, device=device)
        slots.tables = list(block[:, :size].unbind(0))
        slots.streams = [None] * self.cache_size

    def _addresses(self, tensors: int) -> int:
        """How many addresses the table holds for a call given ``tensors`` tensors."""
        return tensors if self.spans is None else sum(self.spans)

    def _shifted(self, addresses: tuple[object, ...], byte_offsets: tuple[int, ...] | None = None) -> list[object]:
        """Each member's address in each slot, from the addresses of the tensors a call gives (and the offsets it
        gives, where the table was made without them)."""
        if self.spans is not None:
            addresses = [address for address, span in zip(addresses, self.spans) for _ in range(span)]
        offsets = self.byte_offsets if byte_offsets is None else byte_offsets
        if offsets is None:
            return list(addresses)
        return [address + offset for address, offset in zip(addresses, offsets)]

    def _make_capture_buffers(self, device: torch.device, size: int, count: int | None = None) -> None:

        def make() -> list[tuple[torch.Tensor, torch.Tensor]]:
            return [
                (_registered_host_buffer(size), torch.empty(size, dtype=torch.int64, device=device))
                for _ in range(self.capture_buffers if count is None else count)
            ]

        buffers = _on_helper_thread(make) if self.outside_graph_pools else make()
        self._unused_capture_buffers = [*(self._unused_capture_buffers or []), *buffers]
        _KEPT_FOR_GRAPHS.extend(buffers)

    def _for_capture(self, key: tuple[object, ...], tensors: tuple[torch.Tensor, ...]) -> torch.Tensor:
        """The table for a call being captured; its misaligned tensors' copies are made (and their copy captured)
        in this capture only, so such a table is this capture's alone."""
        copies = self._aligned_copies(tensors, key)
        table = self._captured.get(key) if copies is None else None
        if table is not None:
            return table
        addresses = key[1:] if copies is None else tuple(map(_data_ptr, copies))
        constant = self._constant_for(key[0])
        if not self._unused_capture_buffers and self.outside_graph_pools:
            self._make_capture_buffers(tensors[0].device, len(constant) + self._addresses(len(key) - 1), count=1)
        if not self._unused_capture_buffers:
            raise RuntimeError(
                f"optimus_ir: more than {self.capture_buffers} CUDA graphs captured with different addresses for one "
                "merged kernel; set OPTIMUS_IR=splitcat to turn the horizontal pass off for this program"
            )
        host, table = self._unused_capture_buffers.pop()
        host.copy_(torch.tensor([*constant, *self._shifted(addresses, key[0][2])], dtype=torch.int64, device="cpu"))
        if not _copy_outside_capture(table, host):
            table.copy_(host, non_blocking=True)  # captured: replays copy these (never rewritten) host values
        if copies is not None:
            return self._holding(table, copies)
        self._captured[key] = table
        return table
