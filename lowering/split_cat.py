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
from collections.abc import Callable, Sequence
from typing import Any

import sympy
import torch

from optimus_ir import index_math
from optimus_ir.drivers import stock_lowering
from optimus_ir.graph_state import current as graph_state
from optimus_ir.lowering.folds import (
    Fold,
    fold_contiguous,
    fold_strided,
    merge_affine,
    progressions_of,
    reader_besides_cats,
    trace,
    write_into_views,
)
from optimus_ir.lowering.precision import as_loaded
from optimus_ir.rule import LoweringRule, NotApplicable, Reject

aten = torch.ops.aten

def _write_as_one_kernel_group(
    folds: list[Fold], size: list[sympy.Expr], stride: list[sympy.Expr], dim: int, direct: Sequence[Any] = ()
) -> tuple[Any, tuple[str, ...]]:
    """:func:`write_into_views`, with the kernels that write it recorded in ``GraphState.piece_groups`` (one
    kernel)."""
    storage = write_into_views(folds, size, stride, dim, direct)
    group = tuple(buf.get_name() for buf in storage.data.inputs)
    graph_state().piece_groups.append(group)
    return storage, group


def _how_later_pieces_read(fx_cat: Any, direct: bool = False) -> str:
    """For the dump: whether later cats' pieces recompute this cat's elements or load them."""
    if direct:
        return "later cats load it (not every element is a fold's)"
    reader = reader_besides_cats(fx_cat)
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


def _check_inputs(inputs: Sequence[Any], dim: int) -> None:
    """Reject pieces on several devices, or of symbolic sizes along the cat: the folds prove the pieces' offsets
    constant steps, so other dimensions may be symbols (a batch that changes), not the one the pieces tile."""
    devices = {str(x.get_device()) for x in inputs}
    if len(devices) != 1:
        raise Reject(f"inputs on several devices {sorted(devices)}")
    for x in inputs:
        if not index_math.is_static([x.get_size()[dim]]):
            raise Reject(f"a piece of symbolic size {x.get_size()[dim]} along the cat (dim {dim}): its offsets are "
                         "not proven, stock lowering")


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
    in ``GraphState.piece_groups``: the scheduler puts it in one kernel that dispatches per progression at block level,
    so code size grows with the number of distinct bodies, not pieces. With few pieces
    (``config.max_pointwise_cat_inputs``) stock Inductor's pointwise cat, fused into the consumers, is kept instead.
    The pieces' sizes along the cat must be numbers (their offsets are folded into the index); the other sizes may
    be symbols (a batch that changes), which the folds carry as they are.
    An input that is already a buffer of its own kernel (a matmul, a reduction) is made to write straight into its
    region, as stock does; the other pieces are folded around it. A later cat's pieces read this cat through its
    folds only when nothing else loads it (:func:`reader_besides_cats`): otherwise it is written anyway, and
    recomputing it in every later layer would only repeat work.
    """

    may_add_launches = True
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
        _check_inputs(inputs, dim)
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
        pieces = [trace(to_dtype(x, dtype), start) for x, start, own in zip(inputs, starts, own_kernel) if not own]
        size = list(inputs[0].get_size())
        size[dim] = sum(x.get_size()[dim] for x in inputs)
        stride = ir.FlexibleLayout.contiguous_strides(size)
        progressions = progressions_of(pieces, dim)
        folds = merge_affine(
            [
                fold_contiguous(p, dim, stride) if p.start_step == p.pieces[0].size[dim] else fold_strided(p, dim, stride)
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

    may_add_launches = True
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


        fx_node = V.graph.current_node
        written = graph_state().written_by_folds
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
        if not isinstance(value, torch.Tensor) or not V.graph.sizevars.statically_known_list_equals(
            ir.convert_shape_to_inductor(value.shape), size
        ):
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
