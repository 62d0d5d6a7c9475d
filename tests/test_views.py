"""The view rules (lowering/views.py) beyond the golden cases: where they fire, where they must not (overlapping,
interleaved, several buffers, out of order, straddling, graph outputs, mutation, unprovable dynamic shapes), a batch
that changes, their fallback on internal errors, and numerics against eager through Triton's interpreter."""

import re

import pytest
import torch

import optimus_ir
from optimus_ir import index_math, registry
from optimus_ir.inspect import compile_report
from optimus_ir.interpret import cpu_triton_interpreter
from optimus_ir.records import recording
from optimus_ir.rule import Stage

VIEW = "CatOfTilingSlicesToView"
SLICE = "SliceOfCatToInput"
SPLIT = "SplitOfCatToInputs"
SPLIT_SIZES = "SplitWithSizesOfCatToInputs"
UNREAD = "UnreadConcatElimination"


def _decisions(records, rule):
    return [r for r in records if r.rule == rule]


def _one(records, rule):
    (decision,) = _decisions(records, rule)
    return decision


def _run(fn, *inputs, dynamic=False, atol=1e-5, rtol=1e-5):
    """Compile and run ``fn`` with optimus_ir through Triton's interpreter on CPU; check outputs and mutated inputs
    against eager; return the rule decisions."""
    eager_inputs = [x.clone() for x in inputs]
    expected = fn(*eager_inputs)
    with optimus_ir.enabled(), cpu_triton_interpreter(), recording() as records:
        actual = torch.compile(fn, dynamic=dynamic, fullgraph=True)(*inputs)
    torch.testing.assert_close(actual, expected, atol=atol, rtol=rtol)
    for x, x_eager in zip(inputs, eager_inputs):
        torch.testing.assert_close(x, x_eager)
    return records, actual


def _reports(fn, *inputs):
    return compile_report(fn, inputs, passes=None), compile_report(fn, inputs)


# ----------------------------------------------------------------------------------------------- registry


def test_view_rule_is_tried_before_split_cat_to_pointwise():
    cat_rules = [r.name for r in registry.rules_of(Stage.LOWERING) if r.op is torch.ops.aten.cat.default]
    assert cat_rules.index(VIEW) < cat_rules.index("SplitCatToPointwise")


def test_rules_stay_off_without_their_pass():
    def fn(x, w):
        return torch.cat(x.split(16, dim=1)[2:6], dim=1) @ w

    report = compile_report(fn, (torch.randn(8, 128), torch.randn(64, 8)), passes=["horizontal"])
    assert not [r for r in report.rewrites if r.rule in (VIEW, SLICE, SPLIT, SPLIT_SIZES, UNREAD)]
    assert len(report.launches) == 2


# ------------------------------------------------------------------------------------------ CatOfTilingSlicesToView


def test_full_tiling_is_the_buffer_itself():
    def fn(x, w):
        return torch.cat(x.split(16, dim=1), dim=1) @ w

    stock, report = _reports(fn, torch.randn(8, 128), torch.randn(128, 8))
    decision = _one(report.rewrites, VIEW)
    assert decision.fired and "the buffer itself" in decision.detail
    assert len(stock.launches) == 2 and report.launches == ["extern_kernels.mm"]
    assert "extern_kernels.mm(arg0_1, arg1_1" in report.wrapper  # no reinterpret_tensor: x as it is
    _run(fn, torch.randn(8, 128), torch.randn(128, 8), atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize(
    "pieces, view",
    [
        (lambda x: [x.narrow(1, 2, 3), x[:, 5:9]], "size [8, 7], stride [16, 1], offset 2"),  # narrow + slice
        (lambda x: [x[2:4], x[4:7]], "size [5, 16], stride [16, 1], offset 32"),  # along dim 0
        (lambda x: [x[:, 0:8:2], x[:, 8:16:2]], "size [8, 8], stride [16, 2], offset 0"),  # strided, continuing
        (lambda x: [x[:, 3:4], x[:, 4].unsqueeze(1), x[:, 5:7]], "size [8, 4], stride [16, 1], offset 3"),
        (lambda x: [x[:, 8:8], x[:, 2:5], x[:, 5:9]], "size [8, 7], stride [16, 1], offset 2"),  # an empty piece
    ],
)
def test_views_that_tile_become_one_view(pieces, view):
    def fn(x):
        return torch.cat(pieces(x), dim=-1 if pieces(x)[0].shape[0] == 8 else 0).sum(1)

    x = torch.randn(8, 16)
    report = compile_report(fn, (x,))
    decision = _one(report.rewrites, VIEW)
    assert decision.fired and view in decision.detail, decision
    records, _ = _run(fn, x)
    assert _one(records, VIEW).fired


def test_through_reshape_stack_of_unbind_is_the_reshaped_buffer():
    def fn(x):
        return torch.stack(x.view(8, 4, 16).unbind(1), dim=1) * 2

    report = compile_report(fn, (torch.randn(8, 64),))
    decision = _one(report.rewrites, VIEW)
    # stack lowers as a cat of the [8, 16] rows along dim 1, then a view: they tile all of x
    assert decision.fired and "tile all of arg0_1" in decision.detail
    (kernel,) = report.kernels
    assert "tl.where" not in kernel.source and kernel.source.count("tl.load") == 1
    _run(fn, torch.randn(8, 64))


def test_piece_with_another_consumer_still_becomes_a_view():
    # a view materializes nothing, so the piece's other consumer costs nothing extra
    def fn(x, w):
        pieces = x.split(16, dim=1)
        return torch.cat(pieces[2:6], dim=1) @ w + pieces[2].sum(1, keepdim=True)

    stock, report = _reports(fn, torch.randn(8, 128), torch.randn(64, 8))
    assert _one(report.rewrites, VIEW).fired
    assert len(report.launches) == len(stock.launches) - 1
    _run(fn, torch.randn(8, 128), torch.randn(64, 8), atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize(
    "pieces, reason",
    [
        (lambda x, y: [x[:, 0:4], x[:, 2:6]], "do not provably lie side by side"),  # overlapping
        (lambda x, y: [x[:, 0::2], x[:, 1::2]], "do not provably lie side by side"),  # interleaved (step 2)
        (lambda x, y: [x[:, 4:8], x[:, 0:4]], "do not provably lie side by side"),  # out of order
        # not of the rule's kind at all (registry.NotApplicable): no decision in the dump
        (lambda x, y: [x[:, 0:4], y[:, 4:8]], None),  # two buffers
        (lambda x, y: [x[:, 0:4], torch.relu(x[:, 4:8])], None),  # computed piece
        (lambda x, y: [x[:, 0:4], x[:, 4:8].to(torch.float64)], None),  # other dtype
    ],
)
def test_does_not_fire(pieces, reason):
    def fn(x, y):
        return torch.cat(pieces(x, y), dim=1) * 2

    x, y = torch.randn(8, 16), torch.randn(8, 16)
    report = compile_report(fn, (x, y))
    if reason is None:
        assert _decisions(report.rewrites, VIEW) == []
    else:
        decision = _one(report.rewrites, VIEW)
        assert not decision.fired and reason in decision.detail, decision
    records, _ = _run(fn, x, y)
    assert not any(d.fired for d in _decisions(records, VIEW))


@pytest.mark.parametrize("through_view", [False, True])
def test_graph_output_would_alias_the_input(through_view):
    def fn(x):
        out = torch.cat(x.split(16, dim=1)[2:6], dim=1)
        return out.view(-1) if through_view else out

    x = torch.randn(8, 128)
    decision = _one(compile_report(fn, (x,)).rewrites, VIEW)
    assert not decision.fired and "would alias arg0_1" in decision.detail
    records, out = _run(fn, x)
    assert out.untyped_storage().data_ptr() != x.untyped_storage().data_ptr()  # a new tensor, as cat promises
    out.add_(1)
    torch.testing.assert_close(x[:, 32:96].reshape(out.shape), out - 1)


def test_buffer_mutated_in_the_graph_is_not_viewed():
    # torch.compile keeps the input mutation in the graph (a copy_ into x at its end): a view of x is refused.
    # (compile_report's AOTAutograd applies it after the graph instead, where a view read inside is harmless.)
    def fn(x, w):
        out = torch.cat(x.split(16, dim=1)[2:6], dim=1) @ w
        x.add_(1)
        return out

    x = torch.randn(8, 128)
    expected_x = x + 1
    records, _ = _run(fn, x, torch.randn(64, 8), atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(x, expected_x)
    decision = _one(records, VIEW)
    assert not decision.fired and "arg0_1 is written in the graph by copy_" in decision.detail


def test_dynamic_shapes_proven_fire():
    def fn(x, w):
        return torch.cat(x.split(16, dim=1)[2:6], dim=1) @ w

    records, _ = _run(fn, torch.randn(8, 128), torch.randn(64, 8), dynamic=True, atol=1e-4, rtol=1e-4)
    decision = _one(records, VIEW)
    assert decision.fired and "offset 32" in decision.detail


def test_dynamic_shapes_not_proven_fall_back_with_the_reason():
    import torch.fx.experimental._config as fx_config

    # x[:, :y.size(1)] then x[:, z.size(1):]: a tiling only when the two sizes are equal, which the
    # symbols (no duck shaping: one symbol per size) do not say
    def fn(x, y, z):
        return torch.cat([x[:, : y.shape[1]], x[:, z.shape[1] :]], dim=1) * 2

    with fx_config.patch(use_duck_shape=False):
        records, _ = _run(fn, torch.randn(8, 16), torch.randn(8, 5), torch.randn(8, 5), dynamic=True)
    decision = _one(records, VIEW)
    assert not decision.fired and "do not provably lie side by side" in decision.detail


def _views_of_a_batch(x, w, a, b):
    """Each view rule once: slices that tile a range, a slice, a split and a split by sizes of a cat."""
    t = torch.cat([a, b], dim=1)
    tiled = torch.cat(x.split(16, dim=1)[2:6], dim=1) @ w
    return tiled, t[:, 20:28] * 2, [p.relu() for p in t.split(8, dim=1)], [p * 3 for p in t.split([4, 4, 8, 16], dim=1)]


def _batch_of(rows):
    return torch.randn(rows, 128), torch.randn(64, 8), torch.randn(rows, 16), torch.randn(rows, 16)


_VIEW_RULES = {VIEW, SLICE, SPLIT, SPLIT_SIZES}


def test_a_symbolic_batch_views_as_static():
    """The rows a symbol (Dynamo's automatic dynamic shapes, after a loop's batch changed): the offsets and widths
    along the cat are numbers, the rows stay a symbol in the views' sizes; the same views, the same kernels."""
    static = compile_report(_views_of_a_batch, _batch_of(8))
    inputs = _batch_of(8)
    for i in (0, 2, 3):
        torch._dynamo.mark_dynamic(inputs[i], 0)
    report = compile_report(_views_of_a_batch, inputs)
    fired = [r for r in report.rewrites if r.rule in _VIEW_RULES and r.fired]
    assert {r.rule for r in fired} == _VIEW_RULES, report.rewrites
    assert re.search(r"size \[s\d+, 64\], stride \[128, 1\], offset 32", _one(fired, VIEW).detail)
    assert report.launches == static.launches


def test_batches_of_three_sizes_are_eagers_in_the_interpreter():
    """As a loop compiles it: static for the first batch, the rows a symbol for the second, that code for the third;
    every view rule fires in the symbolic compile and every result is eager's."""
    compiled = torch.compile(_views_of_a_batch)
    torch._dynamo.utils.counters.clear()
    with optimus_ir.enabled(), cpu_triton_interpreter():
        for i, rows in enumerate((8, 13, 5)):
            inputs = _batch_of(rows)
            with recording() as records:
                actual = compiled(*inputs)
            if i == 1:
                assert {r.rule for r in records if r.fired} >= _VIEW_RULES, records
            torch.testing.assert_close(actual, _views_of_a_batch(*inputs), atol=1e-4, rtol=1e-4)
    assert torch._dynamo.utils.counters["stats"]["unique_graphs"] == 2  # none for the third batch


def test_internal_error_falls_back_and_is_reported(monkeypatch, rule_errors_fall_back):
    def broken(*args):
        raise RuntimeError("boom")

    monkeypatch.setattr(index_math, "tile_strided", broken)

    def fn(x, w):
        return torch.cat(x.split(16, dim=1)[2:6], dim=1) @ w

    stock, report = _reports(fn, torch.randn(8, 128), torch.randn(64, 8))
    decision = _one(report.rewrites, VIEW)
    assert not decision.fired and "internal error RuntimeError('boom')" in decision.detail
    assert len(report.launches) == len(stock.launches) == 2  # SplitCatToPointwise's copy, then the mm
    _run(fn, torch.randn(8, 128), torch.randn(64, 8), atol=1e-4, rtol=1e-4)


# ----------------------------------------------------------------------------------------------- slices of a cat


def _cat5(*xs):
    return torch.cat(xs, dim=1)


def _five():
    return tuple(torch.randn(8, 16) for _ in range(5))


def test_slice_inside_one_input_reads_it():
    def fn(*xs):
        return _cat5(*xs)[:, 36:44] * 2

    stock, report = _reports(fn, *_five())
    decision = _one(report.rewrites, SLICE)
    assert decision.fired and "→ arg2_1[4:12]" in decision.detail
    assert len(stock.launches) == 2 and len(report.launches) == 1  # stock writes the cat first
    (kernel,) = report.kernels
    assert "tl.where" not in kernel.source and kernel.source.count("tl.load") == 1
    _run(fn, *_five())


@pytest.mark.parametrize(
    "take, reason",
    [
        (lambda t: t[:, 12:20], "not proven inside one input"),  # straddles inputs 0 and 1
        (lambda t: t[2:5], "slices dim 0, the cat is along dim 1"),
    ],
)
def test_slice_does_not_fire(take, reason):
    def fn(*xs):
        return take(_cat5(*xs)) * 2

    stock, report = _reports(fn, *_five())
    decision = _one(report.rewrites, SLICE)
    assert not decision.fired and reason in decision.detail, decision
    assert report.launches == stock.launches
    _run(fn, *_five())


def test_slice_with_negative_and_open_bounds():
    def fn(*xs):
        t = _cat5(*xs)
        return t[:, -16:] * 2 + t[:, :16]

    records, _ = _run(fn, *_five())
    details = [r.detail for r in _decisions(records, SLICE) if r.fired]
    assert any("→ arg4_1[0:16]" in d for d in details) and any("→ arg0_1[0:16]" in d for d in details)


def test_slice_with_step_inside_one_input():
    def fn(*xs):
        return _cat5(*xs)[:, 16:32:3] * 2

    records, _ = _run(fn, *_five())
    assert _one(records, SLICE).fired


def test_slice_returned_from_the_graph_keeps_reading_the_cat():
    def fn(*xs):
        return _cat5(*xs)[:, 16:32]

    xs = _five()
    decision = _one(compile_report(fn, xs).rewrites, SLICE)
    assert not decision.fired and "would alias arg1_1" in decision.detail
    records, out = _run(fn, *xs)
    assert out.untyped_storage().data_ptr() != xs[1].untyped_storage().data_ptr()


def test_slice_of_an_input_mutated_in_the_graph_keeps_reading_the_cat():
    def fn(*xs):
        out = _cat5(*xs)[:, 20:28] * 2
        xs[1].add_(1)
        return out

    xs = _five()
    expected_b = xs[1] + 1
    records, _ = _run(fn, *xs)
    torch.testing.assert_close(xs[1], expected_b)
    decision = _one(records, SLICE)
    assert not decision.fired and "written in the graph by copy_" in decision.detail


def test_slice_promotes_like_the_cat():
    def fn(a, b):
        return torch.cat([a, b], dim=1)[:, 20:28] * 2  # a float32 slice of the bfloat16 b

    records, actual = _run(fn, torch.randn(8, 16), torch.randn(8, 16).to(torch.bfloat16))
    assert _one(records, SLICE).fired and actual.dtype == torch.float32


def test_slice_of_a_cat_of_kernel_outputs_reads_the_output_in_place(matmuls_stay_cublas):
    # the mm outputs are written straight into the cat (a ConcatKernel); the slice reads the first one, which
    # still lives in the cat's buffer: the cat is kept, nothing is copied
    def fn(a, b, w):
        return torch.cat([a @ w, b @ w], dim=1)[:, 4:12].relu()

    inputs = (torch.randn(8, 16), torch.randn(8, 16), torch.randn(16, 16))
    stock, report = _reports(fn, *inputs)
    assert _one(report.rewrites, SLICE).fired
    unread = _one(report.rewrites, UNREAD)
    assert not unread.fired and "still read" in unread.detail
    assert report.launches == stock.launches
    _run(fn, *inputs, atol=1e-4, rtol=1e-4)


def test_slice_dynamic_shapes_not_proven_fall_back_with_the_reason():
    def fn(*xs):
        return torch.cat(xs[:3], dim=1)[:, 2:5] * 2  # inside input 0 only if its width is at least 5

    records, _ = _run(fn, *_five(), dynamic=True)
    decision = _one(records, SLICE)
    assert not decision.fired and "not proven inside one input" in decision.detail


def test_slice_internal_error_falls_back_and_is_reported(monkeypatch, rule_errors_fall_back):
    def broken(*args):
        raise RuntimeError("boom")

    monkeypatch.setattr(index_math, "piece_containing", broken)

    def fn(*xs):
        t = _cat5(*xs)
        return torch.relu(t[:, 20:28]) * torch.sin(t[:, 40:48])

    stock, report = _reports(fn, *_five())
    decisions = _decisions(report.rewrites, SLICE)
    assert decisions and all(not d.fired and "internal error RuntimeError('boom')" in d.detail for d in decisions)
    assert report.launches == stock.launches
    _run(fn, *_five())


# ----------------------------------------------------------------------------------------------- splits of a cat


def test_split_with_a_straddling_piece_redirects_the_others():
    def fn(a, b, c):
        p, q, r = torch.cat([a, b, c], dim=1).split([8, 24, 16], dim=1)
        return p.sum(1) + q.amax(1) + r.mean(1)

    inputs = (torch.randn(8, 16), torch.randn(8, 16), torch.randn(8, 16))
    decision = _one(compile_report(fn, inputs).rewrites, SPLIT_SIZES)
    assert decision.fired and decision.detail.startswith("2 of 3 pieces")
    assert "piece 1: [8, 32) is not proven inside one input" in decision.detail
    records, _ = _run(fn, *inputs)
    assert _one(records, SPLIT_SIZES).fired
    assert not _decisions(records, UNREAD) or not _one(records, UNREAD).fired  # piece 1 still reads the cat


def test_split_with_uneven_last_piece():
    def fn(a, b):
        pieces = torch.cat([a, b], dim=1).split(6, dim=1)  # 6, 6, 6, 6, 6, 2 of widths 10 + 22
        return pieces[1].sum(1) + pieces[2].sum(1) + pieces[5].sum(1)

    inputs = (torch.randn(4, 10), torch.randn(4, 22))
    records, _ = _run(fn, *inputs)
    decision = _one(records, SPLIT)
    assert decision.fired and decision.detail.startswith("5 of 6 pieces")
    assert "5 → arg1_1[20:22]" in decision.detail
    assert "still read the cat: piece 1: [6, 12) is not proven inside one input" in decision.detail


def test_split_piece_returned_from_the_graph_keeps_reading_the_cat():
    def fn(a, b):
        p, q, r = torch.cat([a, b], dim=1).split([8, 8, 24], dim=1)  # r is b
        return p * 2, q * 3, r

    inputs = (torch.randn(4, 16), torch.randn(4, 24))
    records, (_, _, r) = _run(fn, *inputs)
    decision = _one(records, SPLIT_SIZES)
    assert decision.fired and decision.detail.startswith("2 of 3 pieces")
    assert "piece 2: graph output" in decision.detail and "would alias arg1_1" in decision.detail
    assert r.untyped_storage().data_ptr() != inputs[1].untyped_storage().data_ptr()


def test_cat_nobody_reads_is_removed_with_its_writers():
    # a ConcatKernel (a reduction among the inputs; more than 8 inputs): stock copies the inputs into it
    def fn(*xs):
        t = torch.cat([*xs[:-1], xs[-1].sum(1, keepdim=True)], dim=1)
        return torch.relu(t[:, 4:12]) + t[:, 20:28]

    inputs = tuple(torch.randn(8, 16) for _ in range(9))
    stock, report = _reports(fn, *inputs)
    assert _one(report.rewrites, UNREAD).fired
    assert len(stock.launches) == 3 and len(report.launches) == 1
    records, _ = _run(fn, *inputs)
    assert _one(records, UNREAD).fired  # on CPU too (a ConcatKernel with a copy per input)


def test_cat_still_read_is_kept():
    def fn(*xs):
        t = torch.cat([*xs[:-1], xs[-1].sum(1, keepdim=True)], dim=1)
        return torch.relu(t[:, 4:12]).sum() + t[:, 10:20].sum()  # the second slice straddles: reads the cat

    inputs = tuple(torch.randn(8, 16) for _ in range(9))
    records, _ = _run(fn, *inputs, atol=1e-4, rtol=1e-4)
    assert [d.fired for d in _decisions(records, SLICE)] == [True, False]
    assert not _decisions(records, UNREAD) or not _one(records, UNREAD).fired
