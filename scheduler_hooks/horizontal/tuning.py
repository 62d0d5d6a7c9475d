"""The horizontal pass's constants, in one place (what each was chosen from is in ``docs/design.md``)."""

from __future__ import annotations

#: The rule's name, as records and the dump give it.
RULE = "IdenticalKernelsToMemberTableKernel"

#: The largest block Inductor's heuristics pick along x (``TRITON_MAX_BLOCK["X"]``): pointwise members are padded
#: to a multiple of it, so that no block spans two members whatever block size autotuning picks.
MAX_XBLOCK = 4096
#: A class kept in 2-d tiles inside a kernel of several bodies takes each block as one tile: ``CLASS_TILE_ROWS`` rows
#: of its y axis and ``XBLOCK // CLASS_TILE_ROWS`` elements of x, or, where x is narrow (a conv weight's 3 × 3), all
#: of x in a power of two of at most ``CLASS_TILE_NARROW`` and ``XBLOCK // that`` rows: whichever pads less. The
#: extents are padded to whole tiles of every block size the heuristics may pick (up to ``MAX_XBLOCK``).
CLASS_TILE_ROWS = 32
CLASS_TILE_NARROW = 64
#: Bytes each thread of a pointwise member-table kernel loads per tensor, at least: a program first loads its
#: member's addresses from the table, then its data, and more bytes per program hide more of that.
BYTES_PER_THREAD = 32
#: More members than this are split into several groups (each member is a row of the table the kernel reads; issue
#: 33's seed at 192 pieces × 16 layers concatenates 6,144 weights and biases of 32 values, one group up to here).
MAX_MEMBERS = 8192
#: A group of at most this many members takes their tensors as its kernel's arguments and picks the block's member's
#: in the kernel, instead of a member table: the host looks a table up by its tensors' addresses on every call, which
#: costs more than passing a few more arguments. Code grows with the members up to this, then no more.
MAX_DIRECT_MEMBERS = 8
#: Classes (bodies) of one kernel of several bodies at most: its code, and Triton's compile time, grow with them.
MAX_CLASSES = 32
#: The largest block of rows Inductor's reduction heuristics pick for rows of at least ``MIN_RNUMEL_FOR_TOTAL_HINT``
#: elements on CUDA (``outer_config_opt``'s 256; persistent reductions' ``xblock_vals`` and ``4096 // rnumel``):
#: members of a row-reduction group start at multiples of the next power of two of their row count, capped here.
MAX_REDUCTION_XBLOCK = 256
#: Below this row width a reduction config may take more rows per block than ``MAX_REDUCTION_XBLOCK`` (a tiny
#: config's ``2 * (256 // rnumel)``, a persistent one's ``4096 // rnumel``), so such groups keep a member's size hint.
MIN_RNUMEL_FOR_TOTAL_HINT = 16
#: Cost of padding: members start at block boundaries, so a group launches blocks that find no work and exit. A
#: group is split by size only where its padded work is more than ``MAX_PADDING`` times its real work AND the empty
#: blocks exceed ``MAX_EMPTY_BLOCKS`` (counted pessimistically: one row per block for reductions, 1024 elements per
#: block for pointwise kernels).
MAX_PADDING = 2.0
MAX_EMPTY_BLOCKS = 2048
#: What one graph may spend on memory estimates for trying merges, in scheduler nodes estimated (each estimate is
#: Inductor's reordering and memory planning over the whole schedule). Groups are tried whole first, then halves,
#: level by level, so the estimates go to the largest merges; what is left untried keeps its stock kernels.
MAX_ESTIMATED_NODES = 32768
#: The CUDA caching allocator rounds every allocation up to a multiple of this many bytes.
ALLOCATION_BLOCK = 512
#: The caching allocator's large allocations (``c10/cuda/CUDACachingAllocator.cpp``): from ``MIN_LARGE_ALLOC``
#: bytes on, a new request is a segment of its own rounded up to ``ROUND_LARGE``, and a block is split only where
#: more than ``SMALL_SIZE`` would be left over; a block not split is allocated, and counted, whole.
SMALL_SIZE, MIN_LARGE_ALLOC, ROUND_LARGE = 1 << 20, 10 << 20, 2 << 20


def block_alignment(max_numel: int, reduction: bool) -> int:
    """Members start at multiples of this: a power of two no smaller than any block the heuristics can pick (the
    kernel's size hint along x is capped at it where it is below the largest block)."""
    return min(MAX_REDUCTION_XBLOCK if reduction else MAX_XBLOCK, 1 << (max_numel - 1).bit_length())


def class_tile_width(tiles: dict[str, int]) -> int | None:
    """For a class in 2-d tiles ``tiles``: the constant width of its tiles along x where all of a narrow x in one
    tile pads less than rows of ``CLASS_TILE_ROWS`` do, else None (its tiles' width is then ``XBLOCK //
    CLASS_TILE_ROWS``)."""
    width = 1 << (tiles["x"] - 1).bit_length()
    if width > CLASS_TILE_NARROW:
        return None
    return width if _padded(tiles, width) < _padded(tiles, None) else None


def tiled_class_numel(tiles: dict[str, int]) -> int:
    """The elements of the blocks a member of a class in 2-d tiles ``tiles`` takes in a kernel of several bodies:
    its extents padded to whole tiles of every block size (:func:`class_tile_width`)."""
    return _padded(tiles, class_tile_width(tiles))


def class_tile_extents(tiles: dict[str, int], width: int | None) -> tuple[int, int]:
    """A member's rows and x extent padded to whole tiles of every block size: tiles of ``CLASS_TILE_ROWS`` rows (x
    padded for the widest tile, ``MAX_XBLOCK // CLASS_TILE_ROWS``), or of constant ``width`` (rows padded for the
    tallest, ``MAX_XBLOCK // width``)."""
    rows, x = (CLASS_TILE_ROWS, MAX_XBLOCK // CLASS_TILE_ROWS) if width is None else (MAX_XBLOCK // width, width)
    return -(-tiles["y"] // rows) * rows, -(-tiles["x"] // x) * x


def _padded(tiles: dict[str, int], width: int | None) -> int:
    rows, x = class_tile_extents(tiles, width)
    return rows * x
