"""SplitCatToPointwise / PieceGroupToComboKernel beyond the golden cases: where they must not fire, how they fall
back, odd inputs (mixed dtypes, empty pieces, mutation, dynamic shapes) that must stay correct, and a batch that
changes (a symbol, as Dynamo compiles a loop's second shape): as few kernels as a static batch, eager's numbers."""

import re
from collections import Counter

import pytest
import torch

import optimus_ir
from optimus_ir import registry
from optimus_ir.inspect import compile_report
from optimus_ir.interpret import cpu_triton_interpreter
from optimus_ir.records import recording


def _decisions(report, rule="SplitCatToPointwise"):
    return [r for r in report.rewrites if r.rule == rule]


def _assert_stock(fn, *inputs, reason):
    """The rule considered the cat, did not fire, said ``reason``, and the kernels are stock Inductor's (the pass
    alone: the horizontal pass may still merge the pieces' kernels, see test_horizontal.py)."""
    stock = compile_report(fn, inputs, passes=None)
    report = compile_report(fn, inputs, passes="splitcat")
    (decision,) = _decisions(report)
    assert not decision.fired
    assert reason in decision.detail
    assert report.launches == stock.launches
    assert [k.source for k in report.kernels] == [k.source for k in stock.kernels]


def test_piece_returned_as_output_is_not_rewritten():
    def fn(x):
        pieces = [torch.relu(p) for p in x.split(16, dim=1)]
        return torch.cat(pieces[::-1], dim=1), pieces[3]

    _assert_stock(fn, torch.randn(8, 160), reason="graph output")


def test_piece_feeding_a_matmul_is_not_rewritten():
    def fn(x, w):
        pieces = [torch.tanh(p) for p in x.split(16, dim=1)]
        return torch.cat(pieces[::-1], dim=1), pieces[0] @ w

    _assert_stock(fn, torch.randn(8, 160), torch.randn(16, 4), reason="another consumer")


def test_cat_of_kernel_outputs_is_left_to_stock():
    # each mm writes straight into its slice of the cat output: nothing to gain by copying
    def fn(a, b, w):
        return torch.cat([a @ w, b @ w], dim=1)

    _assert_stock(fn, torch.randn(8, 16), torch.randn(8, 16), torch.randn(16, 16), reason="computed by their own kernels")


def test_rule_error_falls_back_to_stock_and_is_reported(monkeypatch, rule_errors_fall_back):
    from optimus_ir.lowering import split_cat

    def broken(*args):
        raise RuntimeError("boom")

    monkeypatch.setattr(split_cat, "trace", broken)

    def fn(x):
        return torch.cat([torch.relu(p) for p in x.split(8, dim=1)], dim=1)

    stock = compile_report(fn, (torch.randn(4, 80),), passes=None)
    report = compile_report(fn, (torch.randn(4, 80),), passes="splitcat")
    (decision,) = _decisions(report)
    assert not decision.fired and "internal error RuntimeError('boom')" in decision.detail
    assert report.launches == stock.launches


def test_in_the_tests_a_rule_error_fails_the_compile(monkeypatch):
    # (conftest: RAISE_RULE_ERRORS) a rule's defect is seen, not hidden behind the users' fallback
    from optimus_ir.lowering import split_cat

    def broken(*args):
        raise RuntimeError("boom")

    monkeypatch.setattr(split_cat, "trace", broken)
    with pytest.raises(Exception, match="boom"):
        compile_report(lambda x: torch.cat([torch.relu(p) for p in x.split(8, dim=1)], dim=1), (torch.randn(4, 80),),
                       passes="splitcat")


def test_subset_switch_keeps_rule_off():
    def fn(x):
        return torch.cat([torch.relu(p) for p in x.split(8, dim=1)], dim=1)

    report = compile_report(fn, (torch.randn(4, 80),), passes=["horizontal"])
    horizontal_rules = {"IdenticalKernelsToMemberTableKernel", "InputAlignmentCheckedByMemberTables"}
    assert {r.rule for r in report.rewrites} == horizontal_rules
    # stock writes each relu piece into the cat with its own kernel; the horizontal pass alone merges those
    assert len(compile_report(fn, (torch.randn(4, 80),), passes=None).launches) == 10
    assert len(report.launches) == 1


def _check_in_interpreter(fn, *inputs, fired: bool, dynamic: bool = False):
    expected = fn(*[x.clone() for x in inputs])
    with optimus_ir.enabled(), cpu_triton_interpreter(), recording() as records:
        actual = torch.compile(fn, dynamic=dynamic, fullgraph=True)(*inputs)
    torch.testing.assert_close(actual, expected)
    decisions = [r for r in records if r.rule == "SplitCatToPointwise"]
    assert decisions and any(r.fired for r in decisions) == fired, decisions
    return decisions


def test_mixed_dtypes_are_promoted_as_torch_does():
    def fn(x, y):
        # 10 pieces: 5 of float32 x, then 5 of bfloat16 y; the cat is float32
        return torch.cat([torch.relu(p) for p in x.split(8, dim=1) + y.split(8, dim=1)], dim=1)

    _check_in_interpreter(fn, torch.randn(4, 40), torch.randn(4, 40).to(torch.bfloat16), fired=True)


def test_empty_pieces_are_dropped():
    def fn(x):
        pieces = x.split([8, 0, 8, 8], dim=1)
        return torch.cat([torch.sigmoid(p) for p in pieces], dim=1)

    _check_in_interpreter(fn, torch.randn(4, 24), fired=True)


def test_negative_dim_and_dim0():
    def fn(x):
        return torch.cat([torch.exp(p) for p in reversed(x.chunk(5, dim=-1))], dim=-1) + torch.cat(
            [p * 2 for p in reversed(x.chunk(4, dim=0))], dim=0
        )

    _check_in_interpreter(fn, torch.randn(8, 20), fired=True)


def test_input_mutated_after_split():
    def fn(x):
        out = torch.cat([torch.relu(p) for p in reversed(x.split(4, dim=1))], dim=1)
        x.add_(1)
        return out

    x = torch.randn(4, 16)
    expected_x = x + 1
    _check_in_interpreter(fn, x, fired=True)
    torch.testing.assert_close(x, expected_x)


def test_symbolic_widths_along_the_cat_fall_back_naming_the_symbol():
    def fn(x):
        return torch.cat([torch.relu(p) for p in reversed(x.split(4, dim=1))], dim=1)

    # every size a symbol: the last piece is s1 - 12 wide (Dynamo specializes the count of pieces only)
    decisions = _check_in_interpreter(fn, torch.randn(6, 16), fired=False, dynamic=True)
    assert "a piece of symbolic size s" in decisions[0].detail and "along the cat (dim 1)" in decisions[0].detail


def test_records_name_rule_and_nodes():
    def fn(x):
        return torch.cat([torch.relu(p) for p in x.split(8, dim=1)], dim=1)

    report = compile_report(fn, (torch.randn(4, 80),))
    (decision,) = _decisions(report)
    assert decision.fired and decision.nodes == ("cat",)
    assert "10 pieces along dim 1 → 1 progression(s) of [10] → 1 Pointwise" in decision.detail
    assert str(decision).startswith("FIRED    SplitCatToPointwise on cat:")


def test_registry_lists_each_rule_once_with_a_docstring():
    rules = registry.RULES
    names = [rule.name for rule in rules]
    assert len(names) == len(set(names))
    for rule in rules:
        doc = type(rule).__doc__
        assert doc and "Before" in doc and "After" in doc, rule.name
        assert rule.pass_name in optimus_ir.PASSES


@pytest.mark.parametrize("pieces", [2, 9, 64, 200])
def test_any_number_of_pieces_is_one_kernel(pieces):
    def fn(x):
        return torch.cat([torch.relu(p) for p in reversed(x.chunk(pieces, dim=1))], dim=1)

    report = compile_report(fn, (torch.randn(4, 8 * pieces),))
    assert len(report.launches) == 1
    # per-element work does not grow with the number of pieces: one load, no where/masked chain
    (kernel,) = report.kernels
    assert kernel.source.count("tl.load") == 1
    assert "tl.where" not in kernel.source


def test_cat_of_reductions_is_left_to_stock():
    # reductions are realized before cat lowers; each writes its slice of the output directly
    def fn(x, y):
        return torch.cat([x.sum(1, keepdim=True), y.amax(1, keepdim=True)], dim=1)

    _assert_stock(fn, torch.randn(8, 16), torch.randn(8, 16), reason="computed by their own kernels")


def test_few_pieces_with_different_bodies_keep_stocks_fusable_pointwise_cat():
    # rotate_half in rotary embeddings: stock fuses cat(-x2, x1) into q*cos + rotate_half(q)*sin
    def fn(q, cos, sin):
        x1, x2 = q.chunk(2, dim=-1)
        return q * cos + torch.cat([-x2, x1], dim=-1) * sin

    _assert_stock(fn, torch.randn(2, 4, 16, 32), torch.randn(16, 32), torch.randn(16, 32), reason="fuses into its consumers")


@pytest.mark.parametrize("split", [False, True])
def test_runs_of_one_body_around_strided_members_of_another_stay_apart(split):
    # relu on rows 0-2, 4-6 and 8-11, neg on rows 3 and 7 (strided members): relu's runs 4-6 and 8-11 follow each
    # other in the list of folds but are not neighbours in the output. They were joined into one run of rows 4-10,
    # which overwrote row 7 and left row 11 unwritten (garbage, found by a random split/cat probe)
    def fn(x):
        pieces = x.split(1, dim=0) if split else x.unbind(0)
        outs = [-p if i in (3, 7) else torch.relu(p) for i, p in enumerate(pieces)]
        return torch.cat(outs, dim=0) if split else torch.stack(outs, dim=0)

    (decision,) = _check_in_interpreter(fn, torch.randn(12, 8), fired=True)
    assert "4 progression(s) of [3, 2, 3, 4] → 4 Pointwise" in decision.detail


@pytest.mark.parametrize("dtype", [torch.uint8, torch.int64, torch.bool, torch.float16])
def test_other_dtypes(dtype):
    def fn(x):
        op = torch.logical_not if dtype == torch.bool else (lambda p: p * 3)
        return torch.cat([op(p) for p in reversed(x.split(4, dim=1))], dim=1)

    x = torch.randn(8, 40) * 10
    _check_in_interpreter(fn, x > 0 if dtype == torch.bool else x.to(dtype), fired=True)


def _layers(x, layers, keep_first=False):
    ops = (torch.tanh, torch.sigmoid, torch.relu, torch.sin, torch.cos, torch.neg, torch.exp, torch.abs, torch.erf)
    outs = []
    for _ in range(layers):
        x = torch.cat([op(p) for op, p in zip(ops, x.chunk(9, dim=1))], dim=1) * 0.5
        outs.append(x)
    return (outs[0], x) if keep_first else x


def test_chain_of_layers_reads_through_and_drops_the_inner_cats():
    report = compile_report(lambda x: _layers(x, 4), (torch.randn(8, 72),))
    fired = [r for r in report.rewrites if r.fired]
    # the four cats (each scale is applied in the pieces: CatConsumerIntoPieces) and the first three scaled outputs
    # are never written: one kernel for the four layers and the last scale, a branch per piece
    assert sum(r.rule == "DeadFoldedCatElimination" for r in fired) == 7
    assert len(report.launches) == 1


def test_heavy_piece_group_gets_a_block_of_one_element_per_thread_and_right_results():
    """Triton unrolls each branch once per element a thread handles; twelve layers of nine ops (~200 ops over the
    branches) get a block of 256 (one element per each of the 8 warps' threads), a light group keeps 1024."""
    x = torch.randn(8, 72)
    report = compile_report(lambda x: _layers(x, 12), (x,))
    (group,) = [r for r in report.rewrites if r.rule == "PieceGroupToComboKernel" and r.fired]
    assert group.detail.endswith("block 256")
    (kernel,) = report.kernels
    assert "XBLOCK: tl.constexpr = 256" in kernel.source and "'XBLOCK': 256" in kernel.source
    light = compile_report(lambda x: _layers(x, 1), (x,))
    assert [r.detail.rsplit(" ", 1)[1] for r in light.rewrites if r.rule == "PieceGroupToComboKernel"] == ["1024"]
    with optimus_ir.enabled(), cpu_triton_interpreter():
        actual = torch.compile(lambda x: _layers(x, 12))(x)
    torch.testing.assert_close(actual, _layers(x, 12), rtol=1e-4, atol=1e-5)


def test_piece_groups_heavier_than_a_kernel_are_cut_in_order_into_parts_of_equal_weight():
    from types import SimpleNamespace

    from optimus_ir.scheduler_hooks import piece_groups

    def member(ops):  # a scheduler node whose body has `ops` tanh ops and a load, a constant and a store
        body = SimpleNamespace(op_counts=Counter(tanh=ops, load=1, constant=3, store=1))
        return SimpleNamespace(get_nodes=lambda: [SimpleNamespace(_body=body)], ops=ops)

    limit = piece_groups.MAX_KERNEL_OPS
    # 16 branches, 684 ops → two kernels of 342 ops (not 600 and 84)
    chain = [member(ops) for ops in (36, 36, 36, 72, 36, 36, 36, 84, 36, 36, 36, 72, 36, 36, 36, 36)]
    assert [len(part) for part in piece_groups.compile_sized_parts(chain)] == [8, 8]
    heavy = [member(ops) for ops in (limit // 2, limit // 2, 1, limit + 5, 3, 4)]
    parts = piece_groups.compile_sized_parts(heavy)
    assert [[m.ops for m in part] for part in parts] == [[limit // 2], [limit // 2, 1], [limit + 5, 3, 4]]
    light = [member(ops) for ops in (3, 4, 5)]
    assert piece_groups.compile_sized_parts(light) == [light]
    copies = [member(0) for _ in range(3)]  # pieces copied as they are (divided by a weight of 0 before)
    assert piece_groups.compile_sized_parts(copies) == [copies]


def test_chain_of_layers_in_a_bf16_training_step():
    """Forward and backward of four layers in bf16: the forward is a kernel per layer (the backward reads each
    layer's output, so each is written), the backward (the transposed pattern: gradients of the pieces, cat of the
    gradients) one kernel, and the input's gradient is eager's. Seeded: through four exps some gradients reach 1e4
    to 1e37, where kernels computing in fp32 and eager rounding each op to bf16 can differ by more than 2% (one
    element of 576 did, on inputs that the tests run before this one had drawn)."""
    torch.manual_seed(0)
    x = torch.randn(8, 72, dtype=torch.bfloat16, requires_grad=True)
    report = compile_report(lambda x: _layers(x, 4), (x,))
    stock = compile_report(lambda x: _layers(x, 4), (x,), passes=None)
    launches = {g.name: len(g.launches) for g in report.graphs}
    assert launches == {"forward": 4, "backward": 1}, launches
    assert len(report.launches) * 10 < len(stock.launches)
    grad = torch.randn(8, 72, dtype=torch.bfloat16)
    expected = torch.autograd.grad(_layers(x, 4), x, grad)[0]
    with optimus_ir.enabled(), cpu_triton_interpreter():
        actual = torch.autograd.grad(torch.compile(lambda x: _layers(x, 4))(x), x, grad)[0]
    torch.testing.assert_close(actual, expected, rtol=2e-2, atol=2e-2)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_folded_low_precision_layers_round_where_stock_stores_each_cat(dtype):
    """Four bf16 (fp16) layers and their scales folded into one kernel, which computes in fp32: each piece that
    reads the layer before rounds its value to the dtype, as stock's kernels round each cat they store, so the
    result is stock's to the bit (without the rounding it differed from stock's)."""
    x = torch.randn(8, 72, dtype=dtype)
    report = compile_report(lambda x: _layers(x, 4), (x,))
    (kernel,) = report.kernels
    # nine pieces read each of layers 1-3, and each layer's scale reads its cat: 9 * (3 + 4) roundings
    cast = ".to(tl.bfloat16)" if dtype == torch.bfloat16 else ".to(tl.float16)"
    assert kernel.source.count(cast) == 9 * (3 + 4), kernel.source
    results = {}
    for passes in (None, "all"):
        torch._dynamo.reset()
        with optimus_ir.enabled(passes), cpu_triton_interpreter():
            results[passes] = torch.compile(lambda x: _layers(x, 4))(x)
    torch.testing.assert_close(results["all"], results[None], rtol=0, atol=0)


def test_cat_with_an_input_computed_by_its_own_kernel_folds_the_others():
    """The mm writes straight into its slice of the cat (as stock makes it); the 16 pieces are folded around it."""

    def fn(x, w):
        pieces = [torch.relu(p) if i % 2 else torch.tanh(p) for i, p in enumerate(x.split(4, dim=1))]
        return torch.cat([*pieces, x @ w], dim=1)

    x, w = torch.randn(8, 64), torch.randn(64, 8)
    report = compile_report(fn, (x, w))
    (decision,) = _decisions(report)
    assert decision.fired and "+ 1 input(s) computed by their own kernels (no copy)" in decision.detail
    assert report.launches[0] == "extern_kernels.mm" and len(report.launches) == 2  # the mm, one kernel of both
    assert len(compile_report(fn, (x, w), passes=None).launches) == 17
    _check_in_interpreter(fn, x, w, fired=True)


def _scaled_layers(x, scales):
    ops = (torch.tanh, torch.sigmoid, torch.relu, torch.sin, torch.cos, torch.neg, torch.atan, torch.abs, torch.erf)
    for scale in scales.unbind(0):
        x = torch.cat([op(p) for op, p in zip(ops, x.chunk(9, dim=1))], dim=1) * scale
    return x


def test_gradient_cats_that_are_also_reduced_are_loaded_not_recomputed():
    """With a learned scale per layer, each gradient cat of the backward is also reduced into the scale's gradient,
    so it is written anyway: the next layer loads it instead of reading through its folds (which would recompute
    every later layer's gradient in each earlier one). A kernel per layer in the backward; gradients are eager's."""
    x = torch.randn(8, 72, requires_grad=True)
    scales = (0.5 + 0.1 * torch.randn(4, 72)).requires_grad_()
    report = compile_report(_scaled_layers, (x, scales))
    launches = {g.name: len(g.launches) for g in report.graphs}
    assert launches == {"forward": 5, "backward": 7}, launches
    reduced = [r for r in _decisions(report) if "also read by sum" in r.detail]
    assert len(reduced) == 3 and all(r.detail.endswith("so written and loaded by later cats") for r in reduced)
    grad = torch.randn(8, 72)
    expected = torch.autograd.grad(_scaled_layers(x, scales), (x, scales), grad)
    with optimus_ir.enabled(), cpu_triton_interpreter():
        actual = torch.autograd.grad(torch.compile(_scaled_layers)(x, scales), (x, scales), grad)
    torch.testing.assert_close(actual, expected, rtol=1e-4, atol=1e-5)


def test_returned_inner_cat_is_written_and_results_are_right():
    def fn(x):
        return _layers(x, 3, keep_first=True)

    report = compile_report(fn, (torch.randn(8, 72),))
    removed = [r for r in report.rewrites if r.rule == "DeadFoldedCatElimination" and r.fired]
    # the three cats and the second scaled output; the first scaled output is returned (written, read by layer 2)
    assert len(removed) == 4
    x = torch.randn(8, 72)
    expected = fn(x)
    with optimus_ir.enabled(), cpu_triton_interpreter():
        actual = torch.compile(fn)(x)
    torch.testing.assert_close(actual, expected, rtol=1e-4, atol=1e-5)  # exp of exp: rounding grows


# ----------------------------------------------------------------------------------------- CatConsumerIntoPieces

_OPS16 = (torch.relu, torch.tanh, torch.sigmoid, torch.abs) * 4


def _split_ops_cat(x):
    return torch.cat([op(p) for op, p in zip(_OPS16, x.chunk(16, dim=1))], dim=1)


@pytest.mark.parametrize(
    "consumer, reason",
    [
        (lambda cat, s: (cat * s, cat), None),  # the cat is returned as well: written anyway, no decision
        (lambda cat, s: (cat * s, cat + 1), "has other readers"),
        (lambda cat, s: cat * s.double(), "a conversion"),  # fp32 cat, fp64 result
        (lambda cat, s: cat * s[:, None, None], "does not have the cat's shape"),  # [128, 64, 128]
    ],
    ids=["cat also returned", "cat read twice", "dtype promotion", "result larger than the cat"],
)
def test_cat_consumer_must_not_fire(consumer, reason):
    def fn(x, s):
        return consumer(_split_ops_cat(x), s)

    inputs = (torch.randn(64, 128), torch.rand(128) + 0.5)
    report = compile_report(fn, inputs)
    decisions = _decisions(report, "CatConsumerIntoPieces")
    assert not any(r.fired for r in decisions), decisions
    assert reason is None or (decisions and reason in decisions[0].detail), decisions
    with optimus_ir.enabled(), cpu_triton_interpreter():
        actual = torch.compile(fn)(*inputs)
    torch.testing.assert_close(actual, fn(*inputs), atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize(
    "consumer",
    [
        lambda cat, s: torch.relu(cat),
        lambda cat, s: torch.exp(torch.neg(cat)),  # a consumer of a consumer: pushed in again
        lambda cat, s: torch.add(cat, s, alpha=2),
        lambda cat, s: torch.clamp_min(cat, 0.25) ** 2,
        lambda cat, s: torch.rsqrt(cat.abs() + s),
    ],
    ids=["relu", "exp of neg", "add alpha 2", "clamp_min then pow", "rsqrt of abs plus"],
)
def test_cat_consumer_is_any_elementwise_op_in_one_kernel(consumer):
    """Unary ops, ops with extra arguments and chains of them run inside the pieces, through Inductor's own
    lowering of the op: one kernel, eager's numbers."""

    def fn(x, s):
        return consumer(_split_ops_cat(x), s)

    inputs = (torch.randn(64, 128), torch.rand(128) + 0.5)
    report = compile_report(fn, inputs)
    assert any(r.fired for r in _decisions(report, "CatConsumerIntoPieces"))
    assert len(report.launches) == 1
    with optimus_ir.enabled(), cpu_triton_interpreter():
        actual = torch.compile(fn)(*inputs)
    torch.testing.assert_close(actual, fn(*inputs), atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("cat_first", [True, False])
def test_cat_consumer_keeps_the_operand_order(cat_first):
    def fn(x, s):
        cat = _split_ops_cat(x)
        return (cat - s) / (s + 1.0) if cat_first else s / (cat + 2.0)

    inputs = (torch.randn(64, 128), torch.rand(128) + 0.5)
    report = compile_report(fn, inputs)
    assert len(report.launches) == 1
    with optimus_ir.enabled(), cpu_triton_interpreter():
        actual = torch.compile(fn)(*inputs)
    torch.testing.assert_close(actual, fn(*inputs), atol=1e-5, rtol=1e-5)


# ------------------------------------------------------------------------------------ a batch that changes


_CHAIN_RULES = {"SplitCatToPointwise", "CatConsumerIntoPieces", "DeadFoldedCatElimination", "PieceGroupToComboKernel"}


def _internal_errors(records):
    return [r for r in records if "internal error" in r.detail]


@pytest.mark.parametrize("grad", [False, True], ids=["inference", "training"])
def test_chain_with_a_symbolic_batch_is_as_few_kernels_as_static(grad):
    """The batch a symbol (Dynamo's automatic dynamic shapes, after a loop's batch changed), the widths numbers: the
    pieces' offsets along the cat are the static compile's, and reading a layer through the one before proves its
    columns from the symbol's range. The same rules fire and the same kernels launch as for a static batch."""
    fn = lambda x: _layers(x, 4)  # noqa: E731
    static = compile_report(fn, (torch.randn(64, 72, requires_grad=grad),))
    x = torch.randn(64, 72, requires_grad=grad)
    torch._dynamo.mark_dynamic(x, 0)
    report = compile_report(fn, (x,))
    assert not _internal_errors(report.rewrites), _internal_errors(report.rewrites)
    fired = Counter(r.rule for r in report.rewrites if r.fired and r.rule in _CHAIN_RULES)
    assert fired == Counter(r.rule for r in static.rewrites if r.fired and r.rule in _CHAIN_RULES), fired
    assert set(fired) >= (_CHAIN_RULES if not grad else {"SplitCatToPointwise", "PieceGroupToComboKernel"}), fired
    assert {g.name: len(g.launches) for g in report.graphs} == {g.name: len(g.launches) for g in static.graphs}
    assert len(report.launches) == (5 if grad else 1)
    assert all(re.search(r"\(s\d+, 72\)", g.wrapper) for g in report.graphs)  # buffers of a symbolic batch


def _loop(fn, batches, grad=False, rtol=1.3e-6, atol=1e-5):
    """``fn`` compiled as a training loop compiles it: static for the first batch, with the batch a symbol for the
    second (automatic dynamic shapes), and that code for the third; each result (and with ``grad`` each input's
    gradient) eager's. Returns the decisions of the symbolic compile."""
    compiled = torch.compile(fn)
    torch._dynamo.utils.counters.clear()
    symbolic = []
    with optimus_ir.enabled(), cpu_triton_interpreter():
        for i, inputs in enumerate(batches):
            leaves = [x.detach().requires_grad_(grad) for x in inputs]
            with recording() as records:
                actual = compiled(*leaves)
                if grad:
                    upstream = torch.randn_like(actual)
                    actual_grads = torch.autograd.grad(actual, leaves, upstream)
            if i == 1:
                symbolic = records
            eager = [x.detach().requires_grad_(grad) for x in inputs]
            expected = fn(*eager)
            torch.testing.assert_close(actual, expected, rtol=rtol, atol=atol)
            if grad:
                torch.testing.assert_close(actual_grads, torch.autograd.grad(expected, eager, upstream),
                                           rtol=rtol, atol=atol)
    assert torch._dynamo.utils.counters["stats"]["unique_graphs"] == 2  # none for the third batch
    assert not _internal_errors(symbolic), _internal_errors(symbolic)
    return symbolic


@pytest.mark.parametrize("grad", [False, True], ids=["inference", "training"])
def test_chain_over_batches_of_three_sizes_is_eagers(grad):
    symbolic = _loop(lambda x: _layers(x, 3), [(torch.randn(rows, 72),) for rows in (16, 11, 6)], grad=grad,
                     rtol=1e-4, atol=1e-5)
    fired = {r.rule for r in symbolic if r.fired}
    assert fired >= (_CHAIN_RULES if not grad else {"SplitCatToPointwise", "PieceGroupToComboKernel"}), fired


def test_cat_consumer_over_batches_of_three_sizes_is_eagers():
    def fn(x, s):
        return torch.rsqrt(_split_ops_cat(x).abs() + s)

    s = torch.rand(128) + 0.5
    symbolic = _loop(fn, [(torch.randn(rows, 128), s) for rows in (32, 20, 9)])
    assert any(r.fired for r in symbolic if r.rule == "CatConsumerIntoPieces")
