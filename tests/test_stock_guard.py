"""The guard (optimus_ir.stock_guard): a graph whose code with optimus_ir would launch more kernels than stock's
gets stock's code, which computes the same as eager; one whose estimated peak is above stock's gets the code
lowered without the rule that raised it, or without the split/cat pass; a graph no lowering rule changed is not
lowered twice."""

from unittest import mock

import pytest
import torch
from optimus_ir.scheduler_hooks.horizontal import rule as horizontal_rule

import optimus_ir
from optimus_ir import stock_guard, virtual_cuda
from optimus_ir.inspect import compile_report
from optimus_ir.interpret import cpu_triton_interpreter
from optimus_ir.records import recording
from optimus_ir.testing.golden_from_inductor_tests import split_clones_regrouped


@pytest.fixture
def more_launches_than_stock():
    """Bring back the fault the guard exists for: a member table that takes one body's progressions of a cat and
    leaves the others a kernel of their own (2 launches where stock's foreach kernel is 1), with no kernel of
    several bodies to put them together again."""
    with mock.patch.object(horizontal_rule, "_leave_mixed_piece_groups", lambda *args: None), \
            mock.patch.object(horizontal_rule, "class_sets", lambda units: []):
        yield


def _guard_records(records):
    return [r for r in records if r.rule == stock_guard.RULE]


def test_stocks_code_is_kept_where_ours_launches_more(more_launches_than_stock):
    x = torch.randn(50, 16)
    assert len(compile_report(split_clones_regrouped, (x,), passes=None).launches) == 1
    with mock.patch.object(stock_guard, "GUARD_MAX_NODES", 0):  # the fault itself, unguarded
        assert len(compile_report(split_clones_regrouped, (x,)).launches) == 2
    report = compile_report(split_clones_regrouped, (x,))
    assert len(report.launches) == 1
    (decision,) = _guard_records(report.rewrites)
    assert decision.fired and decision.nodes == ("SplitCatToPointwise",)
    assert decision.detail == "2 launches per call with these rules, 1 without: stock's code kept"


def test_stocks_code_kept_computes_what_eager_does():
    """Run where the guard keeps stock's code (ours counted as launching 100 more than it does, as on the CPU the
    fault above launches no more than stock): the code run is stock's, and it computes eager's values."""
    from optimus_ir.codegen_text import parse_wrapper

    counted = []

    def many_more_for_ours(code, *args):
        parsed = parse_wrapper(code, *args)
        counted.append(parsed)
        if len(counted) % 2 == 1:  # the guard counts ours first, then stock's
            parsed.launches.extend(["<more>"] * 100)
        return parsed

    stock_codes, codes = [], []
    original = stock_guard.lower_again

    def lower_again(graph, *args):
        stock, code = original(graph, *args)
        stock_codes.append(code[0].value)
        return stock, code

    x = torch.randn(50, 16)
    torch._dynamo.reset()
    with optimus_ir.enabled(), cpu_triton_interpreter(), recording() as records, \
            mock.patch.object(stock_guard, "parse_wrapper", many_more_for_ours), \
            mock.patch.object(stock_guard, "lower_again", lower_again), \
            mock.patch.object(torch._inductor.graph.GraphLowering, "save_output_code", codes.append):
        out = torch.compile(split_clones_regrouped)(x)
    assert [r.fired for r in _guard_records(records)] == [True]
    assert codes == stock_codes and len(codes) == 1
    torch.testing.assert_close(out, split_clones_regrouped(x), rtol=0, atol=0)


def test_a_graph_over_the_limit_is_not_lowered_again_and_says_so(more_launches_than_stock):
    with mock.patch.object(stock_guard, "GUARD_MAX_NODES", 10):
        report = compile_report(split_clones_regrouped, (torch.randn(50, 16),))
    (decision,) = _guard_records(report.rewrites)
    assert not decision.fired and "over GUARD_MAX_NODES (10)" in decision.detail


def _cat_beside_a_matmul(x, y):
    return torch.cat([torch.relu(p) for p in reversed(x.split(8, dim=1))], dim=1), torch.sigmoid(y) @ y


def test_only_a_graph_a_cat_rule_changed_into_several_launches_is_lowered_twice():
    lowered = []
    original = stock_guard.lower_again
    with mock.patch.object(stock_guard, "lower_again", lambda graph, *a: lowered.append(graph) or original(graph, *a)):
        merged = compile_report(lambda *xs: [torch.tanh(x) for x in xs], tuple(torch.randn(64, 32) for _ in range(8)))
        assert len(merged.launches) == 1 and lowered == []  # no cat rule fired
        one = compile_report(split_clones_regrouped, (torch.randn(50, 16),))
        assert len(one.launches) == 1 and lowered == []  # one launch: stock cannot launch fewer
        bags = compile_report(lambda ids, table: torch.nn.functional.embedding_bag(ids, table, mode="sum") * 2,
                              (torch.randint(0, 50, (8, 3)), torch.randn(50, 16, requires_grad=True)))
        assert "EmbeddingBagBackwardOfRegularBagsToScatterAdd" in {r.rule for r in bags.rewrites if r.fired}
        assert lowered == []  # an ATen call replaced by kernels: one launch in the wrapper, many on the GPU
        two = compile_report(_cat_beside_a_matmul, (torch.randn(8, 96), torch.randn(16, 16)))
        assert len(two.launches) > 1 and len(lowered) == 1


WIDTHS = [16, 32, 48, 64] * 3


def _split_norm_tanh_cat(x, shift, *params):
    """Two layers of split → layer norm of each piece with its own weight and bias → tanh → cat (issue 33's seed),
    after a shift that needs no gradient (a None among the backward's outputs)."""
    params = iter(params)
    x = x + shift
    for _ in range(2):
        x = torch.cat([torch.tanh(torch.nn.functional.layer_norm(piece, piece.shape[1:], next(params), next(params)))
                       for piece in x.split(WIDTHS, dim=1)], dim=1)
    return x


def test_a_backward_whose_views_raise_the_peak_gets_the_code_lowered_without_them():
    """The slices of each layer's gradient cat read its pieces (``SliceOfCatToInput``), the cat stays allocated (its
    pieces are computed into it), and Inductor fuses each piece with its reader: the cats of both layers are held at
    once. The guard sees the estimate above stock's and loads the graph lowered without the split/cat pass, whose
    merges keep to the tolerance over stock's own graph; the replayed wrapper then peaks as stock's does.

    The graph is the CPU's trace of the bf16 layer norms, whose backward reads their statistics rounded to bf16 (the
    virtual device reads them unrounded, as CUDA does, unless its rewrite is switched off as here): traced as CUDA
    traces them, these layers keep no such cat."""
    with mock.patch.object(virtual_cuda, "_ELEMENTWISE", frozenset()), pytest.warns(UserWarning, match="rstd"):
        _the_guard_takes_the_code_without_the_views()


def _the_guard_takes_the_code_without_the_views():
    from optimus_ir.testing.wrapper_memory import peak_bytes

    g = torch.Generator().manual_seed(0)
    params = [torch.randn(w, generator=g, dtype=torch.bfloat16, requires_grad=True)
              for _ in range(2) for w in WIDTHS for _ in range(2)]
    x = torch.randn(256, sum(WIDTHS), generator=g, dtype=torch.bfloat16, requires_grad=True)
    inputs = (x, torch.randn(sum(WIDTHS), generator=g, dtype=torch.bfloat16), *params)
    stock = compile_report(_split_norm_tanh_cat, inputs, passes=None).graphs[-1]
    with mock.patch.object(stock_guard, "GUARD_MAX_NODES", 0):  # the rise itself, unguarded
        unguarded = compile_report(_split_norm_tanh_cat, inputs).graphs[-1]
    assert peak_bytes(unguarded.wrapper) > 1.2 * peak_bytes(stock.wrapper)
    report = compile_report(_split_norm_tanh_cat, inputs)
    (decision,) = [r for r in report.rewrites if r.rule == stock_guard.PEAK_RULE]
    assert decision.fired and "the code lowered without the splitcat pass kept" in decision.detail
    backward = report.graphs[-1]
    assert peak_bytes(backward.wrapper) <= 1.01 * peak_bytes(stock.wrapper)
    assert len(backward.launches) < len(stock.launches)  # the horizontal merges stay


def test_a_graph_whose_repeated_values_raise_the_peak_gets_the_code_lowered_without_that_rule():
    """The hetero GNN of ``tests/test_matmul_sum.py`` with more edges: its second layer reads the first layer's
    edge counts (``RepeatedComputationToFirstValue``), and the schedule then peaks 6% above stock's. Lowered again
    without that rule alone, the graph keeps its sums as reductions and its merges, below stock's peak."""
    from optimus_ir.testing.wrapper_memory import peak_bytes
    from tests.test_matmul_sum import REDUCTION, MeanConvsPerNodeType, _graph

    with torch.no_grad():
        stock = compile_report(MeanConvsPerNodeType(), _graph(edges=8000), passes=None)
        report = compile_report(MeanConvsPerNodeType(), _graph(edges=8000))
    (decision,) = [r for r in report.rewrites if r.rule == stock_guard.PEAK_RULE]
    assert decision.fired and "lowered without RepeatedComputationToFirstValue kept" in decision.detail
    assert len(report.launches) * 4 <= len(stock.launches)
    assert len([r for r in report.rewrites if r.rule == REDUCTION and r.fired]) >= 8
    assert peak_bytes(report.wrapper) <= peak_bytes(stock.wrapper)
