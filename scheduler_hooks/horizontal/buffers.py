"""Facts about one graph's buffers that the memory model, the allocation planning and the codegen all ask."""

from __future__ import annotations

import enum
from typing import Any

from torch._inductor import config, ir
from torch._inductor.dependencies import StarDep
from torch._inductor.utils import is_nonfreeable_buffers, sympy_product
from torch._inductor.virtualized import V
from torch.utils._ordered_set import OrderedSet

from optimus_ir.scheduler_hooks.horizontal.tuning import ALLOCATION_BLOCK, MIN_LARGE_ALLOC, ROUND_LARGE, SMALL_SIZE


def is_tangent(name: str) -> bool:
    """Whether graph input ``name`` is one of a backward's incoming gradients."""
    return name.removeprefix(f"{V.graph.name}_" if V.graph.name else "").startswith("tangents")


def cudagraph_trees() -> bool:
    """Whether this compile's graphs run under cudagraph trees (``mode="reduce-overhead"``)."""
    return bool(config.triton.cudagraphs and config.triton.cudagraph_trees)


def in_blocks(nbytes: int) -> int:
    """What the CUDA caching allocator hands out (and ``torch.cuda.memory_allocated`` counts) for a new allocation
    of ``nbytes``: whole 512-byte blocks; from ``MIN_LARGE_ALLOC`` on, the whole segment where rounding it up to
    ``ROUND_LARGE`` leaves at most ``SMALL_SIZE`` over (15 MiB: 16 MiB)."""
    size = -(-nbytes // ALLOCATION_BLOCK) * ALLOCATION_BLOCK
    segment = -(-size // ROUND_LARGE) * ROUND_LARGE
    return segment if size >= MIN_LARGE_ALLOC and segment - size <= SMALL_SIZE else size


class BufferBytes:
    """Sizes of the graph's buffers by name, each worked out once per pass (a sympy evaluation): every memory
    estimate asks for them again."""

    def __init__(self) -> None:
        self._allocated: dict[tuple[str, bool], int] = {}
        self._reuse_kinds: dict[str, tuple[Any, int, bool]] = {}

    def allocated(self, name: str, layout: ir.Layout, own_elements: bool = False) -> int:
        """What the CUDA caching allocator hands out for buffer ``name`` of this layout (or, ``own_elements``, for
        its elements alone): whole blocks (:func:`in_blocks`)."""
        key = (name, own_elements)
        if key not in self._allocated:
            numel = sympy_product(layout.size) if own_elements else layout.storage_size()
            size = V.graph.sizevars.optimization_hint(numel, fallback=0) * layout.dtype.itemsize
            self._allocated[key] = in_blocks(size)
        return self._allocated[key]

    def reuse_kind(self, buf: Any) -> tuple[Any, int, bool]:
        """A scheduler buffer's key in the wrapper's reuse pool (``buffer_reuse_key``: dtype and storage size), its
        bytes, and whether the wrapper allocates it (an ATen fallback's outputs come allocated, but go to the
        pool)."""
        node = buf.node
        if node.get_name() not in self._reuse_kinds:
            elements = V.graph.sizevars.optimization_hint(V.graph.get_allocation_storage_size(node), fallback=0)
            key = (node.get_dtype(), elements, node.get_name() not in V.graph.unaligned_buffers)
            allocated_by_wrapper = not isinstance(node, (ir.ExternKernelAlloc, ir.MultiOutput))
            self._reuse_kinds[node.get_name()] = (key, elements * node.get_dtype().itemsize, allocated_by_wrapper)
        return self._reuse_kinds[node.get_name()]


def kernel_local(scheduler: Any, buf: Any, outputs: OrderedSet[str]) -> bool:
    """Whether every reader of ``buf`` is in the kernel that writes it and it is not among the graph's ``outputs``
    (Inductor then never allocates it)."""
    own = scheduler.name_to_fused_node[buf.defining_op_name()]
    return all(
        user.is_weak or scheduler.name_to_fused_node.get(user.get_name()) is own for user in buf.users
    ) and buf.get_name() not in outputs


class InputKind(enum.Enum):
    """How the estimates count a graph input."""

    HELD = "held by the caller"  # never freed by the graph: not counted
    FREED = "freed by the wrapper"  # a backward's saved tensors: live until their last reader
    TANGENT = "incoming gradient"  # a backward's ``tangents_*``: both ways (see ``memory.MemoryEstimate``)


def graph_input_bytes(name: str, bytes_of: BufferBytes) -> tuple[InputKind, int] | None:
    """The one accounting of a graph input, for the memory model (``memory.peak_memory``,
    ``memory.live_while_running``) and the saved tensors an output may be written over
    (``allocation.saved_tensors_to_take_over``) alike: its kind and bytes, or None where it holds no tensor. Its own elements, not its storage's: saved views of one buffer (the
    halves of a split, a weight's transpose) would count that storage once each, a constant that hid where the real
    peak is. Which inputs the wrapper frees is Inductor's own decision (``is_nonfreeable_buffers``)."""
    value = V.graph.graph_inputs.get(name)
    layout = value.get_output_spec() if isinstance(value, ir.TensorBox) else None
    if not isinstance(layout, ir.Layout):
        return None
    return input_kind(name), bytes_of.allocated(name, layout, own_elements=True)


def input_kind(name: str) -> InputKind:
    """How the estimates count graph input ``name`` (see :func:`graph_input_bytes`)."""
    if is_tangent(name):
        return InputKind.TANGENT
    return InputKind.HELD if is_nonfreeable_buffers(StarDep(name)) else InputKind.FREED
