"""PieceLayerNormsToOneLayerNorm: split → per-piece layer norm (own weight and bias) → tanh → cat, layer after layer
(issue 33's seed), as one layer norm per layer in Dynamo's graph for inference; what it leaves alone (training graphs
among them), the graph put back when it fails, and the numerics against eager through Triton's interpreter."""

import contextlib
import copy
import re
from unittest import mock

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import optimus_ir
from optimus_ir.inspect import compile_report
from optimus_ir.interpret import cpu_triton_interpreter
from optimus_ir.lowering import grouped_layer_norm
from optimus_ir.records import recording
from optimus_ir.testing.models import SplitLayerNormTanhCat
from optimus_ir.testing.wrapper_memory import peak_bytes

RULE = "PieceLayerNormsToOneLayerNorm"


@contextlib.contextmanager
def deterministic_algorithms():
    previous = torch.are_deterministic_algorithms_enabled()
    torch.use_deterministic_algorithms(True)
    try:
        yield
    finally:
        torch.use_deterministic_algorithms(previous)


def _seed(pieces: int = 16, layers: int = 4, dtype: torch.dtype = torch.float32, rows: int = 64, grad: bool = False):
    torch.manual_seed(0)
    model = SplitLayerNormTanhCat(pieces, layers).to(dtype)
    for p in model.parameters():
        p.data.normal_()  # weights and biases of their own, not ones and zeros
    model.requires_grad_(grad)
    return model, (torch.randn(rows, 32 * pieces, dtype=dtype, requires_grad=grad),)


def test_each_layer_is_one_layer_norm():
    stock = compile_report(*_seed(), passes=None)
    report = compile_report(*_seed(), passes="all")
    assert len(stock.launches) == 64
    # the weights' and the biases' concatenation (one merged copy kernel), the four layers' norms and tanhs
    assert len(report.launches) == 2
    fired = [r for r in report.rewrites if r.rule == RULE and r.fired]
    assert len(fired) == 4 and "16 pieces of 32" in fired[0].detail and "[64, 16, 32]" in fired[0].detail


def test_a_training_step_is_two_kernels_forward_and_three_backward_within_stocks_peaks():
    """The weights' and biases' gradients are atomic adds in the backward's row kernel through the layers, so that no
    layer's gradient rows are written; the layers' outputs are saved and the norms recomputed. Wrappers replayed:
    neither graph peaks above stock's."""
    stock = compile_report(*_seed(grad=True, rows=256), passes=None)
    report = compile_report(*_seed(grad=True, rows=256), passes="all")
    assert [len(g.launches) for g in stock.graphs] == [64, 256]
    assert [len(g.launches) for g in report.graphs] == [2, 3]
    assert len([r for r in report.rewrites if r.rule == RULE and r.fired]) == 4
    backward = report.graphs[1]
    assert sum(k.source.count("tl.atomic_add(") for k in backward.kernels) == 8  # 4 layers' weights and biases
    for ours, theirs in zip(report.graphs, stock.graphs, strict=True):
        assert peak_bytes(ours.wrapper) <= peak_bytes(theirs.wrapper)


def test_a_training_graph_under_deterministic_algorithms_stays_per_piece():
    with deterministic_algorithms():
        report = compile_report(*_seed(grad=True), passes="splitcat")
    rejected = [r for r in report.rewrites if r.rule == RULE]
    assert len(rejected) == 4 and not any(r.fired for r in rejected) and "deterministic" in rejected[0].detail


def test_a_training_graph_with_an_op_of_side_effects_stays_per_piece():
    model, (x,) = _seed(4, 2, grad=True)

    def asserted(x):
        torch._assert_async((x == x).any())
        return model(x)

    report = compile_report(asserted, (x,), passes="splitcat")
    rejected = [r for r in report.rewrites if r.rule == RULE]
    assert rejected and not any(r.fired for r in rejected) and "side effects" in rejected[0].detail


@pytest.mark.parametrize("grad", [False, True], ids=["inference", "training"])
def test_numerics_in_the_interpreter(grad):
    model, (x,) = _seed(6, 3, rows=40, grad=grad)
    expected = model(x)
    upstream = torch.randn_like(expected)
    if grad:
        expected.backward(upstream)
        want = [x.grad.clone()] + [p.grad.clone() for p in model.parameters()]
        x.grad = None
        model.zero_grad(set_to_none=True)
    with cpu_triton_interpreter(), optimus_ir.enabled("splitcat"), recording() as records:
        actual = torch.compile(model)(x)
        if grad:
            actual.backward(upstream)
    assert len([r for r in records if r.rule == RULE and r.fired]) == 3
    torch.testing.assert_close(actual, expected.detach(), atol=1e-5, rtol=1e-5)
    if grad:
        torch.testing.assert_close([x.grad] + [p.grad for p in model.parameters()], want, atol=1e-4, rtol=1e-4)


def test_bf16_training_gradients_are_as_close_to_fp64_as_stocks_in_the_interpreter():
    """Against the model in fp64: eager's bf16 rounds after every op; the grouped backward accumulates the weights'
    gradients in fp32 atomics and rounds once."""
    model, (x,) = _seed(6, 3, rows=40, dtype=torch.bfloat16, grad=True)
    exact_model, exact_x = copy.deepcopy(model).double(), x.detach().double().requires_grad_()
    upstream = torch.randn(x.shape, dtype=torch.bfloat16)
    exact_model(exact_x).backward(upstream.double())
    exact = [exact_x.grad] + [p.grad for p in exact_model.parameters()]

    def errors(passes):
        m, xx = copy.deepcopy(model), x.detach().clone().requires_grad_()
        with cpu_triton_interpreter(), optimus_ir.enabled(passes), recording() as records:
            torch.compile(m)(xx).backward(upstream)
        got = [xx.grad] + [p.grad for p in m.parameters()]
        fired = [r for r in records if r.rule == RULE and r.fired]
        return [float((a.double() - b).abs().max() / b.abs().max()) for a, b in zip(got, exact)], fired

    ours, fired = errors("splitcat")
    stock, _ = errors(None)
    assert len(fired) == 3
    assert max(ours) <= 1.1 * max(stock)


@pytest.mark.parametrize("grad", [False, True], ids=["inference", "training"])
def test_a_symbolic_batch_is_as_few_kernels_as_static(grad):
    """The rows a symbol (Dynamo's automatic dynamic shapes, after a loop's batch changed), the pieces' width a
    number: the same layer norms over views that name no row count, the same kernels as for a static batch."""
    static = compile_report(*_seed(grad=grad), passes="all")
    model, (x,) = _seed(grad=grad)
    torch._dynamo.mark_dynamic(x, 0)
    report = compile_report(model, (x,), passes="all")
    fired = [r for r in report.rewrites if r.rule == RULE and r.fired]
    assert len(fired) == 4 and re.search(r"\[s\d+, 16, 32\]", fired[0].detail), fired
    launches = [len(g.launches) for g in report.graphs]
    assert launches == [len(g.launches) for g in static.graphs] == ([2, 3] if grad else [2])
    assert all(re.search(r"\(s\d+, 512\)", g.wrapper) for g in report.graphs)  # buffers of a symbolic batch


def test_every_size_symbolic_fires_where_dynamo_made_the_split_width_a_number():
    """``dynamic=True``: splitting the symbolic width by 32 makes Dynamo specialize it (a symbol of one value, a
    number); the rows stay a symbol. (Dynamo's first trace makes eps a value of the graph: rejected, naming it.)"""
    report = compile_report(*_seed(), passes="all", dynamic=True)
    decisions = [r for r in report.rewrites if r.rule == RULE]
    fired = [r for r in decisions if r.fired]
    assert len(fired) == 4 and re.search(r"\[s\d+, 16, 32\]", fired[0].detail), decisions
    assert all("eps" in r.detail and "is a symbol" in r.detail for r in decisions if not r.fired), decisions
    assert len(report.launches) == 2


@pytest.mark.parametrize("grad", [False, True], ids=["inference", "training"])
def test_batches_of_three_sizes_are_eagers_in_the_interpreter(grad):
    """As a loop compiles it: static for the first batch, the rows a symbol for the second, that code for the third;
    the output and every gradient eager's, each layer one layer norm in the symbolic compile."""
    model, _ = _seed(6, 3, grad=grad)
    compiled = torch.compile(model)
    torch._dynamo.utils.counters.clear()
    with cpu_triton_interpreter(), optimus_ir.enabled("splitcat"):
        for i, rows in enumerate((40, 27, 13)):
            x = torch.randn(rows, 6 * 32, requires_grad=grad)
            upstream = torch.randn(rows, 6 * 32)
            with recording() as records:
                actual = compiled(x)
                if grad:
                    actual_grads = torch.autograd.grad(actual, [x, *model.parameters()], upstream)
            if i == 1:
                assert len([r for r in records if r.rule == RULE and r.fired]) == 3, records
            expected = model(x)
            torch.testing.assert_close(actual, expected, atol=1e-5, rtol=1e-5)
            if grad:
                expected_grads = torch.autograd.grad(expected, [x, *model.parameters()], upstream)
                torch.testing.assert_close(actual_grads, expected_grads, atol=1e-4, rtol=1e-4)
    assert torch._dynamo.utils.counters["stats"]["unique_graphs"] == 2  # none for the third batch


class NormsReadOnTheirOwn(nn.Module):
    """Pieces layer-normed, the norms returned apart (no common op and cat): each a select of the group's."""

    def __init__(self) -> None:
        super().__init__()
        self.norms = nn.ModuleList(nn.LayerNorm(8) for _ in range(3))

    def forward(self, x):
        return tuple(norm(piece) * (i + 1) for i, (norm, piece) in enumerate(zip(self.norms, x.split(8, dim=-1))))


def test_norms_read_apart_become_selects_of_one_layer_norm():
    model = NormsReadOnTheirOwn().requires_grad_(False)
    for p in model.parameters():
        p.data.normal_()
    x = torch.randn(5, 7, 24)
    with cpu_triton_interpreter(), optimus_ir.enabled("splitcat"), recording() as records:
        actual = torch.compile(model)(x)
    assert [r for r in records if r.rule == RULE and r.fired]
    torch.testing.assert_close(actual, model(x))


def test_weights_indexed_next_to_their_piece_move_before_the_one_layer_norm():
    """``w[i]`` of a stacked weight: Dynamo traces each next to the piece that reads it, after the first piece's
    norm; those reads move before the one layer norm (the graph stays in order), and the numerics are eager's."""

    def pieces_normed(x, w, b):
        return torch.cat([torch.tanh(F.layer_norm(p, (8,), w[i], b[i])) for i, p in enumerate(x.split(8, 1))], 1)

    inputs = (torch.randn(16, 32), torch.randn(4, 8), torch.randn(4, 8))
    with cpu_triton_interpreter(), optimus_ir.enabled("splitcat"), recording() as records:
        actual = torch.compile(pieces_normed)(*inputs)
    assert [r for r in records if r.rule == RULE and r.fired], records
    torch.testing.assert_close(actual, pieces_normed(*inputs))


def test_unequal_widths_or_a_norm_without_weights_stay_per_piece():
    unequal = SplitLayerNormTanhCat(4, 2, widths=[16, 32, 16, 32]).requires_grad_(False)

    def no_weights(x):
        return torch.cat([torch.tanh(F.layer_norm(p, (8,))) for p in x.split(8, dim=1)], dim=1)

    for fn, x, reason in ((unequal, torch.randn(8, 96), "widths"), (no_weights, torch.randn(8, 32), "own weight")):
        report = compile_report(fn, (x,), passes="splitcat")
        (record,) = {r.detail: r for r in report.rewrites if r.rule == RULE}.values()
        assert not record.fired and reason in record.detail


def test_a_rule_that_raises_gets_the_graph_back(rule_errors_fall_back):
    model, inputs = _seed(4, 2)
    expected = model(*inputs)

    def half_done(graph, group, read_later):  # erases a node the graph still reads, after replacing nothing
        graph.erase_node(group.norms[0])

    with mock.patch.object(grouped_layer_norm, "_rewrite", half_done), optimus_ir.enabled("splitcat"), \
            cpu_triton_interpreter(), recording() as records:
        actual = torch.compile(model)(*inputs)
    assert any(r.rule == RULE and "internal error" in r.detail for r in records)
    torch.testing.assert_close(actual, expected)
