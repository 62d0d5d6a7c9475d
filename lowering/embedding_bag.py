"""Embedding bags lowered to Inductor nodes instead of ATen's kernels.

Stock Inductor calls ATen's ``_embedding_bag`` (or ``_embedding_bag_forward_only``) kernel for every
``nn.EmbeddingBag``, and ATen's ``_embedding_bag_backward`` for its gradient (sort-based: about twenty launches per
table on a GPU). A recommendation model with 26 tables launches hundreds of kernels that nothing can merge. Here a
bag's sum is ``ops.segment_sum`` (:mod:`optimus_ir.segment_sum`), a loop over the bag's ids inside the kernel of
whatever reads the bag, whatever the offsets: a node that fuses with what follows (a layer norm reads the bags
straight from the table) and that ``IdenticalKernelsToMemberTableKernel`` merges across tables. The gradient is one
scatter-add into zeros: each id's bag ``i // L`` for bags of one size ``L`` (2-d inputs, which ``F.embedding_bag``
turns into ``offsets = arange(0, B*L, L)``), else found by a binary search of the offsets.
"""
from __future__ import annotations

import contextlib
import dataclasses
import operator
import sys
from typing import Any

import sympy
import torch
from torch._inductor import ir
from torch._inductor.codegen.common import BackendFeature
from torch._inductor.lowering import full, lowerings, to_dtype
from torch._inductor.virtualized import V, ops
from torch.fx.experimental.symbolic_shapes import statically_known_true
from torch.fx.operator_schemas import normalize_function
from torch.utils._pytree import tree_map
from torch.utils._sympy.functions import FloorDiv

from optimus_ir import index_math, segment_sum
from optimus_ir.lowering import triton_kernels
from optimus_ir.rule import LoweringRule, NotApplicable, Reject

aten = torch.ops.aten

_SUM, _MEAN = 0, 1  # ATen's embedding_bag modes (2 is max)

#: ``node.meta`` key of an ``_embedding_bag_backward`` whose offsets the joint graph shows to be ``iota(B, 0, L)``
_REGULAR_BAG_SIZE = "optimus_ir_regular_bag_size"


def _only_pooled_read(fx_node: Any) -> bool:
    """Whether only the pooled output (``getitem 0``) of an ``_embedding_bag`` FX node is read."""
    return all(user.target is operator.getitem and user.args[1] == 0 for user in fx_node.users)


def _value(arg: Any) -> Any:
    """An FX argument's value: a node's traced value (a symbol's SymInt), else the argument."""
    return arg.meta.get("val") if isinstance(arg, torch.fx.Node) else arg


def _regular_bag_size(offsets_node: Any, indices_numel: Any) -> int | None:
    """``L`` if the FX node of the offsets is ``iota(B, start=0, step=L)`` (what ``arange(0, B*L, L)`` decomposes
    to) with ``B*L == indices_numel``: bag ``b`` is then ids ``[b*L, (b+1)*L)``. Else None. ``B`` may be a symbol
    (a batch that changes); ``L`` is a number."""
    if not isinstance(offsets_node, torch.fx.Node) or offsets_node.target is not torch.ops.prims.iota.default:
        return None
    (length,) = offsets_node.args
    start, step = offsets_node.kwargs.get("start"), offsets_node.kwargs.get("step")
    if not isinstance(start, int) or not isinstance(step, int) or start != 0 or step <= 0:
        return None
    length = _value(length)
    if not isinstance(length, int | torch.SymInt) or not statically_known_true(length * step == indices_numel):
        return None
    return step


def _unsupported(
    mode: int, scale_grad_by_freq: bool, sparse: bool, per_sample_weights: Any, padding_idx: int | None = -1, **_: Any
) -> str | None:
    """Why ``EmbeddingBagBackwardOfRegularBagsToScatterAdd`` leaves a gradient to ATen, or None (arguments of
    ``_embedding_bag_backward``)."""
    if sparse:
        return "sparse gradient"  # (ATen's autograd calls the sparse backward directly; kept as a guard)
    if mode not in (_SUM, _MEAN):
        return "max mode"
    if scale_grad_by_freq or per_sample_weights is not None or padding_idx not in (-1, None):
        return "per-sample weights, scale_grad_by_freq or a padding index"
    return None


class EmbeddingBagBackwardOfRegularBagsToScatterAdd(LoweringRule):
    """``_embedding_bag_backward`` of bags of one size ``L`` → zeros and one atomic scatter-add (what Inductor makes
    of ``nn.Embedding``'s backward) instead of ATen's sort-based kernels.

    Before (the backward graph of a training step; ``offsets`` is a saved tensor there, so this rule marks the
    node in the joint graph, where the forward's ``offsets = iota(B, start=0, step=L)`` is visible)::

        grad_weight = _embedding_bag_backward(grad, ids, offsets, offset2bag, bag_size, max_indices, N, ...)

    After::

        grad_weight = zeros(N, D)
        grad_weight[ids[i], d] += grad[i // L, d]          # ir.Scatter, atomic_add (times 1/L in mean mode)

    Sum and mean modes, dense gradients, no per-sample weights, padding index or ``scale_grad_by_freq``; the bags'
    count may be a symbol (a batch that changes). Inductor's ``_unsafe_index_put`` lowering makes the scatter, and falls back to ATen's index_put where
    atomics cannot serve (deterministic mode, dtypes without atomic add). Low precision accumulates in fp32.
    """

    pass_name = "horizontal"
    op = aten._embedding_bag_backward.default

    def prepare_joint_graph(self, graph: Any) -> None:
        """Mark each backward whose offsets are ``iota(B, 0, L)``; where ``rewrite`` then makes the gradient, give it
        its own offsets (recomputed in the backward, not saved), ``offset2bag`` and ``max_indices`` empty and
        ``bag_size`` as ``full([B], L)``: the same gradient in ATen too (it rebuilds an empty ``offset2bag`` from
        the offsets, reads ``max_indices`` in max mode only, and without a padding index every bag has ``L`` ids).
        The forward saves nothing of its bags then, so ``EmbeddingBagToSegmentSum`` lowers it."""
        for node in graph.find_nodes(op="call_function", target=self.op):
            indices = node.args[1]
            value = indices.meta.get("val") if isinstance(indices, torch.fx.Node) else None
            numel = value.numel() if isinstance(value, torch.Tensor) else None
            bag = _regular_bag_size(node.args[2], numel) if numel is not None else None
            arguments = normalize_function(node.target, node.args, node.kwargs, normalize_to_only_use_kwargs=True)
            if bag is None or arguments is None or _unsupported(**arguments.kwargs) is not None:
                continue  # EmbeddingBagBackwardOfRuntimeOffsetsToScatterAdd's
            node.meta[_REGULAR_BAG_SIZE] = bag
            offsets = node.args[2]
            # the bags' count as the offsets' iota has it: a number, or the node of its symbol
            device, bags = value.device, offsets.args[0]
            with graph.inserting_before(node):
                # iota(B) * L: the same offsets, but not the forward's node (which CSE would make it), so that the
                # partitioner recomputes them in the backward (never a kernel: rewrite does not read them)
                steps = graph.call_function(offsets.target, (bags,), {**offsets.kwargs, "step": 1})
                own_offsets = graph.call_function(aten.mul.Tensor, (steps, bag))
                empty = graph.call_function(aten.full.default, ([0], 0), {"dtype": torch.int64, "device": device})
                sizes = graph.call_function(aten.full.default, ([bags], bag), {"dtype": torch.int64, "device": device})
            with torch._guards.detect_fake_mode([value]) or contextlib.nullcontext():
                steps.meta["val"] = torch.arange(_value(bags), dtype=torch.int64, device=device)
                own_offsets.meta["val"] = steps.meta["val"] * bag
                empty.meta["val"] = torch.full([0], 0, dtype=torch.int64, device=device)
                sizes.meta["val"] = torch.full([_value(bags)], bag, dtype=torch.int64, device=device)
            node.args = (*node.args[:2], own_offsets, empty, sizes, empty, *node.args[6:])

    def rewrite(
        self,
        grad: Any,
        indices: Any,
        offsets: Any,
        offset2bag: Any,
        bag_size: Any,
        maximum_indices: Any,
        num_weights: int,
        scale_grad_by_freq: bool,
        mode: int,
        sparse: bool,
        per_sample_weights: Any,
        padding_idx: int = -1,
    ) -> tuple[Any, str]:
        fx_node = V.graph.current_node
        if fx_node is None:
            raise NotApplicable("no FX node")
        bag = fx_node.meta.get(_REGULAR_BAG_SIZE)  # (set only where supported)
        if bag is None:
            raise NotApplicable("not regular bags, or not supported")  # EmbeddingBagBackwardOfRuntimeOffsets...
        (numel,) = indices.get_size()  # (a symbol where the batch changes)
        dim = grad.get_size()[1]
        dtype = grad.get_dtype()
        acc = torch.float32 if dtype in (torch.float16, torch.bfloat16) else dtype
        # each bag's gradient is read by its L ids: computed once into a [B, D] buffer (the tables' copies merge into
        # one kernel), and the scatter then reads only that, not what it is computed from
        grad.realize()
        grad_loader = grad.make_loader()
        scale = 1.0 / bag if mode == _MEAN else None

        def value_fn(index: list[Any]) -> Any:
            position, d = index
            value = ops.to_dtype(grad_loader([FloorDiv(position, bag), d]), acc)
            return value * ops.constant(scale, acc) if scale is not None else value

        values = ir.Pointwise.create(device=grad.get_device(), dtype=acc, inner_fn=value_fn, ranges=[numel, dim])
        zeros = full([num_weights, dim], 0, dtype=acc, device=grad.get_device())
        grad_weight = lowerings[aten._unsafe_index_put.default](zeros, [indices], values, True)
        kind = "mean" if mode == _MEAN else "sum"
        detail = f"gradient of {numel // bag} {kind} bags of {bag} rows → a scatter-add into a {num_weights}x{dim} table"
        return to_dtype(grad_weight, dtype), detail


# -------------------------------------------------------------------------------- the forward; runtime offsets

#: ``node.meta`` key of an ``_embedding_bag_backward`` that ``EmbeddingBagBackwardOfRuntimeOffsetsToScatterAdd``
#: prepared in the joint graph
_RUNTIME_OFFSETS = "optimus_ir_runtime_offsets"


def _runtime_unsupported(
    mode: int, scale_grad_by_freq: bool = False, sparse: bool = False, padding_idx: int | None = -1, **_: Any
) -> str | None:
    """Why the runtime-offsets rules leave an embedding bag (or its gradient) to ATen, or None."""
    if sparse:
        return "sparse gradient"
    if mode not in (_SUM, _MEAN):
        return "max mode"
    if scale_grad_by_freq:
        return "scale_grad_by_freq"
    if mode == _MEAN and padding_idx not in (-1, None):
        return "a padding index in mean mode (a bag's mean counts its other ids)"
    if torch.are_deterministic_algorithms_enabled():
        return "deterministic algorithms: float atomic adds are not"
    return None


@dataclasses.dataclass(frozen=True)
class _Bags:
    """Bags given by runtime offsets, as ATen's CUDA kernels read them: bag ``b`` holds the ids at positions
    ``[offsets[b], end(b))``, ``end(b) = offsets[b + 1]``, or the number of ids for the last bag without
    ``include_last_offset``; ids in no bag (before ``offsets[0]``, from the last offset on) are not read."""

    offsets: Any  # a TensorBox: realized, contiguous from its buffer's start, where ops.bucketize reads it
    count: sympy.Expr  # bags: a number, or a size symbol (a batch that changes)
    closed: bool  # include_last_offset: the offsets end with the last bag's end

    @classmethod
    def of(cls, offsets: Any, count: sympy.Expr, closed: bool) -> _Bags:
        """Bags whose offsets :meth:`bag_of` searches: a buffer of their own."""
        offsets = ir.TensorBox(ir.ExternKernel.realize_input(offsets))
        layout = offsets.get_layout()
        if layout.offset != 0 or layout.stride[-1] != 1:  # a view of a [T, B+1] offsets tensor
            offsets = ir.TensorBox(ir.ExternKernel.copy_input(offsets))
        return cls(offsets, sympy.sympify(count), closed)

    @classmethod
    def read(cls, offsets: Any, count: sympy.Expr, closed: bool) -> _Bags:
        """Bags whose :meth:`bounds` alone are read: the offsets as they come (a view of a feature's row of all
        features' offsets is read in place, not copied into a buffer of its own)."""
        return cls(offsets, sympy.sympify(count), closed)

    def bag_of(self, position: Any) -> tuple[Any, Any]:
        """The bag of the id at ``position`` (an index) and whether it is in one, as ``ops`` values."""
        dtype = self.offsets.get_dtype()
        boundaries = (self.offsets.get_name(), self.count, self.count, sympy.Integer(1))
        after = ops.bucketize(ops.index_expr(position, dtype), boundaries, 0, torch.int64, True)
        bag = after - ops.constant(1, torch.int64)
        valid = ops.ge(bag, ops.constant(0, torch.int64))
        if self.closed:  # ids from offsets[count] on are in none
            last = self.offsets.make_loader()([self.count])
            valid = ops.and_(valid, ops.lt(ops.index_expr(position, dtype), last))
        return bag, valid

    def bounds(self, bag: sympy.Expr) -> tuple[Any, Any]:
        """Where bag ``bag`` (an index) begins and ends among the ids, as int64 ``ops`` values; without
        ``include_last_offset`` the last bag's end is -1, ``segment_sum``'s "the number of ids" (not a constant of
        the body: tables of other id counts share it)."""
        load = self.offsets.make_loader()
        begin = ops.to_dtype(load([bag]), torch.int64)
        if self.closed:
            return begin, ops.to_dtype(load([bag + 1]), torch.int64)
        following = ops.to_dtype(load([sympy.Min(bag + 1, self.count - 1)]), torch.int64)
        is_last = ops.ge(ops.index_expr(bag, torch.int64), ops.index_expr(self.count - 1, torch.int64))
        return begin, ops.where(is_last, ops.constant(-1, torch.int64), following)


def _low_precision(dtype: torch.dtype) -> bool:
    return dtype in (torch.float16, torch.bfloat16)


def _accumulator(dtype: torch.dtype) -> torch.dtype:
    return torch.float32 if _low_precision(dtype) else dtype


def _contiguous_run(box: Any) -> tuple[str, sympy.Expr]:
    """A 1-D input realized with unit stride (copied where it has another): its buffer and offset into it (a
    symbol where earlier runs of one tensor have symbolic lengths: DLRM's ``sparse.unbind(0)`` of a changing
    batch)."""
    realized = ir.ExternKernel.realize_input(box)
    if realized.get_layout().stride[-1] != 1:
        realized = ir.ExternKernel.copy_input(realized)
    return realized.get_name(), sympy.sympify(realized.get_layout().offset)


def _static_table(weight: Any) -> tuple[int, int] | None:
    """A table's rows and width where both are numbers (a parameter's, under Dynamo's default static parameter
    shapes), else None."""
    sizes = weight.get_size()
    return (int(sizes[0]), int(sizes[1])) if index_math.is_static(sizes) else None


class EmbeddingBagToSegmentSum(LoweringRule):
    """``_embedding_bag`` / ``_embedding_bag_forward_only`` → a pointwise node whose value at ``[b, d]`` is the sum
    of bag ``b``'s rows (``ops.segment_sum``, :mod:`optimus_ir.segment_sum`), whatever the offsets (known only at
    run time for jagged features; ``iota(B, 0, L)`` for 2-d ids, whose loads become index arithmetic): it fuses
    into what reads it (a layer norm reads each bag straight from the table; no pooled buffer), and the horizontal
    pass merges the tables' kernels, where ATen runs one kernel per table. (ATen calls ``_embedding_bag`` whenever
    the table requires grad, also under ``no_grad``.)

    Before (``nn.EmbeddingBag(N, D, mode="sum")(ids, offsets)``; ids [T], offsets [B] or [B+1])::

        out, offset2bag, bag_size, max_indices = _embedding_bag(weight, ids, offsets, ...)   # ATen, per table

    After::

        begin(b), end(b) = offsets[b], offsets[b + 1]    # -1 (all ids) for the last bag without include_last_offset
        out[b, d] = segment_sum(begin(b), end(b), d, ids, weight, psw, padding, mean)   # Pointwise, realized
        # (accumulated in fp32 for low precision; mean: divided by the bag's ids other than padding, at least 1)

    Sum and mean modes, per-sample weights, a padding index, ``include_last_offset``, 1-D ids, tables with
    contiguous rows of static sizes (the ids' and the bags' counts may be symbols), on Triton devices, and only where
    nothing reads the other three outputs (inference; training where the backward is one of the two scatter-add
    rules'). Each bag adds its rows in order, without atomics: deterministic.
    """

    pass_name = "horizontal"
    op = (aten._embedding_bag_forward_only.default, aten._embedding_bag.default)

    def rewrite(
        self,
        weight: Any,
        indices: Any,
        offsets: Any,
        scale_grad_by_freq: bool = False,
        mode: int = 0,
        sparse: bool = False,
        per_sample_weights: Any = None,
        include_last_offset: bool = False,
        padding_idx: int = -1,
    ) -> tuple[Any, str]:
        fx_node = V.graph.current_node
        if fx_node is None:
            raise NotApplicable("no FX node")
        if mode not in (_SUM, _MEAN):
            raise Reject("max mode")
        if not _only_pooled_read(fx_node):
            raise Reject("offset2bag / bag_size / max_indices are read: ATen's kernel computes them")
        if _static_table(weight) is None:
            raise Reject(f"a table of symbolic size {list(weight.get_size())}: its rows and width are a kernel's "
                         "constants (parameters have static sizes unless Dynamo is told otherwise)")
        if len(indices.get_size()) != 1 or not weight.get_dtype().is_floating_point:
            raise Reject("ids of more than one dimension, or an integer table")
        if not triton_kernels(weight.get_device()):
            raise Reject(f"no Triton kernels on {weight.get_device()} (segment_sum is written for Triton)")
        table = ir.ExternKernel.realize_input(weight)
        if table.get_layout().stride[-1] != 1:
            raise Reject("a table whose rows are not contiguous (copying it would cost more than ATen's call)")
        rows, dim = _static_table(weight)
        # the ids' and bags' counts may be symbols (jagged features, a batch that changes): the kernel takes them
        numel, count = indices.get_size()[0], offsets.get_size()[0] - int(include_last_offset)
        bags = _Bags.read(offsets, count, include_last_offset)
        ids_ref = (*_contiguous_run(indices), numel)
        weights_ref = None if per_sample_weights is None else _contiguous_run(per_sample_weights)
        dtype, acc = weight.get_dtype(), _accumulator(weight.get_dtype())
        layout = table.get_layout()
        table_ref = (table.get_name(), rows, int(layout.stride[0]), int(layout.offset))
        padding = None if padding_idx in (-1, None) else padding_idx

        def output_fn(index: list[Any]) -> Any:
            bag, d = index
            begin, end = bags.bounds(bag)
            column = ops.index_expr(d, torch.int64)
            mean = mode == _MEAN
            value = segment_sum.segment_sum(begin, end, column, ids_ref, table_ref, weights_ref, padding, mean, acc)
            return ops.to_dtype(value, dtype)

        out = ir.Pointwise.create(device=weight.get_device(), dtype=dtype, inner_fn=output_fn, ranges=[count, dim])
        # a buffer, as ATen's output was: its readers get a node to fuse with (the scheduler then keeps it in
        # registers where they are its only readers), not the loop copied into each
        out.realize()
        kind = "mean" if mode == _MEAN else "sum"
        detail = (
            f"{numel} ids in {count} bags, a {rows}x{dim} table → a {kind} of each bag's rows "
            f"(segment_sum, accumulated in {acc})"
        )
        return (out, None, None, None), detail


def _traced_call(graph: Any, target: Any, *args: Any, **kwargs: Any) -> Any:
    """``graph.call_function(target, args, kwargs)`` with its ``meta["val"]`` (run on its arguments' values)."""
    node = graph.call_function(target, args, kwargs)
    value_of = lambda a: a.meta["val"] if isinstance(a, torch.fx.Node) else a  # noqa: E731
    node.meta["val"] = target(*tree_map(value_of, args), **tree_map(value_of, kwargs))
    return node


class EmbeddingBagBackwardOfRuntimeOffsetsToScatterAdd(LoweringRule):
    """``_embedding_bag_backward`` of bags of runtime offsets → zeros and one atomic scatter-add of each id's bag
    gradient into its row, the bag found by a binary search of the offsets, instead of ATen's sort-based kernels
    (about twenty launches per table); the tables' scatters merge into one kernel.

    Before (the backward of a training step)::

        grad_weight = _embedding_bag_backward(grad, ids, offsets, offset2bag, bag_size, max_indices, N, ...)

    After::

        grad_weight = zeros(N, D)
        grad_weight[ids[t], d] += grad[bag(t), d] * psw[t] / size(bag(t))    # ir.Scatter, atomic_add (mean: /size)

    Sum and mean modes, per-sample weights, a padding index (sum mode: its row gets 0), ``include_last_offset``,
    any counts of ids and bags (symbols too), dense gradients of fp32 tables (a low-precision table's fp32 accumulator would raise the peak),
    not in deterministic mode.
    """

    pass_name = "horizontal"
    op = aten._embedding_bag_backward.default

    def prepare_joint_graph(self, graph: Any) -> None:
        """Give each backward this rule makes ``offset2bag`` and ``max_indices`` empty and ``bag_size`` computed
        from the offsets, so that the forward saves nothing of its bags (and
        ``EmbeddingBagToSegmentSum`` lowers it). ATen computes the same gradient from them: it
        rebuilds an empty ``offset2bag`` from the offsets, reads ``max_indices`` in max mode only and ``bag_size``
        in mean mode, where (without a padding index) it is the offsets' difference."""
        for node in graph.find_nodes(op="call_function", target=self.op):
            arguments = normalize_function(node.target, node.args, node.kwargs, normalize_to_only_use_kwargs=True)
            if _REGULAR_BAG_SIZE in node.meta or arguments is None or _runtime_unsupported(**arguments.kwargs):
                continue
            grad, indices, offsets = node.args[:3]
            values = [a.meta.get("val") if isinstance(a, torch.fx.Node) else None for a in (grad, indices, offsets)]
            if not all(isinstance(v, torch.Tensor) for v in values):
                continue
            # counts may be symbols (jagged ids, a batch that changes): the offsets are the bags' starts, or their
            # starts and the last one's end, wherever Dynamo's guards tell which
            bags, numel, count = values[0].shape[0], values[1].numel(), values[2].numel()
            closed = statically_known_true(count == bags + 1)
            if not (closed or statically_known_true(count == bags)) or _low_precision(values[0].dtype):
                continue
            options = {"dtype": values[2].dtype, "device": values[2].device}
            with graph.inserting_before(node), torch._guards.detect_fake_mode(values) or contextlib.nullcontext():
                # slices by their ends from the offsets' end (a number), not by the bags' count (maybe a symbol)
                begins = _traced_call(graph, aten.slice.Tensor, offsets, 0, 0, -1) if closed else offsets
                ends = _traced_call(graph, aten.slice.Tensor, offsets, 0, 1, sys.maxsize)
                if not closed and isinstance(numel, int):  # the last bag ends at the last id
                    ends = _traced_call(graph, aten.constant_pad_nd.default, ends, [0, 1], numel)
                elif not closed:  # ... whose count is a symbol: a graph value, not a number of the pad
                    last = _traced_call(
                        graph, aten.full.default, [1], _traced_call(graph, aten.sym_size.int, indices, 0), **options
                    )
                    ends = _traced_call(graph, aten.cat.default, [ends, last])
                sizes = _traced_call(graph, aten.sub.Tensor, ends, begins)
                empty = _traced_call(graph, aten.full.default, [0], 0, **options)
            node.args = (*node.args[:3], empty, sizes, empty, *node.args[6:])
            node.meta[_RUNTIME_OFFSETS] = True

    def rewrite(
        self,
        grad: Any,
        indices: Any,
        offsets: Any,
        offset2bag: Any,
        bag_size: Any,
        maximum_indices: Any,
        num_weights: int,
        scale_grad_by_freq: bool,
        mode: int,
        sparse: bool,
        per_sample_weights: Any,
        padding_idx: int = -1,
    ) -> tuple[Any, str]:
        fx_node = V.graph.current_node
        if fx_node is None:
            raise NotApplicable("no FX node")
        if not fx_node.meta.get(_RUNTIME_OFFSETS):
            reason = _runtime_unsupported(mode, scale_grad_by_freq, sparse, padding_idx)
            if reason is None and _low_precision(grad.get_dtype()):
                # accumulated in fp32 (one rounding, as ATen), the gradient would need a table-sized fp32 buffer
                # beside the table's own: peak memory above stock's (ATen accumulates row by row)
                reason = f"a {grad.get_dtype()} table: an fp32 accumulator of the whole table would raise the peak"
            raise Reject(reason or "not prepared in the joint graph (symbolic sizes)")
        if not V.graph.has_feature(offsets, BackendFeature.BUCKETIZE):
            raise Reject(f"no bucketize on {offsets.get_device()}")
        count, dim = grad.get_size()  # (the bags' and the ids' counts may be symbols)
        numel = indices.get_size()[0]
        bags = _Bags.of(offsets, count, not V.graph.sizevars.statically_known_equals(offsets.get_size()[0], count))
        dtype = grad.get_dtype()  # (fp32 or fp64: prepare_joint_graph leaves low precision to ATen)
        load_grad, ids, sizes = grad.make_loader(), indices.make_loader(), bag_size.make_loader()
        weights = None if per_sample_weights is None else per_sample_weights.make_loader()
        padding = None if padding_idx in (-1, None) else padding_idx

        def value_fn(index: list[Any]) -> Any:
            position, d = index
            bag, valid = bags.bag_of(position)
            if padding is not None:  # ATen leaves the padding row's gradient 0
                valid = ops.and_(valid, ops.ne(ids([position]), ops.constant(padding, indices.get_dtype())))
            row = ops.indirect_indexing(ops.where(valid, bag, ops.constant(0, torch.int64)), count, check=False)
            value = load_grad([row, d])
            if weights is not None:
                value = value * weights([position])
            if mode == _MEAN:  # (bag_size as prepare_joint_graph computed it; a bag with an id has at least 1)
                value = value / ops.to_dtype(sizes([row]), dtype)
            return ops.where(valid, value, ops.constant(0, dtype))

        values = ir.Pointwise.create(device=grad.get_device(), dtype=dtype, inner_fn=value_fn, ranges=[numel, dim])
        zeros = full([num_weights, dim], 0, dtype=dtype, device=grad.get_device())
        grad_weight = lowerings[aten._unsafe_index_put.default](zeros, [indices], values, True)
        kind = "mean" if mode == _MEAN else "sum"
        detail = (
            f"gradient of {count} {kind} bags of runtime offsets ({numel} ids) → a scatter-add into a "
            f"{num_weights}x{dim} table"
        )
        return grad_weight, detail
