"""Sums of matmuls: one kernel where Inductor makes one call per product and a kernel for the sum.

A heterogeneous GNN sums, per node type, the messages of every edge type that ends there, and each message is a
Linear of the aggregated neighbours plus a Linear of the node's own features (torch_geometric's ``to_hetero`` of a
SAGE convolution, ``aggr="sum"``): per node type and layer, an extern call per product and a kernel that adds them.
An RGCN's root weights and any sum of projections of one input are the same shape.

- Small products (``SummedSmallMatmulsToOneReduction``): the whole sum as one Triton reduction over the inner
  dimension, each output the sum of its products' dot products, the sum's other terms and its reader fused after.
- Larger products of one left operand (``SharedOperandMatmulsToOneMatmul``): ``a @ b1 + a @ b2`` as
  ``a @ (b1 + b2)``, the right operands (weights, small) added instead of the products.

Both are written for the sum's last add, where all its terms are lowered.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import torch
from torch._inductor import ir
from torch._inductor.lowering import to_dtype
from torch._inductor.virtualized import V, ops

from optimus_ir import graph_state, index_math
from optimus_ir.drivers import stock_lowering
from optimus_ir.lowering import PRODUCT_DTYPES, boxed, fp32_sum, triton_kernels
from optimus_ir.rule import LoweringRule, NotApplicable, Reject

aten = torch.ops.aten

#: the least number of matmuls worth one call
_MIN_MATMULS = 2
#: the most multiply-adds of a sum taken as one reduction: each output loads its operands' rows and columns again
#: where cuBLAS reuses them in registers. Up to here the reduction takes about the device time of cuBLAS's products
#: and their add, in one launch where they take several; past it up to 4x theirs
#: (measured on an H100, 2026-12-06: benchmarks/results/HISTORY.md)
MAX_REDUCTION_PRODUCTS = 1 << 25
#: the longest inner dimension taken as a reduction (a loop per output where cuBLAS splits it)
MAX_REDUCTION_INNER = 512


def _is_inner_add(node: Any) -> bool:
    """Whether ``node`` is an ``add`` of two tensors read only by the next add of the same sum."""
    return (
        isinstance(node, torch.fx.Node)
        and node.target is aten.add.Tensor
        and not node.kwargs
        and len(node.users) == 1
        and all(isinstance(arg, torch.fx.Node) for arg in node.args)
    )


def _takes_a_sum(node: torch.fx.Node) -> bool:
    """Whether this rule looks at ``node`` as the last add of a sum (so not at the adds inside it)."""
    return node.target is aten.add.Tensor and not node.kwargs and len(node.args) == 2


def _terms(root: torch.fx.Node) -> tuple[list[Any], set[torch.fx.Node]]:
    """The terms of the sum whose last add is ``root``, in order, and the adds between them."""
    terms: list[Any] = []
    adds = {root}
    pending = list(root.args)
    while pending:
        node = pending.pop(0)
        if _is_inner_add(node):
            adds.add(node)
            pending[:0] = node.args
        else:
            terms.append(node)
    return terms, adds


def _buffers_of(values: list[Any], adds: set[torch.fx.Node]) -> dict[torch.fx.Node, Any]:
    """The realized buffers the lowered sum ``values`` reads, by the FX node each was lowered from (looked for
    through the sum's own adds where Inductor realized one): the FX graph's values are freed after their last
    reader, so the terms are found by what the sum reads."""
    found: dict[torch.fx.Node, Any] = {}
    names = [name for value in values if isinstance(value, ir.IRNode) for name in value.get_read_names()]
    while names:
        buffer = V.graph.get_buffer(names.pop())
        origin = getattr(buffer, "origin_node", None)
        if origin in adds:
            names += buffer.get_read_names()
        elif origin is not None:
            found.setdefault(origin, buffer)
    return found



@dataclasses.dataclass
class _Product:
    """A matmul term of a sum: its FX node, its lowered value and operands; ``scale`` the per-row divisor of its left
    operand where ``RowScaledMatmulInputToScaledProduct`` moved it after the product (``left`` then unscaled);
    ``bias`` an addmm's."""

    node: torch.fx.Node
    value: Any
    left: Any
    right: Any
    scale: Any | None = None
    bias: Any | None = None


@dataclasses.dataclass
class _Sum:
    """The sum whose last add is being lowered: its FX terms and adds, its matmul terms read by the sum alone, and
    the lowered value of every other term."""

    root: torch.fx.Node
    terms: list[Any]
    adds: set[torch.fx.Node]
    products: list[_Product]
    others: dict[Any, Any]
    dtype: torch.dtype
    device: torch.device

    def value(self, replaced: dict[torch.fx.Node, Any]) -> Any:
        """The sum in the FX graph's order (so that the other terms round as they did), ``replaced`` standing for
        the products (None: a product folded into another's value)."""
        add = stock_lowering(aten.add.Tensor)  # these rules stand in add's lowering

        def value(node: Any) -> Any:
            if node not in self.adds:
                return replaced[node] if node in replaced else self.others.get(node, node)
            left, right = value(node.args[0]), value(node.args[1])
            return right if left is None else left if right is None else add(left, right)

        return value(self.root)


def _scaled_product(mm: torch.fx.Node, state: Any) -> Any:
    """The extern matmul of a product that ``RowScaledMatmulInputToScaledProduct`` lowered as the product of the
    unscaled input, then scaled (its value a pointwise of that product)."""
    if mm.args[0] not in state.row_scaled or mm not in state.rule_values:
        return None
    read = [V.graph.get_buffer(name) for name in state.rule_values[mm].get_read_names()]
    return next((buffer for buffer in read if isinstance(buffer, ir.ExternKernelOut)), None)


def _is_product(term: Any, every_kind: bool) -> bool:
    """Whether the FX term ``term`` is a matmul read by its sum alone: an ``mm``, or (``every_kind``) an ``mm`` a
    rule rewrote (a row-scaled one) or an ``addmm`` of unscaled terms too."""
    if not isinstance(term, torch.fx.Node) or len(term.users) != 1:
        return False
    if term.target is aten.mm.default:
        return every_kind or term not in graph_state.current().rule_values
    return every_kind and term.target is aten.addmm.default and not term.kwargs


def _sum_at(root: Any, args: tuple[Any, ...], kwargs: dict[str, Any], every_kind: bool) -> _Sum:
    """The sum whose last add ``root`` is; ``every_kind``: row-scaled matmuls and addmms are products too (else
    other terms)."""
    if root is None or kwargs or len(args) != 2 or not _takes_a_sum(root):
        raise NotApplicable("not an add of two values")
    if _is_inner_add(root) and _takes_a_sum(next(iter(root.users))):
        raise NotApplicable("an inner add of a sum; the last add takes the whole sum")
    terms, adds = _terms(root)
    state = graph_state.current()
    mms = [t for t in terms if _is_product(t, every_kind)]
    if len(mms) < _MIN_MATMULS:
        raise NotApplicable("fewer than two matmuls read by the sum alone")
    buffers = _buffers_of(list(args), adds)
    products = []
    for mm in mms:
        extern = _scaled_product(mm, state) if mm in state.rule_values else buffers.get(mm)
        operands = 3 if mm.target is aten.addmm.default else 2
        if not isinstance(extern, ir.ExternKernelOut) or len(extern.inputs) != operands:
            raise Reject("a matmul of the sum is not one extern kernel the sum reads")
        *bias, left, right = map(boxed, extern.inputs)
        if mm in state.rule_values:
            products.append(_Product(mm, state.rule_values[mm], left, right, state.row_scaled[mm.args[0]][1]))
        else:
            products.append(_Product(mm, boxed(extern), left, right, bias=bias[0] if bias else None))
    dtypes = {t.get_dtype() for p in products for t in (p.left, p.right, p.bias) if t is not None}
    device = products[0].left.get_device()
    if len(dtypes) != 1 or not next(iter(dtypes)).is_floating_point:
        raise Reject(f"operands of dtypes {sorted(map(str, dtypes))}")
    if device is None or not triton_kernels(device):
        raise Reject(f"on {device}: Inductor writes no Triton kernels there")
    known_equal = V.graph.sizevars.statically_known_equals
    rows, cols = products[0].left.get_size()[0], products[0].right.get_size()[1]
    if not all(known_equal(p.left.get_size()[0], rows) and known_equal(p.right.get_size()[1], cols) for p in products):
        shapes = sorted({f"{p.left.get_size()[0]}x{p.right.get_size()[1]}" for p in products})
        raise Reject(f"matmuls of output shapes {shapes} not proven equal (a broadcast sum)")
    others: dict[Any, Any] = {}  # each other FX term of the sum → its lowered value
    for term in terms:
        if term in mms or not isinstance(term, torch.fx.Node):
            continue
        if term.op == "placeholder" and term.target in V.graph.graph_inputs:
            others[term] = V.graph.graph_inputs[term.target]
        elif term in state.rule_values:
            others[term] = state.rule_values[term]
        elif term in buffers:
            others[term] = boxed(buffers[term])
        else:
            raise Reject(f"the term {term.name} is computed inline, not a buffer the sum reads")
    dtype = next(iter(dtypes))
    if any(v.get_dtype() != dtype for v in others.values()):
        raise Reject(f"terms of another dtype than the products' {dtype}: the sum's promotions would move")
    return _Sum(root, terms, adds, products, others, dtype, device)


class SummedSmallMatmulsToOneReduction(LoweringRule):
    """``mm(a1, b1) + mm(a2, b2) + ... + rest`` (each matmul and each add of the sum read once; one inner size ``K``;
    at most ``MAX_REDUCTION_PRODUCTS`` multiply-adds) → a sum over ``k`` of ``a1[m, k] * b1[k, n] + a2[m, k] *
    b2[k, n] + ...`` (a Triton reduction, accumulated in fp32), then ``rest`` added as it was.

    Before (two SAGE convolutions into one node type: ``x`` its features, ``s1``, ``s2`` the summed messages, ``c1``,
    ``c2`` their counts; ``RowScaledMatmulInputToScaledProduct`` has moved each mean's division after its product)::

        buf0 = extern mm(s1, reinterpret(w1, [64, 64], [1, 64]))
        buf1 = extern mm(x, reinterpret(v1, [64, 64], [1, 64]))
        buf2 = extern mm(s2, reinterpret(w2, [64, 64], [1, 64]))
        buf3 = extern mm(x, reinterpret(v2, [64, 64], [1, 64]))
        buf4 = Pointwise(relu(b1[i1] + buf0[...] / c1[i0] + buf1[...] + b2[i1] + buf2[...] / c2[i0] + buf3[...]))

    After::

        buf5 = Reduction(sum over r0 < 64 of s1[64*i0 + r0] / c1[i0] * w1[64*i1 + r0] + x[...] * v1[...]
                         + s2[...] / c2[i0] * w2[...] + x[...] * v2[...])                    # [M, 64], fp32
        buf6 = Pointwise(relu(b1[i1] + buf5[64*i0 + i1] + b2[i1]))    # fused with buf5: one kernel
        # buf0 to buf3: no reader left, removed by the scheduler's dead-node elimination

    An ``addmm`` term (a sum Inductor folded partly, where it is a graph's output) is a product and its bias, added
    in its place. A row-scaled operand is divided where it is read, as the mean was before its product. The products
    are added in fp32 before they are rounded (bf16: one rounding where stock has one per product), in another order
    than cuBLAS's: a difference within float rounding. The operands are read until the sum, not until their own product
    (``GraphState.may_raise_peak``: the stock guard compares the peaks). Fp32, fp16 or bf16; where Inductor writes
    Triton kernels. Rows and columns may be symbolic (a sampled subgraph's node counts): the products' output shapes
    must be proven equal, and their multiply-adds are counted at Inductor's size hints (the sizes it compiles for).
    ``K`` must be proven one size and at most ``MAX_REDUCTION_INNER`` (static, or a symbol whose range bounds it):
    a later call may not loop longer per output. Larger sums are left to ``SharedOperandMatmulsToOneMatmul``.
    """

    pass_name = "horizontal"
    op = aten.add.Tensor

    def rewrite(self, *args: Any, **kwargs: Any) -> tuple[Any, str]:
        root = V.graph.current_node
        found = _sum_at(root, args, kwargs, every_kind=True)
        if found.dtype not in PRODUCT_DTYPES:
            raise NotApplicable(f"products of {found.dtype}")
        sizevars = V.graph.sizevars
        inner, *more_inner = (p.left.get_size()[1] for p in found.products)
        if not all(sizevars.statically_known_equals(k, inner) for k in more_inner):
            if index_math.is_static([inner, *more_inner]):
                raise NotApplicable(f"products of inner sizes {sorted({inner, *more_inner})}: cuBLAS's")
            raise Reject(f"inner sizes {[inner, *more_inner]} not proven equal: one reduction runs over one")
        if not sizevars.statically_known_leq(inner, MAX_REDUCTION_INNER):
            if index_math.is_static([inner]):
                raise NotApplicable(f"products of inner size {inner}: cuBLAS's")
            raise Reject(f"the inner size {inner} is not proven at most {MAX_REDUCTION_INNER}: a longer one would "
                         f"loop per output where cuBLAS splits it")
        rows, cols = found.products[0].left.get_size()[0], found.products[0].right.get_size()[1]
        # at the sizes Inductor compiles for (its size hints), as it chooses its own kernels
        size = sizevars.optimization_hint(rows * cols * inner) * len(found.products)
        if size > MAX_REDUCTION_PRODUCTS:
            raise NotApplicable(f"products of {size} multiply-adds: cuBLAS's")
        loads = [(p.left.make_loader(), p.right.make_loader(), p.scale.make_loader() if p.scale is not None else None)
                 for p in found.products]

        def summand(index: list[Any], reduction_index: list[Any]) -> Any:
            (m, n), (k,) = index, reduction_index
            total = None
            for left, right, scale in loads:
                a = ops.to_dtype(left([m, k]), torch.float32)
                if scale is not None:
                    a = ops.truediv(a, ops.to_dtype(scale([m, 0]), torch.float32))
                term = ops.mul(a, ops.to_dtype(right([k, n]), torch.float32))
                total = term if total is None else ops.add(total, term)
            return total

        out = to_dtype(fp32_sum(found.device, summand, [rows, cols], [inner]), found.dtype)
        graph_state.current().note_peak_raise(self.name, root.name)
        add = stock_lowering(aten.add.Tensor)
        replaced: dict[torch.fx.Node, Any] = {}
        for product in found.products:  # the reduction in the first one's place, the addmms' biases in theirs
            value = None if replaced else out
            if product.bias is not None:
                value = product.bias if value is None else add(value, product.bias)
            replaced[product.node] = value
        result = found.value(replaced)
        return result, (f"{len(found.products)} matmuls ({rows}x{inner}x{cols} each) and "
                        f"{len(found.others)} other terms → one reduction over the inner dimension")


class SharedOperandMatmulsToOneMatmul(LoweringRule):
    """``mm(a, b1) + mm(a, b2) + ... + rest`` (each matmul and each add of the sum read once; ``a`` one FX value)
    → ``mm(a, b1 + b2 + ...) + rest``, the sum's other adds as they were.

    Before (two SAGE convolutions into one node type: ``x`` its features, ``m1``, ``m2`` the mean messages)::

        buf0 = extern mm(m1, reinterpret(w1, [64, 64], [1, 64]))
        buf1 = extern mm(x, reinterpret(v1, [64, 64], [1, 64]))
        buf2 = extern mm(m2, reinterpret(w2, [64, 64], [1, 64]))
        buf3 = extern mm(x, reinterpret(v2, [64, 64], [1, 64]))
        buf4 = Pointwise(relu(b1[i1] + buf0[64*i0 + i1] + buf1[...] + b2[i1] + buf2[...] + buf3[...]))

    After::

        buf5 = extern mm(x, Pointwise(v1[i1, i0] + v2[i1, i0]))                  # [64, 64], realized by mm
        buf6 = Pointwise(relu(b1[i1] + buf0[...] + buf5[64*i0 + i1] + b2[i1] + buf2[...]))
        # buf1, buf3: no reader left, removed by the scheduler's dead-node elimination

    The right operands' sum rounds once where the products' sum rounded once: the result moves within float
    rounding (docs/design.md has the hetero GNN's errors). Side by side instead (``a @ [b1 | b2]``, its column
    blocks added) would round as stock, but holds the products at their total size. One floating dtype, where
    Inductor writes Triton kernels; any sizes, symbolic ones too, with the products' output shapes proven equal; the
    sum's other terms must be graph inputs, values another lowering rule returned, or buffers the sum reads.
    """

    pass_name = "horizontal"
    op = aten.add.Tensor

    def rewrite(self, *args: Any, **kwargs: Any) -> tuple[Any, str]:
        found = _sum_at(V.graph.current_node, args, kwargs, every_kind=False)
        by_operand: dict[Any, list[_Product]] = {}
        for product in found.products:
            by_operand.setdefault(product.node.args[0], []).append(product)
        shared = [products for products in by_operand.values() if len(products) >= _MIN_MATMULS]
        if not shared:
            raise NotApplicable("no two matmuls of one left operand in the sum")
        add = stock_lowering(aten.add.Tensor)
        replaced: dict[torch.fx.Node, Any] = {p.node: p.value for p in found.products}
        merged = 0
        for products in shared:
            right = products[0].right
            for p in products[1:]:
                right = add(right, p.right)
            replaced[products[0].node] = stock_lowering(aten.mm.default)(products[0].left, right)
            replaced.update((p.node, None) for p in products[1:])  # in the first one's product
            merged += len(products)
        size = "x".join(map(str, (found.products[0].left.get_size()[0], found.products[0].right.get_size()[1])))
        return found.value(replaced), (f"{merged} matmuls of {len(shared)} left operand(s) ({size}) → {len(shared)}, "
                                       f"right operands added; {len(found.terms) - merged} other terms")
