"""RepeatedComputationToFirstValue: a scatter computed again from the same inputs (a GNN's edge counts, layer after
layer) takes the first one's buffer; scatters of other inputs stay; numerics against eager in Triton's interpreter."""

import torch

import optimus_ir
from optimus_ir.inspect import compile_report
from optimus_ir.interpret import cpu_triton_interpreter
from optimus_ir.lowering.repeated_values import computation
from optimus_ir.records import recording

RULE = "RepeatedComputationToFirstValue"


def _mean(x, index, nodes):
    """A mean aggregation as torch_geometric writes it: sums and counts of messages at their edges' targets, the
    targets' zeros made from the messages (``new_zeros``), so that two layers' counts are separate graph nodes."""
    summed = x.new_zeros(nodes, x.shape[1]).scatter_add(0, index[:, None].expand_as(x), x)
    count = x.new_zeros(nodes).scatter_add(0, index, x.new_ones(index.shape[0]))
    return summed / count.clamp(min=1)[:, None]


def two_layers(x, index):
    return _mean(torch.tanh(_mean(x, index, 100)[index]), index, 100)


def two_layers_two_edge_sets(x, index, other):
    return _mean(torch.tanh(_mean(x, index, 100)[index]), other, 100)


def _inputs():
    torch.manual_seed(0)
    return torch.randn(400, 16), torch.randint(0, 100, (400,)), torch.randint(0, 100, (400,))


def test_the_second_layer_reads_the_first_layers_counts():
    x, index, _ = _inputs()
    stock = compile_report(two_layers, (x, index), passes=None)
    report = compile_report(two_layers, (x, index), passes="horizontal")
    (fired,) = [r for r in report.rewrites if r.rule == RULE]
    assert fired.fired and fired.detail.startswith("computed as scatter_add")
    assert sum("new_ones" in name or "full" in name for name in report.launches) < sum(
        "new_ones" in name or "full" in name for name in stock.launches)
    assert len(report.launches) < len(stock.launches)


def test_counts_of_other_edges_stay_their_own():
    x, index, other = _inputs()
    report = compile_report(two_layers_two_edge_sets, (x, index, other), passes="horizontal")
    assert not [r for r in report.rewrites if r.rule == RULE and r.fired]


def test_a_computation_names_inputs_and_pure_ops_and_nothing_random():
    graph = torch.fx.Graph()
    a, b = graph.placeholder("a"), graph.placeholder("b")
    first, second = (graph.call_function(torch.ops.aten.select.int, (a, 0, 1)) for _ in range(2))
    other = graph.call_function(torch.ops.aten.select.int, (b, 0, 1))
    noise = graph.call_function(torch.ops.aten.rand_like.default, (a,))
    garbage = graph.call_function(torch.ops.aten.empty.memory_format, ([4],))
    assert computation(first) == computation(second) != computation(other)
    assert computation(noise) is None and computation(garbage) is None


def test_numerics_in_the_interpreter():
    x, index, _ = _inputs()
    with cpu_triton_interpreter(), optimus_ir.enabled("horizontal"), recording() as records:
        actual = torch.compile(two_layers)(x, index)
    assert [r for r in records if r.rule == RULE and r.fired]
    torch.testing.assert_close(actual, two_layers(x, index))


def test_a_backwards_weight_gradients_of_one_input_are_one_product():
    """Two Linears of one input summed: in the backward each weight's gradient is ``g.T @ x``, the same product."""
    torch.manual_seed(0)
    first, second = torch.nn.Linear(64, 32, bias=False), torch.nn.Linear(64, 32, bias=False)

    def summed(x):
        return torch.relu(first(x) + second(x))

    x = torch.randn(300, 64)
    stock = compile_report(summed, (x,), passes=None)
    report = compile_report(summed, (x,), passes="horizontal")
    backward = [g for g in report.graphs if g.name == "backward"][0]
    stock_backward = [g for g in stock.graphs if g.name == "backward"][0]
    assert [r for r in report.rewrites if r.rule == RULE and r.fired]
    assert backward.launches.count("extern_kernels.mm") < stock_backward.launches.count("extern_kernels.mm")

    summed(x).sum().backward()
    expected = [first.weight.grad.clone(), second.weight.grad.clone()]
    first.weight.grad = second.weight.grad = None
    with cpu_triton_interpreter(), optimus_ir.enabled("horizontal"), recording() as records:
        torch.compile(summed)(x).sum().backward()
    assert [r for r in records if r.rule == RULE and r.fired]
    torch.testing.assert_close([first.weight.grad, second.weight.grad], expected)


def two_layers_over_a_quarter(x, index):
    """Targets counted over a node count the graph computes: with symbolic sizes a size expression (``s0 // 4``) of
    the computation."""
    return _mean(torch.tanh(_mean(x, index, x.shape[0] // 4)[index]), index, x.shape[0] // 4)


def _batch(edges: int) -> tuple[torch.Tensor, torch.Tensor]:
    torch.manual_seed(0)
    return torch.randn(edges, 16), torch.randint(0, edges // 4, (edges,))


def test_with_symbolic_sizes_a_count_over_a_computed_size_is_read_again():
    def counts(report):  # the kernels that make a count: each fills and scatters new ones
        return sum("new_ones" in name for name in report.launches)

    stock = compile_report(two_layers_over_a_quarter, _batch(400), passes=None, dynamic=True)
    static = compile_report(two_layers_over_a_quarter, _batch(400), passes="horizontal")
    report = compile_report(two_layers_over_a_quarter, _batch(400), passes="horizontal", dynamic=True)
    (fired,) = [r for r in report.rewrites if r.rule == RULE]
    assert fired.fired and fired.detail.startswith("computed as scatter_add")
    # (counts, not all launches, against the static compile's: with symbolic sizes the horizontal scheduler merges
    # fewer of the other scatters)
    assert counts(report) == 1 < counts(stock) and counts(report) <= counts(static)
    assert len(report.launches) < len(stock.launches)


def test_numerics_with_symbolic_sizes_at_two_shapes_in_the_interpreter():
    compiled = torch.compile(two_layers_over_a_quarter, dynamic=True)
    torch._dynamo.utils.counters.clear()
    with cpu_triton_interpreter(), optimus_ir.enabled("horizontal"), recording() as records:
        for edges in (400, 252):
            x, index = _batch(edges)
            torch.testing.assert_close(compiled(x, index), two_layers_over_a_quarter(x, index))
    assert torch._dynamo.utils.counters["stats"]["unique_graphs"] == 1  # no recompile for the second shape
    (fired,) = [r for r in records if r.rule == RULE]
    assert fired.fired
