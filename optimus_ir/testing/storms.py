"""The storms (N independent copies of one small op: the horizontal issue's) and the split → pointwise → cat chains
(the vertical issue's) that ``python -m benchmarks storms`` and ``chains`` measure.

``STORMS``: each a :class:`Storm` (name, function, input maker, dtype); ``make(dtype, requires_grad)`` makes the
inputs, on CUDA unless ``device`` says otherwise. Two storms share a name in fp32 and bf16: a storm is named by its
name and dtype. ``TRAINING_STORMS``: the names of those also measured in a training step (fp32).

``CHAINS`` and ``TRAINING_CHAINS``: each a :class:`Chain` (name, function, input shape, dtype) of one input;
:meth:`Chain.make` makes it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import torch
import torch.nn.functional as F

__all__ = [
    "CHAINS",
    "STORMS",
    "TRAINING_CHAINS",
    "TRAINING_STORMS",
    "Chain",
    "Storm",
    "gelu_each",
    "layer_norm_each",
    "layer_norm_inputs",
    "row_sum_each",
    "split16_chain12",
    "split_mixed_cat",
    "split_relu_cat_reversed",
    "storm_tensors",
    "sum_each",
    "tanh_each",
]


# ----------------------------------------------------------------------------------------------- storms


def tanh_each(*xs):
    return [torch.tanh(x) for x in xs]


def gelu_each(*xs):
    return [F.gelu(x) for x in xs]


def row_sum_each(*xs):
    return [x.sum(dim=1) for x in xs]


def sum_each(*xs):
    return [x.sum() for x in xs]


def layer_norm_each(*args):
    n = len(args) // 3
    return [F.layer_norm(x, x.shape[-1:], w, b) for x, w, b in zip(args[:n], args[n : 2 * n], args[2 * n :])]


def storm_tensors(
    shapes: list[tuple[int, ...]], dtype: torch.dtype, grad: bool = False, device: str = "cuda"
) -> list[torch.Tensor]:
    return [torch.randn(s, dtype=dtype, device=device, requires_grad=grad) for s in shapes]


def layer_norm_inputs(
    n: int, rows: int, width: int, dtype: torch.dtype, grad: bool = False, device: str = "cuda"
) -> list[torch.Tensor]:
    xs = storm_tensors([(rows, width)] * n, dtype, grad, device)
    weights = [(1 + 0.1 * torch.randn(width, device=device, dtype=dtype)).requires_grad_(grad) for _ in range(n)]
    biases = storm_tensors([(width,)] * n, dtype, grad, device)
    return xs + weights + biases


class Storm(NamedTuple):
    """A storm: ``fn(*make(dtype, requires_grad[, device]))``, the inputs on CUDA by default."""

    name: str
    fn: Callable[..., list[torch.Tensor]]
    make: Callable[..., list[torch.Tensor]]
    dtype: torch.dtype


_SEVEN_ROW_COUNTS = (64, 128, 256, 512, 1024, 2048, 4096)

STORMS: list[Storm] = [
    Storm("128x tanh [256x512]", tanh_each, lambda d, g, device="cuda": storm_tensors([(256, 512)] * 128, d, g, device),
          torch.float32),
    Storm("128x tanh [256x512]", tanh_each, lambda d, g, device="cuda": storm_tensors([(256, 512)] * 128, d, g, device),
          torch.bfloat16),
    Storm("64x layer_norm [256x512]", layer_norm_each,
          lambda d, g, device="cuda": layer_norm_inputs(64, 256, 512, d, g, device), torch.float32),
    Storm(
        "96x gelu on 7 sizes [64..4096 x 256]",
        gelu_each,
        lambda d, g, device="cuda": storm_tensors([(_SEVEN_ROW_COUNTS[i % 7], 256) for i in range(96)], d, g, device),
        torch.float32,
    ),
    Storm(
        "48x row sum [512..2048 x 512]",
        row_sum_each,
        lambda d, g, device="cuda": storm_tensors([(512 + 32 * i, 512) for i in range(48)], d, g, device),
        torch.float32,
    ),
    Storm("48x full sum [256x512]", sum_each,
          lambda d, g, device="cuda": storm_tensors([(256, 512)] * 48, d, g, device), torch.float32),
    Storm(
        "48x full sum, 12 sizes [32..384 x 512]",
        sum_each,
        lambda d, g, device="cuda": storm_tensors([(32 * (1 + i % 12), 512) for i in range(48)], d, g, device),
        torch.float32,
    ),
]

TRAINING_STORMS = ["128x tanh [256x512]", "64x layer_norm [256x512]", "48x full sum [256x512]"]


# ----------------------------------------------------------------------------------------------- chains


def split_relu_cat_reversed(x: torch.Tensor, pieces: int = 64) -> torch.Tensor:
    return torch.cat([torch.relu(p) for p in reversed(x.chunk(pieces, dim=1))], dim=1)


def split_mixed_cat(x: torch.Tensor, pieces: int = 64) -> torch.Tensor:
    ops = (torch.tanh, torch.sigmoid)
    return torch.cat([ops[i % 2](p) for i, p in enumerate(x.chunk(pieces, dim=1))], dim=1)


_CHAIN_OPS = (torch.relu, torch.tanh, torch.sigmoid, torch.nn.functional.silu, torch.abs, torch.neg, torch.exp,
              torch.nn.functional.gelu, torch.sin, torch.cos, torch.square, torch.nn.functional.softplus,
              torch.erf, torch.atan, torch.expm1, torch.log1p)


def split16_chain12(x: torch.Tensor) -> torch.Tensor:
    """12 layers of: split into 16 → a different pointwise op per piece → cat → scale (the vertical issue's case)."""
    for _ in range(12):
        x = torch.cat([op(p) for op, p in zip(_CHAIN_OPS, x.chunk(16, dim=1))], dim=1) * 0.5
    return x


class Chain(NamedTuple):
    """A chain: ``fn(x)`` for one input ``x`` of ``shape`` and ``dtype``."""

    name: str
    fn: Callable[[torch.Tensor], torch.Tensor]
    shape: tuple[int, ...]
    dtype: torch.dtype

    def make(self, requires_grad: bool = False, device: str = "cpu") -> torch.Tensor:
        """The input: ``torch.randn(*shape, dtype=dtype)`` (seed it first where that matters)."""
        return torch.randn(*self.shape, dtype=self.dtype, device=device, requires_grad=requires_grad)


CHAINS: list[Chain] = [
    Chain("split64_relu_cat_reversed[64x4096,fp32]", split_relu_cat_reversed, (64, 4096), torch.float32),
    Chain("split64_relu_cat_reversed[8192x4096,fp32]", split_relu_cat_reversed, (8192, 4096), torch.float32),
    Chain("split64_relu_cat_reversed[8192x4096,bf16]", split_relu_cat_reversed, (8192, 4096), torch.bfloat16),
    Chain("split64_tanh_sigmoid_cat[8192x4096,fp32]", split_mixed_cat, (8192, 4096), torch.float32),
    Chain("split16_chain12[1024x1024,fp32]", split16_chain12, (1024, 1024), torch.float32),
]

TRAINING_CHAINS: list[Chain] = [
    Chain("split16_chain12[1024x1024,fp32] training step", split16_chain12, (1024, 1024), torch.float32),
]
