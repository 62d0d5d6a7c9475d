"""The cost model of a merge, in microseconds: the launches it saves against what it adds to the merged kernel.

A merged kernel runs each pointwise member over its flat index, unless all its members have the same 2-d tiles.
Where Inductor tiles a member in 2-d (a transpose: a conv weight laid out for channels-last, a channel shuffle), the
flat run reads or writes one side with a stride, touching more memory sectors per warp than 2-d tiles do. The member
runs flat only where those extra sectors cost the device less than the launch it saves does; else it merges only
with members of its own tiles. Constants: what each was calibrated from is in ``docs/design.md``.
"""

from __future__ import annotations

from typing import Any

from torch._inductor.virtualized import V

from optimus_ir import index_math
from optimus_ir.scheduler_hooks.horizontal.structure import FLAT_INDEX, Structure, addressed_buffers

#: Device time one launch costs beyond its work (the gap between kernels, a small grid's ramp): what a merge saves
#: the device per kernel it removes. A flat run may add at most this much per member, so that merges trade no
#: device time for the host's launches (which cost it about 10 µs each).
LAUNCH_DEVICE_US = 1.0
#: Bytes of extra sectors (those a strided access touches beyond a contiguous one) the device moves per
#: microsecond, most of them in L2.
EXTRA_SECTOR_BYTES_PER_US = 2.0e6


def flat_run_refusal(prefixes: tuple[str, ...], node: Any, structure: Structure) -> str | None:
    """None where a merged kernel may run pointwise ``node``, which Inductor tiles by ``prefixes``
    (:func:`.structure.tiling_prefixes`), over its flat index: Inductor's kernel does too (1-d tiling), or it tiles
    in 2-d and the flat run's extra sectors cost less than ``LAUNCH_DEVICE_US``; else why not. Symbolic sizes leave
    symbols in the indices, whose sectors are then not known: refused."""
    if prefixes == ("x",):
        return None
    if "r0_" in prefixes:
        return f"tiling {prefixes}: only 1-d (x) and row-reduction (x, r0_) kernels"
    if not structure.flat_indices:
        return f"tiling {prefixes}: it loads indices, so it is not run over one flat index"
    extra = flat_extra_us(node, structure)
    if extra is None:
        return f"tiling {prefixes}: the sectors of its indices over one flat index are not known"
    if extra > LAUNCH_DEVICE_US:
        return (f"tiling {prefixes}: over one flat index it would take the device an estimated {extra:.1f} µs more "
                f"than in 2-d tiles, more than the launch a merge saves it ({LAUNCH_DEVICE_US} µs), and no member "
                "has its tiles")
    return None


def flat_extra_us(node: Any, structure: Structure) -> float | None:
    """The estimated time a kernel running pointwise ``node`` over its flat index spends on sectors beyond those of
    contiguous accesses (which 2-d tiles make of a transpose's both sides); None where an index is not known."""
    values = {index_math.divisor_symbol(i): value for i, value in enumerate(structure.divisors)}
    extra = 0.0
    for snode, indices in zip(node.get_nodes(), structure.flat_indices, strict=True):
        body = snode._body
        addressed = addressed_buffers([body.root_block, *body.subblocks.values()])
        for name, expr in indices.items():
            for buffer in addressed.get(name) or ():
                itemsize = V.graph.get_dtype(buffer).itemsize
                bytes_ = extra_sector_bytes(expr.xreplace(values), structure.numel, itemsize)
                if bytes_ is None:
                    return None
                extra += bytes_
    return extra / EXTRA_SECTOR_BYTES_PER_US


def extra_sector_bytes(expr: Any, numel: int, itemsize: int) -> float | None:
    """The bytes of the sectors that warps running over ``FLAT_INDEX`` in ``[0, numel)`` touch through the address
    ``expr`` (elements of ``itemsize`` bytes) beyond those of a contiguous access (and one more sector a warp, where
    it starts mid-sector); None where the sectors are not known (:func:`index_math.sectors_per_warp`)."""
    sectors = index_math.sectors_per_warp(expr, FLAT_INDEX, numel, itemsize)
    if sectors is None:
        return None
    contiguous = itemsize * index_math.WARP_THREADS / index_math.SECTOR_BYTES
    warps = -(-numel // index_math.WARP_THREADS)
    return max(0.0, sectors - contiguous - 1) * index_math.SECTOR_BYTES * warps
