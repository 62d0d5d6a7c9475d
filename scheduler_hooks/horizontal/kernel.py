"""The Triton kernel of a merged group: Inductor's kernel for one member, with a prologue that makes it serve every
member through the member table (its layout: :mod:`optimus_ir.member_table`)."""

from __future__ import annotations

import dataclasses
import itertools
import math
from typing import Any, NamedTuple

import sympy
import torch
from torch._inductor import config
from torch._inductor.codegen.common import IndentedBuffer, TensorArg
from torch._inductor.codegen.triton import TritonKernel
from torch._inductor.codegen.triton_utils import is_unaligned_buffer
from torch._inductor.runtime import triton_heuristics
from torch._inductor.runtime.hints import TRITON_MAX_BLOCK
from torch._inductor.runtime.runtime_utils import get_max_y_grid
from torch._inductor.virtualized import V
from torch.utils._ordered_set import OrderedSet
from torch.utils._sympy.functions import FloorDiv

from optimus_ir import index_math
from optimus_ir.member_table import MemberTableLayout, padded_members
from optimus_ir.scheduler_hooks.horizontal.allocation import RegionsOfAllocations
from optimus_ir.scheduler_hooks.horizontal import buffers
from optimus_ir.scheduler_hooks.horizontal.structure import Structure
from optimus_ir.scheduler_hooks.horizontal.tuning import (
    BYTES_PER_THREAD,
    MAX_REDUCTION_XBLOCK,
    MAX_XBLOCK,
    MIN_RNUMEL_FOR_TOTAL_HINT,
    block_alignment,
    class_tile_extents,
    class_tile_width,
)

_TRITON_DTYPE = {
    "fp64": "float64", "fp32": "float32", "fp16": "float16", "bf16": "bfloat16", "fp8e4nv": "float8e4nv",
    "fp8e5": "float8e5", "i64": "int64", "i32": "int32", "i16": "int16", "i8": "int8", "i1": "int1",
    "u64": "uint64", "u32": "uint32", "u16": "uint16", "u8": "uint8",
}


class DirectArgument(NamedTuple):
    """A tensor argument of a ``direct`` class's kernel: its name there, the buffer it is given, its type in the
    signature (``*fp32``), the buffer's dtype, and whether Inductor takes its address as 16-byte aligned
    (``tt.divisibility``)."""

    name: str
    buffer: str
    signature_type: str
    dtype: torch.dtype
    aligned: bool


#: The name of a class's block index among its own blocks: the first argument of a class's function after its
#: tensors and sizes (:mod:`.dispatch`)
CLASS_PID = "xpid"


@dataclasses.dataclass(frozen=True)
class ClassPlacement:
    """Where the classes of one kernel of several bodies start their members: at multiples of ``align``, the same
    for every class, so that one block size serves them all; ``size_hint_x`` is that kernel's size hint."""

    align: int
    size_hint_x: int

    @classmethod
    def of(
        cls, numels: list[list[int]], reduction: bool = False, rnumel: int = 1, symbolic: bool = False
    ) -> ClassPlacement:
        """The placement of classes whose members have ``numels`` (by class; size hints where symbolic): pointwise
        ones, or row reductions whose longest row is ``rnumel`` (the kernel's size hint along the row). Where a
        class has ``symbolic`` sizes, the classes start at multiples of the largest block the heuristics pick, as
        a member table of symbolic sizes does: a size hint bounds no block of a later call's sizes."""
        largest = MAX_REDUCTION_XBLOCK if reduction else MAX_XBLOCK
        align = largest if symbolic else block_alignment(max(max(n) for n in numels), reduction)
        total = sum(-(-n // align) * align for members in numels for n in members)
        hint = reduction_size_hint(total, align, rnumel) if reduction else pointwise_size_hint(total, align)
        return cls(align, hint)


def pointwise_size_hint(total: int, align: int) -> int:
    """A pointwise member-table kernel's size hint along x: the members' blocks end to end where members are padded
    to the largest block (no block the heuristics pick can span two), else ``align``, which bounds every block the
    heuristics pick (they never exceed the hint)."""
    return 1 << (total - 1).bit_length() if align == MAX_XBLOCK else align


def reduction_size_hint(total: int, align: int, rnumel: int) -> int:
    """A row-reduction member-table kernel's size hint along x, for rows of ``rnumel`` elements (0: symbolic): the
    members' blocks end to end (what the launch covers, as for one tensor of all their rows) where no block the
    heuristics or the autotuner can pick is larger than ``align`` (members padded to ``MAX_REDUCTION_XBLOCK`` rows
    of at least ``MIN_RNUMEL_FOR_TOTAL_HINT`` elements). Elsewhere ``align``, which bounds every block the heuristics
    pick (they never exceed the hint).

    Row reductions of 64 × [256, 512]: a hint of 256 rows gives Inductor's one-row, four-warp config (for "few"
    rows); the total, 16384, its two-row, one-warp one, as for one tensor of all rows.
    """
    wide_rows = align == MAX_REDUCTION_XBLOCK and rnumel >= MIN_RNUMEL_FOR_TOTAL_HINT
    return 1 << (total - 1).bit_length() if wide_rows and torch.version.hip is None else align


class MemberSizes(NamedTuple):
    """Where each member of a kernel starts among its blocks, and its numel: numbers, or size arguments' names."""

    starts: list[Any]
    numels: list[Any]


class MemberTableKernel(TritonKernel):
    """Inductor's Triton kernel for one member, with a prologue that makes it serve every member of a group.

    Member ``m`` owns the blocks ``[starts[m], starts[m] + padded numel) / XBLOCK``. Every tensor argument
    receives the table; the prologue replaces it by the member's address, and ``xnumel`` by its numel (and
    ``r0_numel`` by its row length, where one-row members reduce different lengths: ``Structure.rnumel``).

    Members of the same 2-d tiles (``tiles``) keep them: member ``m`` owns the rows ``[m, m + 1) * padded ynumel``
    of the y axis, ``ynumel`` padded to a multiple of the largest YBLOCK the heuristics may pick; x is Inductor's.
    As a class of a kernel of several bodies (``placement`` and ``tiles``), each of the dispatch kernel's blocks is
    one tile (:func:`.tuning.class_tile_width`): its rows and its x extent padded to whole tiles of every block.
    A group of a few members (``direct``: :data:`.tuning.MAX_DIRECT_MEMBERS`) takes their tensors, not a table, as
    Inductor's kernel takes one member's: the prologue picks the block's member's address of each tensor, and its
    start, numel and values are constants of the code (symbolic starts and numels: size arguments, which the
    wrapper computes per call, as Inductor's ``ks0``).
    """

    def __init__(
        self,
        *args: Any,
        structures: list[Structure],
        reduction: bool,
        call_site: str,
        member_values: dict[sympy.Symbol, list[int]],
        placement: ClassPlacement | None = None,
        tiles: dict[str, int] | None = None,
        direct: bool = False,
        **kwargs: Any,
    ) -> None:
        self.structures = structures
        #: the members' tensors are the kernel's arguments (:attr:`.group.MemberTableGroup.direct`)
        self.direct = direct
        #: a ``direct`` kernel of symbolic sizes: its members' starts and numels, its size arguments
        self.member_sizes: MemberSizes | None = None
        #: a ``direct`` kernel's tensor arguments of several members → each member's argument and the elements its
        #: address adds to the representative's offset (which the shared body adds)
        self.member_arguments: dict[str, list[tuple[str, int]]] = {}
        self.tiles = tiles
        lengths = [s.rnumel if s.rnumel_expr is None else s.rnumel_expr for s in structures]
        #: each member's row length, where they differ (the kernel is the longest row's, its masks kept; where they
        #: are symbolic, a looped reduction's, each member's length an expression the table gets per call)
        self.rnumels = lengths if len(set(lengths)) > 1 else None
        #: the name the prologue gives each value of the members → each member's value: the table rows after the
        #: numels (the divisors, the bounds of loaded indices, then the row lengths)
        self.member_values = {str(symbol): values for symbol, values in member_values.items()}
        if self.rnumels:
            self.member_values["r0_numel"] = self.rnumels
        #: names this call's member table: Inductor gives groups whose kernel sources are equal one kernel (and
        #: name), but their members, sizes and addresses differ
        self.call_site = call_site
        numels = [s.numel for s in structures]  # size hints where symbolic
        #: members of symbolic sizes: where each starts is known per call only (the table is filled then), and
        #: any block size the autotuner picks for the size hint must fit (members start at the largest one)
        self.symbolic = structures[0].numel_expr is not None
        largest_block = MAX_REDUCTION_XBLOCK if reduction else MAX_XBLOCK
        #: one class of a kernel of several bodies (:mod:`.dispatch`): where its members start
        self.placement = placement
        #: a class in 2-d tiles (each block one tile): its x extent padded to whole tiles (else 1: x is Inductor's),
        #: and its tiles' constant width, where x is narrow (:func:`.tuning.class_tile_width`)
        self.class_tiles = tiles is not None and placement is not None
        self.tile_width, self.narrow_width = 1, None
        if tiles is not None:  # members placed along y
            numels = [tiles["y"]] * len(structures)
            self.align = min(TRITON_MAX_BLOCK["Y"], 1 << (tiles["y"] - 1).bit_length())
            if placement is not None:
                self.narrow_width = class_tile_width(tiles)
                self.align, self.tile_width = class_tile_extents({"y": 1, "x": tiles["x"]}, self.narrow_width)
        elif placement is not None:
            self.align = placement.align
        else:
            self.align = largest_block if self.symbolic else block_alignment(numels[0], reduction)
        padded = [-(-n // self.align) * self.align for n in numels]
        self.starts = [sum(padded[:i]) for i in range(len(padded))]
        #: the blocks' elements end to end (a class in 2-d tiles: its padded rows times its padded x extent)
        self.total = sum(padded) * self.tile_width
        self.uniform = len(set(numels)) == 1 and not self.symbolic
        self.pad_to = padded_members(len(numels))
        self.layout = MemberTableLayout(len(numels), self.pad_to, len(self.member_values))
        super().__init__(*args, **kwargs)  # writes the range-tree header, which asks the members' masks
        self.size_hint_x = placement.size_hint_x if placement is not None else self._size_hint_x(reduction)

    @property
    def total_expr(self) -> sympy.Expr:
        """:attr:`total` for this call's sizes: an expression of the members' size symbols where they are symbolic
        (each member padded to whole blocks of ``align``)."""
        if not self.symbolic:
            return sympy.Integer(self.total)
        return sum(self._padded_numel_exprs())

    def _padded_numel_exprs(self) -> list[sympy.Expr]:
        """Each member's numel of symbolic size padded to whole blocks of ``align``: its blocks' extent."""
        return [FloorDiv(s.numel_expr + self.align - 1, self.align) * self.align for s in self.structures]

    def _size_hint_x(self, reduction: bool) -> int:
        """The kernel's size hint along x, from which Inductor's heuristics pick its configs
        (:func:`pointwise_size_hint`, :func:`reduction_size_hint`)."""
        if not reduction:
            return pointwise_size_hint(self.total, self.align)
        rnumel = math.prod(int(n) if isinstance(n, (int, sympy.Integer)) else 0
                           for prefix, n in self.numels.items() if prefix != "x")
        return reduction_size_hint(self.total, self.align, rnumel)

    def _has_constant_mask(self, tree: Any) -> bool:
        if self.tiles is not None:  # Inductor's masks of one member; along y always where the grid spreads over z
            tile = {"y": self.align, "x": self.tile_width}.get(tree.prefix)
            if self.class_tiles and tile and self.tiles[tree.prefix] % tile:
                return False  # a class's tiles past the member's extent
            return super()._has_constant_mask(tree) and not (tree.prefix == "y" and self._y_overflows())
        if tree.prefix == "x" and (self.symbolic or any(s.numel % self.align for s in self.structures)):
            return False
        if tree.prefix == "r0_" and self.rnumels:
            return False
        return super()._has_constant_mask(tree)


    def iteration_ranges_get_pid(self, entry: Any) -> str:
        if entry.prefix == ("x" if self.tiles is None else "y"):
            # (x: int64 already where it must be; y's block index: as Inductor's own program ids)
            wide = self.tiles is not None and self.index_dtype != "tl.int32"
            return f"{entry.prefix}block.to({self.index_dtype})" if wide else f"{entry.prefix}block"
        if entry.prefix == "x" and self.class_tiles:
            return "xtile"
        return super().iteration_ranges_get_pid(entry)

    def _y_overflows(self) -> bool:
        """Whether the members' rows take more blocks along y than a grid's y dimension holds (with blocks of one
        row): Inductor's grid then spreads them over y and z (``Grid2DWithYZOverflow``), and may launch more."""
        return self.tiles is not None and self.placement is None and self.total > get_max_y_grid()

    def _get_grid_type(self) -> type[triton_heuristics.GridExpr]:
        if self._y_overflows():
            return triton_heuristics.Grid2DWithYZOverflow
        return super()._get_grid_type()

    def codegen_kernel(self, name: str | None = None) -> str:
        # Inductor gives a 2-d kernel of two tensors square tiles (``TileHint.SQUARE``): the member's hint, whatever
        # tensors the other members add
        square = False
        if self.direct and len(self.structures) > 1:
            square = self.tiles is not None and len(self.args.python_argdefs()[0]) == 2
            self._take_members_tensors()
        if self.direct and self.symbolic:
            self._take_members_sizes()
        numel = self.numels["x"]
        if self.tiles is None:  # (2-d tiles: each member's size hints, which bound YBLOCK by ``align``)
            self.numels["x"] = self.size_hint_x
        # the autotuner benchmarks configs by running the kernel, after cloning the arguments it mutates; it cannot
        # clone what the table points to, nor the other members' buffers (Inductor names the representative's
        # alone as mutated), so a kernel that updates buffers in place gets one config, run once
        one_config = (
            {"triton.autotune_pointwise": False, "max_autotune": False, "max_autotune_pointwise": False,
             "coordinate_descent_tuning": False}
            if any(s.updates_in_place for s in self.structures) else {}
        )
        if self.tiles is not None and TRITON_MAX_BLOCK["Y"] > self.align:
            one_config["coordinate_descent_tuning"] = False
        elif self.tiles is None and min(self.size_hint_x, TRITON_MAX_BLOCK["X"]) > self.align:
            one_config["coordinate_descent_tuning"] = False  # it grows blocks up to that
        if not self.inside_reduction and self.tiles is None:
            self.min_elem_per_thread = max(self.min_elem_per_thread, self._min_elements_per_thread())
        try:
            with config.patch(one_config):
                source = super().codegen_kernel(name)
        finally:
            self.numels["x"] = numel
        return source.replace("tile_hint=TileHint.DEFAULT,", "tile_hint=TileHint.SQUARE,", 1) if square else source

    def _min_elements_per_thread(self) -> int:
        """Elements per thread for ``BYTES_PER_THREAD`` of the widest tensor dtype: the floor Inductor's pointwise
        configs take (``triton_config``'s ``min_elem_per_thread``), which otherwise give 16-bit kernels half the
        bytes per thread of fp32 ones (1024 elements on 4 warps)."""
        _, _, _, arg_types = self.args.python_argdefs()
        widest = max((t.itemsize for t in arg_types if isinstance(t, torch.dtype)), default=4)
        return max(1, BYTES_PER_THREAD // widest)

    def codegen_static_numels(self, code: Any) -> None:
        if self.tiles is not None:
            self._codegen_tiles_prologue(code)
            return
        stock = IndentedBuffer()
        super().codegen_static_numels(stock)
        for line in stock.getvalue().splitlines():
            if not line.startswith("xnumel = ") and not (self.rnumels and line.startswith("r0_numel = ")):
                code.writeline(line)
        small = self.index_dtype == "tl.int32" and self.total < 2**31 and not self.symbolic
        pid = "tl.program_id(0)" if self.placement is None else CLASS_PID  # a class: the block among its own
        pid = pid if small else f"{pid}.to(tl.int64)"
        code.writeline(f"xstart = {pid} * XBLOCK")
        if not self.direct:
            code.writeline(f"xtable = {self.tensor_args_of_table()[0][0]}.to(tl.pointer_type(tl.int64))")
        if self.uniform or self.direct:
            self._codegen_member_constants(code)
        else:
            code.writeline(f"xmembers = tl.arange(0, {self.pad_to})")
            code.writeline("xmember = tl.sum((tl.load(xtable + xmembers) <= xstart).to(tl.int32), 0) - 1")
            code.writeline("xblock = (xstart - tl.load(xtable + xmember)) // XBLOCK")
            code.writeline(f"xnumel = tl.load(xtable + {self.layout.numels_row} + xmember)")
        for j, (symbol, values) in enumerate(self.member_values.items()):
            loaded = f"tl.load(xtable + ({self.layout.value_row(j)} + xmember)).to({self.index_dtype})"
            code.writeline(f"{symbol} = {_per_member(values) if self.direct else loaded}")
        self._codegen_addresses(code)

    def _codegen_member_constants(self, code: Any) -> None:
        """The block's member, the member's first block and its numel, from constants of the code (members of one
        size, or a ``direct`` kernel's), or, of symbolic sizes, from its size arguments (:attr:`member_sizes`)."""
        if self.uniform:
            padded = self.total // len(self.structures)
            code.writeline(f"xmember = xstart // {padded}")
            code.writeline(f"xblock = (xstart - xmember * {padded}) // XBLOCK")
            code.writeline(f"xnumel = {self.structures[0].numel}")
            return
        starts, numels = self.member_sizes or MemberSizes(self.starts, [s.numel for s in self.structures])
        if len(starts) == 1:  # (one member of symbolic size)
            code.writeline("xblock = xstart // XBLOCK")
        else:
            code.writeline(f"xmember = {' + '.join(f'(xstart >= {start}).to(tl.int32)' for start in starts[1:])}")
            code.writeline(f"xblock = (xstart - {_per_member(starts)}) // XBLOCK")
        code.writeline(f"xnumel = {_per_member(numels)}")

    def _take_members_sizes(self) -> None:
        """Make each member's numel, and where each member after the first starts, size arguments of a ``direct``
        kernel of symbolic sizes (:attr:`member_sizes`), as Inductor's kernel takes its ``ks0``: the wrapper computes
        them from the size symbols on every call (an expression as Inductor's precomputed size, ``ps0 = 64*s52``)."""

        def argument(expr: sympy.Expr) -> str:
            return self.args.size(V.graph.sizevars.lookup_precomputed_size(expr))

        starts = itertools.accumulate(self._padded_numel_exprs()[:-1])
        self.member_sizes = MemberSizes(
            [0, *map(argument, starts)], [argument(s.numel_expr) for s in self.structures]
        )

    def _take_members_tensors(self) -> None:
        """Make each member's tensors the kernel's arguments too, beside the representative's (as Inductor's kernel
        takes a buffer: an input, an output), and note for each of the representative's which member's stands for
        it (:attr:`member_arguments`)."""
        argdefs, call_args, _, _ = self.args.python_argdefs()
        rep = self.structures[0]
        for argdef, outer in zip(argdefs, call_args):
            if outer not in rep.slots or argdef.name in self.member_arguments:
                continue
            if outer not in self.args.input_buffers and outer not in self.args.output_buffers:
                raise NotImplementedError(f"{outer} is neither an input nor an output of the kernel")
            take = self.args.input if outer in self.args.input_buffers else self.args.output
            slot = rep.slots.index(outer)
            itemsize = V.graph.get_dtype(outer).itemsize
            self.member_arguments[argdef.name] = [
                (argdef.name if s is rep else take(s.slots[slot]), offset // itemsize)
                for s, (_, offset) in zip(self.structures, self._members_of_slot(outer), strict=True)
            ]

    def _codegen_tiles_prologue(self, code: Any) -> None:
        """Inductor's numels of one member, then the member of the block's rows and its addresses. Blocks past
        the last member (a grid spread over y and z) take its addresses and rows past its ``ynumel``: masked."""
        super().codegen_static_numels(code)
        rows = self.total // self.tile_width // len(self.structures)  # each member's, padded
        pid = "tl.program_id(1)"
        member = f"ystart // {rows}"
        if self._y_overflows():
            pid = "(tl.program_id(1) + tl.program_id(2) * tl.num_programs(1))"
            member = f"tl.minimum({member}, {len(self.structures) - 1})"
        if self.class_tiles:  # a class: its block among its own, one tile, row of tiles after row of tiles
            code.writeline(f"xtile = {CLASS_PID} % ({self.tile_width} // XBLOCK)")
            pid = f"({CLASS_PID} // ({self.tile_width} // XBLOCK))"
        code.writeline(f"ystart = {pid} * YBLOCK")
        if not self.direct:
            code.writeline(f"xtable = {self.tensor_args_of_table()[0][0]}.to(tl.pointer_type(tl.int64))")
        code.writeline(f"xmember = {member}")
        code.writeline(f"yblock = (ystart - xmember * {rows}) // YBLOCK")
        self._codegen_addresses(code)

    def _codegen_addresses(self, code: Any) -> None:
        """Each tensor argument replaced by the block's member's address: read from the table, or, for a ``direct``
        kernel, picked among its members' arguments (one member: its arguments are its tensors already)."""
        aligned = self._aligned_args()
        if self.direct:
            self._codegen_member_addresses(code, aligned)
            return
        for slot, (arg, dtype) in enumerate(self.tensor_args_of_table()):
            row = self.layout.address_row(slot)
            address = f"tl.load(xtable + ({row} + xmember)).to(tl.pointer_type(tl.{dtype}))"
            code.writeline(f"{arg} = {f'tl.multiple_of({address}, 16)' if arg in aligned else address}")

    def _codegen_member_addresses(self, code: Any, aligned: set[str]) -> None:
        """A ``direct`` kernel's addresses of its block's member. Where one member's argument is another argument
        the prologue replaces (a buffer two members read in different slots), all are picked into temporaries first."""
        picked = {}
        for arg, members in self.member_arguments.items():
            if len({name for name, _ in members}) == 1:  # one buffer: the members' offsets into it
                offsets = [offset for _, offset in members]
                address = arg if len(set(offsets)) == 1 else f"{arg} + {_per_member(offsets)}"
            else:
                address = _per_member([f"{name} + {offset}" if offset else name for name, offset in members])
            if address != arg:
                picked[arg] = f"tl.multiple_of({address}, 16)" if arg in aligned else address
        reread = any(
            name != arg and name in picked for arg in picked for name, _ in self.member_arguments[arg]
        )
        for arg, address in picked.items():
            code.writeline(f"{arg}_of_member = {address}" if reread else f"{arg} = {address}")
        for arg in picked if reread else ():
            code.writeline(f"{arg} = {arg}_of_member")

    def _aligned_args(self) -> set[str]:
        """The tensor arguments whose address is 16-byte aligned for every member, by the rule Inductor applies to a
        stock kernel's pointer arguments (``tt.divisibility``: a buffer it allocated, or a graph input it checks and
        copies when misaligned) and the member's constant offset. The prologue says so to Triton, which then loads
        and stores 16 bytes per instruction: an address loaded from the table has no known alignment otherwise
        (Triton would load and store a 16-bit member 2 bytes at a time)."""
        if not config.triton.divisible_by_16:
            return set()
        argdefs, call_args, _, _ = self.args.python_argdefs()
        aligned = set()
        for argdef, outer in zip(argdefs, call_args):
            if outer not in self.structures[0].slots:
                continue
            if all(
                offset % 16 == 0 and not is_unaligned_buffer(TensorArg(argdef.name, name, V.graph.get_dtype(name)))
                for name, offset in self._members_of_slot(outer)
            ):
                aligned.add(argdef.name)
        return aligned

    def check_slots(self) -> None:
        """Raise unless every tensor the kernel takes is one its members' structure names (a buffer read through
        another's mutation is named as neither)."""
        argdefs, call_args, _, _ = self.args.python_argdefs()
        tensors = {arg for arg, _ in self.tensor_args_of_table()}
        named = self.structures if self.direct else self.structures[:1]
        for argdef, outer in zip(argdefs, call_args):
            if argdef.name in tensors and not any(outer in s.slots for s in named):
                raise NotImplementedError(f"the kernel reads {outer}, which its members' structure does not name")

    def _members_of_slot(self, outer: str) -> list[tuple[str, int]]:
        """For the representative's buffer ``outer``: each member's buffer in that slot, and the bytes its address
        adds to the representative's offset (which the shared body adds)."""
        rep = self.structures[0]
        slot = rep.slots.index(outer)
        itemsize = V.graph.get_dtype(outer).itemsize
        return [(s.slots[slot], (s.offsets[slot] - rep.offsets[slot]) * itemsize) for s in self.structures]

    def tensor_args_of_table(self) -> list[tuple[str, str]]:
        signature = self.triton_meta["signature"]
        return [
            (arg, _TRITON_DTYPE[kind[1:]])
            for arg, kind in signature.items()
            if isinstance(kind, str) and kind.startswith("*")
        ]

    def direct_arguments(self) -> list[DirectArgument]:
        """A ``direct`` kernel's tensor arguments (every member's), in its kernel's order."""
        argdefs, call_args, _, arg_types = self.args.python_argdefs()
        signature = self.triton_meta["signature"]
        names = list(signature)
        divisible = {
            names[index] for indices, hints in self.triton_meta["configs"][0].items() if ["tt.divisibility", 16] in hints
            for index in indices
        }
        tensors = {arg for arg, _ in self.tensor_args_of_table()}
        return [
            DirectArgument(a.name, outer, signature[a.name], dtype, a.name in divisible)
            for a, outer, dtype in zip(argdefs, call_args, arg_types)
            if a.name in tensors
        ]

    def call_kernel(self, name: str, node: Any = None, deallocate_ws: bool = True) -> None:
        wrapper = V.graph.wrapper_code
        wrapper.write_triton_header_once()
        argdefs, call_args, _, arg_types = self.args.python_argdefs()
        if self.direct:  # (regions of one allocation another group made: tensors, as Inductor's kernel takes)
            RegionsOfAllocations.of(wrapper).make_tensors(OrderedSet(a.buffer for a in self.direct_arguments()))
            table, total = None, wrapper.codegen_python_sizevar(self.total_expr)
        else:
            table, total = self.write_table(name)
            tensor_args = {arg for arg, _ in self.tensor_args_of_table()}
            call_args = [table if a.name in tensor_args else c for a, c in zip(argdefs, call_args)]
        first_numel = len(call_args)
        self.add_numel_to_call_args(name, call_args, arg_types)
        # the members' blocks end to end (the grid): along x, or along y where the kernel keeps 2-d tiles
        numels = [tree.prefix for tree in self.range_trees if not tree.is_reduction or self.inside_reduction]
        call_args[first_numel + numels.index("x" if self.tiles is None else "y")] = total
        wrapper.generate_kernel_call(
            name, call_args, triton=True, arg_types=arg_types,
            triton_meta=self.triton_meta, inductor_meta=self.inductor_meta,
        )
        if table is not None:
            wrapper.writeline(f"del {table}")

    def write_table(self, name: str) -> tuple[str, str]:
        """Write the wrapper's lines that make this call's member table (for kernel ``name``); returns the name of
        the table's tensor in the call and the members' blocks end to end (what the launch covers), as code."""
        wrapper = V.graph.wrapper_code
        argdefs, call_args, _, _ = self.args.python_argdefs()
        argdefs = [a.name for a in argdefs]
        tensor_args = {arg for arg, _ in self.tensor_args_of_table()}
        table = f"{name}_members_{self.call_site}"
        regions = RegionsOfAllocations.of(wrapper)
        aligned_args = self._aligned_args()
        by_slot, byte_offsets, spans, storages, aligned = [], [], [], OrderedSet(), []
        for arg_name, outer in zip(argdefs, call_args):
            if arg_name in tensor_args:
                members = self._members_of_slot(outer)
                offsets = iter(offset for _, offset in members)
                # regions of one allocation given as one tensor, with where each starts
                for tensor, starts, storage in regions.runs([name for name, _ in members]):
                    if arg_name in aligned_args and tensor in V.graph.graph_inputs:  # the table checks these
                        aligned.append(len(by_slot))
                    by_slot.append(tensor)
                    spans.append(len(starts))
                    byte_offsets.extend(start + next(offsets) for start in starts)
                    if storage is not None:
                        storages.add(storage)
        numels = [s.numel for s in self.structures]
        options = call_options = ""
        if not index_math.is_static(byte_offsets):  # (regions of one allocation of symbolic sizes): known per call
            call_options = f", byte_offsets=({''.join(wrapper.codegen_python_sizevar(o) + ', ' for o in byte_offsets)})"
        elif any(byte_offsets):
            options = f", byte_offsets={[int(o) for o in byte_offsets]!r}"
        if len(spans) < len(byte_offsets):
            options += f", spans={spans!r}"
        total = str(self.total)
        if self.symbolic:  # where members start is known per call: the table is filled from their numels
            exprs = [s.numel_expr for s in self.structures]
            options += f", align={self.align}"
            call_options += f", numels=({''.join(wrapper.codegen_python_sizevar(e) + ', ' for e in exprs)})"
            total = wrapper.codegen_python_sizevar(self.total_expr)
            numels = None
        values = [v for values in self.member_values.values() for v in values]
        if not index_math.is_static(values):  # (a jagged bag's ids count): known per call
            call_options += f", values=({''.join(wrapper.codegen_python_sizevar(v) + ', ' for v in values)})"
        elif values:
            options += f", values={[int(v) for v in values]!r}"
        if aligned:
            options += f", aligned={aligned!r}"
        if buffers.cudagraph_trees():  # the table must not live in a graph's memory pool
            options += ", outside_graph_pools=True"
        wrapper.add_import_once("from optimus_ir.runtime import MemberTable")
        starts = None if self.symbolic else self.starts
        wrapper.header.writeline(f"{table} = MemberTable({starts!r}, {numels!r}, {self.pad_to}{options})")
        wrapper.writeline(f"{table}_now = {table}({', '.join(by_slot)}{call_options})")
        for storage in storages:
            regions.after_table(storage)
        return f"{table}_now", total


def _per_member(values: list[Any]) -> str:
    """Code for the value of the block's member (``xmember``) among ``values``, one per member."""
    code = str(values[0])
    for j in range(1, len(values)):
        if values[j] != values[0]:
            code = f"tl.where(xmember == {j}, {values[j]}, {code})"
    return code
