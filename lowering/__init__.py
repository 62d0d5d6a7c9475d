"""Lowering rules: each replaces the lowering of one aten op for the inputs it recognizes."""

from __future__ import annotations

import torch
from torch._inductor import config


def triton_kernels(device: torch.device) -> bool:
    """Whether Inductor writes Triton kernels for ``device`` (a GPU, or the CPU under Triton's interpreter)."""
    backend = {"cuda": config.cuda_backend, "cpu": config.cpu_backend}.get(device.type)
    return backend == "triton"
