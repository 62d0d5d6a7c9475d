"""Lowering rules: each replaces the lowering of one aten op for the inputs it recognizes."""

from __future__ import annotations

from typing import Any

import torch
from torch._inductor import config, ir
from torch._inductor.runtime.hints import ReductionHint

#: dtypes whose products a rule sums in a Triton kernel, accumulated in fp32 as cuBLAS accumulates them
PRODUCT_DTYPES = frozenset({torch.float32, torch.float16, torch.bfloat16})


def triton_kernels(device: torch.device) -> bool:
    """Whether Inductor writes Triton kernels for ``device`` (a GPU, or the CPU under Triton's interpreter)."""
    backend = {"cuda": config.cuda_backend, "cpu": config.cpu_backend}.get(device.type)
    return backend == "triton"


def boxed(node: Any) -> Any:
    """An extern kernel's input (a buffer, or a view of one) as a lowered value another lowering can take."""
    return ir.TensorBox(node) if isinstance(node, ir.ReinterpretView) else ir.TensorBox.create(node)


def fp32_sum(
    device: torch.device, summand: Any, ranges: list[Any], reduction_ranges: list[Any],
    hint: ReductionHint = ReductionHint.DEFAULT,
) -> Any:
    """The realized fp32 sum over ``reduction_ranges`` of ``summand(index, reduction_index)`` (an fp32 value): what a
    matmul rule writes where cuBLAS would accumulate in fp32."""
    out = ir.Reduction.create(device=device, dst_dtype=torch.float32, src_dtype=torch.float32, inner_fn=summand,
                              ranges=ranges, reduction_ranges=reduction_ranges, reduction_type="sum",
                              reduction_hint=hint)
    out.realize()
    return out
