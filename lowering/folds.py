"""The folds of split/cat rewrites: pieces traced into loop bodies, grouped into progressions of equal pieces,
and each progression's index expressions folded into one (:mod:`optimus_ir.index_math`), written into views of
one output; later pieces read a fold's computation where an earlier cat wrote it (:class:`ReadThroughFolds`)."""

from __future__ import annotations

import dataclasses
import functools
import operator
from collections.abc import Callable, Sequence
from typing import Any

import sympy
import torch
from torch._inductor.ops_handler import WrapperHandler
from torch.utils._sympy.functions import FloorDiv, ModularIndexing

from optimus_ir import index_math
from optimus_ir.graph_state import current as graph_state
from optimus_ir.loop_body import replay
from optimus_ir.lowering.precision import as_loaded

aten = torch.ops.aten


@dataclasses.dataclass
class _TracedPiece:
    """A cat input traced into a LoopBody over its own index space, and where it lands along the cat dim."""

    box: Any  # the TensorBox given to cat
    start: sympy.Expr  # its offset along the cat dimension
    size: list[sympy.Expr]
    body: Any  # torch._inductor.loop_body.LoopBody
    loop_vars: list[sympy.Symbol]

    @functools.cached_property
    def ops_key(self) -> tuple[Any, ...]:
        """What must be equal for two pieces to share one body: ops graph, buffers read, dtype."""
        blocks = [self.body.root_block.debug_str("body")]
        blocks += [block.debug_str(name) for name, block in self.body.subblocks.items()]
        return (tuple(blocks), self.box.get_dtype(), tuple(self.body.indexing_exprs))


def trace(box: Any, start: sympy.Expr) -> _TracedPiece:
    from torch._inductor import dependencies, ir
    from torch._inductor.loop_body import LoopBody
    from torch._inductor.virtualized import V

    size = list(box.get_size())
    (loop_vars,), var_ranges = dependencies.index_vars_no_squeeze(size, prefix="q")
    loader = box.make_loader()

    def read_through(index: Sequence[sympy.Expr]) -> Any:
        with V.set_ops_handler(ReadThroughFolds(V.ops, var_ranges)):
            return loader(index)

    try:
        body = LoopBody(read_through, [loop_vars], var_ranges, loop_vars, [])
    except AssertionError as error:  # Inductor's "convert FlexibleLayout to FixedLayout first"
        if "FlexibleLayout" not in str(error):
            raise
        # a buffer the piece reads has a layout Inductor may still change: fix it as it is now (as a consumer that
        # needs its strides, e.g. an extern kernel, makes Inductor do), so that the traced index stays right
        for name in box.get_read_names():
            buffer = V.graph.try_get_buffer(name)
            if buffer is not None and isinstance(buffer.get_layout(), ir.FlexibleLayout):
                buffer.freeze_layout()
        body = LoopBody(read_through, [loop_vars], var_ranges, loop_vars, [])
    return _TracedPiece(box, start, size, body, loop_vars)


class ReadThroughFolds(WrapperHandler):
    """Ops handler for tracing a piece: a load from a cat output this rule wrote through folds, of a region that
    one fold wrote, becomes that fold's computation (so chains of split → op → cat layers stay one kernel).

    Before: ``load(cat_1, 1024*q0 + q1 + 64)`` (``cat_1`` written by a tanh fold at columns 64..127).
    After: ``tanh(load(x, 1024*q0 + q1 + 64))``. The cat output is left to dead-code elimination when nothing
    else reads it. Loads whose region is not proven (sympy bounds over the piece's loop ranges, those of symbolic
    sizes bounded by the shape environment's ranges of the symbols) stay loads.
    """

    def __init__(self, inner: Any, var_ranges: dict[sympy.Symbol, sympy.Expr]) -> None:
        super().__init__(inner)
        self.var_ranges = var_ranges
        # An op that uses its input twice (silu: x * sigmoid(x)) loads it twice; computing the fold once per
        # index keeps the trace linear in the depth of a chain instead of exponential.
        self.read: dict[tuple[str, sympy.Expr], Any] = {}

    def load(self, name: str, index: sympy.Expr) -> Any:
        from torch._inductor.virtualized import V

        written = graph_state().written_by_folds.get(name)
        if written is None or name in V.graph.mutated_buffers:
            return self._inner.load(name, index)
        if (name, index) not in self.read:
            self.read[name, index] = self._read_through(written, name, index)
        return self.read[name, index]

    def _read_through(self, written: tuple[Any, ...], name: str, index: sympy.Expr) -> Any:
        from torch._inductor.virtualized import V
        from torch.utils._sympy.value_ranges import bound_sympy

        folds, size, stride, dim = written
        # sizes off the cat dim may be symbols (a batch that changes), bounded by the shape environment
        size_ranges = V.graph.sizevars.shape_env.var_to_range
        coords = [
            index_math.bounded_div_mod(
                FloorDiv(index, st) if i == 0 else ModularIndexing(index, st, sz), self.var_ranges, size_ranges
            )
            for i, (st, sz) in enumerate(zip(stride, size))
        ]
        bounds = bound_sympy(coords[dim], index_math.loop_value_ranges(self.var_ranges, size_ranges))
        if bounds.lower.is_Integer and bounds.upper.is_Integer:
            for fold in folds:
                fold_index = fold.index_for(coords, int(bounds.lower), int(bounds.upper), dim)
                if fold_index is not None:
                    return as_loaded(self, fold.value(fold_index), V.graph.get_dtype(name))
        return self._inner.load(name, index)


@dataclasses.dataclass
class _Progression:
    """Pieces with one body and size whose output offsets and index expressions all grow by a constant step
    from one member to the next: ``member m`` = first member shifted by ``m * step``."""

    pieces: list[_TracedPiece]
    start_step: sympy.Expr  # along the cat dimension; the piece size when the members are contiguous
    steps: dict[str, sympy.Expr]  # per indexing-expression name

    def try_add(self, piece: _TracedPiece) -> bool:
        first = self.pieces[0]
        if piece.ops_key != first.ops_key or piece.size != first.size:
            return False
        start_step = index_math.constant_step([p.start for p in self.pieces] + [piece.start], ())
        if start_step is None:
            return False
        steps = {}
        for name in first.body.indexing_exprs:
            exprs = [p.body.indexing_exprs[name] for p in self.pieces] + [piece.body.indexing_exprs[name]]
            steps[name] = index_math.constant_step(exprs, first.loop_vars)
            if steps[name] is None:
                return False
        self.pieces.append(piece)
        self.start_step, self.steps = start_step, steps
        return True


def progressions_of(pieces: Sequence[_TracedPiece], dim: int) -> list[_Progression]:
    """Each piece joins the first progression it extends, else starts one (so alternating ops give two)."""
    progressions: list[_Progression] = []
    for piece in pieces:
        if not any(p.try_add(piece) for p in progressions):
            zeros = {name: sympy.Integer(0) for name in piece.body.indexing_exprs}
            progressions.append(_Progression([piece], piece.size[dim], zeros))
    return progressions


@dataclasses.dataclass
class Fold:
    """One Pointwise-to-be: ``template``'s body with index expressions ``exprs`` over ``ranges`` (variables
    ``out_vars``), writing the output elements at ``offset + sum(var * stride)`` (in output elements)."""

    template: _TracedPiece
    ranges: list[sympy.Expr]
    out_vars: list[sympy.Symbol]
    exprs: dict[str, sympy.Expr]
    stride: list[sympy.Expr]
    offset: sympy.Expr
    start: sympy.Expr  # first element along the cat dimension
    member_step: sympy.Expr | None  # for members at a stride: distance between members along the cat dimension
    dim: int  # the cat dimension
    #: a pointwise consumer of the cat applied to every value (``CatConsumerIntoPieces``): (value, cat coords) → value
    epilogue: Callable[[Any, list[sympy.Expr]], Any] | None = None

    def value(self, index: Sequence[sympy.Expr]) -> Any:
        """The body at ``index`` (in ``ranges``), emitted through the current ops handler."""
        from torch._inductor.utils import sympy_subs

        replacements = dict(zip(self.out_vars, index))
        value = replay(self.template.body, {n: sympy_subs(e, replacements) for n, e in self.exprs.items()})
        return value if self.epilogue is None else self.epilogue(value, self.cat_coords(index))

    def cat_coords(self, index: Sequence[sympy.Expr]) -> list[sympy.Expr]:
        """The cat-output coordinates of ``index`` (in ``ranges``)."""
        dim = self.dim
        if self.member_step is None:
            return [*index[:dim], index[dim] + self.start, *index[dim + 1 :]]
        return [*index[:dim], self.start + index[dim] * self.member_step + index[dim + 1], *index[dim + 2 :]]

    def pointwise(self) -> Any:
        """ONE Pointwise that replays the template body with the folded index expressions."""
        from torch._inductor import ir

        box = self.template.box
        return ir.Pointwise.create(device=box.get_device(), dtype=box.get_dtype(), inner_fn=self.value, ranges=self.ranges)

    def index_for(self, coords: list[sympy.Expr], lo: int, hi: int, dim: int) -> list[sympy.Expr] | None:
        """Our index for cat-output coordinates ``coords`` whose cat-dim coordinate is proven in ``[lo, hi]``;
        None unless that whole interval is written by this fold (within one member when strided)."""
        first = int(self.start)
        if self.member_step is None:
            if first <= lo and hi < first + int(self.ranges[dim]):
                return [*coords[:dim], coords[dim] - first, *coords[dim + 1 :]]
            return None
        step, size, members = int(self.member_step), int(self.ranges[dim + 1]), int(self.ranges[dim])
        member = (lo - first) // step
        if lo < first or member >= members or (lo - first) % step + (hi - lo) >= size:
            return None
        return [*coords[:dim], sympy.Integer(member), coords[dim] - first - member * step, *coords[dim + 1 :]]

    def affine_map(self, out_var: sympy.Symbol) -> dict[str, sympy.Expr] | None:
        """The expressions with ``out_var`` counted from the cat's start instead of ours; None unless affine."""
        shifted = {name: sympy.expand(e.xreplace({out_var: out_var - self.start})) for name, e in self.exprs.items()}
        if any(e.has(FloorDiv, ModularIndexing) for e in shifted.values()):
            return None
        return shifted


def _out_vars(rank: int) -> list[sympy.Symbol]:
    return [sympy.Symbol(f"optimus_o{i}", integer=True, nonnegative=True) for i in range(rank)]


def fold_contiguous(prog: _Progression, dim: int, out_stride: list[sympy.Expr]) -> Fold:
    """Members side by side: one range along the cat dim, piece = FloorDiv, offset in piece = ModularIndexing."""
    from torch._inductor.virtualized import V

    first = prog.pieces[0]
    ranges = list(first.size)
    ranges[dim] = first.size[dim] * len(prog.pieces)
    out_vars = _out_vars(len(ranges))
    others = {v: o for i, (v, o) in enumerate(zip(first.loop_vars, out_vars)) if i != dim}
    exprs = {
        name: V.graph.sizevars.simplify_with_ranges(
            index_math.fold_pieces(expr, first.loop_vars[dim], first.size[dim], prog.steps[name], out_vars[dim], others),
            dict(zip(out_vars, ranges)),
        )
        for name, expr in first.body.indexing_exprs.items()
    }
    offset = first.start * out_stride[dim]
    return Fold(first, ranges, out_vars, exprs, list(out_stride), offset, first.start, None, dim)


def fold_strided(prog: _Progression, dim: int, out_stride: list[sympy.Expr]) -> Fold:
    """Members at a stride: an extra loop over the members in front of the cat dim, index grows by step each."""
    first = prog.pieces[0]
    ranges = [*first.size[:dim], sympy.Integer(len(prog.pieces)), *first.size[dim:]]
    out_vars = _out_vars(len(ranges))
    member, piece_vars = out_vars[dim], out_vars[:dim] + out_vars[dim + 1 :]
    replacements = dict(zip(first.loop_vars, piece_vars))
    exprs = {
        name: expr.xreplace(replacements) + prog.steps[name] * member
        for name, expr in first.body.indexing_exprs.items()
    }
    stride = [*out_stride[:dim], prog.start_step * out_stride[dim], *out_stride[dim:]]
    offset = first.start * out_stride[dim]
    return Fold(first, ranges, out_vars, exprs, stride, offset, first.start, prog.start_step, dim)


def merge_affine(folds: list[Fold], dim: int) -> list[Fold]:
    """Join neighbours (one ends where the next starts, neither strided) with one body whose index maps are the
    same affine map of the cat coordinate.

    E.g. ``split(x, [16, 16, 32])`` → relu → cat in order: runs of sizes 16+16 and 32 both read ``x`` at the
    output position, so they are one Pointwise ``relu(x)``. Folds come in order of their first piece, so two
    runs of one body can follow each other in the list with another body's strided members between them
    (``[relu] * 3, neg, [relu] * 3, neg, [relu] * 4``: relu's runs are rows 4-6 and 8-11): those stay apart.
    """
    merged = [folds[0]]
    for fold in folds[1:]:
        last = merged[-1]
        adjacent = (
            last.member_step is None and fold.member_step is None and fold.start == last.start + last.ranges[dim]
        )
        if adjacent and last.template.ops_key == fold.template.ops_key:
            var = last.out_vars[dim]
            last_map = last.affine_map(var)
            if last_map is not None and last_map == fold.affine_map(var):
                ranges = list(last.ranges)
                ranges[dim] = last.ranges[dim] + fold.ranges[dim]
                merged[-1] = dataclasses.replace(last, ranges=ranges)
                continue
        merged.append(fold)
    return merged


def write_into_views(
    folds: list[Fold], size: list[sympy.Expr], stride: list[sympy.Expr], dim: int, direct: Sequence[Any] = ()
) -> Any:
    """A ConcatKernel output of ``size`` whose every fold is realized into its (possibly strided) view, and each
    ``direct`` piece (a buffer with its start along ``dim``) is made to write straight into its region.

    ``ConcatKernel.create`` only places inputs side by side; strided members need their own views, so this is
    its construction with ``ReinterpretView``s of our choosing. Only a cat written entirely by folds is listed in
    ``GraphState.written_by_folds`` (a consumer moved into the folds must see every element).
    """
    from torch._inductor import ir
    from torch._inductor.virtualized import V

    box = folds[0].template.box
    device, dtype = box.get_device(), box.get_dtype()
    concat = ir.ConcatKernel(name=None, layout=ir.FixedLayout(device, dtype, size, stride), inputs=[])
    storage = ir.StorageBox(concat)
    regions = [(fold.pointwise(), fold.ranges, fold.stride, fold.offset) for fold in folds]
    regions += [(x, x.get_size(), stride, start * stride[dim]) for x, start in direct]
    for data, ranges, region_stride, offset in regions:
        view = ir.ReinterpretView(data=storage, layout=ir.FixedLayout(device, dtype, ranges, region_stride, offset))
        concat.inputs.append(ir.ConcatKernel.realize_into(data, view))
    concat.name = V.graph.register_buffer(concat)
    concat.inputs = ir.ConcatKernel.unwrap_storage(concat.inputs)
    V.graph.register_operation(concat)
    if not direct and reader_besides_cats(V.graph.current_node) is None:
        graph_state().written_by_folds[concat.name] = (folds, size, stride, dim)
    return storage


#: Ops through which a later cat's pieces still read a cat's elements one by one (and so can read through its folds).


_VIEWS_OF_PIECES = frozenset({
    operator.getitem, aten.split.Tensor, aten.split_with_sizes.default, aten.slice.Tensor, aten.narrow.default,
    aten.select.int, aten.unbind.int,
})


def reader_besides_cats(fx_cat: Any) -> Any:
    """A use of ``fx_cat``'s value by an op that loads it from memory (not another cat through views and
    elementwise ops, nor a return of an elementwise op of it), or None.

    Only with none is reading through its folds (:class:`ReadThroughFolds`) a saving: a cat that is also returned,
    reduced, multiplied by a matrix, ... is written anyway, and a later piece that recomputed it instead of loading
    it would only repeat work (in a backward, where each layer's gradient is also reduced into a weight gradient,
    the bodies would grow with the depth of the chain).
    """
    returned = [user for user in fx_cat.users if user.op == "output"]
    if returned:
        return returned[0]
    seen, todo = set(), list(fx_cat.users)
    while todo:
        node = todo.pop()
        if node in seen or node.op == "output" or node.target is aten.cat.default:
            continue
        seen.add(node)
        pointwise = isinstance(node.target, torch._ops.OpOverload) and torch.Tag.pointwise in node.target.tags
        if node.op != "call_function" or not (pointwise or node.target in _VIEWS_OF_PIECES):
            return node
        todo.extend(node.users)
    return None
