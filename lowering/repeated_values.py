"""A scatter or a matmul computed again from the same inputs takes the first one's value: one kernel where there
were several.

A GNN layer's mean aggregation counts each node's incoming edges (``scatter_add`` of ones at the edges' targets);
every layer counts them again for the same edges, and Inductor's graph, CSE'd before the partitioner and rewritten
after it (``new_zeros`` → ``full``), has them as separate nodes. In a backward, the weight gradients of two Linears
of one input whose outputs are summed are the same product (``g.T @ x`` twice), in separate nodes too. Values are
compared by how they are computed: the same op of the same arguments, down to the graph's inputs.
"""

from __future__ import annotations

import math
import operator
from typing import Any

import torch
from torch._inductor import ir
from torch._inductor.utils import convert_shape_to_inductor
from torch._inductor.virtualized import V

from optimus_ir import graph_state
from optimus_ir.lowering import boxed
from optimus_ir.rule import LoweringRule, NotApplicable, Reject

aten = torch.ops.aten

#: how deep a value's computation is compared (a scatter's index is a select or a view of an input)
_MAX_DEPTH = 8


#: ops whose values are not told by their arguments: uninitialized memory
_UNINITIALIZED = frozenset({"empty", "new_empty", "empty_strided", "new_empty_strided", "empty_like"})
#: what a graph of symbolic sizes computes sizes with (``full([s0 // 4], 0)``): Python's operators on SymInts
_SIZE_ARITHMETIC = frozenset({
    operator.add, operator.sub, operator.mul, operator.floordiv, operator.mod, operator.truediv, operator.pow,
    operator.neg, math.ceil, math.floor, torch.sym_int, torch.sym_float, torch.sym_max, torch.sym_min,
})


def _pure(target: Any) -> bool:
    """Whether ``target``'s value is told by its arguments: arithmetic of sizes, or an aten op that mutates nothing,
    draws no random numbers and does not hand out uninitialized memory."""
    return target in _SIZE_ARITHMETIC or (
        isinstance(target, torch._ops.OpOverload)
        and not target._schema.is_mutable
        and torch.Tag.nondeterministic_seeded not in target.tags
        and target.overloadpacket.__name__ not in _UNINITIALIZED
    )


def computation(value: Any, depth: int = 0) -> Any:
    """A hashable description of how ``value`` (an FX node, or a constant argument) is computed, equal for two
    nodes that compute the same tensor; None where it cannot be told (an impure or random op, a deep chain)."""
    if isinstance(value, torch.fx.Node):
        if value.op == "placeholder":
            return ("input", value.target)
        if value.op != "call_function" or not _pure(value.target) or depth >= _MAX_DEPTH:
            return None
        parts = [computation(arg, depth + 1) for arg in (*value.args, *value.kwargs.values())]
        if any(part is None for part in parts):
            return None
        return (value.target, tuple(parts), tuple(value.kwargs))
    if isinstance(value, (list, tuple)):
        parts = [computation(item, depth + 1) for item in value]
        return None if any(part is None for part in parts) else tuple(parts)
    if isinstance(value, (bool, int, float, str, type(None), torch.dtype, torch.device, torch.layout)):
        return (type(value).__name__, value)
    return None


def _value_of(node: torch.fx.Node) -> Any:
    """The lowered value of ``node``, an earlier FX node, or None: what a rule returned for it, else the buffer it
    was lowered to (Inductor marks a node's own buffer, not a view of one, with ``origin_node``)."""
    state = graph_state.current()
    if node in state.rule_values:
        return state.rule_values[node]
    found = [buffer for buffer in V.graph.buffers if getattr(buffer, "origin_node", None) is node]
    if len(found) != 1 or not isinstance(found[0], (ir.ComputedBuffer, ir.ExternKernelOut)):
        return None
    size, shape = found[0].get_size(), convert_shape_to_inductor(node.meta["val"].shape)
    if len(size) != len(shape) or not all(map(V.graph.sizevars.statically_known_equals, size, shape)):
        return None
    return boxed(found[0])


class RepeatedComputationToFirstValue(LoweringRule):
    """``scatter_add`` or ``mm`` computed as an earlier one was (the same op of the same arguments, down to the
    graph's inputs) → the earlier one's value.

    Before (two layers' edge counts of one edge type)::

        buf3 = full([1500], 0); scatter_add(buf3, 0, select(arg13_1, 0, 1), full([4000], 1))  # layer 1
        buf40 = full([1500], 0); scatter_add(buf40, 0, select(arg13_1, 0, 1), full([4000], 1))  # layer 2

    After::

        buf3 = full([1500], 0); scatter_add(buf3, 0, select(arg13_1, 0, 1), full([4000], 1))
        # layer 2 reads buf3

    The earlier buffer then lives until the later readers: a count is a vector per node type, a weight gradient a
    weight's size, small beside what a layer holds; where the stock guard compares the graph, it compares its peak
    with stock's (``GraphState.may_raise_peak``). Nothing random, nothing mutable in the computation. Sizes may be
    symbolic: a size the graph computes (``s0 // 4``) is part of the computation, and the earlier buffer's shape is
    proven the value's.
    """

    pass_name = "horizontal"
    op = (aten.scatter_add.default, aten.mm.default)

    def rewrite(self, *args: Any, **kwargs: Any) -> tuple[Any, str]:
        node = V.graph.current_node
        key = computation(node) if node is not None else None
        if key is None:
            raise NotApplicable("not a value told by its computation")
        first = graph_state.current().first_by_computation.setdefault(key, node)
        if first is node:
            raise NotApplicable("the first of its computation")
        value = _value_of(first)
        if value is None:
            raise Reject(f"the earlier {first.name} is not one buffer of its own")
        graph_state.current().note_peak_raise(self.name, first.name)  # held until the later readers
        return value, f"computed as {first.name} was: its value"
