"""Lowering rules: each replaces the lowering of one aten op for the inputs it recognizes."""

from __future__ import annotations

from typing import Any

import torch
from torch._inductor import config, ir


def triton_kernels(device: torch.device) -> bool:
    """Whether Inductor writes Triton kernels for ``device`` (a GPU, or the CPU under Triton's interpreter)."""
    backend = {"cuda": config.cuda_backend, "cpu": config.cpu_backend}.get(device.type)
    return backend == "triton"


def boxed(node: Any) -> Any:
    """An extern kernel's input (a buffer, or a view of one) as a lowered value another lowering can take."""
    return ir.TensorBox(node) if isinstance(node, ir.ReinterpretView) else ir.TensorBox.create(node)
