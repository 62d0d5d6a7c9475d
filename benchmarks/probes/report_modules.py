"""Does ``compile_report`` take what ``torch.compile`` takes? Real modules it once failed on: a torch_geometric
``to_hetero`` GraphSAGE (dict inputs; and a variant holding its edge indices as plain tensor attributes), transformers
MoE models (Mixtral with its default grouped-mm experts, Qwen2-MoE) and a module reading a plain tensor attribute.
Each is reported with CPU inputs (traced on the CPU, code for CUDA) and, on a GPU, with CUDA inputs and the module
on the GPU (traced there); ``torch.compile`` runs each for comparison. Random weights, no downloads.

    python -m benchmarks report-modules --out benchmarks/results/<date> [--devices cpu cuda] [--stem NAME]
"""

from __future__ import annotations

import argparse
import copy
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from torch import nn

from benchmarks.measure import header, write_results
from optimus_ir.inspect import compile_report

NODE_TYPES = ["paper", "author", "inst"]
EDGE_TYPES = [("author", "writes", "paper"), ("paper", "rev_writes", "author"), ("author", "affiliated", "inst"),
              ("paper", "cites", "paper")]
NUM_NODES = {"paper": 12, "author": 10, "inst": 4}


def _hetero_data() -> tuple[dict[str, torch.Tensor], dict[tuple[str, str, str], torch.Tensor]]:
    g = torch.Generator().manual_seed(0)
    x = {t: torch.randn(NUM_NODES[t], 16, generator=g) for t in NODE_TYPES}
    edges = {e: torch.stack([torch.randint(0, NUM_NODES[e[0]], (30,), generator=g),
                             torch.randint(0, NUM_NODES[e[2]], (30,), generator=g)]) for e in EDGE_TYPES}
    return x, edges


def _hetero_model() -> nn.Module:
    from torch_geometric.nn import SAGEConv, to_hetero

    class GraphSAGE(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.conv1, self.conv2 = SAGEConv((16, 16), 32), SAGEConv((32, 32), 8)

        def forward(self, x: torch.Tensor, edge_index: torch.Tensor) -> torch.Tensor:
            return self.conv2(self.conv1(x, edge_index).relu(), edge_index)

    torch.manual_seed(0)
    return to_hetero(GraphSAGE(), (NODE_TYPES, EDGE_TYPES), aggr="sum")


class _HeteroWithEdgeAttributes(nn.Module):
    """Edge indices held as plain tensor attributes (neither parameters nor buffers)."""

    def __init__(self, edges: dict[tuple[str, str, str], torch.Tensor]) -> None:
        super().__init__()
        self.model, self.edges = _hetero_model(), dict(edges)

    def forward(self, *xs: torch.Tensor) -> tuple[torch.Tensor, ...]:
        out = self.model(dict(zip(NODE_TYPES, xs)), self.edges)
        return tuple(out[t] for t in NODE_TYPES)

    def _apply(self, fn: Any, recurse: bool = True) -> nn.Module:  # .to() moves the plain attributes too
        self.edges = {k: fn(v) for k, v in self.edges.items()}
        return super()._apply(fn, recurse)


class _Logits(nn.Module):
    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.model(input_ids=ids, use_cache=False).logits


class _TensorAttribute(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.linear, self.scale = nn.Linear(16, 16), torch.randn(16)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.linear(x)) * self.scale + 1

    def _apply(self, fn: Any, recurse: bool = True) -> nn.Module:
        self.scale = fn(self.scale)
        return super()._apply(fn, recurse)


def _ids() -> tuple[torch.Tensor]:
    return (torch.randint(0, 100, (2, 16), generator=torch.Generator().manual_seed(0)),)


def _mixtral() -> tuple[nn.Module, tuple[Any, ...]]:
    import transformers as tf

    config = tf.MixtralConfig(vocab_size=100, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                              num_attention_heads=4, num_key_value_heads=2, num_local_experts=4,
                              num_experts_per_tok=2, max_position_embeddings=64)
    torch.manual_seed(0)
    return _Logits(tf.MixtralForCausalLM._from_config(config, attn_implementation="sdpa")), _ids()


def _qwen2_moe() -> tuple[nn.Module, tuple[Any, ...]]:
    import transformers as tf

    config = tf.Qwen2MoeConfig(vocab_size=100, hidden_size=64, intermediate_size=128, moe_intermediate_size=32,
                               shared_expert_intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                               num_key_value_heads=2, num_experts=4, num_experts_per_tok=2,
                               max_position_embeddings=64)
    torch.manual_seed(0)
    return _Logits(tf.Qwen2MoeForCausalLM._from_config(config, attn_implementation="sdpa")), _ids()


def _hetero() -> tuple[nn.Module, tuple[Any, ...]]:
    return _hetero_model(), _hetero_data()


def _hetero_attributes() -> tuple[nn.Module, tuple[Any, ...]]:
    x, edges = _hetero_data()
    return _HeteroWithEdgeAttributes(edges), tuple(x[t] for t in NODE_TYPES)


CASES: dict[str, Callable[[], tuple[nn.Module, tuple[Any, ...]]]] = {
    "to_hetero SAGE (dict inputs)": _hetero,
    "to_hetero SAGE (edge indices as attributes)": _hetero_attributes,
    "Mixtral MoE (grouped-mm experts)": _mixtral,
    "Qwen2-MoE": _qwen2_moe,
    "module reading a tensor attribute": lambda: (_TensorAttribute(), (torch.randn(4, 16),)),
}


def _to(value: Any, device: str) -> Any:
    return torch.utils._pytree.tree_map(lambda t: t.to(device) if isinstance(t, torch.Tensor) else t, value)


def _measure(name: str, device: str, training: bool) -> dict[str, Any]:
    module, inputs = CASES[name]()
    module = copy.deepcopy(module).to(device).train(training).requires_grad_(training)
    inputs = _to(inputs, device)
    row: dict[str, Any] = {"model": name, "inputs on": device, "training": training}
    try:
        torch.compile(module)(*inputs)
        row["torch.compile"] = "ok"
    except Exception as error:  # a row, not a crash: the table says what failed
        row["torch.compile"] = f"{type(error).__name__}: {str(error).splitlines()[0][:120]}"
    finally:
        torch._dynamo.reset()
    try:
        stock = compile_report(module, inputs, passes=None)
        ours = compile_report(module, inputs)
        row["compile_report"] = "ok"
        row["graphs"] = len(ours.graphs)
        row["launches stock → optimus_ir"] = f"{len(stock.launches)} → {len(ours.launches)}"
    except Exception as error:
        row["compile_report"] = f"{type(error).__name__}: {str(error).splitlines()[0][:160]}"
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--devices", nargs="+", default=["cpu", "cuda"] if torch.cuda.is_available() else ["cpu"],
                        help="where the inputs and the module are (default: cpu, and cuda on a GPU)")
    parser.add_argument("--stem", default="report_modules", help="results file name")
    args = parser.parse_args()
    rows = [_measure(name, device, training) for name in CASES for device in args.devices for training in (False, True)]
    columns = ["model", "inputs on", "training", "torch.compile", "compile_report", "graphs",
               "launches stock → optimus_ir"]
    write_results(args.out, args.stem, header(" ".join(sys.argv)), rows, columns)
    sys.exit(0 if all(r["compile_report"] == "ok" for r in rows if r["torch.compile"] == "ok") else 1)


if __name__ == "__main__":
    main()
