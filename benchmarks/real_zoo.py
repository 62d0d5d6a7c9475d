"""The models of ``python -m benchmarks real``, built from their libraries' configs, random weights, no downloads.

Five sets. ``issue30``: the kinds of model on which the horizontal pass barely fired (issue 30): a heterogeneous
GNN, CNNs with channel splits and parallel branches, an MoE transformer, the DLRM-style model. ``issue31``: a
sparse arch of 8, 26 and 100 embedding-bag tables with jagged features (runtime offsets). ``issue33``: the
split → layer norm → tanh → cat case at 48 pieces x 4 layers, 96 x 8 and 192 x 16. ``gnn``: the hetero GNN of
SAGE convolutions, mean (as in ``issue30``) and max aggregation, and of GAT convolutions. ``more``: the
transformers and timm models measured first, on which optimus_ir's kernels were stock's. torchvision, timm,
transformers and torch_geometric are imported by the builders only: they are no dependencies of optimus_ir, and a
missing one fails the rows of its models, not the run.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from optimus_ir.testing.models import SplitLayerNormTanhCat

Built = tuple[nn.Module, tuple[Any, ...]]


@dataclasses.dataclass(frozen=True)
class RealModel:
    """A model of the suite: ``make()`` returns the module and its example inputs, on the CPU."""

    name: str
    make: Callable[[], Built]

    def build(self) -> Built:
        """The module and its inputs, seeded: every build (eager reference, each variant) has the same weights."""
        torch.manual_seed(0)
        return self.make()


# ----------------------------------------------------------------------------------------------- issue 30

HETERO_NODE_TYPES = [f"n{i}" for i in range(8)]
#: each node type sends edges of relation r0 to the next type and of r1 to the type three on: 16 edge types, each
#: node type the destination of two
HETERO_HOPS = {"r0": 1, "r1": 3}
HETERO_FEATURES, HETERO_EDGES = 64, 4000


def _hetero(conv: Callable[[int, int], nn.Module]) -> Built:
    """torch_geometric's ``to_hetero`` of a two-layer GNN of ``conv(in, out)`` layers over a HeteroData of 8 node
    types (500 to 1900 nodes, 64 features) and 16 edge types (4000 random edges each): per layer one convolution
    per edge type, summed per destination type."""
    from torch_geometric.data import HeteroData
    from torch_geometric.nn import to_hetero

    class GNN(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.conv1 = conv(HETERO_FEATURES, 64)
            self.conv2 = conv(64, 32)

        def forward(self, x: torch.Tensor, edge_index: torch.Tensor) -> torch.Tensor:
            return self.conv2(self.conv1(x, edge_index).relu(), edge_index)

    data = HeteroData()
    for i, node_type in enumerate(HETERO_NODE_TYPES):
        data[node_type].x = torch.randn(500 + 200 * i, HETERO_FEATURES)
    for i, source in enumerate(HETERO_NODE_TYPES):
        for relation, hop in HETERO_HOPS.items():
            target = HETERO_NODE_TYPES[(i + hop) % len(HETERO_NODE_TYPES)]
            ends = [torch.randint(0, data[t].num_nodes, (HETERO_EDGES,)) for t in (source, target)]
            data[source, relation, target].edge_index = torch.stack(ends)
    model = to_hetero(GNN(), data.metadata(), aggr="sum")
    return model, (data.x_dict, data.edge_index_dict)


def _hetero_sage() -> Built:
    """The hetero GNN of SAGE convolutions (mean aggregation)."""
    from torch_geometric.nn import SAGEConv

    return _hetero(lambda i, o: SAGEConv((i, i), o))


def _hetero_sage_max() -> Built:
    """The hetero GNN of SAGE convolutions with max aggregation (a scatter-reduce, not a sum)."""
    from torch_geometric.nn import SAGEConv

    return _hetero(lambda i, o: SAGEConv((i, i), o, aggr="max"))


def _hetero_gat() -> Built:
    """The hetero GNN of GAT convolutions (attention softmax over each node's incoming edges, one head)."""
    from torch_geometric.nn import GATConv

    return _hetero(lambda i, o: GATConv((i, i), o, add_self_loops=False))


def _images(batch: int = 8, size: int = 224) -> tuple[torch.Tensor]:
    return (torch.randn(batch, 3, size, size),)


def _shufflenet() -> Built:
    """Channel split, two branches, concat and channel shuffle in every unit."""
    import torchvision

    return torchvision.models.shufflenet_v2_x1_0(weights=None), _images()


def _inception() -> Built:
    """Four to six parallel branches per block, concatenated; 299 x 299 images, the size it was built for."""
    import torchvision

    model = torchvision.models.inception_v3(weights=None, aux_logits=False, init_weights=False)
    return model, _images(size=299)


def _mixnet() -> Built:
    """Mixed depthwise convolutions: channels split into groups, one kernel size each, concatenated."""
    import timm

    return timm.create_model("mixnet_s", pretrained=False), _images()


def _mixtral() -> Built:
    """A Mixtral MoE, tiny: 2 layers, hidden 256, 4 experts, 2 per token; token ids [4, 128]."""
    import transformers as tf

    config = tf.MixtralConfig(vocab_size=1000, hidden_size=256, intermediate_size=512, num_hidden_layers=2,
                              num_attention_heads=4, num_key_value_heads=2, num_local_experts=4,
                              num_experts_per_tok=2, max_position_embeddings=128, use_cache=False)
    return _LastHidden(tf.MixtralModel._from_config(config, attn_implementation="sdpa")), _ids()


def _dlrm() -> Built:
    """The DLRM-style model of the workload registry at the size with 26 tables (``small``: batch 2048)."""
    from optimus_ir.testing.workloads import WORKLOADS

    return WORKLOADS["dlrm"].make("small")


# ----------------------------------------------------------------------------------------------- more


def _ids(batch: int = 4, length: int = 128, vocab: int = 1000) -> tuple[torch.Tensor]:
    return (torch.randint(0, vocab, (batch, length)),)


#: two layers, hidden 256, as in every transformers model here
SMALL = dict(num_hidden_layers=2, hidden_size=256, num_attention_heads=4, intermediate_size=1024, vocab_size=1000)


def _bert() -> Built:
    import transformers as tf

    return _LastHidden(tf.BertModel(tf.BertConfig(**SMALL))), _ids()


def _gpt2() -> Built:
    import transformers as tf

    config = tf.GPT2Config(n_layer=2, n_embd=256, n_head=4, vocab_size=1000, bos_token_id=0, eos_token_id=0)
    return _LastHidden(tf.GPT2Model(config)), _ids()


def _t5_encoder() -> Built:
    import transformers as tf

    config = tf.T5Config(num_layers=2, d_model=256, num_heads=4, d_ff=1024, vocab_size=1000)
    return _LastHidden(tf.T5EncoderModel(config)), _ids()


def _llama() -> Built:
    import transformers as tf

    return _LastHidden(tf.LlamaModel(tf.LlamaConfig(**SMALL, num_key_value_heads=2))), _ids()


def _vit() -> Built:
    import transformers as tf

    config = tf.ViTConfig(**{k: v for k, v in SMALL.items() if k != "vocab_size"}, image_size=64)
    return _LastHidden(tf.ViTModel(config)), _images(batch=4, size=64)


def _timm(name: str) -> Callable[[], Built]:
    """timm's ``name`` (``pretrained=False``) on 8 images of 160 x 160."""

    def make() -> Built:
        import timm

        return timm.create_model(name, pretrained=False), _images(size=160)

    return make


class _LastHidden(nn.Module):
    """A transformers model returning its last hidden state alone (one tensor, not a ModelOutput)."""

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.model(x).last_hidden_state


# ----------------------------------------------------------------------------------------------- issue 31


class JaggedSparseArch(nn.Module):
    """The sparse arch of a ranking model with jagged features: ``tables`` sum-pooled ``nn.EmbeddingBag`` tables
    of different sizes (1,000 to 100,000 rows, dimension 64) with runtime offsets, each bag 0 to 8 ids drawn per
    batch, each pooled output layer-normed, all concatenated. Each table gets 4 ids per bag on average, exactly (the
    bags' sizes a random split of that total), so that the shapes stay static from batch to batch while the bags do
    not."""

    def __init__(self, tables: int, dim: int = 64) -> None:
        super().__init__()
        rows = torch.logspace(3, 5, tables).long().tolist()
        self.tables = nn.ModuleList(nn.EmbeddingBag(n, dim, mode="sum") for n in rows)
        self.norms = nn.ModuleList(nn.LayerNorm(dim) for _ in rows)

    def forward(self, ids: list[torch.Tensor], offsets: list[torch.Tensor]) -> torch.Tensor:
        return torch.cat([norm(table(i, o)) for table, norm, i, o in zip(self.tables, self.norms, ids, offsets)], 1)

    def example_inputs(self, batch: int, max_bag: int = 8) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
        ids, offsets = [], []
        for table in self.tables:
            # batch * max_bag / 2 ids put one by one into bags not yet full: sizes 0..max_bag, a random split
            slots = torch.randperm(batch * max_bag)[: batch * max_bag // 2] // max_bag
            lengths = torch.bincount(slots, minlength=batch)
            offsets.append(torch.cat([torch.zeros(1, dtype=torch.long), lengths.cumsum(0)[:-1]]))
            ids.append(torch.randint(0, table.num_embeddings, (int(lengths.sum()),)))
        return ids, offsets


def _sparse_arch(tables: int) -> Callable[[], Built]:
    def make() -> Built:
        model = JaggedSparseArch(tables)
        return model, model.example_inputs(batch=2048)

    return make


def _seed(
    pieces: int, layers: int, dtype: torch.dtype = torch.float32, unequal: bool = False, rows: int = 256
) -> Callable[[], Built]:
    """Pieces of width 32, or (``unequal``) of widths 16, 32, 48 and 64 in turn."""

    def make() -> Built:
        widths = [(16, 32, 48, 64)[i % 4] for i in range(pieces)] if unequal else [32] * pieces
        model = SplitLayerNormTanhCat(pieces, layers, widths=widths).to(dtype)
        return model, (torch.randn(rows, sum(widths), dtype=dtype),)

    return make


# ----------------------------------------------------------------------------------------------- replicated layers


class Towers(nn.Module):
    """Per-feature towers: ``towers`` x (Linear -> ReLU -> Linear), each on its own feature, outputs side by side."""

    def __init__(self, towers: int, width: int, hidden: int, out: int) -> None:
        super().__init__()
        self.towers = nn.ModuleList(
            nn.Sequential(nn.Linear(width, hidden), nn.ReLU(), nn.Linear(hidden, out)) for _ in range(towers)
        )

    def forward(self, *features: torch.Tensor) -> torch.Tensor:
        return torch.cat([tower(x) for tower, x in zip(self.towers, features)], 1)


class DenseExperts(nn.Module):
    """Dense experts over one input: ``experts`` x (Linear -> ReLU -> Linear), outputs stacked."""

    def __init__(self, experts: int, width: int, hidden: int) -> None:
        super().__init__()
        self.experts = nn.ModuleList(
            nn.Sequential(nn.Linear(width, hidden), nn.ReLU(), nn.Linear(hidden, width)) for _ in range(experts)
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.stack([expert(x) for expert in self.experts], 1)


def _towers() -> Built:
    """16 x (32 -> 64 -> 16), batch 1024."""
    return Towers(16, 32, 64, 16), tuple(torch.randn(1024, 32) for _ in range(16))


def _experts() -> Built:
    """8 x (128 -> 256 -> 128) over one input, batch 2048."""
    return DenseExperts(8, 128, 256), (torch.randn(2048, 128),)


SETS: dict[str, list[RealModel]] = {
    "issue30": [
        RealModel("hetero-sage", _hetero_sage),
        RealModel("shufflenet-v2", _shufflenet),
        RealModel("inception-v3", _inception),
        RealModel("mixnet-s", _mixnet),
        RealModel("mixtral-moe", _mixtral),
        RealModel("dlrm-26", _dlrm),
    ],
    "issue31": [RealModel(f"sparse-arch-{n}", _sparse_arch(n)) for n in (8, 26, 100)],
    "issue33": [
        *(RealModel(f"seed-{p}x{n}", _seed(p, n)) for p, n in ((48, 4), (96, 8), (192, 16))),
        RealModel("seed-48x4-bf16", _seed(48, 4, torch.bfloat16)),
        RealModel("seed-48x4-unequal", _seed(48, 4, unequal=True)),
        # the backward whose split/cat views raised the peak before the guard compared peaks; 8192 rows, so that
        # the backward's tensors make the step's peak
        RealModel("seed-16x4-bf16-unequal", _seed(16, 4, torch.bfloat16, unequal=True, rows=8192)),
    ],
    "gnn": [
        RealModel("hetero-sage", _hetero_sage),
        RealModel("hetero-sage-max", _hetero_sage_max),
        RealModel("hetero-gat", _hetero_gat),
    ],
    "layers": [RealModel("towers-16", _towers), RealModel("experts-8", _experts)],
    "more": [
        RealModel("bert", _bert),
        RealModel("gpt2", _gpt2),
        RealModel("t5-encoder", _t5_encoder),
        RealModel("llama", _llama),
        RealModel("vit", _vit),
        RealModel("resnet50", _timm("resnet50")),
        RealModel("convnext_tiny", _timm("convnext_tiny")),
    ],
}
