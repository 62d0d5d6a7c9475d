"""PieceLayerNormsToOneLayerNorm: split → per-piece layer norm (own weight and bias) → tanh → cat, layer after layer
(issue 33's seed), as one layer norm per layer in Dynamo's graph for inference; what it leaves alone (training graphs
among them), the graph put back when it fails, and the numerics against eager through Triton's interpreter."""

import contextlib
import copy
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


def test_unequal_widths_or_a_norm_without_weights_stay_per_piece():
    unequal = SplitLayerNormTanhCat(4, 2, widths=[16, 32, 16, 32]).requires_grad_(False)

    def no_weights(x):
        return torch.cat([torch.tanh(F.layer_norm(p, (8,))) for p in x.split(8, dim=1)], dim=1)

    for fn, x, reason in ((unequal, torch.randn(8, 96), "widths"), (no_weights, torch.randn(8, 32), "own weight")):
        report = compile_report(fn, (x,), passes="splitcat")
        (record,) = {r.detail: r for r in report.rewrites if r.rule == RULE}.values()
        assert not record.fired and reason in record.detail


def test_a_rule_that_raises_gets_the_graph_back():
    model, inputs = _seed(4, 2)
    expected = model(*inputs)

    def half_done(graph, group, read_later):  # erases a node the graph still reads, after replacing nothing
        graph.erase_node(group.norms[0])

    with mock.patch.object(grouped_layer_norm, "_rewrite", half_done), optimus_ir.enabled("splitcat"), \
            cpu_triton_interpreter(), recording() as records:
        actual = torch.compile(model)(*inputs)
    assert any(r.rule == RULE and "internal error" in r.detail for r in records)
    torch.testing.assert_close(actual, expected)
