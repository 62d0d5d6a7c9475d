"""``ops.segment_sum``: one value per element, the sum (or mean) of a run of table rows whose length is known only
at run time.

Inductor's loops have static lengths: a reduction's range is part of the IR. An embedding bag of runtime offsets
sums ``offsets[b + 1] - offsets[b]`` rows, so stock Inductor leaves it to ATen, and a scatter-add would keep an
accumulator in memory. This op is a value like any other in a loop body: the node computing it fuses into its
readers (a layer norm reads each bag's rows straight from the table, as FBGEMM's table-batched embedding does;
nothing is stored in between), and the horizontal pass merges the tables' kernels.

    segment_sum(begin, end, column, ids, table, weights, padding, mean, dtype)
        = sum over begin <= t < end, ids[t] != padding, of  table[ids[t], column] * weights[t]     (in ``dtype``)
          (divided by the number of those t, at least 1, where ``mean``)

``begin``, ``end`` and ``column`` are int64 values of the body; ``end < 0`` stands for the number of ids (the last
bag of offsets without their last entry), so that tables of other id counts share a body. ``ids`` is ``(buffer,
offset, count)`` of a contiguous run of ids, ``table`` ``(buffer, rows, row stride, offset)``, ``weights``
``(buffer, offset)`` or None; sizes and offsets are numbers or size symbols (the ids' count of a batch of jagged
features, Dynamo's symbol once it changes); ``padding`` an int or None. Buffer names sit in
tuples, as ``ops.bucketize``'s do, so that the horizontal pass gives them slots; the table's rows and the ids'
count are bounds that members of a merged kernel read from the member table (:func:`member_bounds`).

Inductor has no hook for new ops; :mod:`optimus_ir.patches` installs the functions below on the handlers that
need them (and the default of Inductor's ``DefaultHandler`` on every other): the dtype (:func:`dtype`) and block
shape (:func:`shape`), the buffers read (:func:`capture`, :func:`record_reads`, :func:`count`: whole, as
bucketize's boundaries), and the Triton code (:func:`triton`): a loop of ``max(end - begin)`` steps over the block, each lane
masked to its own run.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any

import sympy
import torch
from torch._inductor.virtualized import V, ops

NAME = "segment_sum"

#: ``(buffer, offset, count)`` of ids; ``(buffer, offset)`` of per-id weights; ``(buffer, rows, row stride,
#: offset)`` of a table
Ids = tuple[str, int, int]
Weights = tuple[str, int]
Table = tuple[str, int, int, int]

#: positions among a call's arguments in a loop body's graph (after the ops handler), and where each buffer's
#: offset sits in its tuple
_IDS, _TABLE, _WEIGHTS = 4, 5, 6
_OFFSET = {_IDS: 1, _TABLE: 3, _WEIGHTS: 1}


@dataclasses.dataclass(frozen=True)
class Size:
    """A size or offset among the op's arguments that is not a number (a size symbol). A loop body's graph holds
    numbers and names, not sympy values: this holds the value through it, as itself."""

    expr: sympy.Expr

    def __fx_create_arg__(self, tracer: Any) -> Size:
        return self

    def __repr__(self) -> str:
        return str(self.expr)


def _held(value: Any) -> Any:
    """``value`` as the op's arguments hold it: an int, or a :class:`Size`."""
    value = sympy.sympify(value)
    return int(value) if value.is_number else Size(value)


def held_size(held: Any) -> Any:
    """A size the op's arguments hold, as a number or a sympy expression."""
    return held.expr if isinstance(held, Size) else held


def segment_sum(
    begin: Any, end: Any, column: Any, ids: Ids, table: Table, weights: Weights | None, padding: int | None,
    mean: bool, dtype: torch.dtype,
) -> Any:
    """The op in a loop body (see the module's docstring)."""
    ids, table = (ids[0], *map(_held, ids[1:])), (table[0], *map(_held, table[1:]))
    weights = None if weights is None else (weights[0], _held(weights[1]))
    return getattr(ops, NAME)(begin, end, column, ids, table, weights, padding, mean, dtype)


def dtype(*args: Any) -> torch.dtype:
    """``DtypePropagationOpsHandler``: the accumulator's dtype, the last argument."""
    return args[-1]


def shape(begin: Any, end: Any, column: Any, *_: Any) -> Any:
    """``ShapePropagationOpsHandler``: the block shape of ``begin``, ``end`` and ``column`` broadcast."""
    from torch._inductor.shape_propagation import broadcast_shapes_for_args

    return broadcast_shapes_for_args([begin, end, column])


def _buffers(ids: Ids, table: Table, weights: Weights | None) -> list[str]:
    return [ref[0] for ref in (ids, table, weights) if ref is not None]


def capture(handler: Any, begin: Any, end: Any, column: Any, ids: Ids, table: Table, *rest: Any) -> Any:
    """``CaptureIndexing`` (the tracing of a loop body): the buffers are recorded as read by the body, as
    bucketize's boundaries are (Inductor's dependencies read them from there: read whole)."""
    import sympy
    from torch._inductor.loop_body import MemoryUsageType

    for name in _buffers(ids, table, rest[0]):
        handler.body.add_index_expr(sympy.Integer(0), MemoryUsageType.BUCKETIZE, buffer_name=name)
    return getattr(handler._inner, NAME)(begin, end, column, ids, table, *rest)


def count(handler: Any, begin: Any, end: Any, column: Any, ids: Ids, table: Table, weights: Weights | None,
          *rest: Any) -> Any:
    """``OpCounterCSE`` (what Inductor weighs before inlining a node into its readers): the buffers as reads, not
    trivial ones. Counted as none, a realized node of the op would be computed again in each reader."""
    value = getattr(handler.parent_handler, NAME)(begin, end, column, ids, table, weights, *rest)
    if value not in handler.var_names:
        handler._used_ops.add(NAME)
        names = _buffers(ids, table, weights)
        handler._read_names.extend(names)
        handler._nontrivial_read_count += len(names)
    return handler._update_count(value)


def record_reads(handler: Any, begin: Any, end: Any, column: Any, ids: Ids, table: Table, weights: Weights | None,
                 *_: Any) -> None:
    """``_RecordLoadStoreInner`` (dependencies of a function that is not a loop body): the buffers, read whole."""
    from torch._inductor.dependencies import StarDep

    for name in _buffers(ids, table, weights):
        handler._reads.add(StarDep(name))


def fusion_score_without_shared_runs(stock: Any) -> Any:
    """``Scheduler.score_fusion_memory`` (the bytes two nodes share, for which Inductor fuses independent nodes)
    without the buffers both read through this op alone. Each table's sum reads its own run of one ids tensor
    (DLRM's ``sparse.unbind(0)``); read whole, as here, that tensor would look shared, and Inductor would fuse up to
    64 tables' kernels by it for no saving, in groups of different bodies that the horizontal pass cannot merge."""
    from torch._inductor.dependencies import StarDep

    @functools.wraps(stock)
    def score_fusion_memory(scheduler: Any, node1: Any, node2: Any, *args: Any, **kwargs: Any) -> Any:
        score = stock(scheduler, node1, node2, *args, **kwargs)
        shared = {dep for dep in node1.read_writes.reads if isinstance(dep, StarDep)} & node2.read_writes.reads
        runs = shared and buffers_read(node1) & buffers_read(node2)
        if not runs:
            return score
        count_bytes = args[0] if args else kwargs.get("count_bytes", True)
        less = sum(scheduler.dep_size_hint(dep, count_bytes) for dep in shared if dep.name in runs)
        if isinstance(score, tuple):  # (score, whether a mix-order reduction: scored by numel, left as it is)
            return score if score[1] else (max(0, score[0] - less), False)
        return max(0, score - less)

    return score_fusion_memory


def buffers_read(node: Any) -> set[str]:
    """The buffers the op reads in a scheduler node's loop bodies: ids, tables and weights."""
    names: set[str] = set()
    for snode in node.get_nodes():
        body = getattr(snode, "_body", None)
        for block in [] if body is None else [body.root_block, *body.subblocks.values()]:
            for call in _calls(block):
                names.update(_buffers(call.args[_IDS], call.args[_TABLE], call.args[_WEIGHTS]))
    return names


def _calls(block: Any) -> list[Any]:
    return [node for node in block.graph.nodes if node.op == "call_method" and node.target == NAME]


def member_bounds(block: Any) -> list[tuple[Any, list[int]]]:
    """The op's calls in a loop body block's graph, each with its bounds: the table's rows, the ids' count."""
    return [(node, [held_size(node.args[_TABLE][1]), held_size(node.args[_IDS][2])]) for node in _calls(block)]


def offsets(block: Any) -> list[tuple[str, int]]:
    """Each buffer the op's calls in a loop body block read, with the offset (elements) its run starts at."""
    return [
        (node.args[i][0], held_size(node.args[i][position]))
        for node in _calls(block) for i, position in _OFFSET.items() if node.args[i] is not None
    ]


def with_bounds(node: Any, rows: Any, count: Any) -> tuple[Any, ...]:
    """The arguments of the op's call ``node`` with other bounds: numbers, symbols the kernel reads from the member
    table (tables of other sizes share the call), or None (in a structure's key)."""
    args = list(node.args)
    name, _, stride, offset = args[_TABLE]
    args[_TABLE] = (name, rows, stride, offset)
    args[_IDS] = (*args[_IDS][:2], count)
    return tuple(args)


def key_args(node: Any, relative: Any) -> tuple[Any, ...]:
    """The arguments of the op's call ``node`` as a structure's key compares them: without bounds (members read
    theirs from the member table) and with each buffer's offset ``relative(buffer, offset)``, the part a member's
    address in the member table does not add (DLRM's tables read runs of one ids tensor, each at its own offset)."""
    args = list(with_bounds(node, None, None))
    for i, position in _OFFSET.items():
        if args[i] is not None:
            ref = list(args[i])
            ref[position] = relative(ref[0], held_size(ref[position]))
            args[i] = tuple(ref)
    return tuple(args)


def triton(
    begin: Any, end: Any, column: Any, ids: Ids, table: Table, weights: Weights | None, padding: int | None,
    mean: bool, dtype: torch.dtype,
) -> str:
    """``TritonKernelOverrides``: the loop, written into the kernel's compute lines; returns the result's name.

    The loop runs ``max(end - begin)`` over the block's lanes; a lane whose run is shorter loads nothing, and a lane
    that the kernel's masks turn off (a last block's rows past the batch) runs none: its ``end`` would stand for the
    ids' count (``end < 0``, the last bag's), and the block would loop over every id of the table. Ids out of the
    table's rows trip the device assert Inductor writes for its own indirect loads, where it writes them
    (``config.assert_indirect_indexing``)."""
    from torch._inductor import config
    from torch._inductor.codegen.triton import triton_compute_type

    kernel = V.kernel
    code = kernel.compute
    acc_type = triton_compute_type(dtype)
    lanes, bag_lanes = shape(begin, end, column), shape(begin, end, begin)
    total, stop, length, count, step, valid, row, value = (kernel.cse.newvar(dtype=d, shape=s) for d, s in (
        (dtype, lanes), (torch.int64, bag_lanes), (torch.int64, bag_lanes), (dtype, bag_lanes), (torch.int64, ()),
        (torch.bool, bag_lanes), (torch.int64, bag_lanes), (dtype, lanes)))
    ids_ptr, table_ptr = kernel.args.input(ids[0]), kernel.args.input(table[0])
    # sizes may be symbols: the kernel's arguments (a size symbol) or its prologue's values (a member's bound)
    ids_offset, ids_count, rows, stride, table_offset = (
        kernel.index_to_str(sympy.sympify(held_size(n))) for n in (*ids[1:], *table[1:])
    )
    weights_offset = None if weights is None else kernel.index_to_str(sympy.sympify(held_size(weights[1])))
    code.writeline(f"{total} = tl.zeros_like(({begin} + {column}).to({acc_type}))")
    code.writeline(f"{stop} = tl.where({end} < 0, {ids_count}, {end})")
    # (every range tree's mask is written in the kernel's header; a mix-order reduction writes x's in its loop)
    masks = [f"{tree.prefix}mask" for tree in kernel.range_trees
             if not tree.is_reduction and not (tree.prefix == "x" and kernel.mix_order_reduction)]
    code.writeline(f"{length} = tl.where({' & '.join(masks)}, {stop} - {begin}, 0)" if masks
                   else f"{length} = {stop} - {begin}")
    if mean:
        code.writeline(f"{count} = tl.zeros_like({begin}.to({acc_type}))")
    code.writeline(f"for {step} in range(0, tl.max({length})):")
    with code.indent():
        code.writeline(f"{valid} = {step} < {length}")
        code.writeline(f"{row} = tl.load({ids_ptr} + ({ids_offset} + {begin} + {step}), {valid}, other=0)")
        if padding is not None:
            code.writeline(f"{valid} = {valid} & ({row} != {padding})")
        if config.assert_indirect_indexing:  # as Inductor's own indirect loads
            code.writeline(
                f'tl.device_assert(((0 <= {row}) & ({row} < {rows})) | ~{valid}, '
                f'"index out of bounds: 0 <= {row} < {rows}")'
            )
        code.writeline(
            f"{value} = tl.load({table_ptr} + ({table_offset} + {row} * {stride} + {column}), "
            f"{valid}, other=0.0).to({acc_type})"
        )
        if weights is not None:
            weights_ptr = kernel.args.input(weights[0])
            code.writeline(
                f"{value} = {value} * tl.load({weights_ptr} + ({weights_offset} + {begin} + {step}), {valid}, "
                f"other=0.0).to({acc_type})"
            )
        code.writeline(f"{total} = {total} + {value}")
        if mean:
            code.writeline(f"{count} = {count} + {valid}.to({acc_type})")
    if mean:  # an empty bag's mean is 0, as ATen's
        code.writeline(f"{total} = {total} / tl.maximum({count}, 1.0)")
    return str(total)
