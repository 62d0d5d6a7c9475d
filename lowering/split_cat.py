"""Lowering-time rewrites of split/slice/chunk → pointwise → cat chains.

Each cat input ("piece") is, at lowering time, an unrealized Inductor IR node: a ``Pointwise`` whose ``inner_fn``
reads some buffer through views (``split`` and ``chunk`` lower to ``SliceView``s). We trace every piece into a
``LoopBody`` (ops graph + sympy index expressions, the same form the scheduler uses), compare pieces structurally,
and build the cat's output as ONE ``Pointwise`` whose body is a piece's body with index expressions folded over
the pieces by :mod:`optimus_ir.index_math` — or, when pieces have different bodies, one Pointwise per progression
of equal pieces, written into views of one output and merged into one kernel by the scheduler. No piece buffer is
materialized and per-element work does not depend on the number of pieces.
"""

from __future__ import annotations

import dataclasses
import functools
import operator
import weakref
from collections.abc import Callable, Sequence
from typing import Any

import sympy
import torch
from torch._inductor.ops_handler import WrapperHandler
from torch.utils._sympy.functions import FloorDiv, ModularIndexing

from optimus_ir import index_math
from optimus_ir.lowering.precision import as_loaded
from optimus_ir.registry import LoweringRule, NotApplicable, Reject, register

aten = torch.ops.aten

#: Groups of buffer names (per graph) that a rule wants in one kernel with block-level dispatch;
#: consumed by :class:`optimus_ir.scheduler_hooks.piece_groups.PieceGroupToComboKernel`.
PIECE_GROUPS: weakref.WeakKeyDictionary[Any, list[tuple[str, ...]]] = weakref.WeakKeyDictionary()

#: Per graph, the cat outputs this rule wrote through folds: buffer name → (folds, size, stride, cat dim). A later
#: piece that reads a region one fold wrote reads that fold's computation instead (:class:`_ReadThroughFolds`).
#: Cats returned from the graph are not listed: they are written anyway, so reading them is cheaper.
WRITTEN_BY_FOLDS: weakref.WeakKeyDictionary[Any, dict[str, tuple[list[Any], list[Any], list[Any], int]]] = (
    weakref.WeakKeyDictionary()
)


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


def _trace(box: Any, start: sympy.Expr) -> _TracedPiece:
    from torch._inductor import dependencies, ir
    from torch._inductor.loop_body import LoopBody
    from torch._inductor.virtualized import V

    size = list(box.get_size())
    (loop_vars,), var_ranges = dependencies.index_vars_no_squeeze(size, prefix="q")
    loader = box.make_loader()

    def read_through(index: Sequence[sympy.Expr]) -> Any:
        with V.set_ops_handler(_ReadThroughFolds(V.ops, var_ranges)):
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


class _ReadThroughFolds(WrapperHandler):
    """Ops handler for tracing a piece: a load from a cat output this rule wrote through folds, of a region that
    one fold wrote, becomes that fold's computation (so chains of split → op → cat layers stay one kernel).

    Before: ``load(cat_1, 1024*q0 + q1 + 64)`` (``cat_1`` written by a tanh fold at columns 64..127).
    After: ``tanh(load(x, 1024*q0 + q1 + 64))``. The cat output is left to dead-code elimination when nothing
    else reads it. Loads whose region is not proven (sympy bounds over the piece's loop ranges) stay loads.
    """

    def __init__(self, inner: Any, var_ranges: dict[sympy.Symbol, sympy.Expr]) -> None:
        super().__init__(inner)
        self.var_ranges = var_ranges
        # An op that uses its input twice (silu: x * sigmoid(x)) loads it twice; computing the fold once per
        # index keeps the trace linear in the depth of a chain instead of exponential.
        self.read: dict[tuple[str, sympy.Expr], Any] = {}

    def load(self, name: str, index: sympy.Expr) -> Any:
        from torch._inductor.virtualized import V

        written = WRITTEN_BY_FOLDS.get(V.graph, {}).get(name)
        if written is None or name in V.graph.mutated_buffers:
            return self._inner.load(name, index)
        if (name, index) not in self.read:
            self.read[name, index] = self._read_through(written, name, index)
        return self.read[name, index]

    def _read_through(self, written: tuple[Any, ...], name: str, index: sympy.Expr) -> Any:
        from torch._inductor.virtualized import V
        from torch.utils._sympy.value_ranges import ValueRanges, bound_sympy

        folds, size, stride, dim = written
        coords = [
            index_math.bounded_div_mod(
                FloorDiv(index, st) if i == 0 else ModularIndexing(index, st, sz), self.var_ranges
            )
            for i, (st, sz) in enumerate(zip(stride, size))
        ]
        bounds = bound_sympy(coords[dim], {v: ValueRanges(0, int(r) - 1) for v, r in self.var_ranges.items()})
        if bounds.lower.is_integer and bounds.upper.is_integer:
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


def _progressions(pieces: Sequence[_TracedPiece], dim: int) -> list[_Progression]:
    """Each piece joins the first progression it extends, else starts one (so alternating ops give two)."""
    progressions: list[_Progression] = []
    for piece in pieces:
        if not any(p.try_add(piece) for p in progressions):
            zeros = {name: sympy.Integer(0) for name in piece.body.indexing_exprs}
            progressions.append(_Progression([piece], piece.size[dim], zeros))
    return progressions


def replay(body: Any, indexing: dict[str, sympy.Expr]) -> Any:
    """Run a LoopBody's ops under the current ops handler with the given index expressions.

    This is ``LoopBody.__call__`` with the index expressions given directly instead of by variable substitution.
    """
    saved = body.indexing
    body.indexing = indexing
    try:
        return body.root_block()
    finally:
        body.indexing = saved


@dataclasses.dataclass
class _Fold:
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


def _fold_contiguous(prog: _Progression, dim: int, out_stride: list[sympy.Expr]) -> _Fold:
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
    return _Fold(first, ranges, out_vars, exprs, list(out_stride), offset, first.start, None, dim)


def _fold_strided(prog: _Progression, dim: int, out_stride: list[sympy.Expr]) -> _Fold:
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
    return _Fold(first, ranges, out_vars, exprs, stride, offset, first.start, prog.start_step, dim)


def _merge_affine(folds: list[_Fold], dim: int) -> list[_Fold]:
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


def _write_into_views(
    folds: list[_Fold], size: list[sympy.Expr], stride: list[sympy.Expr], dim: int, direct: Sequence[Any] = ()
) -> Any:
    """A ConcatKernel output of ``size`` whose every fold is realized into its (possibly strided) view, and each
    ``direct`` piece (a buffer with its start along ``dim``) is made to write straight into its region.

    ``ConcatKernel.create`` only places inputs side by side; strided members need their own views, so this is
    its construction with ``ReinterpretView``s of our choosing. Only a cat written entirely by folds is listed in
    :data:`WRITTEN_BY_FOLDS` (a consumer moved into the folds must see every element).
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
    if not direct and _reader_besides_cats(V.graph.current_node) is None:
        WRITTEN_BY_FOLDS.setdefault(V.graph, {})[concat.name] = (folds, size, stride, dim)
    return storage


#: Ops through which a later cat's pieces still read a cat's elements one by one (and so can read through its folds).
_VIEWS_OF_PIECES = frozenset({
    operator.getitem, aten.split.Tensor, aten.split_with_sizes.default, aten.slice.Tensor, aten.narrow.default,
    aten.select.int, aten.unbind.int,
})


def _reader_besides_cats(fx_cat: Any) -> Any:
    """A use of ``fx_cat``'s value by an op that loads it from memory (not another cat through views and
    elementwise ops, nor a return of an elementwise op of it), or None.

    Only with none is reading through its folds (:class:`_ReadThroughFolds`) a saving: a cat that is also returned,
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


def _write_as_one_kernel_group(
    folds: list[_Fold], size: list[sympy.Expr], stride: list[sympy.Expr], dim: int, direct: Sequence[Any] = ()
) -> tuple[Any, tuple[str, ...]]:
    """:func:`_write_into_views`, with the kernels that write it recorded in :data:`PIECE_GROUPS` (one kernel)."""
    from torch._inductor.virtualized import V

    storage = _write_into_views(folds, size, stride, dim, direct)
    group = tuple(buf.get_name() for buf in storage.data.inputs)
    PIECE_GROUPS.setdefault(V.graph, []).append(group)
    return storage, group


def _how_later_pieces_read(fx_cat: Any, direct: bool = False) -> str:
    """For the dump: whether later cats' pieces recompute this cat's elements or load them."""
    if direct:
        return "later cats load it (not every element is a fold's)"
    reader = _reader_besides_cats(fx_cat)
    if reader is None:
        return "later cats read through it"
    if reader.op == "output":
        return "returned, so written"
    return f"also read by {reader.name}, so written and loaded by later cats"


def _check_consumers(fx_cat: Any) -> None:
    """Reject when a piece has a consumer besides the cat.

    Stock Inductor computes such a piece once, writes it straight into the cat's output, and fuses the other
    consumer into the same kernel (e.g. the ``le`` masks a training forward saves for relu's backward); our
    kernel would compute the piece a second time, so we leave the cat to stock Inductor.
    """
    for piece in fx_cat.args[0]:
        if not isinstance(piece, torch.fx.Node):
            continue
        for user in piece.users:
            if user is not fx_cat:
                what = "graph output" if user.op == "output" else str(user.target)
                raise Reject(f"piece {piece.name} has another consumer {user.name} ({what}); stock Inductor "
                             "writes it once and fuses that consumer with it")


def _check_inputs(inputs: Sequence[Any]) -> None:
    from torch._inductor import ir

    devices = {str(x.get_device()) for x in inputs}
    if len(devices) != 1:
        raise Reject(f"inputs on several devices {sorted(devices)}")
    for x in inputs:
        if not index_math.is_static(x.get_size()):
            raise Reject(f"symbolic sizes {list(x.get_size())}: not proven, stock lowering")


def _computed_by_own_kernel(x: Any, dtype: torch.dtype) -> bool:
    """Whether cat input ``x`` is already a buffer of ``dtype`` that its kernel can write straight into the cat
    output, as stock Inductor's ConcatKernel makes it (folding it would add a copy)."""
    from torch._inductor import ir

    if x.get_dtype() != dtype or not ir.is_storage_and_layout(x):
        return False
    storage, _ = ir.as_storage_and_layout(x, freeze=False)
    return ir.ConcatKernel.can_realize_into_without_copy(storage) and not storage.is_input_buffer()


def _nonempty(inputs: Sequence[Any], dim: int) -> list[Any]:
    """Drop pieces with no elements along ``dim`` (cat ignores them)."""
    from torch._inductor.virtualized import V

    return [x for x in inputs if not V.graph.sizevars.statically_known_equals(x.get_size()[dim], 0)]


@register
class SplitCatToPointwise(LoweringRule):
    """cat of pointwise functions of views (split/chunk/slice pieces) → one Pointwise, any number of pieces.

    Before (stock Inductor, 64 pieces; more than 8 cat inputs always give a ConcatKernel)::

        buf0 = ComputedBuffer(Pointwise(relu(load(x, 4096*p0 + p1 + 4032))), NonOwningLayout(cat[:, 0:64]))
        ...                                                             # 64 kernels, one per piece
        buf63 = ComputedBuffer(Pointwise(relu(load(x, 4096*p0 + p1))), NonOwningLayout(cat[:, 4032:4096]))
        cat = ConcatKernel(inputs=[buf0, ..., buf63])

    After (``cat(reversed([relu(p) for p in x.split(64, 1)]), 1)``)::

        cat = Pointwise(relu(load(x, 4096*o0 + ModularIndexing(o1, 1, 64) - 64*FloorDiv(o1, 64) + 4032)))

    Pieces are traced to LoopBodies and grouped into progressions: pieces with equal ops, buffers, sizes and dtype
    whose output offsets and index expressions grow by one constant each from member to member
    (:func:`index_math.constant_step`). Contiguous members fold into one range (:func:`index_math.fold_pieces`);
    members at a stride (e.g. ``[tanh, sigmoid, tanh, sigmoid, ...]``: two progressions) get an extra loop over
    the members. If one progression covers the cat, the result is that one Pointwise, unrealized, so consumers fuse
    with it. Otherwise each progression is realized into its (strided) view of one output and the group is recorded
    in :data:`PIECE_GROUPS`: the scheduler puts it in one kernel that dispatches per progression at block level,
    so code size grows with the number of distinct bodies, not pieces. With few pieces
    (``config.max_pointwise_cat_inputs``) stock Inductor's pointwise cat, fused into the consumers, is kept instead.
    An input that is already a buffer of its own kernel (a matmul, a reduction) is made to write straight into its
    region, as stock does; the other pieces are folded around it. A later cat's pieces read this cat through its
    folds only when nothing else loads it (:func:`_reader_besides_cats`): otherwise it is written anyway, and
    recomputing it in every later layer would only repeat work.
    """

    name = "SplitCatToPointwise"
    pass_name = "splitcat"
    op = aten.cat.default

    def rewrite(self, inputs: Sequence[Any], dim: int = 0) -> tuple[Any, str]:
        from torch._inductor import config, ir
        from torch._inductor.lowering import ELEMENTWISE_TYPE_PROMOTION_KIND, get_promoted_dtype, to_dtype
        from torch._inductor.virtualized import V

        if len(inputs) < 2:
            raise Reject("fewer than two inputs")
        dim = dim % len(inputs[0].get_size()) if inputs[0].get_size() else 0
        _check_consumers(V.graph.current_node)
        _check_inputs(inputs)
        dtype = get_promoted_dtype(*inputs, type_promotion_kind=ELEMENTWISE_TYPE_PROMOTION_KIND.DEFAULT)
        inputs = _nonempty(inputs, dim)
        if len(inputs) < 2:
            raise Reject("fewer than two non-empty inputs")
        starts = index_math.piece_starts([x.get_size()[dim] for x in inputs])
        own_kernel = [_computed_by_own_kernel(x, dtype) for x in inputs]
        direct = [(x, start) for x, start, own in zip(inputs, starts, own_kernel) if own]
        if len(inputs) - len(direct) < 2:
            raise Reject(f"{len(direct)} of {len(inputs)} inputs are computed by their own kernels, which stock "
                         "Inductor makes write straight into the cat output (no copy): nothing to fold")
        pieces = [_trace(to_dtype(x, dtype), start) for x, start, own in zip(inputs, starts, own_kernel) if not own]
        size = list(inputs[0].get_size())
        size[dim] = sum(x.get_size()[dim] for x in inputs)
        stride = ir.FlexibleLayout.contiguous_strides(size)
        progressions = _progressions(pieces, dim)
        folds = _merge_affine(
            [
                _fold_contiguous(p, dim, stride) if p.start_step == p.pieces[0].size[dim] else _fold_strided(p, dim, stride)
                for p in progressions
            ],
            dim,
        )
        summary = (
            f"{len(pieces)} pieces along dim {dim} → {len(progressions)} progression(s) of "
            f"{[len(p.pieces) for p in progressions]} → {len(folds)} Pointwise"
        )
        if direct:
            summary += f" + {len(direct)} input(s) computed by their own kernels (no copy)"
        if len(folds) == 1 and not direct:
            return folds[0].pointwise(), f"{summary}, index {_describe(folds[0].exprs)}"
        if len(inputs) <= config.max_pointwise_cat_inputs:
            raise Reject(f"{summary}: stock lowers up to {config.max_pointwise_cat_inputs} pieces as one pointwise cat "
                         "that fuses into its consumers, which beats a separate kernel")
        storage, group = _write_as_one_kernel_group(folds, size, stride, dim, direct)
        return ir.TensorBox(storage), (
            f"{summary} written into one output, one kernel group {list(group)}; "
            f"{_how_later_pieces_read(V.graph.current_node, bool(direct))}"
        )


@register
class CatConsumerIntoPieces(LoweringRule):
    """An elementwise op of a cat written piece by piece (``SplitCatToPointwise``'s several progressions) → the same
    pieces, each with the op applied, written into the op's output: one kernel for both. The cat, then unread, is
    removed (``DeadFoldedCatElimination``). The op is Inductor's own lowering of it, run on a stand-in for the cat
    whose every element is the piece's value; its other operands (a tensor that broadcasts to the cat, a number)
    are loaded where the piece writes.

    Before (the last layer of ``12 × (split into 16 → a different op per piece → cat → * scale)``)::

        cat = ConcatKernel([relu fold → cat[:, 0:64], tanh fold → cat[:, 64:128], ...])   # one kernel
        out = Pointwise(load(cat, 1024*o0 + o1) * load(scale, o1))                          # a second kernel

    After::

        out = ConcatKernel([relu(...) * load(scale, o1) → out[:, 0:64],
                            tanh(...) * load(scale, o1 + 64) → out[:, 64:128], ...])        # one kernel

    Only where the cat has no other reader and the op's output has the cat's shape and dtype (no broadcast of the
    cat, no conversion), and where Inductor's lowering makes an elementwise Pointwise that reads the stand-in where
    it writes. Per-element work is the op once, whatever the number of pieces.
    """

    name = "CatConsumerIntoPieces"
    pass_name = "splitcat"
    op = (
        aten.mul.Tensor, aten.add.Tensor, aten.sub.Tensor, aten.div.Tensor,
        aten.relu.default, aten.sigmoid.default, aten.tanh.default, aten.neg.default, aten.abs.default,
        aten.exp.default, aten.log.default, aten.sqrt.default, aten.rsqrt.default, aten.erf.default,
        aten.clamp_min.default, aten.clamp_max.default, aten.pow.Tensor_Scalar,
    )

    def rewrite(self, *args: Any, **kwargs: Any) -> tuple[Any, str]:
        from torch._inductor import ir
        from torch._inductor.virtualized import OpsValue, OpsWrapper, V, ops

        from optimus_ir.registry import stock_lowering

        fx_node = V.graph.current_node
        written = WRITTEN_BY_FOLDS.get(V.graph, {})
        cat_side = next((i for i, x in enumerate(args) if _folded_cat_name(x) in written), None)
        if fx_node is None or fx_node.target not in self.op or cat_side is None:
            raise NotApplicable("no operand is a cat written piece by piece")
        fx_cat, cat = fx_node.args[cat_side], args[cat_side]
        if not isinstance(fx_cat, torch.fx.Node) or V.graph.env.get(fx_cat) is not cat:
            raise NotApplicable("called for another node's lowering")
        if set(fx_cat.users) != {fx_node}:
            raise Reject(f"the cat {fx_cat.name} has other readers: it is written anyway")
        folds, size, stride, dim = written[_folded_cat_name(cat)]
        value = fx_node.meta.get("val")
        if not isinstance(value, torch.Tensor) or list(value.shape) != [int(n) for n in size]:
            raise Reject("the result does not have the cat's shape")
        if value.dtype != cat.get_dtype():
            raise Reject(f"{cat.get_dtype()} → {value.dtype}: a conversion")
        # the value of the element a piece is writing, set while the epilogue loads; outside it (the lowering
        # looking at its operands, e.g. for a constant divisor) the stand-in is the cat itself
        piece_value: list[Any] = [None]
        cat_loader = cat.make_loader()

        def stand_in_element(index: list[sympy.Expr]) -> Any:
            if piece_value[0] is None:
                return cat_loader(index)
            return as_loaded(ops, OpsValue(piece_value[0]), cat.get_dtype())  # as stock's kernel loads the cat

        stand_in = ir.Pointwise.create(
            device=cat.get_device(), dtype=cat.get_dtype(), inner_fn=stand_in_element, ranges=list(size)
        )
        stand_in_args = [stand_in if x is cat else x for x in args]
        result = stock_lowering(fx_node.target)(*stand_in_args, **kwargs)
        if not (isinstance(result, ir.TensorBox) and isinstance(result.data, ir.StorageBox)
                and type(result.data.data) is ir.Pointwise and type(stand_in.data.data) is ir.Pointwise):
            raise Reject(f"Inductor's lowering of {fx_node.target} is not one elementwise Pointwise")
        loader = result.make_loader()

        def epilogue(folded: Any, coords: list[sympy.Expr]) -> Any:
            # a fold's body runs under the current handler (raw values); ``ops`` and loaders wrap theirs
            piece_value[0] = folded
            try:
                return OpsWrapper._unwrap(loader(coords))
            finally:
                piece_value[0] = None

        consumed = [dataclasses.replace(f, epilogue=_then(f.epilogue, epilogue)) for f in folds]
        storage, _ = _write_as_one_kernel_group(consumed, size, stride, dim)
        op_name = fx_node.target.__name__.split(".")[0]
        detail = (
            f"{op_name} of {fx_cat.name} applied in its {len(folds)} Pointwise, written into one output; "
            f"{_how_later_pieces_read(fx_node)}"
        )
        return ir.TensorBox(storage), detail


def _folded_cat_name(x: Any) -> str | None:
    """The buffer name of a cat output ``SplitCatToPointwise`` wrote piece by piece, or None."""
    from torch._inductor import ir

    if isinstance(x, ir.TensorBox) and isinstance(x.data, ir.StorageBox) and isinstance(x.data.data, ir.ConcatKernel):
        return x.data.get_name()
    return None


def _then(first: Callable[[Any, list[sympy.Expr]], Any] | None, second: Callable[[Any, list[sympy.Expr]], Any]) -> Any:
    if first is None:
        return second
    return lambda value, coords: second(first(value, coords), coords)


def _describe(folded: dict[str, sympy.Expr]) -> str:
    return "; ".join(f"{name}={expr}" for name, expr in folded.items()) or "(no index)"
