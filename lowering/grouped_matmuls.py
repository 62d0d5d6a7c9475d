"""Independent small matrix products, one launch: replicated layers (one per feature, task, table or expert) and
their gradients as one ``optimus_ir::grouped_mm`` call.

Inductor lowers each ``mm`` / ``addmm`` to its own extern call (cuBLAS): 16 per-feature towers of two Linears are
32 launches in the forward and 64 in the backward (each layer's input and weight gradients), each a product of a
few MFLOP that takes less time on the GPU than its launch. The products of one depth of such a graph (none reads
another's result) are computed by one kernel (:mod:`optimus_ir.grouped_mm`), a member's bias and relu applied
there. The rule runs on the post-grad graph, once per graph Inductor compiles: so a training step's forward and
its backward each group their own products (the backward's are those of the forward's transposed operands).

Depth: a product's depth is the longest chain of products among its ancestors; products of one depth are
independent, so each depth of a stack of towers is one launch. Products that cuBLAS computes near the device's
peak (over ``MAX_MEMBER_MACS`` multiply-adds; ``MAX_MEMBER_MACS_IEEE_FP32`` in fp32 without TF32) stay cuBLAS calls.

The grouped call is placed after the last of its members' inputs, and what reads a member's output after it; where
one cat reads all their outputs side by side, the call writes the cat (``grouped_mm_cat``). A group that would
raise the graph's estimated peak (:func:`estimated_peak`) beyond ``OPTIMUS_IR_PEAK_TOLERANCE`` keeps the members
that fit.
"""

from __future__ import annotations

import dataclasses
import operator
from typing import Any

import torch
from torch.fx.experimental.symbolic_shapes import statically_known_true
from torch.utils._pytree import tree_leaves

from optimus_ir import grouped_mm, settings
from optimus_ir.compat import symint_hint
from optimus_ir.lowering import triton_kernels
from optimus_ir.lowering.matmul_sum import MAX_REDUCTION_INNER, MAX_REDUCTION_PRODUCTS
from optimus_ir.records import record
from optimus_ir.rule import GraphRule, Stage

aten = torch.ops.aten

#: a product of more multiply-adds than this is left to cuBLAS (at 2**26, about 4 us of an H100's fp32 rate: the
#: launches saved are worth more below)
MAX_MEMBER_MACS = 1 << 26
#: the bound for fp32 products without TF32, where the kernel's IEEE dots ran at half cuBLAS's rate (an H100, 2048 x
#: 128 x 256 products: 0.23 ms of GPU time grouped against cuBLAS's 0.16)
MAX_MEMBER_MACS_IEEE_FP32 = 1 << 22
#: the fewest members of a group
MIN_MEMBERS = 2
#: the size a symbol is taken to have where it has no hint
_UNHINTED = 4096
#: the ops between a product and the sum it is a term of (a mean's division moved after it, a scale)
_SUM_PATH = (aten.add.Tensor, aten.sub.Tensor, aten.mul.Tensor, aten.div.Tensor)
_PRODUCTS = (aten.mm.default, aten.addmm.default)


@dataclasses.dataclass(frozen=True)
class Member:
    """One product: ``activation(a @ b + bias)``, computed by ``nodes`` (the matmul first, its result last)."""

    nodes: tuple[torch.fx.Node, ...]
    a: torch.fx.Node
    b: torch.fx.Node
    bias: torch.fx.Node | None
    activation: str

    @property
    def result(self) -> torch.fx.Node:
        return self.nodes[-1]

    def key(self) -> tuple[Any, ...]:
        value = _val(self.nodes[0])
        return value.dtype, value.device, self.activation, self.bias is not None

    @property
    def layers(self) -> tuple[Member, ...]:
        return (self,)

    def mapped(self, nodes: dict[Any, Any]) -> Member:
        """This product with its nodes replaced where ``nodes`` says (a graph's copy; an earlier group's results)."""
        def mapped(n: Any) -> Any:
            return nodes.get(n, n)

        return Member(tuple(map(mapped, self.nodes)), mapped(self.a), mapped(self.b), mapped(self.bias),
                      self.activation)


@dataclasses.dataclass(frozen=True)
class Chain:
    """Two products of one member, the second reading the first's result alone: a tower's two layers."""

    first: Member
    second: Member

    @property
    def nodes(self) -> tuple[torch.fx.Node, ...]:
        return self.first.nodes + self.second.nodes

    @property
    def a(self) -> torch.fx.Node:
        return self.first.a

    @property
    def result(self) -> torch.fx.Node:
        return self.second.result

    @property
    def layers(self) -> tuple[Member, ...]:
        return self.first, self.second

    def mapped(self, nodes: dict[Any, Any]) -> Chain:
        return Chain(self.first.mapped(nodes), self.second.mapped(nodes))


def _call(members: list[Member] | list[Chain], into_cat: bool,
          outside_graph_pools: bool) -> tuple[torch._ops.OpOverload, tuple[Any, ...]]:
    """The op and arguments of one call computing ``members``: per layer its weights, biases and activation."""
    layers = list(zip(*(m.layers for m in members)))
    args = tuple(x for layer in layers for x in ([m.b for m in layer], [m.bias for m in layer], layer[0].activation))
    ops = {1: (grouped_mm.OP, grouped_mm.CAT_OP), 2: (grouped_mm.MLP_OP, grouped_mm.MLP_CAT_OP)}[len(layers)]
    return ops[into_cat], ([m.a for m in members], *args, outside_graph_pools)


def _val(node: Any) -> Any:
    return node.meta.get("val") if isinstance(node, torch.fx.Node) else None


def _sole_user(node: torch.fx.Node, target: Any) -> torch.fx.Node | None:
    users = list(node.users)
    return users[0] if len(users) == 1 and users[0].op == "call_function" and users[0].target is target else None


def _bias_of(add: torch.fx.Node, mm: torch.fx.Node) -> torch.fx.Node | None:
    """The bias of ``add(mm, bias)`` or ``add(bias, mm)``: a row of the product's width, of its dtype."""
    if len(add.args) != 2 or add.kwargs:
        return None
    bias = add.args[1] if add.args[0] is mm else add.args[0]
    value, out = _val(bias), _val(mm)
    if value is None or bias is mm or value.dim() != 1 or value.dtype != out.dtype:
        return None
    return bias if value.shape[0] == out.shape[1] else None


def member(node: torch.fx.Node) -> Member | str | None:
    """The product ``node`` starts, its bias add and relu after it where it alone reads them; a reason where it is a
    product that is not grouped; None where ``node`` is not a product on a device Inductor writes Triton for, or is a
    term of a sum that a sum rule computes in one kernel."""
    if node.op != "call_function" or node.target not in _PRODUCTS:
        return None
    out = _val(node)
    if out is None or not triton_kernels(out.device):  # (the CPU's C++ kernels: not a candidate at all)
        return None
    if out.dtype not in grouped_mm.DTYPES:
        return f"{out.dtype}, where products are grouped in fp32, fp16 or bf16"
    nodes, bias = [node], None
    if node.target is aten.addmm.default:
        if len(node.args) != 3 or node.kwargs:
            return "an addmm with alpha or beta"
        bias, a, b = node.args
        value = _val(bias)
        if value is None or value.dim() != 1 or value.dtype != out.dtype:
            return f"an addmm whose bias is not a row of {out.dtype}"
    else:
        a, b = node.args
        add = _sole_user(node, aten.add.Tensor)
        if add is not None and (bias := _bias_of(add, node)) is not None:
            nodes.append(add)
    relu = _sole_user(nodes[-1], aten.relu.default)
    if relu is not None:
        nodes.append(relu)
    macs, bound = _macs(node), _max_macs(out.dtype)
    if macs > bound:
        return f"{macs} multiply-adds, over {bound}: a cuBLAS call"
    terms = _terms_of_sum(nodes[-1])
    if len(terms) >= 2 and (_one_small_reduction(terms) or sum(t.args[-2] is a for t in terms) >= 2):
        return None  # the sum rules' (SummedSmallMatmulsToOneReduction, SharedOperandMatmulsToOneMatmul)
    return Member(tuple(nodes), a, b, bias, "relu" if relu is not None else "none")


def _max_macs(dtype: torch.dtype) -> int:
    ieee = dtype == torch.float32 and not torch.backends.cuda.matmul.allow_tf32
    return MAX_MEMBER_MACS_IEEE_FP32 if ieee else MAX_MEMBER_MACS


def _macs(product: torch.fx.Node) -> int:
    a, b = product.args[-2:]
    (m, k), n = _val(a).shape, _val(b).shape[1]
    return _hint(m) * _hint(k) * _hint(n)


def _terms_of_sum(result: torch.fx.Node) -> list[torch.fx.Node]:
    """The products of the sum ``result`` flows into (through ops of ``_SUM_PATH`` that each read it alone)."""
    top = result
    while len(top.users) == 1 and (user := next(iter(top.users))).op == "call_function" and user.target in _SUM_PATH:
        top = user
    if top is result:
        return []
    found, stack, seen = [], [top], set()
    while stack:
        node = stack.pop()
        if node in seen or node.op != "call_function":
            continue
        seen.add(node)
        if node.target in _PRODUCTS:
            found.append(node)
        elif node.target in _SUM_PATH:
            stack.extend(node.all_input_nodes)
    return found


def _one_small_reduction(products: list[torch.fx.Node]) -> bool:
    """Whether ``SummedSmallMatmulsToOneReduction`` computes these products' sum (one Triton reduction: each inner
    size within its bound, their multiply-adds within its total), which is fewer launches and bytes than a group."""
    inner = [_hint(_val(p.args[-2]).shape[1]) for p in products]
    return max(inner) <= MAX_REDUCTION_INNER and sum(map(_macs, products)) <= MAX_REDUCTION_PRODUCTS


def _hint(size: Any) -> int:
    return symint_hint(size, fallback=_UNHINTED)


def groups(graph: torch.fx.Graph) -> tuple[list[list[Member]], list[tuple[torch.fx.Node, str]]]:
    """The graph's products grouped by depth and kind (dtype, device, activation, bias), in graph order; and the
    products left out, each with the reason. A product computed as an earlier one was (a backward's equal weight
    gradients) is left to ``RepeatedComputationToFirstValue``, which computes it once."""
    reach: dict[torch.fx.Node, int] = {}  # the most products on a path from the graph's inputs to the node
    found: dict[tuple[Any, ...], list[Member]] = {}
    seen: set[tuple[Any, ...]] = set()
    left_out = []
    for node in graph.nodes:
        depth = max((reach[i] for i in node.all_input_nodes), default=0)
        reach[node] = depth
        found_member = member(node)
        if isinstance(found_member, str):
            left_out.append((node, found_member))
        elif found_member is not None:
            reach[node] = depth + 1
            value = (_value_key(found_member.a), _value_key(found_member.b), found_member.bias, found_member.activation)
            if value not in seen:
                seen.add(value)
                found.setdefault((depth, *found_member.key()), []).append(found_member)
    return [g for g in found.values() if len(g) >= MIN_MEMBERS], left_out


def _value_key(node: Any) -> Any:
    """``node``, or for a view the view op, its arguments and its base's key: equal for equal values."""
    if isinstance(node, torch.fx.Node) and node.op == "call_function" and _is_view(node):
        return node.target, _value_key(node.args[0]), tuple(map(_value_key, node.args[1:])), tuple(node.kwargs.items())
    return node


def _bytes(value: Any) -> int:
    return sum(_hint(t.numel()) * t.element_size() for t in tree_leaves(value) if isinstance(t, torch.Tensor))


def _is_view(node: torch.fx.Node) -> bool:
    return getattr(node.target, "is_view", False)


def _multi_output(node: torch.fx.Node) -> bool:
    """Whether ``node``'s outputs are held by its ``getitem`` readers (each its own allocation)."""
    return isinstance(_val(node), (list, tuple)) and any(u.target is operator.getitem for u in node.users)


def _fused_away(node: torch.fx.Node) -> bool:
    """Whether ``node`` holds no memory of its own: a pointwise or reduction op whose readers all are (Inductor fuses
    it into them) or a cat (its kernel computes the piece); or a product only a cat reads (written into the cat)."""
    def fusible(n: torch.fx.Node) -> bool:
        tags = getattr(n.target, "tags", ())
        return n.op == "call_function" and (torch.Tag.pointwise in tags or torch.Tag.reduction in tags)

    def cat(n: torch.fx.Node) -> bool:
        return n.op == "call_function" and n.target is aten.cat.default

    if node.target in _PRODUCTS:
        return bool(node.users) and all(map(cat, node.users))
    return fusible(node) and all(fusible(u) or cat(u) for u in node.users)


def estimated_peak(graph: torch.fx.Graph) -> int:
    """The most bytes the graph's values hold at once, above its inputs (what a call's measured peak counts: the
    caller holds the inputs already): each value Inductor keeps in memory (:func:`_fused_away`) from when its node
    runs (a multi-output op's outputs, its ``getitem`` nodes, all at the op) until its last reader or a view's of it
    runs. In the graph's order: Inductor's scheduler may hold less (fusing across readers) or more (reordering)."""
    nodes = list(graph.nodes)
    position = {node: i for i, node in enumerate(nodes)}
    owner: dict[torch.fx.Node, torch.fx.Node] = {}
    born, freed = [0] * len(nodes), [0] * (len(nodes) + 1)
    for node in nodes:
        if node.op == "call_function":
            source = node.args[0] if node.args and isinstance(node.args[0], torch.fx.Node) else None
            if source is not None and _is_view(node):
                owner[node] = owner.get(source, source)
            elif not _multi_output(node) and not _fused_away(node):
                owner[node] = node
                made_by = source if node.target is operator.getitem and _multi_output(source) else node
                if node.target is aten.cat.default:  # allocated where its first piece is written into it
                    made_by = min((i for i in node.all_input_nodes if _fused_away(i)), key=position.__getitem__,
                                  default=node)
                born[position[made_by]] += _bytes(_val(node))
    last: dict[torch.fx.Node, int] = {}
    for node in nodes:
        for i in node.all_input_nodes:
            if i in owner:
                last[owner[i]] = len(nodes) if node.op == "output" else position[node]
    for node, end in last.items():
        if owner.get(node) is node:  # (not a graph input: the caller's)
            freed[end] += _bytes(_val(node))
    peak = live = 0
    for i in range(len(nodes)):
        live += born[i]
        peak = max(peak, live)
        live -= freed[i]
    return peak


def cat_of(members: list[Any]) -> tuple[torch.fx.Node, list[Any]] | None:
    """The cat that alone reads every member's result, side by side along the columns and nothing else, with the
    members in its order; None where there is none or the members' row counts are not proven equal."""
    cats = {u for m in members for u in m.result.users}
    if len(cats) != 1 or any(len(m.result.users) != 1 for m in members):
        return None
    cat = cats.pop()
    if cat.target is not aten.cat.default or cat.kwargs or len(cat.args[0]) != len(members):
        return None
    if (cat.args[1] if len(cat.args) > 1 else 0) not in (1, -1) or len(_val(cat).shape) != 2:
        return None
    by_result = {m.result: m for m in members}
    if set(cat.args[0]) != set(by_result):
        return None
    rows = [_val(m.a).shape[0] for m in members]
    if not all(statically_known_true(r == rows[0]) for r in rows[1:]):
        return None
    return cat, [by_result[r] for r in cat.args[0]]


def _grouped(graph: torch.fx.Graph, members: list[Member] | list[Chain], outside_graph_pools: bool) -> dict[Any, Any]:
    """Replace ``members`` by one grouped call, then sort the graph; returns what replaces each node others read.
    Where one cat reads all the members' results (:func:`cat_of`), the call writes the cat (``grouped_mm_cat``,
    ``grouped_mlp_cat``); else a ``getitem`` of the call replaces each member's result."""
    order = {node: i for i, node in enumerate(graph.nodes)}
    side_by_side = cat_of(members)
    if side_by_side is not None:
        members = side_by_side[1]
    op, args = _call(members, side_by_side is not None, outside_graph_pools)
    inputs = [i for i in tree_leaves(args) if isinstance(i, torch.fx.Node)]
    with graph.inserting_after(max(inputs, key=order.__getitem__)):
        call = graph.call_function(op, args)
    call.meta["val"] = op(*torch.fx.node.map_arg(args, _val))
    replaced: dict[Any, Any] = {}
    if side_by_side is not None:
        cat = side_by_side[0]
        cat.replace_all_uses_with(call)
        graph.erase_node(cat)
        replaced[cat] = call
    else:
        previous = call
        for i, m in enumerate(members):
            with graph.inserting_after(previous):
                item = previous = graph.call_function(operator.getitem, (call, i))
            item.meta["val"] = call.meta["val"][i]
            m.result.replace_all_uses_with(item)
            replaced[m.result] = item
    for m in members:
        for node in reversed(m.nodes):
            graph.erase_node(node)
    from torch._inductor.pattern_matcher import stable_topological_sort

    stable_topological_sort(graph)
    return replaced


def _copy(graph: torch.fx.Graph) -> tuple[torch.fx.Graph, dict[torch.fx.Node, torch.fx.Node]]:
    copy, nodes = torch.fx.Graph(), {}
    copy.output(copy.graph_copy(graph, nodes))
    return copy, nodes


def _mapped(members: list[Any], nodes: dict[Any, Any]) -> list[Any]:
    return [m.mapped(nodes) for m in members]


class IndependentMatmulsToGroupedMatmul(GraphRule):
    """Products of one depth and kind, each small → one ``grouped_mm`` call.

    Before (two of 16 per-feature towers' first layers, inference; ``x_i [1024, 32]``)::

        addmm = aten.addmm(b0, x0, permute)            # Linear(32, 64)
        relu = aten.relu(addmm)
        addmm_1 = aten.addmm(b1, x1, permute_1)
        relu_1 = aten.relu(addmm_1)

    After::

        grouped_mm = optimus_ir.grouped_mm([x0, x1], [permute, permute_1], [b0, b1], "relu", False)
        getitem = grouped_mm[0]                        # relu's readers read this
        getitem_1 = grouped_mm[1]

    The towers' second layers, which one cat reads side by side (``cat([addmm_2, addmm_3], 1)``), become
    ``grouped_mm_cat([relu, relu_1], [permute_2, permute_3], [b2, b3], "none", False)``: the cat, written by the
    call.

    A product is ``mm(a, b)``, optionally followed by an add of a bias row that it alone reads, or ``addmm(bias, a,
    b)`` without alpha or beta; then a relu that it alone reads; on CUDA, fp32, fp16 or bf16; any sizes (symbols
    too: the kernel reads them per call), of at most ``MAX_MEMBER_MACS`` multiply-adds at their hints
    (``MAX_MEMBER_MACS_IEEE_FP32`` in fp32 without TF32).
    """

    pass_name = "horizontal"
    stage = Stage.POST_GRAD

    def rewrite(self, graph: torch.fx.Graph) -> None:
        found, left_out = groups(graph)
        for node, reason in left_out:
            record(self.name, False, [node.name], reason)
        _rewrite_groups(self.name, graph, found)


def _chains(found: list[list[Member]]) -> list[list[Chain]]:
    """Of the groups of products, the groups of two-layer members (:class:`Chain`): a product of one group whose
    left operand is the result of a product of another, which nothing else reads; its output at most
    ``MAX_MLP_WIDTH`` wide. A product is in one chain at most (a deeper stack: its first two layers)."""
    by_result = {m.result: m for group in found for m in group}
    taken: set[int] = set()
    chains = []
    for group in found:
        kinds: dict[tuple[Any, ...], list[Chain]] = {}
        for second in group:
            first = by_result.get(second.a)
            if first is None or id(first) in taken or id(second) in taken or len(first.result.users) != 1:
                continue
            if statically_known_true(_val(second.result).shape[1] <= grouped_mm.MAX_MLP_WIDTH):
                kinds.setdefault((first.key(), second.key()), []).append(Chain(first, second))
        for kind in kinds.values():
            if len(kind) >= MIN_MEMBERS:
                taken.update(id(m) for chain in kind for m in (chain.first, chain.second))
                chains.append(kind)
    return chains


class MatmulChainsToGroupedMlp(GraphRule):
    """Two-layer members whose hidden activation nothing else reads → one ``grouped_mlp`` call, the hidden
    activations kept in registers.

    Before (two of 16 per-feature towers, inference; ``x_i [1024, 32]``)::

        addmm = aten.addmm(b0, x0, permute)            # Linear(32, 64)
        relu = aten.relu(addmm)
        addmm_1 = aten.addmm(b1, relu, permute_1)      # Linear(64, 16)
        addmm_2 = aten.addmm(b2, x1, permute_2)
        relu_1 = aten.relu(addmm_2)
        addmm_3 = aten.addmm(b3, relu_1, permute_3)
        cat = aten.cat([addmm_1, addmm_3], 1)

    After::

        cat = optimus_ir.grouped_mlp_cat([x0, x1], [permute, permute_2], [b0, b2], "relu",
                                         [permute_1, permute_3], [b1, b3], "none", False)

    Grouping each depth apart (``IndependentMatmulsToGroupedMatmul``) would hold every member's hidden activation at
    once, where stock holds one; here none is written. Each layer is a product of that rule's kind (bias, relu,
    dtypes, sizes within its bounds); the second layer's output at most ``MAX_MLP_WIDTH`` columns. In a training
    step the hidden activations are saved for the backward (read twice): not a chain, left to the per-depth rule.
    """

    pass_name = "horizontal"
    stage = Stage.POST_GRAD

    def rewrite(self, graph: torch.fx.Graph) -> None:
        _rewrite_groups(self.name, graph, _chains(groups(graph)[0]))


def _rewrite_groups(rule: str, graph: torch.fx.Graph, found: list[list[Member]] | list[list[Chain]]) -> None:
    """Each group of ``found`` as one call, keeping those of its members that fit in the peak's tolerance."""
    from torch._inductor import config

    outside_graph_pools = bool(config.triton.cudagraphs and config.triton.cudagraph_trees)
    replaced: dict[Any, Any] = {}
    for members in found:
        members = _mapped(members, replaced)
        kept, peaks = _within_peak(graph, members, outside_graph_pools)
        if len(kept) < len(members):
            left = [m.nodes[0].name for m in members if m not in kept]
            record(rule, False, left, f"{len(left)} of {len(members)} products left apart: with them, the estimated "
                   f"peak {peaks[0]} -> {peaks[1]} bytes, over the tolerance of {settings.peak_tolerance()}")
        if len(kept) < MIN_MEMBERS:
            continue
        into_cat = cat_of(kept) is not None
        if len(kept) == 2 and any(_read_by_cat(m) for m in kept) and not into_cat:
            record(rule, False, [m.nodes[0].name for m in kept], "2 products a cat reads: Inductor writes them into "
                   "the cat; grouped, they would be copied there (one launch for one saved)")
            continue
        replaced.update(_grouped(graph, kept, outside_graph_pools))
        record(rule, True, [m.nodes[0].name for m in kept], _described(kept, into_cat))


def _described(members: list[Member] | list[Chain], into_cat: bool) -> str:
    layers = list(zip(*(m.layers for m in members)))
    chains = len(layers) == 2
    shapes = ", ".join(_shape(m.a) + "".join(f"@{_shape(layer[i].b)}" for layer in layers)
                       for i, m in enumerate(members[:4]))
    more = f" and {len(members) - 4} more" if len(members) > 4 else ""
    steps = ", then".join(f"{' + bias' if layer[0].bias is not None else ''}, {layer[0].activation}"
                          for layer in layers)
    what = "two-layer members" if chains else "products"
    op = "grouped_mlp launch, the hidden activations never written" if chains else "grouped_mm launch"
    into = ", written into the cat that reads them" if into_cat else ""
    return f"{len(members)} {what} ({shapes}{more}){steps} → one {op}{into}"


def _within_peak(graph: torch.fx.Graph, members: list[Any],
                 outside_graph_pools: bool) -> tuple[list[Any], tuple[int, int]]:
    """The most members, smallest products first, whose grouping keeps the graph's estimated peak within the
    tolerance; and the peak before and with all of them."""
    ceiling = (before := estimated_peak(graph)) * (1 + settings.peak_tolerance())

    def peak(some: list[Member]) -> int:
        trial, nodes = _copy(graph)
        _grouped(trial, _mapped(some, nodes), outside_graph_pools)
        return estimated_peak(trial)

    with_all = peak(members)
    if with_all <= ceiling:
        return members, (before, with_all)
    by_size = sorted(members, key=lambda m: _bytes(_val(m.result)))
    low, high = 0, len(by_size) - 1  # the most that fit: at least low, fewer than high + 1
    while low < high:
        middle = (low + high + 1) // 2
        low, high = (middle, high) if middle >= MIN_MEMBERS and peak(by_size[:middle]) <= ceiling else (low, middle - 1)
    kept = set(map(id, by_size[:low]))
    return [m for m in members if id(m) in kept], (before, with_all)


def _read_by_cat(m: Member) -> bool:
    return any(u.target is aten.cat.default for u in m.result.users)


def _shape(node: torch.fx.Node) -> str:
    return "x".join(map(str, _val(node).shape))
