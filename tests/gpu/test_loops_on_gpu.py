"""On a real GPU: loops whose batches change shape, as training and serving run them. Dynamo compiles the first batch
statically and, on the second shape, a graph of symbolic sizes (automatic dynamic shapes) that serves every later
one. Under the default mode and ``reduce-overhead`` (cudagraph trees: one graph recorded per shape), optimus_ir's
code must match eager's numbers batch after batch, compile no more often than stock's, and keep its merges in the
symbolic graph: jagged embedding bags (every table's id count and the batch change) and a DLRM-style model whose
last batch is partial.
"""

from collections.abc import Callable

import pytest
import torch
from torch import nn

import optimus_ir
from optimus_ir.records import recording
from optimus_ir.testing.workloads import WORKLOADS, output_loss
from tests.gpu.helpers import CUDA, fresh_compile, max_rel_error

pytestmark = CUDA

MODES = {"default": {}, "reduce-overhead": {"mode": "reduce-overhead"}}


class JaggedTables(nn.Module):
    """Sum-pooled tables of runtime offsets, each pooled output layer-normed, all concatenated."""

    def __init__(self, rows: tuple[int, ...] = (1000, 5000, 20000, 70000), dim: int = 64) -> None:
        super().__init__()
        self.tables = nn.ModuleList(nn.EmbeddingBag(n, dim, mode="sum") for n in rows)
        self.norms = nn.ModuleList(nn.LayerNorm(dim) for _ in rows)

    def forward(self, ids: list[torch.Tensor], offsets: list[torch.Tensor]) -> torch.Tensor:
        return torch.cat([n(t(i, o)) for t, n, i, o in zip(self.tables, self.norms, ids, offsets)], 1)

    def batch(self, bags: int) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
        """Bags of 0 to 8 ids each, drawn anew: every table's id count changes from batch to batch."""
        ids, offsets = [], []
        for table in self.tables:
            lengths = torch.randint(0, 9, (bags,), device="cuda")
            offsets.append(torch.cat([lengths.new_zeros(1), lengths.cumsum(0)[:-1]]))
            ids.append(torch.randint(0, table.num_embeddings, (int(lengths.sum()),), device="cuda"))
        return ids, offsets


def _dlrm_batches() -> tuple[nn.Module, list[tuple[torch.Tensor, ...]]]:
    workload = WORKLOADS["dlrm"]
    model, _ = workload.make("small", device="cuda")
    # full batches of 2048, then others, then a last partial one
    return model, [model.example_inputs(b, torch.float32, torch.device("cuda")) for b in (2048, 2048, 1024, 2048, 777)]


def _jagged_batches() -> tuple[nn.Module, list[tuple[list[torch.Tensor], list[torch.Tensor]]]]:
    model = JaggedTables().cuda()
    return model, [model.batch(b) for b in (2048, 2048, 2048, 1500, 2048, 333)]


CASES: dict[str, Callable[[], tuple[nn.Module, list]]] = {"jagged-tables": _jagged_batches, "dlrm": _dlrm_batches}


def _results(call: Callable, model: nn.Module, batches: list, training: bool) -> list[list[torch.Tensor]]:
    """Each batch's output of ``call`` (and, in training, the parameters' gradients of its loss), copied: a loop
    of steps, gradients set to None before each."""
    results = []
    for batch in batches:
        for p in model.parameters():
            p.grad = None
        out = call(*batch)
        if training:
            output_loss(out).backward()
        results.append([out.detach().clone(), *(p.grad.clone() for p in model.parameters() if training)])
    return results


def _run(model: nn.Module, batches: list, training: bool, options: dict, passes: str | None) -> tuple[list, int]:
    """:func:`_results` under ``torch.compile`` with ``options`` and ``passes``, and the graphs Dynamo compiled."""
    with fresh_compile(), optimus_ir.enabled(passes):
        torch._dynamo.utils.counters.clear()
        results = _results(torch.compile(model, **options), model, batches, training)
        return results, torch._dynamo.utils.counters["stats"]["unique_graphs"]


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("training", [False, True], ids=["inference", "training"])
@pytest.mark.parametrize("case", CASES)
def test_a_loop_of_changing_shapes_matches_eager_and_compiles_as_often_as_stock(case, training, mode):
    torch.manual_seed(0)
    model, batches = CASES[case]()
    model.requires_grad_(training)
    expected = _results(model, model, batches, training)
    stock, stock_graphs = _run(model, batches, training, MODES[mode], None)
    with recording() as records:
        ours, graphs = _run(model, batches, training, MODES[mode], "all")
    assert graphs <= stock_graphs, (graphs, stock_graphs)
    fired = {r.rule for r in records if r.fired}
    assert "EmbeddingBagToSegmentSum" in fired and "IdenticalKernelsToMemberTableKernel" in fired, fired
    for step, (got, base, want) in enumerate(zip(ours, stock, expected, strict=True)):
        ours_error = max_rel_error(tuple(got), tuple(want))
        stock_error = max_rel_error(tuple(base), tuple(want))
        assert ours_error <= max(4 * stock_error, 1e-5), (step, ours_error, stock_error)
