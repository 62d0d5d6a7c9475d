"""Matmuls of one left operand summed: one extern call where Inductor makes one per term.

``a @ b1 + a @ b2 + rest`` is ``a @ (b1 + b2) + rest``: the right operands (weights, small) are added instead of
the products. A heterogeneous GNN sums, per node type, the messages of every edge type that ends there, and each
message is a Linear of the aggregated neighbours plus a Linear of the node's own features (torch_geometric's
``to_hetero`` of a SAGE convolution, ``aggr="sum"``): the node's features go through one matmul per edge type where
one does. An RGCN's root weights and any sum of projections of one input are the same shape.

Written for the sum's last add: the products of other left operands stay where Inductor computed them, and one
product where there were several is held in their place.
"""

from __future__ import annotations

from typing import Any

import torch
from torch._inductor import ir
from torch._inductor.virtualized import V

from optimus_ir import graph_state, index_math
from optimus_ir.drivers import stock_lowering
from optimus_ir.lowering import boxed, triton_kernels
from optimus_ir.rule import LoweringRule, NotApplicable, Reject

aten = torch.ops.aten

#: the least number of matmuls worth one call
_MIN_MATMULS = 2


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
    blocks added) would round as stock, but holds the products at their total size. Static sizes, one floating dtype, where Inductor writes Triton kernels; the sum's other terms
    must be graph inputs, values another lowering rule returned, or buffers the sum reads.
    """

    name = "SharedOperandMatmulsToOneMatmul"
    pass_name = "horizontal"
    op = aten.add.Tensor

    def rewrite(self, *args: Any, **kwargs: Any) -> tuple[Any, str]:
        root = V.graph.current_node
        if root is None or kwargs or len(args) != 2 or not _takes_a_sum(root):
            raise NotApplicable("not an add of two values")
        if _is_inner_add(root) and _takes_a_sum(next(iter(root.users))):
            raise NotApplicable("an inner add of a sum; the last add takes the whole sum")
        terms, adds = _terms(root)
        by_operand: dict[Any, list[torch.fx.Node]] = {}
        for term in terms:
            if isinstance(term, torch.fx.Node) and term.target is aten.mm.default and len(term.users) == 1:
                by_operand.setdefault(term.args[0], []).append(term)
        shared = {a: mms for a, mms in by_operand.items() if len(mms) >= _MIN_MATMULS}
        if not shared:
            raise NotApplicable("no two matmuls of one left operand in the sum")
        buffers = _buffers_of(list(args), adds)
        merged = [mm for mms in shared.values() for mm in mms]
        externs = [buffers.get(mm) for mm in merged]
        if any(not isinstance(e, ir.ExternKernelOut) or len(e.inputs) != 2 for e in externs):
            raise Reject("a matmul of the sum is not one extern kernel the sum reads")
        operands = {mm: extern.inputs for mm, extern in zip(merged, externs)}
        dtypes = {t.get_dtype() for pair in operands.values() for t in pair}
        device = externs[0].get_device()
        if len(dtypes) != 1 or not next(iter(dtypes)).is_floating_point:
            raise Reject(f"operands of dtypes {sorted(map(str, dtypes))}")
        if device is None or not triton_kernels(device):
            raise Reject(f"on {device}: Inductor writes no Triton kernels there")
        if not index_math.is_static([s for pair in operands.values() for t in pair for s in t.get_size()]):
            raise Reject("symbolic sizes")
        if len({tuple(extern.get_size()) for extern in externs}) != 1:
            raise Reject("matmuls of different output shapes (a broadcast sum)")
        values: dict[Any, Any] = {}  # each FX term of the sum → its lowered value
        for term in terms:
            if term in merged or not isinstance(term, torch.fx.Node):
                continue
            if term.op == "placeholder" and term.target in V.graph.graph_inputs:
                values[term] = V.graph.graph_inputs[term.target]
            elif term in graph_state.current().rule_values:
                values[term] = graph_state.current().rule_values[term]
            elif term in buffers:
                values[term] = boxed(buffers[term])
            else:
                raise Reject(f"the term {term.name} is computed inline, not a buffer the sum reads")
        dtype = next(iter(dtypes))
        if any(v.get_dtype() != dtype for v in values.values()):
            raise Reject(f"terms of another dtype than the products' {dtype}: the sum's promotions would move")
        add = stock_lowering(aten.add.Tensor)  # this rule stands in add's lowering
        for mms in shared.values():
            right = boxed(operands[mms[0]][1])
            for m in mms[1:]:
                right = add(right, boxed(operands[m][1]))
            values[mms[0]] = stock_lowering(aten.mm.default)(boxed(operands[mms[0]][0]), right)
            values.update((m, None) for m in mms[1:])  # in the first one's product

        def value(node: Any) -> Any:  # the sum in the FX graph's order, so that the other terms round as they did
            if node not in adds:
                return values.get(node, node)
            left, right = value(node.args[0]), value(node.args[1])
            return right if left is None else left if right is None else add(left, right)

        out = value(root)
        size = "x".join(map(str, externs[0].get_size()))
        return out, (f"{len(merged)} matmuls of {len(shared)} left operand(s) ({size}) → {len(shared)}, "
                     f"right operands added; {len(terms) - len(merged)} other terms")
