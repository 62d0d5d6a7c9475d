"""A matmul of a row-scaled input as the scaled product: the scale goes where the product is read, not into a
kernel and a buffer of its own.

``(x / r) @ w``, ``r`` one value per row (a mean's counts: torch_geometric's mean aggregation divides each node's
summed messages by its number of edges, then a Linear reads the mean), is ``(x @ w) / r``: scaling rows commutes
with a product on the right. Inductor writes the division as a kernel and a buffer the matmul reads; scaled after,
the division is a pointwise read of the product, which Inductor fuses into the product's reader.
"""

from __future__ import annotations

from typing import Any

import torch
from torch._inductor.virtualized import V
from torch.fx.experimental.symbolic_shapes import statically_known_true

from optimus_ir import graph_state
from optimus_ir.drivers import stock_lowering
from optimus_ir.lowering import triton_kernels
from optimus_ir.rule import LoweringRule, NotApplicable, Reject

aten = torch.ops.aten

#: ops that move or repeat a value without changing it, between a divisor and the clamp that bounds it
_SAME_VALUES = frozenset({aten.view.default, aten._unsafe_view.default, aten.expand.default, aten.unsqueeze.default,
                          aten.reshape.default, aten.squeeze.dim})


def _positive(divisor: Any) -> bool:
    """Whether the FX value ``divisor`` is clamped to at least a positive number (a mean's counts:
    ``count.clamp(min=1)``): dividing the product by it then rounds where dividing the input did, and no zero
    divides (a zero would give inf where the input's division gave nan, or the reverse)."""
    while isinstance(divisor, torch.fx.Node) and divisor.target in _SAME_VALUES:
        divisor = divisor.args[0]
    if not isinstance(divisor, torch.fx.Node):
        return False
    if divisor.target is aten.clamp_min.default:
        low = divisor.args[1]
    elif divisor.target is aten.clamp.default:
        low = divisor.args[1] if len(divisor.args) > 1 else divisor.kwargs.get("min")
    else:
        return False
    return isinstance(low, (int, float)) and low > 0


def _per_row(scale: Any, rows: int | torch.SymInt) -> bool:
    """Whether the FX value ``scale`` holds one value per row of ``rows``: ``[rows, 1]``, or broadcast along the
    columns (stride 0); with symbolic sizes, proven without adding a guard."""
    val = scale.meta.get("val") if isinstance(scale, torch.fx.Node) else None
    return (
        isinstance(val, torch.Tensor)
        and val.dim() == 2
        and statically_known_true(val.shape[0] == rows)
        and (statically_known_true(val.shape[1] == 1) or statically_known_true(val.stride(1) == 0))
    )


def _scaled_input(scaling: torch.fx.Node) -> bool:
    """Whether ``scaling`` (a div) divides the rows of a 2-d input read by one matmul alone, as its left operand,
    by positive numbers."""
    if len(scaling.args) != 2 or scaling.kwargs or list(scaling.users) == []:
        return False
    (reader,) = scaling.users if len(scaling.users) == 1 else (None,)
    x, scale = scaling.args
    val, x_val = scaling.meta.get("val"), getattr(x, "meta", {}).get("val")
    return (
        reader is not None
        and reader.target is aten.mm.default
        and reader.args[0] is scaling
        and reader.args[1] is not scaling
        and isinstance(val, torch.Tensor)
        and isinstance(x_val, torch.Tensor)
        and val.dim() == 2
        and x_val.dim() == val.dim()
        and all(statically_known_true(a == b) for a, b in zip(x_val.shape, val.shape))
        and val.dtype.is_floating_point
        and _per_row(scale, val.shape[0])
        and _positive(scale)
    )


class RowScaledMatmulInputToScaledProduct(LoweringRule):
    """``mm(x / r, w)``, ``r`` one value per row and clamped to a positive minimum, the scaled ``x`` read by this
    matmul alone → ``mm(x, w) / r[:, :1]``.

    Before (a mean aggregation of messages, then a Linear)::

        buf0 = Pointwise(buf_sum[64*i0 + i1] / max(buf_count[i0], 1))          # [M, 64]
        buf1 = extern mm(buf0, reinterpret(w, [64, 32], [1, 64]))

    After::

        buf1 = extern mm(buf_sum, reinterpret(w, [64, 32], [1, 64]))
        # its reader loads buf1[32*i0 + i1] / max(buf_count[i0], 1); buf0 is never made

    The rule sees the scaling first, where its operands are at hand, and keeps them (``GraphState.row_scaled``;
    the scaling itself is lowered as stock, and nothing reads it); at the matmul it multiplies the unscaled input
    and scales the product. The product is rounded before it is scaled, where the input was: a difference within
    float rounding (a divisor that could be zero or was not clamped is left alone: where the input's division makes
    nan, the product's would make inf, or the reverse). Any sizes, symbolic ones too (the scale proven one per row of
    the input), where Inductor writes Triton kernels.
    """

    pass_name = "horizontal"
    op = (aten.div.Tensor, aten.mm.default)

    def rewrite(self, *args: Any, **kwargs: Any) -> tuple[Any, str]:
        node = V.graph.current_node
        if node is None or kwargs or len(args) != 2:
            raise NotApplicable("not a binary op")
        state = graph_state.current()
        if node.target is aten.div.Tensor:
            if _scaled_input(node):
                state.row_scaled[node] = (args[0], args[1])
            raise NotApplicable("the scaling is lowered as stock; the matmul reading it is rewritten")
        scaling = node.args[0]
        if scaling not in state.row_scaled:
            raise NotApplicable("not a matmul of a row-scaled input")
        x, scale = state.row_scaled[scaling]
        device = x.get_device()
        if device is None or not triton_kernels(device):
            raise Reject(f"on {device}: Inductor writes no Triton kernels there")
        if x.get_dtype() != args[1].get_dtype() or scale.get_dtype() != x.get_dtype():
            raise Reject(f"dtypes {x.get_dtype()}, {scale.get_dtype()} and {args[1].get_dtype()}")
        if not V.graph.sizevars.statically_known_equals(scale.get_size()[1], 1):
            scale = stock_lowering(aten.slice.Tensor)(scale, 1, 0, 1)
        product = stock_lowering(aten.mm.default)(x, args[1])
        out = stock_lowering(aten.div.Tensor)(product, scale)
        rows, inner = x.get_size()
        return out, (f"mm({scaling.name} = {scaling.args[0].name} / per-row {scaling.args[1].name}) "
                     f"({rows}x{inner}x{args[1].get_size()[1]}) → the product / the scale, read where it is read")
