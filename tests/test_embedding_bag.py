"""The embedding-bag rules: where they fire, where they must not, and numerics (Triton's interpreter)."""

import re

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import optimus_ir
from optimus_ir.inspect import compile_report
from optimus_ir.interpret import cpu_triton_interpreter
from optimus_ir.records import recording
from optimus_ir.testing.sm90 import compile_for_sm90

RULE = "EmbeddingBagToSegmentSum"


class PooledTables(nn.Module):
    """``n`` sum/mean bags of a fixed size, each with its own layer norm (a DLRM sparse arch)."""

    def __init__(self, n: int = 5, mode: str = "sum", dtype: torch.dtype = torch.float32) -> None:
        super().__init__()
        self.tables = nn.ModuleList(nn.EmbeddingBag(50, 16, mode=mode).to(dtype) for _ in range(n))
        self.norms = nn.ModuleList(nn.LayerNorm(16).to(dtype) for _ in range(n))

    def forward(self, ids: torch.Tensor) -> list[torch.Tensor]:
        return [norm(table(i)) for table, norm, i in zip(self.tables, self.norms, ids.unbind(0))]


def _interpreted(fn, *inputs):
    with optimus_ir.enabled(), cpu_triton_interpreter(), recording() as records:
        actual = torch.compile(fn)(*inputs)
    return actual, [r for r in records if r.rule == RULE]


@pytest.mark.parametrize("mode", ["sum", "mean"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_tables_and_their_norms_become_one_kernel(mode, dtype):
    model = PooledTables(mode=mode, dtype=dtype).eval().requires_grad_(False)
    ids = torch.randint(0, 50, (5, 8, 3))
    stock = compile_report(model, (ids,), passes=None)
    report = compile_report(model, (ids,))
    assert stock.launches.count("torch.ops.aten._embedding_bag_forward_only.default") == 5
    assert len(report.launches) == 1  # 5 bags + 5 layer norms: one merged Triton kernel
    actual, records = _interpreted(model, ids)
    assert len(records) == 5 and all(r.fired for r in records)
    tolerance = {"atol": 2e-2, "rtol": 2e-2} if dtype == torch.bfloat16 else {}
    torch.testing.assert_close(actual, model(ids), **tolerance)


def test_low_precision_sums_are_stored_once_rounded_from_the_fp32_accumulator():
    # as ATen: accumulate in fp32, store bf16; no fp32 buffer in between (twice the memory, a second kernel's load)
    table = nn.EmbeddingBag(50, 16, mode="sum").to(torch.bfloat16).requires_grad_(False)
    ids = torch.randint(0, 50, (8, 3))
    actual, records = _interpreted(table, ids)
    assert [r.fired for r in records] == [True]
    assert "accumulated in torch.float32" in records[0].detail
    torch.testing.assert_close(actual, table(ids), atol=0, rtol=2**-7)  # one bf16 ulp: the order of the sum


def test_fires_under_no_grad_on_trainable_tables():
    # an eval()-mode model whose tables still require grad, called under no_grad (what serving code does): ATen's
    # embedding_bag then calls _embedding_bag, not _embedding_bag_forward_only; only its first output is read
    model = PooledTables().eval()
    ids = torch.randint(0, 50, (5, 8, 3))

    def serve(ids):
        with torch.no_grad():
            return model(ids)

    actual, records = _interpreted(serve, ids)
    assert len(records) == 5 and all(r.fired for r in records), records
    torch.testing.assert_close(actual, serve(ids))




@pytest.mark.parametrize(
    "call",
    [
        lambda w, ids: F.embedding_bag(ids, w, mode="sum", per_sample_weights=torch.ones_like(ids, dtype=w.dtype)),
        lambda w, ids: F.embedding_bag(ids.flatten(), w, offsets=torch.tensor([0, 5, 9, 12, 20, 21, 22, 23])),
        lambda w, ids: F.embedding_bag(ids, w, mode="sum", padding_idx=0),
        lambda w, ids: F.embedding_bag(ids, w, mode="mean", padding_idx=0),
        lambda w, ids: F.embedding_bag(ids, w),
    ],
    ids=["per-sample weights", "ragged offsets", "padding_idx", "mean, padding_idx", "regular"],
)
def test_bags_of_any_offsets_are_segment_sums(call):
    weight, ids = torch.randn(50, 16), torch.randint(0, 50, (8, 3))
    ids[0, 0], ids[1] = 0, 0  # a padding id, and a bag of padding ids only (its mean is 0)
    with optimus_ir.enabled(), cpu_triton_interpreter(), recording() as records:
        actual = torch.compile(call)(weight, ids)
    assert [r.fired for r in records if r.rule == RULE] == [True], records
    torch.testing.assert_close(actual, call(weight, ids))


@pytest.mark.parametrize(
    "call, reason",
    [
        (lambda w, ids, offsets: F.embedding_bag(ids, w, offsets, mode="max"), "max mode"),
    ],
    ids=["max"],
)
def test_must_not_fire(call, reason):
    weight, ids, offsets = torch.randn(50, 16), torch.randint(0, 50, (23,)), torch.tensor([0, 5, 9, 12, 20, 21, 22])
    with optimus_ir.enabled(), cpu_triton_interpreter(), recording() as records:
        actual = torch.compile(call)(weight, ids, offsets)
    decisions = [r for r in records if r.rule == RULE]
    assert decisions and not any(r.fired for r in decisions) and reason in decisions[0].detail, decisions
    torch.testing.assert_close(actual, call(weight, ids, offsets))


def test_deterministic_mode_keeps_the_sums_and_leaves_the_gradient_to_aten():
    # a bag's sum adds its rows in order, without atomics; the gradient's scatter adds with atomics: ATen's
    weight = torch.randn(50, 16, requires_grad=True)
    ids, offsets = torch.randint(0, 50, (23,)), torch.tensor([0, 5, 9, 12, 20, 21, 22])
    call = lambda w, i, o: F.embedding_bag(i, w, o)  # noqa: E731
    torch.use_deterministic_algorithms(True)
    try:
        with optimus_ir.enabled(), cpu_triton_interpreter(), recording() as records:
            with torch.no_grad():
                served = torch.compile(call)(weight, ids, offsets)
            trained = torch.compile(call)(weight, ids, offsets)
    finally:
        torch.use_deterministic_algorithms(False)
    decisions = [(r.rule, r.fired) for r in records if r.rule in (RULE, BACKWARD_RUNTIME_RULE)]
    # no grad: the sum; training: the gradient ATen's, and so the forward, whose offset2bag that gradient reads
    assert decisions == [(RULE, True), (RULE, False)], decisions
    assert "offset2bag" in [r for r in records if r.rule == RULE][1].detail
    torch.testing.assert_close(served, call(weight, ids, offsets))
    torch.testing.assert_close(trained, call(weight, ids, offsets))


def _jagged(rows, bags=6):
    """Ids (the first at the table's last row) and offsets of bags of 0 to 4 ids (the second bag empty)."""
    lengths = torch.randint(0, 5, (bags,))
    lengths[1] = 0
    ends = lengths.cumsum(0)
    ids = torch.randint(0, rows, (int(ends[-1]),))
    ids[0] = rows - 1
    return ids, torch.cat([torch.zeros(1, dtype=torch.long), ends])


class JaggedTables(nn.Module):
    """A sparse arch of jagged features: tables of different row counts, bags of runtime offsets (different id
    counts per table), each pooled output layer-normed, all concatenated."""

    def __init__(self, mode: str, include_last_offset: bool, dtype: torch.dtype) -> None:
        super().__init__()
        self.tables = nn.ModuleList(
            nn.EmbeddingBag(rows, 16, mode=mode, include_last_offset=include_last_offset).to(dtype)
            for rows in (50, 70, 90)
        )
        self.norms = nn.ModuleList(nn.LayerNorm(16).to(dtype) for _ in self.tables)

    def forward(self, ids: list[torch.Tensor], offsets: list[torch.Tensor]) -> torch.Tensor:
        return torch.cat([n(t(i, o)) for t, n, i, o in zip(self.tables, self.norms, ids, offsets)], 1)


@pytest.mark.parametrize("mode, include_last_offset", [("sum", False), ("mean", True)])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_jagged_tables_and_their_norms_are_one_kernel(mode, include_last_offset, dtype):
    # each table's bags summed inside its layer norm's kernel (no pooled buffer), the three tables' kernels one;
    # Triton's compiler takes the kernel for sm_90, and the interpreter's numbers are eager's
    torch.manual_seed(0)
    model = JaggedTables(mode, include_last_offset, dtype).eval().requires_grad_(False)
    jagged = [_jagged(t.num_embeddings, bags=8) for t in model.tables]
    ids = [i for i, _ in jagged]
    offsets = [o if include_last_offset else o[:-1] for _, o in jagged]
    stock = compile_report(model, (ids, offsets), passes=None)
    report = compile_report(model, (ids, offsets))
    assert stock.launches.count("torch.ops.aten._embedding_bag_forward_only.default") == 3
    assert len(report.launches) == 1, report.launches
    (kernel,) = report.kernels
    assert "tl.max(" in kernel.source and "irows" in kernel.source and "class_" not in kernel.source
    assert kernel.source.count("for ") == 1  # each bag summed once, not again in each reader of the sum
    # rows the masks turn off run no step: the last block of a batch not a multiple of it would loop over every id
    (length,) = re.findall(r"(tmp\d+) = tl.where\(xmask, tmp\d+ - tmp\d+, 0\)", kernel.source)
    assert f"in range(0, tl.max({length})):" in kernel.source
    assert compile_for_sm90(kernel.source, {"XBLOCK": 8, "R0_BLOCK": 16}) > 0
    with pytest.raises(RuntimeError, match="does not compile for sm_90"):  # (the check can fail)
        compile_for_sm90(kernel.source.replace("tl.max(", "tl.max_of("), {"XBLOCK": 8, "R0_BLOCK": 16})
    with optimus_ir.enabled(), cpu_triton_interpreter(), recording() as records:
        actual = torch.compile(model)(ids, offsets)
    assert [r.fired for r in records if r.rule == RULE] == [True] * 3
    tolerance = {"atol": 2e-2, "rtol": 2e-2} if dtype == torch.bfloat16 else {}
    torch.testing.assert_close(actual, model(ids, offsets), **tolerance)


@pytest.mark.parametrize(
    "mode, dtype, weighted, padding_idx, include_last_offset",
    [
        ("sum", torch.float32, False, None, False),
        ("mean", torch.float32, False, None, False),
        ("sum", torch.bfloat16, False, None, False),
        ("sum", torch.float32, True, None, False),
        ("sum", torch.float32, False, 3, False),
        ("sum", torch.float32, False, None, True),
        ("mean", torch.float32, False, None, True),
    ],
    ids=["sum", "mean", "bf16", "per-sample weights", "padding_idx", "include_last_offset", "mean, last offset"],
)
def test_runtime_offsets_training_step(mode, dtype, weighted, padding_idx, include_last_offset):
    # tables of 50, 70 and 90 rows: their forward and backward scatters, numerics against eager (ATen)
    torch.manual_seed(0)
    tables = [
        nn.EmbeddingBag(rows, 16, mode=mode, padding_idx=padding_idx, include_last_offset=include_last_offset).to(dtype)
        for rows in (50, 70, 90)
    ]
    jagged = [_jagged(t.num_embeddings) for t in tables]
    ids = [i for i, _ in jagged]
    offsets = [o if include_last_offset else o[:-1] for _, o in jagged]
    weights = [torch.rand(len(i), dtype=dtype) if weighted else None for i in ids]
    grads = [torch.randn(6, 16, dtype=dtype) for _ in tables]

    def step(ids, offsets, weights):
        outs = [t(i, o, per_sample_weights=w) for t, i, o, w in zip(tables, ids, offsets, weights)]
        torch.autograd.backward(outs, grads)
        return outs

    with optimus_ir.enabled(), cpu_triton_interpreter(), recording() as records:
        actual = torch.compile(step)(ids, offsets, weights)
    actual_grads = [t.weight.grad for t in tables]
    for t in tables:
        t.weight.grad = None
    expected = step(ids, offsets, weights)
    decisions = [(r.rule, r.fired) for r in records if r.rule.startswith("EmbeddingBag")]
    # a low-precision table's gradient stays ATen's (an fp32 accumulator of the whole table would raise the peak),
    # and so does its forward, whose offset2bag and bag_size that gradient reads
    fired = dtype == torch.float32
    assert sorted(decisions) == [(BACKWARD_RUNTIME_RULE, fired)] * 3 + [(RULE, fired)] * 3, decisions
    tolerance = {"atol": 2e-2, "rtol": 2e-2} if dtype == torch.bfloat16 else {}
    torch.testing.assert_close(actual, expected, **tolerance)
    torch.testing.assert_close(actual_grads, [t.weight.grad for t in tables], **tolerance)


def test_tables_of_different_sizes_share_one_body():
    # one body for the three tables' sums: each member's row count (the bound of its ids) and id count (where its
    # last bag ends) are read from the member table, not the first member's
    tables = [torch.randn(rows, 16, requires_grad=True) for rows in (50, 70, 90)]
    jagged = [_jagged(t.shape[0], bags=64) for t in tables]

    def step(*args):
        return [F.embedding_bag(i, t, o[:-1], mode="sum") for i, o, t in zip(args[:3], args[3:6], args[6:])]

    report = compile_report(step, (*[i for i, _ in jagged], *[o for _, o in jagged], *tables))
    merged = [k for k in report.kernels if "tl.max(" in k.source and "irows1" in k.source]
    assert len(merged) == 1 and "class_" not in merged[0].source, [k.source for k in report.kernels]
    assert "< irows0" in merged[0].source and re.search(r"tl.where\(tmp\d+ < 0, irows1", merged[0].source), merged[0].source


BACKWARD_RULE = "EmbeddingBagBackwardOfRegularBagsToScatterAdd"
BACKWARD_RUNTIME_RULE = "EmbeddingBagBackwardOfRuntimeOffsetsToScatterAdd"


@pytest.mark.parametrize("mode", ["sum", "mean"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_training_backward_becomes_a_scatter_add(mode, dtype):
    # the gradient is zeros + one atomic scatter-add per table; it no longer reads the forward's offset2bag and
    # bag_size, so the forward is a reduction too
    tables = [nn.EmbeddingBag(50, 16, mode=mode).to(dtype) for _ in range(3)]
    ids = torch.randint(0, 50, (3, 8, 3))
    grads = [torch.randn(8, 16, dtype=dtype) for _ in tables]

    def step(ids):
        outs = [table(i) for table, i in zip(tables, ids.unbind(0))]
        torch.autograd.backward(outs, grads)

    with optimus_ir.enabled(), cpu_triton_interpreter(), recording() as records:
        torch.compile(step)(ids)
    actual = [table.weight.grad for table in tables]
    for table in tables:
        table.weight.grad = None
    step(ids)
    fired = [r for r in records if r.rule == BACKWARD_RULE]
    assert len(fired) == 3 and all(r.fired for r in fired), fired
    forward = [r for r in records if r.rule == RULE]
    assert len(forward) == 3 and all(r.fired for r in forward), forward
    tolerance = {"atol": 2e-2, "rtol": 2e-2} if dtype == torch.bfloat16 else {}
    torch.testing.assert_close(actual, [table.weight.grad for table in tables], **tolerance)


@pytest.mark.parametrize(
    "kwargs, reason",
    [
        ({"mode": "max"}, "max mode"),
        ({"mode": "mean", "padding_idx": 0}, "a padding index in mean mode"),
        ({"scale_grad_by_freq": True}, "scale_grad_by_freq"),
        ({"sparse": True}, None),  # its backward is not _embedding_bag_backward: no decision at all
    ],
    ids=["max", "mean with padding_idx", "scale_grad_by_freq", "sparse"],
)
def test_backward_must_not_fire(kwargs, reason):
    weight = torch.randn(50, 16, requires_grad=True)
    ids = torch.randint(0, 50, (8, 3))
    grad = torch.randn(8, 16)

    def step(weight, ids):
        F.embedding_bag(ids, weight, **kwargs).backward(grad)

    with optimus_ir.enabled(), cpu_triton_interpreter(), recording() as records:
        torch.compile(step)(weight, ids)
    actual, weight.grad = weight.grad, None
    step(weight, ids)
    decisions = [r for r in records if r.rule in (BACKWARD_RULE, BACKWARD_RUNTIME_RULE)]
    assert not any(r.fired for r in decisions), decisions
    assert reason is None or (decisions and reason in decisions[0].detail), decisions
    torch.testing.assert_close(actual.to_dense(), weight.grad.to_dense())


def test_dlrm_inference_matches_eager_with_fewer_launches():
    from optimus_ir.testing.workloads import WORKLOADS

    model, inputs = WORKLOADS["dlrm"].make("tiny")
    model.eval().requires_grad_(False)
    stock = compile_report(model, inputs, passes=None)
    report = compile_report(model, inputs)
    assert "torch.ops.aten._embedding_bag_forward_only.default" not in report.launches
    # tiny config (5 dense features, 3 tables): 26 → 10 on the virtual sm_90 target, each Linear + ReLU one call,
    # the interaction's kept pairs and the logit each one reduction kernel
    assert (len(stock.launches), len(report.launches)) == (26, 10)
    assert report.launches.count("torch.ops.aten._addmm_activation.default") == 4
    with optimus_ir.enabled(), cpu_triton_interpreter():
        actual = torch.compile(model)(*inputs)
    torch.testing.assert_close(actual, model(*inputs), atol=1e-4, rtol=1e-4)


class SparseArch(nn.Module):
    """``n`` sum-pooled tables of 1,000 to 100,000 rows with runtime offsets, each pooled output layer-normed, all
    concatenated (the sparse arch of ``python -m benchmarks real --set issue31``)."""

    def __init__(self, n: int, dim: int) -> None:
        super().__init__()
        rows = torch.logspace(3, 5, n).long().tolist()
        self.tables = nn.ModuleList(nn.EmbeddingBag(r, dim, mode="sum") for r in rows)
        self.norms = nn.ModuleList(nn.LayerNorm(dim) for _ in range(n))

    def forward(self, ids: list[torch.Tensor], offsets: list[torch.Tensor]) -> torch.Tensor:
        return torch.cat([norm(table(i, o)) for table, norm, i, o in zip(self.tables, self.norms, ids, offsets)], 1)


def test_row_sums_each_merged_scatter_reads_are_one_allocation():
    # The layer norms' backward makes two row sums [256, 1] a table (1 KB each, above the allocator's block), each
    # read by its table's scatter-add alone; the scatters merge in parts. The row sums a part's merged kernel reads
    # are one allocation per slot, freed after it as each would be; a table whose scatter is not merged keeps its own.
    torch.manual_seed(0)
    model = SparseArch(12, 16)
    lengths = [torch.randint(0, 8, (256,)) for _ in model.tables]
    offsets = [torch.cat([torch.zeros(1, dtype=torch.long), n.cumsum(0)[:-1]]) for n in lengths]
    ids = [torch.randint(0, t.num_embeddings, (int(n.sum()),)) for t, n in zip(model.tables, lengths)]
    backward = compile_report(model, (ids, offsets)).graphs[1].wrapper.split("def call(")[1]
    alone = len(re.findall(r"empty_strided_cuda\(\(256, 1\)", backward))
    parts = re.findall(r"(\w+_out\d+_\d+) = empty_strided_cuda\(\((\d+), 1\), \(1, 1\)", backward)
    assert sum(int(rows) for _, rows in parts) + 256 * alone == 2 * 12 * 256 and alone <= 6, parts
    # a part of more than MAX_DIRECT_MEMBERS tables: its kernel's table is given the allocation, no tensor per sum
    given_whole = [name for name, rows in parts if int(rows) > 8 * 256 and f"tensors_of({name}," not in backward]
    assert given_whole and all(backward.count(f"del {name}\n") == 1 for name in given_whole), parts


def test_a_symbolic_batch_gives_the_tables_cat_to_the_member_table_whole():
    # every size symbolic: the norms' outputs are columns of the cat, given to the member table as the cat and
    # static byte offsets, as with static sizes; no view of the cat made per table and call in the wrapper
    torch.manual_seed(0)
    model = JaggedTables("sum", False, torch.float32).requires_grad_(False)
    jagged = [_jagged(t.num_embeddings, bags=8) for t in model.tables]
    report = compile_report(model, ([i for i, _ in jagged], [o[:-1] for _, o in jagged]), dynamic=True)
    call = report.graphs[0].wrapper.split("def call(")[1]
    assert len(report.launches) == 1 and "reinterpret_tensor(" not in call
    # (the cat's three column regions: one tensor, three members, 0, 64 and 128 bytes into a row)
    assert re.search(r"MemberTable\(None, None, \d+, byte_offsets=\[(0, ){15}0, 64, 128\], spans=\[(1, ){15}3\]",
                     report.graphs[0].wrapper)


def _mark_counts_dynamic(ids, offsets):
    """The ids' and the offsets' lengths symbolic, as Dynamo makes them once a loop's batches change them."""
    for tensor in (*ids, *offsets):
        torch._dynamo.mark_dynamic(tensor, 0)


@pytest.mark.parametrize("training", [False, True], ids=["inference", "training"])
@pytest.mark.parametrize("mode, include_last_offset", [("sum", False), ("mean", True)])
def test_jagged_tables_whose_batch_and_id_counts_change(training, mode, include_last_offset):
    # symbolic counts (automatic dynamic shapes): still one kernel for the tables' sums and their norms, each
    # table's id count read from the member table per call; the gradient one scatter-add per table, merged; the
    # same compiled code serves batches of other sizes, as eager's numbers
    torch.manual_seed(0)
    model = JaggedTables(mode, include_last_offset, torch.float32).requires_grad_(training)

    def batch(bags):
        jagged = [_jagged(t.num_embeddings, bags=bags) for t in model.tables]
        ids = [i for i, _ in jagged]
        return ids, [o if include_last_offset else o[:-1] for _, o in jagged]

    ids, offsets = batch(8)
    _mark_counts_dynamic(ids, offsets)
    stock = compile_report(model, (ids, offsets), passes=None)
    report = compile_report(model, (ids, offsets))
    fired = {(r.rule, r.fired) for r in report.rewrites if r.rule.startswith("EmbeddingBag")}
    assert fired == {(RULE, True)} | ({(BACKWARD_RUNTIME_RULE, True)} if training else set()), report.rewrites
    forward = report.graphs[0]
    # (training: and the output's cat, whose pieces the backward reads, as with static sizes)
    assert len(forward.launches) == 1 + training, forward.launches
    source = forward.kernels[0].source
    assert "irows1" in source  # a table's ids, from the member table
    assert ("ks0" in source) == (not include_last_offset)  # the bags' count: where the last bag ends at the last id
    assert "values=(" in forward.wrapper  # the ids' counts given per call
    assert len(report.launches) <= len(stock.launches) - 5, (report.launches, stock.launches)

    compiled = torch.compile(model)  # static, then the counts symbols (automatic dynamic shapes), then that code
    torch._dynamo.utils.counters.clear()
    with optimus_ir.enabled(), cpu_triton_interpreter(), recording() as records:
        for bags in (8, 13, 10):
            ids, offsets = batch(bags)
            actual = compiled(ids, offsets)
            expected = model(ids, offsets)
            torch.testing.assert_close(actual, expected)
            if training:
                grad = torch.randn_like(expected)
                actual_grads = torch.autograd.grad(actual, [t.weight for t in model.tables], grad)
                torch.testing.assert_close(
                    actual_grads, torch.autograd.grad(expected, [t.weight for t in model.tables], grad)
                )
    assert torch._dynamo.utils.counters["stats"]["unique_graphs"] == 2  # none for the third batch
    assert all(r.fired for r in records if r.rule.startswith("EmbeddingBag")) and records


class ValuesSplitPerFeature(nn.Module):
    """TorchRec's layout: one values tensor of every feature's ids, split by the features' id counts (ints that
    change every batch), and each feature's offsets a row of one ``[features, bags + 1]`` tensor."""

    def __init__(self) -> None:
        super().__init__()
        self.tables = nn.ModuleList(nn.EmbeddingBag(rows, 16, include_last_offset=True) for rows in (50, 70, 90))
        self.norms = nn.ModuleList(nn.LayerNorm(16) for _ in self.tables)

    def forward(self, values: torch.Tensor, counts: list[int], offsets: torch.Tensor) -> torch.Tensor:
        ids = values.split(counts)
        return torch.cat([n(t(i, offsets[k])) for k, (t, n, i) in enumerate(zip(self.tables, self.norms, ids))], 1)


def test_one_values_tensor_split_per_feature_reads_each_features_offsets_where_they_lie():
    # each feature's offsets read in place from their row (no copy of the row per feature); with static counts the
    # tables and their norms are one kernel; the loop's symbolic graph (counts and bags symbols) serves the later
    # batches with eager's numbers and fewer launches than stock's
    torch.manual_seed(0)
    model = ValuesSplitPerFeature().eval().requires_grad_(False)

    def batch(bags):
        jagged = [_jagged(t.num_embeddings, bags=bags) for t in model.tables]
        return torch.cat([i for i, _ in jagged]), [i.numel() for i, _ in jagged], torch.stack([o for _, o in jagged])

    static = compile_report(model, batch(8))
    assert len(static.launches) == 1, static.launches
    values, counts, offsets = batch(8)
    torch._dynamo.mark_dynamic(values, 0)
    torch._dynamo.mark_dynamic(offsets, 1)
    stock = compile_report(model, (values, counts, offsets), passes=None, dynamic=True)
    symbolic = compile_report(model, (values, counts, offsets), dynamic=True)
    assert all("_poi_" not in name for name in symbolic.launches), symbolic.launches  # no copy of offsets
    assert len(symbolic.launches) < len(stock.launches), (symbolic.launches, stock.launches)

    compiled = torch.compile(model)
    torch._dynamo.utils.counters.clear()
    with optimus_ir.enabled(), cpu_triton_interpreter(), recording() as records, torch.no_grad():
        for bags in (8, 13, 10):
            values, counts, offsets = batch(bags)
            torch.testing.assert_close(compiled(values, counts, offsets), model(values, counts, offsets))
    assert torch._dynamo.utils.counters["stats"]["unique_graphs"] == 2  # none for the third batch
    assert [r.fired for r in records if r.rule == RULE] == [True] * 6
