"""Selected entries of a batch of Gram matrices as dot products: one reduction kernel for what Inductor computes
as a batched matmul and a gather of some of its entries.

DLRM's interaction stacks the bottom MLP's output with the pooled embeddings (``s``, ``[B, n, D]``), takes every
pairwise dot product (``bmm(s, s.transpose(1, 2))``, ``[B, n, n]``) and keeps the strictly lower triangle
(``dots[:, rows, cols]``, ``n(n-1)/2`` of the ``n²`` entries). Each kept entry is the dot product of two rows of
``s``: a reduction over ``D`` whose loads are indirect, which Inductor writes into the buffer its reader (the
interaction's cat) takes, with no ``[B, n, n]`` buffer between.
"""

from __future__ import annotations

from typing import Any

import torch
from torch._inductor import ir
from torch._inductor.lowering import to_dtype
from torch._inductor.runtime.hints import ReductionHint
from torch._inductor.virtualized import V, ops

from optimus_ir import index_math
from optimus_ir.lowering import PRODUCT_DTYPES, boxed, fp32_sum, triton_kernels
from optimus_ir.rule import LoweringRule, NotApplicable, Reject

aten = torch.ops.aten

#: the pairs' reduction runs along a row of ``s``, contiguous: Inductor's hint for such a reduction where it sees the
#: loads (it sees none through the indirect rows); ``python -m benchmarks gram-entries`` times it against the default
REDUCTION_HINT = ReductionHint.INNER

#: the most products (batch x pairs x width) taken this way: each pair reads its two rows again, where a bmm reuses
#: them, so the kernel costs more device time than the bmm and gather it replaces; below this, a saved launch is
#: worth more than that (``python -m benchmarks gram-entries``)
MAX_PRODUCTS = 1 << 26

#: FX ops that swap the last two dimensions of a 3-d tensor, with the arguments that say so
_TRANSPOSES = {aten.permute.default: ([0, 2, 1],), aten.transpose.int: ((1, 2), (2, 1), (-1, -2), (-2, -1))}


def _swaps_last_two(node: Any, base: Any) -> bool:
    """Whether the FX node ``node`` is ``base`` with its last two dimensions swapped."""
    if not isinstance(node, torch.fx.Node) or node.target not in _TRANSPOSES or node.args[0] is not base:
        return False
    rest = tuple(node.args[1:]) if node.target is aten.transpose.int else list(node.args[1])
    return rest in _TRANSPOSES[node.target] or [rest] == list(_TRANSPOSES[node.target])


def _gram_of(index: torch.fx.Node) -> torch.fx.Node:
    """The FX node ``bmm(s, s^T)`` that ``index`` selects from, read by it alone; raises NotApplicable otherwise."""
    gram, indices = index.args[0], index.args[1]
    if not (isinstance(gram, torch.fx.Node) and gram.target is aten.bmm.default and list(gram.users) == [index]):
        raise NotApplicable("not a selection from a batched matmul read by it alone")
    if not _swaps_last_two(gram.args[1], gram.args[0]):
        raise NotApplicable("not a batched matmul of a tensor with its transpose")
    if len(indices) != 3 or indices[0] is not None or any(not isinstance(i, torch.fx.Node) for i in indices[1:]):
        raise NotApplicable("not dots[:, rows, cols]")
    return gram


def _storage(node: Any) -> tuple[str, Any] | None:
    """The buffer an extern kernel's input lies in and its offset there (a buffer, or a view of one)."""
    if isinstance(node, ir.ReinterpretView):
        return node.data.get_name(), node.layout.offset
    if isinstance(node, ir.Buffer):
        return node.get_name(), node.get_layout().offset
    return None


def _same_rows_and_transpose(left: Any, right: Any) -> bool:
    """Whether the bmm's lowered inputs are one buffer's ``[B, n, D]`` rows and their transpose."""
    size, stride = list(left.get_size()), list(left.get_stride())
    return (
        _storage(left) is not None
        and _storage(left) == _storage(right)
        and list(right.get_size()) == [size[0], size[2], size[1]]
        and list(right.get_stride()) == [stride[0], stride[2], stride[1]]
    )


class SelectedGramEntriesToDotProducts(LoweringRule):
    """``bmm(s, s.transpose(1, 2))[:, rows, cols]``, the bmm read by this selection alone → for each batch ``b`` and
    pair ``p``, the sum over ``d`` of ``s[b, rows[p], d] * s[b, cols[p], d]`` (accumulated in fp32).

    Before (DLRM's interaction: 27 rows of 64, 351 pairs; ``s`` is ``buf0``)::

        buf1 = extern bmm(reinterpret(buf0, [2048, 27, 64]), reinterpret(buf0, [2048, 64, 27], [1728, 1, 64]))
        buf2 = Pointwise(buf1[729*i0 + 27*rows[i1] + cols[i1]])        # [2048, 351], a kernel of its own or
                                                                       # its reader's
    After::

        buf2 = Reduction(sum over r0 < 64 of buf0[1728*i0 + 64*rows[i1] + r0] * buf0[1728*i0 + 64*cols[i1] + r0])
        # buf1 is never made; out-of-range ids fail the kernel's bounds assert, as the gather's do

    The sums run in another order than cuBLAS's: a difference within float rounding. The batch may be a symbol (a
    batch that changes), the features' count and width and the pairs not; at most ``MAX_PRODUCTS`` products (by
    the batch's hint); fp32, fp16 or bf16, where Inductor writes Triton kernels; any integer ``rows`` and
    ``cols`` of one length (graph inputs or computed).
    """

    pass_name = "horizontal"
    op = aten.index.Tensor

    def rewrite(self, source: Any, indices: Any) -> tuple[Any, str]:
        node = V.graph.current_node
        if node is None:
            raise NotApplicable("no FX node")
        gram = _gram_of(node)
        kernel = source.data.data if isinstance(source, ir.TensorBox) and isinstance(source.data, ir.StorageBox) else None
        if not isinstance(kernel, ir.ExternKernelOut) or len(kernel.inputs) != 2:
            raise Reject(f"the batched matmul {gram.name} is not one extern kernel")
        left, right = kernel.inputs
        if not _same_rows_and_transpose(left, right):
            raise Reject(f"{gram.name}'s operands are not one buffer's rows and their transpose")
        device = left.get_device()
        if device is None or not triton_kernels(device):
            raise Reject(f"on {device}: Inductor writes no Triton kernels there")
        dtype = left.get_dtype()
        if dtype not in PRODUCT_DTYPES:
            raise Reject(f"{dtype}, not fp32, fp16 or bf16")
        batch, count, width = left.get_size()
        rows, cols = indices[1], indices[2]
        if any(i.get_dtype() not in (torch.int32, torch.int64) or len(i.get_size()) != 1 for i in (rows, cols)):
            raise Reject("rows and cols are not 1-d integer tensors")
        pairs = rows.get_size()[0]
        if not index_math.is_static([count, width, pairs, cols.get_size()[0]]) or pairs != cols.get_size()[0]:
            # (the batch may be a symbol; the features' count and width, and the kept pairs, are the model's)
            raise Reject(f"features, width or pairs symbolic ({count}, {width}, {pairs}), or rows and cols of "
                         "different lengths")
        if V.graph.sizevars.optimization_hint(batch * pairs * width) > MAX_PRODUCTS:  # a changing batch: by its hint
            raise Reject(f"{batch}x{pairs} pairs of {width}: above {MAX_PRODUCTS} products, the bmm reuses rows better")
        load, row_of, col_of = boxed(left).make_loader(), rows.make_loader(), cols.make_loader()

        def product(index: list[Any], reduction_index: list[Any]) -> Any:
            (b, p), (d,) = index, reduction_index
            i = ops.indirect_indexing(row_of([p]), count)
            j = ops.indirect_indexing(col_of([p]), count)
            return ops.mul(ops.to_dtype(load([b, i, d]), torch.float32), ops.to_dtype(load([b, j, d]), torch.float32))

        out = to_dtype(fp32_sum(device, product, [batch, pairs], [width], REDUCTION_HINT), dtype)
        return out, (f"{node.name} = {gram.name}[:, rows, cols] ({batch}x{count}x{width}, {pairs} pairs) → "
                     "their dot products, one reduction")
