"""Embedding bags of a fixed size, lowered to Inductor reductions and scatters instead of ATen's kernels.

Stock Inductor calls ATen's ``_embedding_bag`` (or ``_embedding_bag_forward_only``) kernel for every
``nn.EmbeddingBag``, and ATen's ``_embedding_bag_backward`` for its gradient (sort-based: about twenty launches per
table on a GPU). A recommendation model with 26 tables launches hundreds of kernels that nothing can merge. With
bags of one fixed size (2-d inputs, which ``F.embedding_bag`` turns into ``offsets = arange(0, B*L, L)``), a bag is
a sum over ``L`` rows of the table: an Inductor reduction, which fuses with what follows and which
``IdenticalKernelsToMemberTableKernel`` merges across tables; its gradient is one scatter-add into zeros.
"""

from __future__ import annotations

import contextlib
import operator
from typing import Any

import torch
from torch._inductor import ir
from torch._inductor.lowering import full, lowerings, to_dtype
from torch._inductor.virtualized import V, ops
from torch.fx.operator_schemas import normalize_function
from torch.utils._sympy.functions import FloorDiv

from optimus_ir import index_math
from optimus_ir.rule import LoweringRule, NotApplicable, Reject

aten = torch.ops.aten

_SUM, _MEAN = 0, 1  # ATen's embedding_bag modes (2 is max)

#: ``node.meta`` key of an ``_embedding_bag_backward`` whose offsets the joint graph shows to be ``iota(B, 0, L)``
_REGULAR_BAG_SIZE = "optimus_ir_regular_bag_size"


def _regular_bag_size(offsets_node: Any, indices_numel: int) -> int | None:
    """``L`` if the FX node of the offsets is ``iota(B, start=0, step=L)`` (what ``arange(0, B*L, L)`` decomposes
    to) with ``B*L == indices_numel``: bag ``b`` is then ids ``[b*L, (b+1)*L)``. Else None."""
    if not isinstance(offsets_node, torch.fx.Node) or offsets_node.target is not torch.ops.prims.iota.default:
        return None
    (length,) = offsets_node.args
    start, step = offsets_node.kwargs.get("start"), offsets_node.kwargs.get("step")
    if not all(isinstance(v, int) for v in (length, start, step)):
        return None
    if start != 0 or step <= 0 or length * step != indices_numel:
        return None
    return step


class EmbeddingBagOfRegularBagsToReduction(LoweringRule):
    """``_embedding_bag`` / ``_embedding_bag_forward_only`` with bags of one size ``L`` → a sum (or mean) over ``L``
    table rows. (ATen calls ``_embedding_bag`` whenever the table requires grad, also under ``no_grad``.)

    Before (``nn.EmbeddingBag(N, D, mode="sum")(ids)``, ids of shape [B, L])::

        offsets = iota(B, start=0, step=L)                  # F.embedding_bag's arange(0, B*L, L)
        out, offset2bag, bag_size, max_indices = _embedding_bag_forward_only(weight, ids.view(-1), offsets, ...)
        # an extern kernel per table

    After::

        out = Reduction(sum over l < L of weight[ids[b*L + l], d], ranges [B, D])   # Triton, fusable, mergeable

    Only where nothing reads the other three outputs (inference; training where the backward is
    ``EmbeddingBagBackwardOfRegularBagsToScatterAdd``'s), without per-sample weights, padding index or
    ``include_last_offset``, in sum or mean mode, with static sizes.
    """

    name = "EmbeddingBagOfRegularBagsToReduction"
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
        if per_sample_weights is not None or include_last_offset or padding_idx not in (-1, None):
            raise Reject("per-sample weights, include_last_offset or a padding index")
        if any(user.target is not operator.getitem or user.args[1] != 0 for user in fx_node.users):
            raise Reject("offset2bag / bag_size / max_indices are read (training): ATen's kernel computes them")
        if not index_math.is_static([*weight.get_size(), *indices.get_size()]):
            raise Reject("symbolic sizes")
        (numel,) = [int(s) for s in indices.get_size()]
        bag = _regular_bag_size(fx_node.args[2], numel)
        if bag is None:
            raise Reject("offsets are not proven to be iota(B, start=0, step=L): other bags need ATen's kernel")
        rows, dim = (int(s) for s in weight.get_size())
        bags = numel // bag
        weight_loader, indices_loader = weight.make_loader(), indices.make_loader()

        def inner_fn(index: list[Any], reduction_index: list[Any]) -> Any:
            b, d = index
            (position,) = reduction_index
            row = ops.indirect_indexing(indices_loader([b * bag + position]), rows)
            value = weight_loader([row, d])
            if weight.get_dtype() != torch.float32 and weight.get_dtype().is_floating_point:
                value = ops.to_dtype(value, torch.float32)  # accumulate low precision in fp32, as ATen does
            return value

        acc = torch.float32 if weight.get_dtype().is_floating_point else weight.get_dtype()
        # a sum is stored in the table's dtype straight from the fp32 accumulator, as ATen does: one rounding, and a
        # bf16 model's pooled buffers take half the memory (which the horizontal pass's peak-memory check counts)
        pooled = ir.Reduction.create(
            device=weight.get_device(),
            dst_dtype=weight.get_dtype() if mode == _SUM else acc,
            src_dtype=acc,
            inner_fn=inner_fn,
            ranges=[bags, dim],
            reduction_ranges=[bag],
            reduction_type="sum",
        )
        pooled.realize()  # a buffer, as ATen's output was: consumers that need one (var_mean) get one
        kind = "mean" if mode == _MEAN else "sum"
        detail = (
            f"{bags} bags of {bag} rows of a {rows}x{dim} table → a {kind} reduction (accumulated in {acc}, "
            f"stored as {pooled.get_dtype()})"
        )
        if mode == _SUM:
            return (pooled, None, None, None), detail
        loader = pooled.make_loader()
        scale = 1.0 / bag if mode == _MEAN else None

        def output_fn(index: list[Any]) -> Any:
            value = loader(index)
            if scale is not None:
                value = value * ops.constant(scale, acc)
            return ops.to_dtype(value, weight.get_dtype())

        out = ir.Pointwise.create(device=weight.get_device(), dtype=weight.get_dtype(), inner_fn=output_fn,
                                  ranges=[bags, dim])
        return (out, None, None, None), detail



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

    Sum and mean modes, dense gradients, no per-sample weights, padding index or ``scale_grad_by_freq``, static
    sizes. Inductor's ``_unsafe_index_put`` lowering makes the scatter, and falls back to ATen's index_put where
    atomics cannot serve (deterministic mode, dtypes without atomic add). Low precision accumulates in fp32.
    """

    name = "EmbeddingBagBackwardOfRegularBagsToScatterAdd"
    pass_name = "horizontal"
    op = aten._embedding_bag_backward.default

    def prepare_joint_graph(self, graph: Any) -> None:
        """Mark each backward whose offsets are ``iota(B, 0, L)``; where ``rewrite`` then makes the gradient, give it
        its own offsets (recomputed in the backward, not saved), ``offset2bag`` and ``max_indices`` empty and
        ``bag_size`` as ``full([B], L)``: the same gradient in ATen too (it rebuilds an empty ``offset2bag`` from
        the offsets, reads ``max_indices`` in max mode only, and without a padding index every bag has ``L`` ids).
        The forward saves nothing of its bags then, so ``EmbeddingBagOfRegularBagsToReduction`` lowers it too."""
        for node in graph.find_nodes(op="call_function", target=self.op):
            indices = node.args[1]
            value = indices.meta.get("val") if isinstance(indices, torch.fx.Node) else None
            numel = value.numel() if isinstance(value, torch.Tensor) else None
            bag = _regular_bag_size(node.args[2], numel) if isinstance(numel, int) else None
            if bag is None:
                continue
            node.meta[_REGULAR_BAG_SIZE] = bag
            arguments = normalize_function(node.target, node.args, node.kwargs, normalize_to_only_use_kwargs=True)
            if arguments is None or _unsupported(**arguments.kwargs) is not None:
                continue
            device, bags = value.device, numel // bag
            offsets = node.args[2]
            with graph.inserting_before(node):
                # iota(B) * L: the same offsets, but not the forward's node (which CSE would make it), so that the
                # partitioner recomputes them in the backward (never a kernel: rewrite does not read them)
                steps = graph.call_function(offsets.target, (bags,), {**offsets.kwargs, "step": 1})
                own_offsets = graph.call_function(aten.mul.Tensor, (steps, bag))
                empty = graph.call_function(aten.full.default, ([0], 0), {"dtype": torch.int64, "device": device})
                sizes = graph.call_function(aten.full.default, ([bags], bag), {"dtype": torch.int64, "device": device})
            with torch._guards.detect_fake_mode([value]) or contextlib.nullcontext():
                steps.meta["val"] = torch.arange(bags, dtype=torch.int64, device=device)
                own_offsets.meta["val"] = steps.meta["val"] * bag
                empty.meta["val"] = torch.full([0], 0, dtype=torch.int64, device=device)
                sizes.meta["val"] = torch.full([bags], bag, dtype=torch.int64, device=device)
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
        reason = _unsupported(mode, scale_grad_by_freq, sparse, per_sample_weights, padding_idx)
        if reason is not None:
            raise Reject(reason)
        if not index_math.is_static([*grad.get_size(), *indices.get_size(), num_weights]):
            raise Reject("symbolic sizes")
        bag = fx_node.meta.get(_REGULAR_BAG_SIZE)
        if bag is None:
            raise Reject("offsets are not proven to be iota(B, start=0, step=L) in the joint graph")
        (numel,) = (int(s) for s in indices.get_size())
        dim = int(grad.get_size()[1])
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
