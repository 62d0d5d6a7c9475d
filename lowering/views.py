"""Lowering-time rewrites that turn split/cat junk into views: no kernel, no copy.

- :class:`CatOfTilingSlicesToView` (``aten.cat``): slices/splits/chunks/narrows of one buffer that tile a range of
  it in order → a view of that range (the buffer itself when they tile all of it), also through reshapes.
- :class:`SliceOfCatToInput`, :class:`SplitOfCatToInputs`, :class:`SplitWithSizesOfCatToInputs` (``aten.slice``,
  ``aten.split``, ``aten.split_with_sizes``): a slice of a cat that lies within one input of the cat → a slice of
  that input, so that consumer does not need the cat. A cat nobody reads any more is then not written: Inductor's
  dead-code elimination removes a pointwise cat, ``UnreadConcatElimination`` (before fusion) a ConcatKernel
  and the copies that fill it.

A view is only correct where nobody can tell it from a copy. The rules refuse (with the reason in the dump) when
the result would reach a graph output (it would alias a graph input or another buffer, where the op promises a
fresh tensor) and when the graph mutates the viewed buffer; sizes and offsets must be proven equal in sympy
(:mod:`optimus_ir.index_math`, Inductor's ``statically_known_*``), so symbolic shapes fall back where the proof
fails. Sizes off the cat dim that are symbols (a batch that changes) stay symbols in the views and prove as
numbers do.
"""

from __future__ import annotations

import operator
from collections.abc import Sequence
from typing import Any

import sympy
import torch

from optimus_ir import index_math
from optimus_ir.graph_state import state_of
from optimus_ir.lowering.precision import rounded_as_stored
from optimus_ir.rule import LoweringRule, NotApplicable, Reject

aten = torch.ops.aten

#: Lowerings that may return (a view of) their input's storage although the op has no alias annotation.
_ALIASING_WITHOUT_ANNOTATION = frozenset({aten._unsafe_view.default})


def _aliases_its_input(node: torch.fx.Node) -> bool:
    """Whether the value of ``node`` may share storage with its tensor inputs (views, getitem of split lists)."""
    target = node.target
    if target is operator.getitem:
        return True
    if isinstance(target, torch._ops.OpOverload):
        if target in _ALIASING_WITHOUT_ANNOTATION:
            return True
        # mutating ops (copy_) return an alias of their mutated argument, which the mutation check looks at
        return target.is_view or (
            not target._schema.is_mutable and any(r.alias_info is not None for r in target._schema.returns)
        )
    return True  # unknown callables (higher-order ops, python functions): assume the worst


def _aliases_of(node: torch.fx.Node) -> list[torch.fx.Node]:
    """``node`` and every FX node that may share its storage through view ops after it."""
    seen, todo = [node], [node]
    while todo:
        for user in todo.pop().users:
            if user.op == "call_function" and user not in seen and _aliases_its_input(user):
                seen.append(user)
                todo.append(user)
    return seen


def _escaping_alias(node: torch.fx.Node) -> torch.fx.Node | None:
    """An FX node aliasing ``node`` (itself or a view of it) that the graph returns, or None."""
    for alias in _aliases_of(node):
        if any(user.op == "output" for user in alias.users):
            return alias
    return None


def _fx_base(node: Any) -> Any:
    """The FX node whose storage ``node`` views: walk back through view ops (and getitem of splits)."""
    while isinstance(node, torch.fx.Node) and node.op == "call_function" and _aliases_its_input(node):
        tensors = [a for a in node.args if isinstance(a, torch.fx.Node)]
        if not tensors:
            break
        node = tensors[0]
    return node


def _written_nodes(graph: torch.fx.Graph) -> dict[torch.fx.Node, torch.fx.Node]:
    """Every FX node that an op of ``graph`` may write into (a mutable schema argument, e.g. the ``copy_`` that
    functionalization leaves for ``x.add_(1)`` on a graph input; any tensor argument of a higher-order op or python
    callable), mapped to that op. Computed once per lowering of the graph."""
    from torch._inductor.virtualized import V

    state = state_of(V.graph if V.graph is not None else graph)
    if state.written_nodes is not None:
        return state.written_nodes
    written: dict[torch.fx.Node, torch.fx.Node] = {}
    for node in graph.nodes:
        if node.op != "call_function" or node.target is operator.getitem:
            continue
        target = node.target
        if not isinstance(target, torch._ops.OpOverload):
            # a higher-order op or python callable: it might write any tensor it is given
            written.update((a, node) for a in node.args if isinstance(a, torch.fx.Node))
            continue
        if not target._schema.is_mutable:
            continue
        schema = {a.name: a for a in target._schema.arguments}
        pairs = [*zip(target._schema.arguments, node.args), *((schema.get(k), v) for k, v in node.kwargs.items())]
        for schema_arg, arg in pairs:
            info = schema_arg.alias_info if schema_arg is not None else None
            if isinstance(arg, torch.fx.Node) and info is not None and info.is_write:
                written[arg] = node
    state.written_nodes = written
    return written


def _mutation_of(base: Any) -> torch.fx.Node | None:
    """A node of the graph that writes into the storage of ``base`` (or of a view of it), or None."""
    if not isinstance(base, torch.fx.Node):
        return None
    written = _written_nodes(base.graph)
    return next((written[alias] for alias in _aliases_of(base) if alias in written), None)


def _check_not_mutated(fx_base: Any, buffer_name: str | None) -> None:
    from torch._inductor.virtualized import V

    writer = _mutation_of(fx_base)
    if writer is not None:
        raise Reject(f"{fx_base.name} is written in the graph by {writer.name} ({writer.target}); a view would see "
                     "the write where a copy would not")
    if buffer_name is not None and (buffer_name in V.graph.mutated_buffers or buffer_name in V.graph.mutated_inputs):
        raise Reject(f"buffer {buffer_name} is mutated in the graph; a view would see the write where a copy would not")


def _fixed_view(x: Any) -> tuple[Any, Any]:
    """``(storage box, FixedLayout)`` of a view of a realized buffer with a fixed layout; Reject otherwise."""
    from torch._inductor import ir

    if not ir.is_storage_and_layout(x):
        raise NotApplicable("not a view of a realized buffer")
    storage, layout = ir.as_storage_and_layout(x, freeze=False)
    if type(layout) is not ir.FixedLayout:
        raise NotApplicable(f"{storage.get_name()} with a {type(layout).__name__} (not a view with a fixed layout)")
    if layout.dtype != storage.get_dtype():
        raise Reject(f"a {layout.dtype} view of the {storage.get_dtype()} buffer {storage.get_name()}")
    return storage, layout


class CatOfTilingSlicesToView(LoweringRule):
    """cat of views of ONE buffer that lie side by side along the cat dim, in order → a view of the buffer; no kernel.

    Before (``torch.cat(x.split(16, 1)[2:6], 1) @ w``, x ``[8, 128]``; stock Inductor, or SplitCatToPointwise)::

        buf0 = Pointwise(load(x, 128*o0 + o1 + 32), ranges=[8, 64])        # a copy kernel
        buf1 = mm(buf0, w)

    After::

        cat = ReinterpretView(x, FixedLayout(size=[8, 64], stride=[128, 1], offset=32))   # no kernel
        buf1 = mm(reinterpret_tensor(x, (8, 64), (128, 1), 32), w)

    Every input must be a strided view (``ReinterpretView``: what slices, splits, chunks, narrows, selects,
    unsqueezes and reshapes of a realized buffer lower to) of the same buffer and dtype; in cat order, each must
    start where the previous one ends, with equal sizes and strides off the cat dim
    (:func:`index_math.tile_strided`). ``stack(x.view(B, 4, 16).unbind(1), 1)`` is the full tiling
    ``x.view(B, 4, 16)``. Refused where a view is not a copy: the cat (or a view of it) is a graph output (it
    would alias the buffer), or the graph writes into the buffer. Pieces out of order, overlapping or interleaved
    (``x[:, 0::2]``, ``x[:, 1::2]``) go on to SplitCatToPointwise.
    """

    pass_name = "splitcat"
    op = aten.cat.default

    def rewrite(self, inputs: Sequence[Any], dim: int = 0) -> tuple[Any, str]:
        from torch._inductor import ir
        from torch._inductor.virtualized import V

        fx_cat = V.graph.current_node
        state_of(V.graph).cat_inputs[fx_cat] = list(inputs)  # for the slice rules, whatever we decide
        if len(inputs) < 2:
            raise Reject("fewer than two inputs")
        rank = len(inputs[0].get_size())
        if rank == 0 or any(len(x.get_size()) != rank for x in inputs):
            raise Reject("inputs of different ranks")
        dim = dim % rank
        views = []
        for i, x in enumerate(inputs):
            try:
                views.append(_fixed_view(x))
            except Reject as reason:
                raise type(reason)(f"input {i} is {reason}") from None
        names = {storage.get_name() for storage, _ in views}
        if len(names) != 1:
            raise NotApplicable(f"inputs view several buffers {sorted(names)}")
        dtypes = {layout.dtype for _, layout in views}
        devices = {str(layout.device) for _, layout in views}
        if len(dtypes) != 1 or len(devices) != 1:
            raise Reject(f"inputs of several dtypes/devices {sorted(map(str, dtypes | devices))}")
        nonempty = [(s, lay) for s, lay in views if not V.graph.sizevars.statically_known_equals(lay.size[dim], 0)]
        if not nonempty:
            raise Reject("every input is empty")
        tiled = index_math.tile_strided([(lay.size, lay.stride, lay.offset) for _, lay in nonempty], dim)
        if tiled is None:
            raise Reject(f"views of {names.pop()} do not provably lie side by side along dim {dim} in cat order: "
                         f"{[(list(lay.size), list(lay.stride), lay.offset) for _, lay in nonempty]}")
        size, stride, offset = tiled
        storage, first = nonempty[0]
        alias = _escaping_alias(fx_cat)
        if alias is not None:
            raise Reject(f"graph output {alias.name} would alias {storage.get_name()} (a cat returns a new tensor)")
        for base in {_fx_base(piece): None for piece in fx_cat.args[0]}:
            _check_not_mutated(base, storage.get_name())
        base_layout = storage.get_layout()
        whole = (
            isinstance(base_layout, ir.FixedLayout)
            and list(base_layout.size) == size
            and list(base_layout.stride) == stride
            and base_layout.offset == offset
        )
        what = f"view of {storage.get_name()}: size {size}, stride {stride}, offset {offset}"
        if whole:
            detail = f"{len(nonempty)} views tile all of {storage.get_name()} → the buffer itself"
            return ir.TensorBox(storage), detail
        layout = ir.FixedLayout(first.device, first.dtype, size, stride, offset, first.is_pinned)
        return ir.TensorBox(ir.ReinterpretView(data=storage, layout=layout)), f"{len(nonempty)} views tile one {what}"


# ----------------------------------------------------------------------------------------------- slices of a cat


def _cat_inputs(x: Any) -> tuple[Any, list[Any], list[Any], int]:
    """For the FX node being lowered, whose first argument is a cat: (cat FX node, cat input FX nodes, their lowered
    values, cat dim). Reject unless that cat's lowered value is ``x``."""
    from torch._inductor.virtualized import V

    node = V.graph.current_node
    cat = node.args[0] if node is not None and node.args else None
    if not isinstance(cat, torch.fx.Node) or cat.target is not aten.cat.default:
        raise NotApplicable("input is not a cat")
    if V.graph.env.get(cat) is not x:
        raise Reject(f"input is not the lowered value of {cat.name}")
    fx_inputs = list(cat.args[0])
    dim = cat.args[1] if len(cat.args) > 1 else cat.kwargs.get("dim", 0)
    values = state_of(V.graph).cat_inputs.get(cat)
    if values is None or len(values) != len(fx_inputs):
        raise Reject(f"the inputs of {cat.name} were not seen when it was lowered")
    return cat, fx_inputs, values, dim


def _normalized(index: Any, size: sympy.Expr, default: sympy.Expr) -> sympy.Expr | None:
    """A slice bound in ``[0, size]`` as Python's slicing clamps it; None unless proven."""
    from torch._inductor.virtualized import V

    if index is None:
        return default
    known = V.graph.sizevars
    index = sympy.expand(index)
    if known.statically_known_geq(index, 0):
        if known.statically_known_leq(index, size):
            return index
        return size if known.statically_known_gt(index, size) else None
    if known.statically_known_lt(index, 0):
        if known.statically_known_geq(index, -size):
            return index + size
        return sympy.Integer(0) if known.statically_known_lt(index, -size) else None
    return None


def _note_redirected(x: Any) -> None:
    """Remember the cat buffer behind ``x`` when it is a ConcatKernel (Inductor's dead-code elimination keeps those)."""
    from torch._inductor import ir
    from torch._inductor.virtualized import V

    data = x.data.data if isinstance(x, ir.TensorBox) and isinstance(x.data, ir.StorageBox) else None
    if isinstance(data, ir.ConcatKernel):
        state_of(V.graph).redirected_cats.add(data.get_name())


class _SlicesOfCat:
    """Shared by the rules that redirect slices of a cat to the cat's inputs."""

    def _plan(self, x: Any, dim: int, bounds: list[tuple[Any, Any]]) -> tuple[Any, list[Any], list[str]]:
        """For each ``[start, end)`` of ``x`` along ``dim``: ``(input value, start - input start)`` when it lies in one
        input of the cat that ``x`` is, else the reason why not. Returns (cat FX node, plans, notes)."""
        from torch._inductor.lowering import to_dtype
        from torch._inductor.virtualized import V

        cat, fx_inputs, values, cat_dim = _cat_inputs(x)
        rank = len(x.get_size())
        dim, cat_dim = dim % rank, cat_dim % rank
        if dim != cat_dim:
            raise Reject(f"slices dim {dim}, the cat is along dim {cat_dim}")
        # cat skips legacy empty 1-D inputs and inputs empty along the dim
        kept = [
            (n, v) for n, v in zip(fx_inputs, values)
            if len(v.get_size()) == rank and not V.graph.sizevars.statically_known_equals(v.get_size()[dim], 0)
        ]
        sizes = [v.get_size()[dim] for _, v in kept]
        starts = index_math.piece_starts(sizes)
        plans: list[Any] = []
        for start, end in bounds:
            if start is None or end is None:
                plans.append("bounds not proven in [0, size]")
                continue
            if V.graph.sizevars.statically_known_leq(end, start):
                plans.append("empty")
                continue
            i = index_math.piece_containing(starts, sizes, start, end, V.graph.sizevars.statically_known_leq)
            if i is None:
                plans.append(f"[{start}, {end}) is not proven inside one input (starts {starts})")
                continue
            fx_input, value = kept[i]
            try:
                _check_not_mutated(_fx_base(fx_input), None)
            except Reject as reason:
                plans.append(str(reason))
                continue
            if value.get_dtype() != x.get_dtype():
                value = to_dtype(value, x.get_dtype())
            value = rounded_as_stored(value)  # as the cat holds it
            plans.append((fx_input, value, start - starts[i], end - starts[i]))
        return cat, plans, [str(s) for s in starts]


class SliceOfCatToInput(_SlicesOfCat, LoweringRule):
    """slice of a cat that lies inside one input of the cat → a slice of that input; the cat is not read.

    Before (``torch.cat([a, b, c, d, e], 1)[:, 20:28] * 2``, inputs ``[8, 16]``)::

        cat = Pointwise(masked loads of a..e, where-chain)     # realized when read by several slices
        buf1 = Pointwise(load(cat, 80*o0 + o1 + 20) * 2)

    After::

        buf1 = Pointwise(load(b, 16*o0 + o1 + 4) * 2)          # cat: no reader left, removed by Inductor's DCE

    The sliced node must be an ``aten.cat`` in the FX graph; its inputs' lowered values are those
    :class:`CatOfTilingSlicesToView` saw (``GraphState.cat_inputs``), so this works whichever way the cat was then
    lowered (pointwise cat, ConcatKernel, or SplitCatToPointwise). The bounds must be proven inside one input
    (:func:`index_math.piece_containing`); a slice that straddles two inputs, or is along another dim, keeps
    reading the cat. Refused when the slice (or a view of it) is a graph output (it would alias the input) or the
    graph writes into the input.
    """

    pass_name = "splitcat"
    op = aten.slice.Tensor

    def rewrite(self, x: Any, dim: int = 0, start: Any = None, end: Any = None, step: Any = 1) -> tuple[Any, str]:
        from torch._inductor.lowering import slice_
        from torch._inductor.virtualized import V

        if len(x.get_size()) == 0:
            raise Reject("a 0-d input")
        d = dim % len(x.get_size())
        size = x.get_size()[d]
        bounds = (_normalized(start, size, sympy.Integer(0)), _normalized(end, size, size))
        cat, (plan,), starts = self._plan(x, dim, [bounds])
        if isinstance(plan, str):
            raise Reject(plan)
        alias = _escaping_alias(V.graph.current_node)
        if alias is not None:
            raise Reject(f"graph output {alias.name} would alias {plan[0].name} (a slice of {cat.name} is a new "
                         "buffer)")
        fx_input, value, lo, hi = plan
        result = slice_(value, d, lo, hi, step, clamp=False)
        _note_redirected(x)
        where = f"slice [{bounds[0]}, {bounds[1]}) of {cat.name} (input starts {starts})"
        detail = f"{where} → {fx_input.name}[{lo}:{hi}]"
        return result, detail


class _SplitOfCat(_SlicesOfCat):
    def _split(self, x: Any, sizes: Sequence[Any], dim: int) -> tuple[Any, str]:
        from torch._inductor.lowering import slice_
        from torch._inductor.virtualized import V

        if len(x.get_size()) == 0:
            raise Reject("a 0-d input")
        d = dim % len(x.get_size())
        starts = index_math.piece_starts(sizes)
        bounds = [(s, s + n) for s, n in zip(starts, sizes)]
        cat, plans, cat_starts = self._plan(x, d, bounds)
        getitems = {u.args[1]: u for u in V.graph.current_node.users if u.target is operator.getitem}
        results, done, notes = [], [], []
        for i, (plan, (lo, hi)) in enumerate(zip(plans, bounds)):
            if not isinstance(plan, str) and i in getitems:
                alias = _escaping_alias(getitems[i])
                if alias is not None:
                    plan = f"graph output {alias.name} would alias {plan[0].name}"
            if isinstance(plan, str):
                notes.append(f"piece {i}: {plan}")
                results.append(slice_(x, d, lo, hi, clamp=False))
            else:
                fx_input, value, in_lo, in_hi = plan
                done.append(f"{i} → {fx_input.name}[{in_lo}:{in_hi}]")
                results.append(slice_(value, d, in_lo, in_hi, clamp=False))
        if not done:
            raise Reject("; ".join(notes))
        _note_redirected(x)
        detail = f"{len(done)} of {len(plans)} pieces of {cat.name} (input starts {cat_starts}) read an input: "
        detail += ", ".join(done)
        if notes:
            detail += "; still read the cat: " + "; ".join(notes)
        return results, detail


def _split_sizes(x: Any, split_size: Any, dim: int) -> list[Any]:
    """The sizes of ``torch.split(x, split_size, dim)`` (as Inductor's lowering computes them)."""
    from torch._inductor.virtualized import V
    from torch.utils._sympy.functions import FloorDiv

    total = x.get_size()[dim % len(x.get_size())]
    chunks = V.graph.sizevars.guard_int(FloorDiv(total + split_size - 1, split_size))
    sizes = [sympy.sympify(split_size)] * chunks
    sizes[-1] = total - (chunks - 1) * split_size
    return sizes


class SplitOfCatToInputs(_SplitOfCat, LoweringRule):
    """split (``aten.split.Tensor``: chunk, split by size) of a cat → each piece inside one input of the cat is a
    slice of that input; pieces that straddle two inputs keep reading the cat.

    Before (``torch.cat([a, b, c, d, e], 1).split(8, 1)``, inputs ``[8, 16]``)::

        cat = Pointwise(masked loads of a..e)                    # a kernel: read by several pieces
        piece3 = SliceView(cat, [:, 24:32]); consumer: Pointwise(load(cat, 80*o0 + o1 + 24) ...)

    After::

        piece3 = ReinterpretView(b, [:, 8:16]); consumer: Pointwise(load(b, 16*o0 + o1 + 8) ...)   # cat removed

    Same proofs and refusals as :class:`SliceOfCatToInput`, per piece; a piece returned from the graph keeps
    reading the cat.
    """

    pass_name = "splitcat"
    op = aten.split.Tensor

    def rewrite(self, x: Any, split_size: Any, dim: int = 0) -> tuple[Any, str]:
        if isinstance(split_size, (list, tuple)):
            return self._split(x, [sympy.sympify(s) for s in split_size], dim)
        return self._split(x, _split_sizes(x, split_size, dim), dim)


class SplitWithSizesOfCatToInputs(_SplitOfCat, LoweringRule):
    """split_with_sizes of a cat (sizes other than the cat's: the same sizes are undone by Inductor's FX passes) →
    each piece inside one input of the cat is a slice of that input.

    Before (``torch.cat([a, b], 1).split([4, 4, 8], 1)``, a and b ``[8, 8]``)::

        pieces: SliceView(cat, [:, 0:4]), SliceView(cat, [:, 4:8]), SliceView(cat, [:, 8:16])

    After::

        pieces: ReinterpretView(a, [:, 0:4]), ReinterpretView(a, [:, 4:8]), b       # the cat is not read

    Same proofs and refusals as :class:`SliceOfCatToInput`, per piece.
    """

    pass_name = "splitcat"
    op = aten.split_with_sizes.default

    def rewrite(self, x: Any, split_sizes: Sequence[Any], dim: int = 0) -> tuple[Any, str]:
        return self._split(x, [sympy.sympify(s) for s in split_sizes], dim)
