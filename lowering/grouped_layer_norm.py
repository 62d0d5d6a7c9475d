"""Pieces of a split, each layer-normed with its own weight and bias, as one layer norm over the pieces side by side.

``torch.cat([tanh(norm_i(piece)) for i, piece in enumerate(x.split(w, dim=-1))], dim=-1)`` (the Optimus write-up's
pattern, layer after layer) is, for pieces of one width, one layer norm over the ``[..., p, w]`` view of ``x``, each
piece's weight and bias applied as a row of ``[p, w]`` parameters, the tanh applied once. Rewritten in Dynamo's
graph, before AOTAutograd, so that AOTAutograd and Inductor see a layer's ops once, not once per piece (at thousands
of pieces, tracing and lowering them per piece was most of the compile).

In a training graph Inductor fuses the grouped norms' backward into one row kernel through the layers. Had each
weight row been broadcast over the rows, their gradients would be column sums after that kernel, which then writes
every layer's gradient rows and holds them together (per piece, stock holds one piece's). So each element gathers
its weight and bias (``index`` with an ``arange`` expanded over the rows), whose backward Inductor lowers to atomic
adds in the row kernel (the ``arange`` recomputed where it is read: an index Inductor sees through, no loads and no
bounds checks); and the layers' outputs that a later layer reads are saved (``CheckpointPolicy.MUST_SAVE``),
the norms and the last output recomputed (``MUST_RECOMPUTE``), where AOTAutograd's partitioner would recompute the
inputs in a kernel of their own and save the last activation's derivative. Atomic adds are not deterministic: under
``torch.use_deterministic_algorithms`` training graphs stay per piece.
"""

from __future__ import annotations

import dataclasses
import operator
from typing import Any

import torch
import torch.nn.functional as F
from torch.fx.experimental.symbolic_shapes import is_concrete_int
from torch.utils.checkpoint import CheckpointPolicy

from optimus_ir.records import record
from optimus_ir.rule import GraphRule

#: elementwise ops of one argument applied to every piece before the cat, applied once to all pieces instead
_ELEMENTWISE = frozenset({torch.tanh, torch.sigmoid, torch.relu, F.relu, F.silu})

#: dtypes whose layer norm is computed in fp32 and rounded at its output: the grouped one is computed so too
_DTYPES = frozenset({torch.float32, torch.bfloat16, torch.float16})


def _value(node: Any) -> Any:
    return node.meta.get("example_value") if isinstance(node, torch.fx.Node) else None


def _split_args(node: torch.fx.Node) -> tuple[Any, Any, Any] | None:
    """``(x, sizes, dim)`` of ``x.split(sizes, dim)`` or ``torch.split(x, sizes, dim)``; None for other nodes."""
    if not ((node.op == "call_method" and node.target == "split")
            or (node.op == "call_function" and node.target in (torch.split, torch.Tensor.split))):
        return None
    args = list(node.args) + [None] * (3 - len(node.args))
    sizes = node.kwargs.get("split_size_or_sections", node.kwargs.get("split_size", args[1]))
    return args[0], sizes, node.kwargs.get("dim", args[2] if args[2] is not None else 0)


def _layer_norm_args(node: torch.fx.Node) -> tuple[Any, Any, Any, Any, Any] | None:
    """``(input, normalized_shape, weight, bias, eps)`` of ``F.layer_norm``; None for other nodes."""
    if node.op != "call_function" or node.target is not F.layer_norm:
        return None
    args = list(node.args) + [None] * (5 - len(node.args))
    return (args[0], node.kwargs.get("normalized_shape", args[1]), node.kwargs.get("weight", args[2]),
            node.kwargs.get("bias", args[3]), node.kwargs.get("eps", 1e-5 if args[4] is None else args[4]))


def _only_user(node: torch.fx.Node) -> torch.fx.Node | None:
    return next(iter(node.users)) if len(node.users) == 1 else None


@dataclasses.dataclass
class _Group:
    """A split into ``p`` pieces of width ``w``, each read by its layer norm alone; ``elementwise`` the pieces'
    common elementwise op and ``cat`` the cat that joins them, where there are."""

    split: torch.fx.Node
    x: torch.fx.Node
    lead: tuple[int | torch.SymInt, ...]  # the sizes in front of the split dim, some of them symbols where dynamic
    p: int
    w: int
    pieces: list[torch.fx.Node]
    norms: list[torch.fx.Node]
    weights: list[torch.fx.Node]
    biases: list[torch.fx.Node]
    eps: float
    dtype: torch.dtype
    elementwise: list[torch.fx.Node] | None
    cat: torch.fx.Node | None
    training: bool


def _group_of(split: torch.fx.Node) -> _Group | str | None:
    """The :class:`_Group` that ``split`` heads, a reason where a split whose pieces are all layer-normed is left
    alone, None where it is no candidate."""
    parsed = _split_args(split)
    if parsed is None:
        return None
    x, sizes, dim = parsed
    pieces = sorted(split.users, key=lambda n: n.args[1] if n.target is operator.getitem else -1)
    norms = [_only_user(piece) for piece in pieces]
    if not pieces or any(n is None or _layer_norm_args(n) is None for n in norms):
        return None  # not a split into layer norms
    value = _value(x)
    if not isinstance(value, torch.Tensor) or not value.dim():
        return "an input of unknown or no sizes"
    # (a symbol Dynamo specialized, as splitting a symbolic width by a number makes it, is a number; comparing a
    # symbol would add a guard)
    width = value.shape[-1]
    if not is_concrete_int(width):
        return f"the split dimension is the symbol {width}: the pieces' count is not known"
    width = int(width)
    if value.dtype not in _DTYPES:
        return f"a {value.dtype} input"
    if dim not in (-1, value.dim() - 1):
        return f"split along dim {dim}, not the last"
    widths = set(sizes) if isinstance(sizes, (list, tuple)) else {sizes}
    if len(widths) != 1 or not isinstance(w := next(iter(widths)), int) or width % w:
        return f"pieces of widths {sorted(widths)}, not one width dividing {width}"
    p = width // w
    if [n.args[1] for n in pieces if n.target is operator.getitem] != list(range(p)):
        return "not every piece read on its own"
    training = any(getattr(_value(n), "requires_grad", True) for n in norms)
    if training and torch.are_deterministic_algorithms_enabled():
        return "a training graph under deterministic algorithms: the grouped weights' gradients are atomic adds"
    args = [_layer_norm_args(n) for n in norms]
    symbolic_eps = next((a[4] for a in args if not isinstance(a[4], (int, float))), None)
    if symbolic_eps is not None:
        return f"eps {symbolic_eps} is a symbol (a float Dynamo traced as a value of the graph), not one number"
    if len({a[4] for a in args}) != 1 or any(not isinstance(a[1], (list, tuple)) or list(a[1]) != [w] for a in args):
        return "the pieces' layer norms differ in eps or normalize other than a piece's row"
    weights, biases = [a[2] for a in args], [a[3] for a in args]
    for t in (*weights, *biases):
        v = _value(t)
        if (not isinstance(v, torch.Tensor) or v.dim() != 1 or not is_concrete_int(v.shape[0])
                or int(v.shape[0]) != w or v.dtype != value.dtype):
            return "a piece's layer norm without its own weight and bias of the piece's width and dtype"
    # (Dynamo traces ``w[i]`` next to the piece that reads it: a later piece's weight, defined after the first
    # piece's norm, moves before it where what it reads is defined there)
    position = {node: i for i, node in enumerate(split.graph.nodes)}
    late = [t for t in (*weights, *biases) if position[t] > position[norms[0]]]
    if any(t.op != "call_function" or t.is_impure() or any(position[a] > position[norms[0]] for a in t.all_input_nodes)
           for t in late):
        return "a piece's weight or bias computed after the first piece's layer norm from values not ready there"
    elementwise = [_only_user(n) for n in norms]
    cat = _only_user(elementwise[0]) if elementwise[0] is not None else None
    joined = (
        all(e is not None and e.op == "call_function" and e.target in _ELEMENTWISE and e.target is elementwise[0].target
            and len(e.args) == 1 and not e.kwargs and _only_user(e) is cat for e in elementwise)
        and cat is not None and cat.op == "call_function" and cat.target is torch.cat and list(cat.args[0]) == elementwise
        and cat.kwargs.get("dim", cat.args[1] if len(cat.args) > 1 else 0) in (-1, value.dim() - 1)
    )
    return _Group(split, x, tuple(value.shape[:-1]), p, w, pieces, norms, weights, biases, args[0][4], value.dtype,
                  elementwise if joined else None, cat if joined else None, training)


def _side_effect(graph: torch.fx.Graph) -> torch.fx.Node | None:
    """An op of ``graph`` with side effects (an assert, a print), if any: AOTAutograd's partitioner raises on one in
    a graph with recompute tags."""
    return next((n for n in graph.nodes if n.op.startswith("call_") and n.is_impure(impure_random=False)), None)


def _rewrite(graph: torch.fx.Graph, g: _Group, read_later: bool) -> None:
    """Rewrite ``g``; ``read_later``: its output is a later group's input (a training graph saves it)."""
    call = graph.call_function
    compute = torch.float32
    position = {node: i for i, node in enumerate(graph.nodes)}
    for param in (*g.weights, *g.biases):  # (those defined later: movable, :func:`_group_of` checked)
        if position[param] > position[g.norms[0]]:
            g.norms[0].prepend(param)
    with graph.inserting_before(g.norms[0]):
        # (the split's input as it is now: an earlier group's rewrite may have replaced it). Views that name no
        # size in front of the split dim: those may be symbols, which only the graph's own nodes may hold
        rows = call(torch.Tensor.unflatten, (g.split.args[0], -1, (g.p, g.w)))
        if g.dtype != compute:
            rows = call(torch.Tensor.to, (rows, compute))
        normed = call(F.layer_norm, (rows, (g.w,), None, None, g.eps))
        if g.training:
            normed.meta["recompute"] = CheckpointPolicy.MUST_RECOMPUTE
            arange = call(torch.arange, (g.p * g.w,), {"device": _value(g.x).device})
            grid = call(torch.reshape, (arange, (g.p, g.w)))
            index = call(torch.Tensor.expand_as, (grid, rows))
            for node in (arange, grid, index):
                node.meta["recompute"] = CheckpointPolicy.MUST_RECOMPUTE
        params = []
        for pieces in (g.weights, g.biases):
            joined = call(torch.cat, (pieces,))
            if g.dtype != compute:
                joined = call(torch.Tensor.to, (joined, compute))
            if g.training:  # each element's own: the gradient an atomic add per element
                params.append(call(torch.ops.aten.index.Tensor, (joined, [index])))
            else:
                params.append(call(torch.reshape, (joined, (g.p, g.w))))
        out = call(torch.add, (call(torch.mul, (normed, params[0])), params[1]))
        if g.dtype != compute:  # where each piece's layer norm rounds its output
            out = call(torch.Tensor.to, (out, g.dtype))
    if g.cat is not None:
        with graph.inserting_before(g.cat):
            activated = call(g.elementwise[0].target, (out,))
            joined = call(torch.flatten, (activated, -2))
        if g.training:
            activated.meta["recompute"] = CheckpointPolicy.MUST_SAVE if read_later else CheckpointPolicy.MUST_RECOMPUTE
        joined.meta.update(g.cat.meta)
        g.cat.replace_all_uses_with(joined)
        dead = [g.cat, *g.elementwise, *g.norms, *g.pieces, g.split]
    else:
        with graph.inserting_before(g.norms[0]):
            for i, norm in enumerate(g.norms):
                norm.replace_all_uses_with(call(torch.select, (out, -2, i)))
        dead = [*g.norms, *g.pieces, g.split]
    for node in dead:
        graph.erase_node(node)


class PieceLayerNormsToOneLayerNorm(GraphRule):
    """``x.split(w, -1)`` into ``p`` pieces, each read by ``F.layer_norm(piece, (w,), weight_i, bias_i, eps)``
    alone → one layer norm over ``x.unflatten(-1, (p, w))``, times the weights and plus the biases concatenated into
    ``[p, w]``; where every piece's norm is read by the same elementwise op, read by one cat along the last dim in
    the pieces' order, that op once and a ``flatten`` back in place of the cat; otherwise each piece's norm a
    ``select`` of the group's.

    Before (Dynamo's graph, one layer of three pieces of 32)::

        split = x.split(32, dim=1)
        layer_norm = F.layer_norm(split[0], (32,), w0, b0, 1e-05); tanh = torch.tanh(layer_norm)
        ...                                                           # the same for pieces 1 and 2
        cat = torch.cat([tanh, tanh_1, tanh_2], dim=1)

    After::

        rows = x.unflatten(-1, (3, 32))
        normed = F.layer_norm(rows, (32,), None, None, 1e-05)
        y = normed * torch.cat([w0, w1, w2]).reshape(3, 32) + torch.cat([b0, b1, b2]).reshape(3, 32)
        cat = torch.flatten(torch.tanh(y), -2)

    In a training graph (the module's docstring says why)::

        index = torch.arange(96).reshape(3, 32).expand_as(rows)   # tagged MUST_RECOMPUTE
        normed = F.layer_norm(rows, ...)                           # tagged MUST_RECOMPUTE
        y = normed * torch.cat([w0, w1, w2])[index] + torch.cat([b0, b1, b2])[index]
        cat = torch.flatten(torch.tanh(y), -2)                     # tanh tagged MUST_SAVE where a later layer
                                                                   # reads it, else MUST_RECOMPUTE

    Each row of 32 is normalized as its piece was; bf16 and fp16 are normalized in fp32 and rounded after the bias,
    where each piece's layer norm rounds its output. A split dim of a static size (the sizes in front of it may be
    symbols: the rewrite names none of them), pieces of one width (a view of ``x``), each with a weight and a bias
    of its own; in training, not under deterministic algorithms, nor in a graph with an op of side
    effects (AOTAutograd applies no recompute tags there).
    """

    pass_name = "splitcat"

    def rewrite(self, graph: torch.fx.Graph) -> None:
        groups = [(split, _group_of(split)) for split in graph.nodes if _split_args(split) is not None]
        inputs = {group.x for _, group in groups if isinstance(group, _Group)}
        impure = _side_effect(graph)
        for split, group in groups:  # all found before any is rewritten: a group's shapes are Dynamo's
            if isinstance(group, _Group) and group.training and impure is not None:
                group = f"a training graph with an op of side effects ({impure.name}): no recompute tags there"
            if isinstance(group, str):
                record(self.name, False, [split.name], group)
            elif group is not None:
                tail = f", then {group.elementwise[0].target.__name__} and a cat" if group.cat is not None else ""
                detail = (f"{split.name}: {group.p} pieces of {group.w} of {group.x.name}, each layer-normed with its "
                          f"own weight and bias{tail} → one layer norm over "
                          f"[{', '.join(map(str, (*group.lead, group.p, group.w)))}]")
                if group.training:
                    detail += "; each element gathers its weight and bias (their gradients atomic adds)"
                _rewrite(graph, group, group.cat in inputs)
                record(self.name, True, [split.name], detail)
