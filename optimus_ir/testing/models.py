"""The model families of the benchmark suite and the tests: models whose graphs are full of what optimus_ir
rewrites.

Vertical junk (split → a little op per piece → cat) and horizontal junk (the same small op, N times, on independent
tensors) is what production recommendation and multi-task models are made of, and what fused-projection
transformers have a little of. Each class here models one such family, or is a storm of one pattern;
:mod:`optimus_ir.testing.workloads` gives each its configurations (``WORKLOADS``). Every model has
``example_inputs(batch, dtype, device)``; ``model(*inputs)`` is a forward pass returning a tensor or a tuple of
tensors.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn

__all__ = [
    "DLRM",
    "FusedQKVDecoderLayer",
    "FusedQKVTransformer",
    "GeluStorm",
    "LayerNormStorm",
    "MultiTaskTowers",
    "RowSumStorm",
    "SplitActivationChain",
    "TanhStorm",
    "apply_rotary",
]

# ----------------------------------------------------------------------------------------------- DLRM


def _log_count(x: torch.Tensor) -> torch.Tensor:
    return torch.log1p(x.clamp(min=0))


def _clip_zscore(x: torch.Tensor) -> torch.Tensor:
    return x.clamp(-3.0, 3.0)


#: The transform of dense feature ``i`` is ``_DENSE_TRANSFORMS[i % 4]``: counts, bounded and unbounded signals.
_DENSE_TRANSFORMS = (_log_count, torch.tanh, torch.sigmoid, _clip_zscore)


class DLRM(nn.Module):
    """A DLRM-family click-through-rate model (Naumov et al., 2019) with the per-feature and per-table
    normalisation production rankers add.

    - Dense arch: ``num_dense`` dense features of ``dense_width`` values each, side by side in one input. The input
      is split into the features; each gets its own transform (log1p of the clamped count, tanh, sigmoid or a
      clip, in turn) and its own layer norm; the features are concatenated again and go through the bottom MLP.
    - Sparse arch: ``num_tables`` sum-pooled ``EmbeddingBag`` tables, bags of a fixed ``bag_size`` ids (2-D
      inputs, so shapes are static); each pooled embedding has its own layer norm.
    - Interaction: the bottom MLP's output and the pooled embeddings are stacked, their pairwise dot products
      taken with one ``bmm``, the strictly lower triangle kept and concatenated with the bottom MLP's output.
    - Top MLP down to one logit.
    """

    def __init__(
        self,
        num_dense: int,
        dense_width: int,
        num_tables: int,
        num_embeddings: int,
        embedding_dim: int,
        bag_size: int,
        bottom_hidden: int,
        top_hidden: int,
    ) -> None:
        super().__init__()
        self.dense_width = dense_width
        self.num_embeddings = num_embeddings
        self.bag_size = bag_size
        self.dense_norms = nn.ModuleList(nn.LayerNorm(dense_width) for _ in range(num_dense))
        self.bottom_mlp = nn.Sequential(
            nn.Linear(num_dense * dense_width, bottom_hidden),
            nn.ReLU(),
            nn.Linear(bottom_hidden, embedding_dim),
            nn.ReLU(),
        )
        self.tables = nn.ModuleList(
            nn.EmbeddingBag(num_embeddings, embedding_dim, mode="sum") for _ in range(num_tables)
        )
        self.table_norms = nn.ModuleList(nn.LayerNorm(embedding_dim) for _ in range(num_tables))
        rows, cols = torch.tril_indices(num_tables + 1, num_tables + 1, offset=-1)
        self.register_buffer("pair_rows", rows, persistent=False)
        self.register_buffer("pair_cols", cols, persistent=False)
        self.top_mlp = nn.Sequential(
            nn.Linear(embedding_dim + rows.numel(), top_hidden),
            nn.ReLU(),
            nn.Linear(top_hidden, top_hidden // 2),
            nn.ReLU(),
            nn.Linear(top_hidden // 2, 1),
        )

    def forward(self, dense: torch.Tensor, sparse: torch.Tensor) -> torch.Tensor:
        """``dense``: [batch, num_dense * dense_width]; ``sparse``: int64 ids [num_tables, batch, bag_size]."""
        features = dense.split(self.dense_width, dim=1)
        transformed = [
            norm(_DENSE_TRANSFORMS[i % len(_DENSE_TRANSFORMS)](feature))
            for i, (norm, feature) in enumerate(zip(self.dense_norms, features))
        ]
        bottom = self.bottom_mlp(torch.cat(transformed, dim=1))
        pooled = [norm(table(ids)) for table, norm, ids in zip(self.tables, self.table_norms, sparse.unbind(0))]
        stacked = torch.stack([bottom, *pooled], dim=1)
        dots = torch.bmm(stacked, stacked.transpose(1, 2))
        pairs = dots[:, self.pair_rows, self.pair_cols]
        return self.top_mlp(torch.cat([bottom, pairs], dim=1))

    def example_inputs(self, batch: int, dtype: torch.dtype, device: torch.device) -> tuple[torch.Tensor, ...]:
        dense = torch.randn(batch, len(self.dense_norms) * self.dense_width, dtype=dtype, device=device)
        sparse = torch.randint(0, self.num_embeddings, (len(self.tables), batch, self.bag_size), device=device)
        return dense, sparse


# ----------------------------------------------------------------------------------------------- issue 33


class SplitLayerNormTanhCat(nn.Module):
    """The scale case of issue 33 (the Optimus write-up's pattern): per layer, split the features into pieces of
    ``width`` (``x.split(width)``), or of the ``widths`` given (``split_with_sizes`` where they differ), layer-norm
    each piece with its own weight and bias, tanh, cat back; ``layers`` layers."""

    def __init__(self, pieces: int, layers: int, width: int = 32, widths: list[int] | None = None) -> None:
        super().__init__()
        self.widths = widths or [width] * pieces
        self.layers = layers
        self.norms = nn.ModuleList(nn.LayerNorm(w) for _ in range(layers) for w in self.widths)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        norms = iter(self.norms)
        split = self.widths[0] if len(set(self.widths)) == 1 else self.widths
        for _ in range(self.layers):
            x = torch.cat([torch.tanh(next(norms)(piece)) for piece in x.split(split, dim=1)], dim=1)
        return x


# ----------------------------------------------------------------------------------------------- multi-task


class MultiTaskTowers(nn.Module):
    """A shared-bottom multi-task model (Caruana, 1997), as in multi-objective rankers: a shared MLP, then one small
    tower per task, each Linear → LayerNorm → SiLU → Linear → LayerNorm → SiLU → Linear to one logit with its own
    weights; the tasks' logits are concatenated into [batch, num_tasks]."""

    def __init__(self, in_features: int, shared_hidden: int, tower_hidden: int, num_tasks: int) -> None:
        super().__init__()
        self.in_features = in_features
        self.shared = nn.Sequential(
            nn.Linear(in_features, shared_hidden), nn.ReLU(), nn.Linear(shared_hidden, shared_hidden), nn.ReLU()
        )
        self.towers = nn.ModuleList(
            nn.Sequential(
                nn.Linear(shared_hidden, tower_hidden),
                nn.LayerNorm(tower_hidden),
                nn.SiLU(),
                nn.Linear(tower_hidden, tower_hidden),
                nn.LayerNorm(tower_hidden),
                nn.SiLU(),
                nn.Linear(tower_hidden, 1),
            )
            for _ in range(num_tasks)
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        shared = self.shared(x)
        return torch.cat([tower(shared) for tower in self.towers], dim=1)

    def example_inputs(self, batch: int, dtype: torch.dtype, device: torch.device) -> tuple[torch.Tensor, ...]:
        return (torch.randn(batch, self.in_features, dtype=dtype, device=device),)


# ----------------------------------------------------------------------------------------------- transformer


def apply_rotary(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotary position embedding (rotate-half form): the two halves of each head, rotated, concatenated again."""
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((x1 * cos - x2 * sin, x2 * cos + x1 * sin), dim=-1)


class FusedQKVDecoderLayer(nn.Module):
    """A Llama-style pre-norm decoder layer whose projections are fused: one Linear makes q, k and v, split apart
    and reshaped per head; rotary embedding on q and k; causal ``scaled_dot_product_attention``; one Linear makes
    the SwiGLU gate and up projections, chunked apart."""

    def __init__(self, dim: int, heads: int, ffn_hidden: int) -> None:
        super().__init__()
        self.heads = heads
        self.attention_norm = nn.RMSNorm(dim)
        self.qkv = nn.Linear(dim, 3 * dim, bias=False)
        self.attention_out = nn.Linear(dim, dim, bias=False)
        self.mlp_norm = nn.RMSNorm(dim)
        self.gate_up = nn.Linear(dim, 2 * ffn_hidden, bias=False)
        self.down = nn.Linear(ffn_hidden, dim, bias=False)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        batch, seq, dim = x.shape
        q, k, v = (
            t.view(batch, seq, self.heads, dim // self.heads).transpose(1, 2)
            for t in self.qkv(self.attention_norm(x)).split(dim, dim=-1)
        )
        q, k = apply_rotary(q, cos, sin), apply_rotary(k, cos, sin)
        attention = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.attention_out(attention.transpose(1, 2).reshape(batch, seq, dim))
        gate, up = self.gate_up(self.mlp_norm(x)).chunk(2, dim=-1)
        return x + self.down(F.silu(gate) * up)


class FusedQKVTransformer(nn.Module):
    """``layers`` :class:`FusedQKVDecoderLayer` and a final RMSNorm, on embedded tokens [batch, seq_len, dim]."""

    def __init__(self, seq_len: int, dim: int, heads: int, ffn_hidden: int, layers: int) -> None:
        super().__init__()
        self.seq_len, self.dim = seq_len, dim
        self.layers = nn.ModuleList(FusedQKVDecoderLayer(dim, heads, ffn_hidden) for _ in range(layers))
        self.norm = nn.RMSNorm(dim)
        head_dim = dim // heads
        inverse_frequency = 10000.0 ** (-torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim)
        angles = torch.outer(torch.arange(seq_len, dtype=torch.float64), inverse_frequency)
        self.register_buffer("cos", angles.cos().float(), persistent=False)
        self.register_buffer("sin", angles.sin().float(), persistent=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self.layers:
            x = layer(x, self.cos, self.sin)
        return self.norm(x)

    def example_inputs(self, batch: int, dtype: torch.dtype, device: torch.device) -> tuple[torch.Tensor, ...]:
        return (torch.randn(batch, self.seq_len, self.dim, dtype=dtype, device=device),)


# ----------------------------------------------------------------------------------------------- storms

#: One op per piece of :class:`SplitActivationChain`: 16 different pointwise ops, none growing faster than linearly,
#: so that 12 layers of them (each followed by a scale near 0.5) stay finite.
_CHAIN_OPS: tuple[Callable[[torch.Tensor], torch.Tensor], ...] = (
    torch.relu,
    torch.tanh,
    torch.sigmoid,
    F.silu,
    torch.abs,
    torch.neg,
    F.gelu,
    torch.sin,
    torch.cos,
    torch.erf,
    torch.atan,
    F.softsign,
    F.hardtanh,
    F.elu,
    F.mish,
    F.logsigmoid,
)


class SplitActivationChain(nn.Module):
    """The vertical storm: ``layers`` layers of split the features into 16 pieces → a different pointwise op per
    piece → cat → scale by a learned per-feature vector. ``split16_chain12`` of :mod:`optimus_ir.testing.storms` with a
    learned scale and ops that keep the values finite (there, the exp/square/expm1 pieces overflow and the log1p
    piece turns negative values to NaN)."""

    def __init__(self, width: int, layers: int) -> None:
        super().__init__()
        self.width = width
        self.scales = nn.ParameterList(nn.Parameter(torch.full((width,), 0.5)) for _ in range(layers))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for scale in self.scales:
            x = torch.cat([op(piece) for op, piece in zip(_CHAIN_OPS, x.chunk(len(_CHAIN_OPS), dim=1))], dim=1) * scale
        return x

    def example_inputs(self, batch: int, dtype: torch.dtype, device: torch.device) -> tuple[torch.Tensor, ...]:
        return (torch.randn(batch, self.width, dtype=dtype, device=device),)


class _Storm(nn.Module):
    """``count`` independent copies of one small op, copy ``i`` on input ``i`` of width ``widths[i % len(widths)]``
    with its own parameters; returns the ``count`` outputs. ``forward(*inputs)``."""

    def __init__(self, count: int, widths: tuple[int, ...]) -> None:
        super().__init__()
        self.widths = [widths[i % len(widths)] for i in range(count)]

    def example_inputs(self, batch: int, dtype: torch.dtype, device: torch.device) -> tuple[torch.Tensor, ...]:
        return tuple(torch.randn(batch, width, dtype=dtype, device=device) for width in self.widths)


class TanhStorm(_Storm):
    """``tanh(x_i * scale_i)`` for ``count`` inputs of one shape: the gates of many small feature branches."""

    def __init__(self, count: int, width: int) -> None:
        super().__init__(count, (width,))
        self.scales = nn.ParameterList(nn.Parameter(torch.ones(width)) for width in self.widths)

    def forward(self, *inputs: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return tuple(torch.tanh(x * scale) for x, scale in zip(inputs, self.scales))


class LayerNormStorm(_Storm):
    """``count`` ``nn.LayerNorm``, each with its own weight and bias, on inputs of one shape: per-feature-group
    normalisation in rankers."""

    def __init__(self, count: int, width: int) -> None:
        super().__init__(count, (width,))
        self.norms = nn.ModuleList(nn.LayerNorm(width) for width in self.widths)

    def forward(self, *inputs: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return tuple(norm(x) for x, norm in zip(inputs, self.norms))


class GeluStorm(_Storm):
    """``gelu(x_i + bias_i)`` for ``count`` inputs whose widths cycle through ``widths``: bias-activations of many
    branches of different widths."""

    def __init__(self, count: int, widths: tuple[int, ...]) -> None:
        super().__init__(count, widths)
        self.biases = nn.ParameterList(nn.Parameter(torch.zeros(width)) for width in self.widths)

    def forward(self, *inputs: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return tuple(F.gelu(x + bias) for x, bias in zip(inputs, self.biases))


class RowSumStorm(_Storm):
    """``(x_i * weight_i).sum(-1)`` for ``count`` inputs of one shape: per-branch weighted row sums (scores,
    pooled gates)."""

    def __init__(self, count: int, width: int) -> None:
        super().__init__(count, (width,))
        self.weights = nn.ParameterList(nn.Parameter(torch.ones(width)) for width in self.widths)

    def forward(self, *inputs: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return tuple((x * weight).sum(dim=-1) for x, weight in zip(inputs, self.weights))

