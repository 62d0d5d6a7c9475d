"""Lowering-time rewrites of split/slice/chunk → pointwise → cat chains.

Each cat input ("piece") is, at lowering time, an unrealized Inductor IR node: a ``Pointwise`` whose ``inner_fn``
reads some buffer through views (``split`` and ``chunk`` lower to ``SliceView``s). We trace every piece into a
``LoopBody`` (ops graph + sympy index expressions, the same form the scheduler uses), compare pieces structurally,
and build the cat's output as ONE ``Pointwise`` whose body is a piece's body with index expressions folded over
the pieces by :mod:`optimus_ir.index_math`. No piece buffer is materialized and per-element work does not depend on
the number of pieces.
"""

from __future__ import annotations

import dataclasses
import weakref
from collections.abc import Sequence
from typing import Any

import sympy
import torch
from torch.utils._sympy.functions import FloorDiv, ModularIndexing

from optimus_ir import index_math
from optimus_ir.registry import LoweringRule, Reject, register

aten = torch.ops.aten

#: Groups of buffer names (per graph) that a rule wants in one kernel with block-level dispatch;
#: consumed by :class:`optimus_ir.scheduler_hooks.piece_groups.PieceGroupToComboKernel`.
PIECE_GROUPS: weakref.WeakKeyDictionary[Any, list[tuple[str, ...]]] = weakref.WeakKeyDictionary()


@dataclasses.dataclass
class _TracedPiece:
    """A cat input traced into a LoopBody over its own index space."""

    box: Any  # the TensorBox given to cat
    size: list[sympy.Expr]
    body: Any  # torch._inductor.loop_body.LoopBody
    loop_vars: list[sympy.Symbol]

    def ops_key(self) -> tuple[Any, ...]:
        """What must be equal for two pieces to share one body: ops graph, buffers read, dtype."""
        blocks = [self.body.root_block.debug_str("body")]
        blocks += [block.debug_str(name) for name, block in self.body.subblocks.items()]
        return (tuple(blocks), self.box.get_dtype(), tuple(self.body.indexing_exprs))

    def structure(self) -> tuple[Any, ...]:
        """What must be equal for two pieces to be folded into one run: the ops key and the size."""
        return (self.ops_key(), tuple(self.size))


@dataclasses.dataclass
class _Run:
    """Consecutive pieces with one structure whose index expressions grow by a constant step per piece."""

    pieces: list[_TracedPiece]
    steps: dict[str, sympy.Expr]  # per indexing-expression name


def _trace(box: Any) -> _TracedPiece:
    from torch._inductor import dependencies
    from torch._inductor.loop_body import LoopBody

    size = list(box.get_size())
    (loop_vars,), var_ranges = dependencies.index_vars_no_squeeze(size, prefix="q")
    loader = box.make_loader()
    body = LoopBody(loader, [loop_vars], var_ranges, loop_vars, [])
    return _TracedPiece(box, size, body, loop_vars)


def _extend(run: _Run, piece: _TracedPiece) -> bool:
    """Add ``piece`` to ``run`` if it has the run's structure and keeps every index an arithmetic progression."""
    first = run.pieces[0]
    if piece.structure() != first.structure():
        return False
    steps = {}
    for name in first.body.indexing_exprs:
        exprs = [p.body.indexing_exprs[name] for p in run.pieces] + [piece.body.indexing_exprs[name]]
        step = index_math.constant_step(exprs, first.loop_vars)
        if step is None:
            return False
        steps[name] = step
    run.pieces.append(piece)
    run.steps = steps
    return True


def _split_into_runs(pieces: Sequence[_TracedPiece]) -> list[_Run]:
    runs: list[_Run] = []
    for piece in pieces:
        if not runs or not _extend(runs[-1], piece):
            runs.append(_Run([piece], {name: sympy.Integer(0) for name in piece.body.indexing_exprs}))
    return runs


def _replay(body: Any, indexing: dict[str, sympy.Expr]) -> Any:
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
    """One Pointwise-to-be: ``template``'s body over ``[start, start + size[dim])`` of the cat dimension, with
    index expressions ``exprs`` in the output variables (``out_vars[dim]`` counted from ``start``)."""

    template: _TracedPiece
    start: sympy.Expr
    size: list[sympy.Expr]
    exprs: dict[str, sympy.Expr]

    def global_exprs(self, out_var: sympy.Symbol) -> dict[str, sympy.Expr] | None:
        """The expressions with the cat dimension counted from the cat's start; None unless affine."""
        shifted = {name: sympy.expand(e.xreplace({out_var: out_var - self.start})) for name, e in self.exprs.items()}
        if any(e.has(FloorDiv, ModularIndexing) for e in shifted.values()):
            return None
        return shifted


def _fold_run(run: _Run, dim: int, start: sympy.Expr, out_vars: list[sympy.Symbol]) -> _Fold:
    """The run's index expressions folded over its pieces (:func:`index_math.fold_pieces`)."""
    from torch._inductor.virtualized import V

    first = run.pieces[0]
    size = list(first.size)
    size[dim] = first.size[dim] * len(run.pieces)
    ranges = dict(zip(out_vars, size))
    others = {v: o for i, (v, o) in enumerate(zip(first.loop_vars, out_vars)) if i != dim}
    exprs = {
        name: V.graph.sizevars.simplify_with_ranges(
            index_math.fold_pieces(expr, first.loop_vars[dim], first.size[dim], run.steps[name], out_vars[dim], others),
            ranges,
        )
        for name, expr in first.body.indexing_exprs.items()
    }
    return _Fold(first, start, size, exprs)


def _merge_affine(folds: list[_Fold], dim: int, out_vars: list[sympy.Symbol]) -> list[_Fold]:
    """Join neighbours with one body whose index maps are the same affine map of the cat coordinate.

    E.g. ``split(x, [16, 16, 32])`` → relu → cat in order: runs of sizes 16+16 and 32 both read ``x`` at the
    output position, so they are one Pointwise ``relu(x)``.
    """
    merged = [folds[0]]
    for fold in folds[1:]:
        last = merged[-1]
        same_map = last.global_exprs(out_vars[dim]) is not None and (
            last.global_exprs(out_vars[dim]) == fold.global_exprs(out_vars[dim])
        )
        if same_map and last.template.ops_key() == fold.template.ops_key():
            size = list(last.size)
            size[dim] = last.size[dim] + fold.size[dim]
            merged[-1] = _Fold(last.template, last.start, size, last.exprs)
        else:
            merged.append(fold)
    return merged


def _pointwise(fold: _Fold, out_vars: list[sympy.Symbol]) -> Any:
    """ONE Pointwise that replays the template body with the folded index expressions."""
    from torch._inductor import ir
    from torch._inductor.utils import sympy_subs

    def inner_fn(index: Sequence[sympy.Expr]) -> Any:
        replacements = dict(zip(out_vars, index))
        return _replay(fold.template.body, {name: sympy_subs(e, replacements) for name, e in fold.exprs.items()})

    box = fold.template.box
    return ir.Pointwise.create(device=box.get_device(), dtype=box.get_dtype(), inner_fn=inner_fn, ranges=fold.size)


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


def _check_inputs(inputs: Sequence[Any], dim: int) -> None:
    from torch._inductor import ir

    devices = {str(x.get_device()) for x in inputs}
    if len(devices) != 1:
        raise Reject(f"inputs on several devices {sorted(devices)}")
    for x in inputs:
        if not index_math.is_static(x.get_size()):
            raise Reject(f"symbolic sizes {list(x.get_size())}: not proven, stock lowering")
        if ir.is_storage_and_layout(x):
            storage, _ = ir.as_storage_and_layout(x, freeze=False)
            if ir.ConcatKernel.can_realize_into_without_copy(storage) and not storage.is_input_buffer():
                raise Reject(f"input {storage.get_name()} is computed by its own kernel, which stock Inductor makes "
                             "write straight into the cat output (no copy)")


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

    Pieces are traced to LoopBodies and cut into runs: consecutive pieces with equal ops, buffers, sizes and
    dtype whose index expressions grow by a constant per piece (:func:`index_math.constant_step`). A run becomes
    one Pointwise whose index is folded over the run (:func:`index_math.fold_pieces`); one run is the whole cat
    (unrealized, so its consumers fuse with it). Several runs (different ops per piece) are realized into their
    slices of one ConcatKernel output and recorded in :data:`PIECE_GROUPS`, so that the scheduler puts them in one
    kernel that dispatches per piece at block level.
    """

    name = "SplitCatToPointwise"
    pass_name = "splitcat"
    op = aten.cat.default

    def rewrite(self, inputs: Sequence[Any], dim: int = 0) -> tuple[Any, str]:
        from torch._inductor import ir
        from torch._inductor.lowering import ELEMENTWISE_TYPE_PROMOTION_KIND, get_promoted_dtype, to_dtype
        from torch._inductor.virtualized import V

        if len(inputs) < 2:
            raise Reject("fewer than two inputs")
        dim = dim % len(inputs[0].get_size()) if inputs[0].get_size() else 0
        _check_consumers(V.graph.current_node)
        _check_inputs(inputs, dim)
        dtype = get_promoted_dtype(*inputs, type_promotion_kind=ELEMENTWISE_TYPE_PROMOTION_KIND.DEFAULT)
        pieces = [_trace(to_dtype(x, dtype)) for x in _nonempty(inputs, dim)]
        if len(pieces) < 2:
            raise Reject("fewer than two non-empty inputs")
        runs = _split_into_runs(pieces)
        out_vars = [sympy.Symbol(f"optimus_o{i}", integer=True, nonnegative=True) for i in range(len(pieces[0].size))]
        starts = index_math.piece_starts([run.pieces[0].size[dim] * len(run.pieces) for run in runs])
        folds = _merge_affine([_fold_run(r, dim, s, out_vars) for r, s in zip(runs, starts)], dim, out_vars)
        summary = (
            f"{len(pieces)} pieces → {len(runs)} run(s) of {[len(r.pieces) for r in runs]} along dim {dim}"
            f" → {len(folds)} Pointwise"
        )
        if len(folds) == 1:
            return _pointwise(folds[0], out_vars), f"{summary}, index {_describe(folds[0].exprs)}"
        concat = ir.ConcatKernel.create([_pointwise(fold, out_vars) for fold in folds], dim)
        group = tuple(buf.get_name() for buf in concat.data.inputs)
        PIECE_GROUPS.setdefault(V.graph, []).append(group)
        return ir.TensorBox(concat), f"{summary} into one output, one kernel group {list(group)}"


def _describe(folded: dict[str, sympy.Expr]) -> str:
    return "; ".join(f"{name}={expr}" for name, expr in folded.items()) or "(no index)"
