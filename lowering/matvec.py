"""A matmul to one output column as a row reduction: a Triton kernel that its bias and its reader fuse into.

``nn.Linear(K, 1)`` (a ranker's last layer, a tower's logit) is ``addmm(b, x, w.t())`` with one output column.
Inductor calls cuBLAS for it: on the GPU a copy of the bias into the output, then a matrix-vector product, and its
reader (a sigmoid, the output's cat) is a kernel of its own. Each output is a dot product of a row of ``x`` with
``w``: a row reduction, which Inductor writes as a Triton kernel and fuses with the bias add and the reader, as its
own decomposition does for such products under coordinate-descent tuning (``decomposition.mm``).
"""

from __future__ import annotations

from typing import Any

import torch
from torch._inductor.lowering import to_dtype
from torch._inductor.virtualized import V, ops

from optimus_ir.drivers import stock_lowering
from optimus_ir.lowering import PRODUCT_DTYPES, fp32_sum, triton_kernels
from optimus_ir.rule import LoweringRule, NotApplicable, Reject

aten = torch.ops.aten

class MatvecToRowReduction(LoweringRule):
    """``mm(x, w)`` or ``addmm(b, x, w)``, ``w`` of one column → a sum over ``k`` of ``x[m, k] * w[k, 0]`` (a
    Triton row reduction, accumulated in fp32), plus ``b``.

    Before (``nn.Linear(256, 1)``; ``x [2048, 256]``)::

        buf0 = extern addmm(b, x, reinterpret(w, [256, 1], [1, 256]))   # on the GPU: a copy of b, then a gemv

    After::

        buf0 = Reduction(sum over r0 < 256 of f32(x[256*i0 + r0]) * f32(w[r0]))      # [2048, 1]
        buf1 = Pointwise(b[0] + buf0[i0])       # fused with buf0 and with its reader

    The sum runs in another order than cuBLAS's: a difference within float rounding. Fp32, fp16 or bf16 operands of
    one dtype, where Inductor writes Triton kernels; ``alpha`` and ``beta`` of 1; one column, static (Dynamo never
    makes a size of 1 a symbol). The rows and ``K`` may be symbolic, as in Inductor's own decomposition of such a
    product: a symbolic ``K`` makes the reduction a loop.
    """

    pass_name = "horizontal"
    op = (aten.mm.default, aten.addmm.default)

    def rewrite(self, *args: Any, **kwargs: Any) -> tuple[Any, str]:
        if any(kwargs.get(scale, 1) != 1 for scale in ("alpha", "beta")) or set(kwargs) - {"alpha", "beta"}:
            raise NotApplicable("a scaled product")
        if len(args) not in (2, 3):
            raise NotApplicable("not mm(x, w) or addmm(b, x, w)")
        bias, x, w = args if len(args) == 3 else (None, *args)
        rows, inner = x.get_size()
        known_equal = V.graph.sizevars.statically_known_equals
        if not known_equal(w.get_size()[1], 1):
            raise NotApplicable("not a product to one column")
        device = x.get_device()
        if device is None or not triton_kernels(device):
            raise Reject(f"on {device}: Inductor writes no Triton kernels there")
        dtypes = {t.get_dtype() for t in (x, w, bias) if t is not None}
        if len(dtypes) != 1 or not dtypes <= PRODUCT_DTYPES:
            raise Reject(f"operands of {sorted(map(str, dtypes))}, not of one of fp32, fp16 and bf16")
        (dtype,) = dtypes
        x_load, w_load = x.make_loader(), w.make_loader()

        def product(index: list[Any], reduction_index: list[Any]) -> Any:
            (row, _), (k,) = index, reduction_index
            return ops.mul(ops.to_dtype(x_load([row, k]), torch.float32), ops.to_dtype(w_load([k, 0]), torch.float32))

        out = fp32_sum(device, product, [rows, 1], [inner])
        if bias is not None:
            # bias first, as Inductor's unfused addmm adds it on CUDA (the same sum; the same kernel text)
            out = stock_lowering(aten.add.Tensor)(to_dtype(bias, torch.float32), out)
            if len(out.get_size()) != 2 or not all(map(known_equal, out.get_size(), (rows, 1))):
                raise Reject(f"a bias of {list(bias.get_size())} widens the product")
        out = to_dtype(out, dtype)
        node = V.graph.current_node
        return out, f"{node.name if node is not None else 'a matmul'} ({rows}x{inner}x1) → a row reduction"
