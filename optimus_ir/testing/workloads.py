"""The workloads of the benchmark suite and the tests: model families whose graphs are full of what optimus_ir
rewrites (the classes are in :mod:`optimus_ir.testing.models`), each at three sizes.

Vertical junk (split → a little op per piece → cat) and horizontal junk (the same small op, N times, on independent
tensors) is what production recommendation and multi-task models are made of, and what fused-projection
transformers have a little of. Each workload here models one such family, or is a storm of one pattern:

========================  ==============================================================================
``dlrm``                  DLRM-family CTR model: per-feature dense transforms, per-table normalised
                          embedding bags, pairwise dot interaction, top MLP
``multitask``             shared bottom MLP and one small tower per task
``qkv_transformer``       Llama-style decoder layers: fused QKV split, rotary embedding, fused gate/up SwiGLU
``split_chain``           12 layers of split into 16 → a different pointwise op per piece → cat → scale
``tanh_storm``            128 × tanh on separate inputs
``layernorm_storm``       64 × layer norm on separate inputs, each with its own weights
``gelu_storm``            96 × bias + gelu on inputs of 7 different widths
``rowsum_storm``          48 × weighted row sums
========================  ==============================================================================

``WORKLOADS[name].make(size, dtype, device)`` builds the model (random weights, seeded) and its example inputs;
``model(*inputs)`` is a forward pass returning a tensor or a tuple of tensors, and :func:`train_step` is one training
step of any of them. Sizes: ``tiny`` (CPU tests), ``small`` (the suite's quick plan) and ``large``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

import torch
from torch import nn

from optimus_ir.testing.models import (
    DLRM,
    FusedQKVTransformer,
    GeluStorm,
    LayerNormStorm,
    MultiTaskTowers,
    RowSumStorm,
    SplitActivationChain,
    TanhStorm,
)

__all__ = ["SIZES", "WORKLOADS", "WithLoss", "Workload", "make_optimizer", "output_loss", "train_step"]

SIZES = ("tiny", "small", "large")


# ----------------------------------------------------------------------------------------------- registry


@dataclasses.dataclass(frozen=True)
class Workload:
    """A model family and its configurations: ``configs[size]`` is the batch size (``"batch"``) and the model's
    constructor arguments."""

    name: str
    model: type[nn.Module]
    configs: Mapping[str, Mapping[str, Any]]

    def make(
        self, size: str, dtype: torch.dtype = torch.float32, device: torch.device | str = "cpu", seed: int = 0
    ) -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
        """The model at ``size`` in ``dtype`` on ``device`` (random weights from ``seed``) and example inputs."""
        config = dict(self.configs[size])
        batch = config.pop("batch")
        torch.manual_seed(seed)
        device = torch.device(device)
        model = self.model(**config).to(device=device, dtype=dtype)
        return model, model.example_inputs(batch, dtype, device)


_GELU_WIDTHS_SMALL = (64, 96, 128, 192, 256, 384, 512)

WORKLOADS: dict[str, Workload] = {
    w.name: w
    for w in [
        Workload(
            "dlrm",
            DLRM,
            {
                "tiny": dict(batch=4, num_dense=5, dense_width=2, num_tables=3, num_embeddings=20, embedding_dim=8,
                             bag_size=2, bottom_hidden=16, top_hidden=16),
                "small": dict(batch=2048, num_dense=26, dense_width=8, num_tables=26, num_embeddings=10_000,
                              embedding_dim=64, bag_size=8, bottom_hidden=256, top_hidden=512),
                "large": dict(batch=8192, num_dense=26, dense_width=16, num_tables=64, num_embeddings=50_000,
                              embedding_dim=128, bag_size=16, bottom_hidden=512, top_hidden=1024),
            },
        ),
        Workload(
            "multitask",
            MultiTaskTowers,
            {
                "tiny": dict(batch=4, in_features=8, shared_hidden=16, tower_hidden=8, num_tasks=3),
                "small": dict(batch=1024, in_features=512, shared_hidden=512, tower_hidden=128, num_tasks=16),
                "large": dict(batch=8192, in_features=1024, shared_hidden=1024, tower_hidden=256, num_tasks=32),
            },
        ),
        Workload(
            "qkv_transformer",
            FusedQKVTransformer,
            {
                "tiny": dict(batch=2, seq_len=8, dim=16, heads=2, ffn_hidden=32, layers=1),
                "small": dict(batch=8, seq_len=512, dim=512, heads=8, ffn_hidden=1408, layers=2),
                "large": dict(batch=16, seq_len=1024, dim=1024, heads=16, ffn_hidden=2816, layers=4),
            },
        ),
        Workload(
            "split_chain",
            SplitActivationChain,
            {
                "tiny": dict(batch=4, width=32, layers=2),
                "small": dict(batch=1024, width=1024, layers=12),
                "large": dict(batch=8192, width=4096, layers=12),
            },
        ),
        Workload(
            "tanh_storm",
            TanhStorm,
            {
                "tiny": dict(batch=2, count=4, width=8),
                "small": dict(batch=256, count=128, width=512),
                "large": dict(batch=2048, count=128, width=1024),
            },
        ),
        Workload(
            "layernorm_storm",
            LayerNormStorm,
            {
                "tiny": dict(batch=2, count=4, width=8),
                "small": dict(batch=512, count=64, width=256),
                "large": dict(batch=4096, count=64, width=1024),
            },
        ),
        Workload(
            "gelu_storm",
            GeluStorm,
            {
                "tiny": dict(batch=2, count=8, widths=(4, 8, 12)),
                "small": dict(batch=256, count=96, widths=_GELU_WIDTHS_SMALL),
                "large": dict(batch=2048, count=96, widths=tuple(4 * w for w in _GELU_WIDTHS_SMALL)),
            },
        ),
        Workload(
            "rowsum_storm",
            RowSumStorm,
            {
                "tiny": dict(batch=2, count=4, width=8),
                "small": dict(batch=1024, count=48, width=1024),
                "large": dict(batch=8192, count=48, width=2048),
            },
        ),
    ]
}


# ----------------------------------------------------------------------------------------------- training


def output_loss(output: torch.Tensor | tuple[torch.Tensor, ...]) -> torch.Tensor:
    """The training loss of every workload: the mean square of each output (in fp32), summed over the outputs."""
    outputs = output if isinstance(output, (tuple, list)) else (output,)
    return sum(o.float().square().mean() for o in outputs)


class WithLoss(nn.Module):
    """``model`` and :func:`output_loss` of its outputs as one module: what a training graph of the loss compiles
    where a module is asked for (``compile_report`` takes the parameters of a module)."""

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, *inputs: torch.Tensor) -> torch.Tensor:
        return output_loss(self.model(*inputs))


def make_optimizer(model: nn.Module, lr: float = 1e-2) -> torch.optim.Optimizer:
    """SGD with momentum, one parameter at a time (``foreach=False``): the per-parameter update kernels are part
    of what a compiled step launches. Its state needs no step counter, so a step can be captured in a CUDA graph."""
    return torch.optim.SGD(model.parameters(), lr=lr, momentum=0.9, foreach=False)


def train_step(model: nn.Module, optimizer: torch.optim.Optimizer, inputs: tuple[torch.Tensor, ...]) -> torch.Tensor:
    """One training step, meant to be compiled whole: forward, :func:`output_loss`, backward, optimizer step.

    Under ``torch.compile`` Dynamo breaks the graph at ``backward()`` and around ``optimizer.step()`` (as it does in
    any training loop): the forward and its AOTAutograd backward are one compiled graph, the step another.
    """
    optimizer.zero_grad(set_to_none=True)
    loss = output_loss(model(*inputs))
    loss.backward()
    optimizer.step()
    return loss.detach()

