"""The parts of the benchmarks' runners that need no GPU, on the CPU: the suite's plans and rows, the variants, the
real-model suite's steps, summary and code-generation report, the summary of several runs, the plot, the per-call
floor, the member-table write counter and the loop benchmark (its streams, and a whole run on the CPU). Not run by
CI (its tests are tests/); run with ``python -m pytest benchmarks/test_runner.py -q``."""

import argparse
import json
import statistics
from unittest import mock

import pytest
import torch

from benchmarks import loops, measure, per_call, real_models, real_zoo, suite, summary
from benchmarks.real_zoo import RealModel
from optimus_ir.runtime import MemberTable
from optimus_ir.testing.workloads import WORKLOADS



@pytest.mark.parametrize("mode", suite.MODES)
def test_prepare_repeats_the_reference(mode, monkeypatch):
    """Two eager preparations of a case give the same first results: errors against the reference are 0."""
    monkeypatch.setattr(suite, "timed_first_call", lambda fn: (fn(), 0.0))
    for name in WORKLOADS:
        case = suite.Case(name, "tiny", "fp32", mode)
        call, reference, _ = suite.prepare(case, compiled=False, device="cpu")
        _, result, _ = suite.prepare(case, compiled=False, device="cpu")
        assert measure.max_rel_error(result, reference) == 0.0
        assert measure.all_finite(result)
        if mode == "training":  # the loss, then one update per parameter, not all zero
            assert result[0].dim() == 0 and len(result) > 1 and any(u.abs().sum() > 0 for u in result[1:])
        call()


def test_quick_plan_covers_every_workload_in_inference():
    cases = suite.build_plan("quick")
    assert {c.workload for c in cases if c.mode == "inference" and c.dtype == "fp32"} == set(WORKLOADS)
    assert suite.Case("dlrm", "small", "fp32", "training") in cases
    assert suite.Case("dlrm", "small", "bf16", "inference") in cases
    storms = {"split_chain", "tanh_storm", "layernorm_storm", "gelu_storm", "rowsum_storm"}
    assert any(c.workload in storms and c.mode == "training" for c in cases)
    assert any(c.workload in storms and c.dtype == "bf16" for c in cases)
    assert cases[0].workload == "dlrm"
    assert len(set(cases)) == len(cases)


def test_full_plan_and_only():
    cases = suite.build_plan("full")
    assert len(cases) == len(set(cases)) == len(WORKLOADS) * 2 * 2 * 2
    only = suite.build_plan("full", ["dlrm", "tanh_storm"])
    assert {c.workload for c in only} == {"dlrm", "tanh_storm"} and len(only) == 16
    part = suite.build_plan("full", ["dlrm"], sizes=["large"], dtypes=["bf16"], modes=["training"])
    assert part == [suite.Case("dlrm", "large", "bf16", "training")]
    shards = [suite.build_plan("full", ["dlrm"], shard=(k, 3)) for k in range(3)]
    assert sorted(sum(shards, []), key=cases.index) == suite.build_plan("full", ["dlrm"])
    assert [len(shard) for shard in shards] == [3, 3, 2]
    with pytest.raises(ValueError, match="must be in"):
        suite.build_plan("full", shard=(2, 2))
    with pytest.raises(ValueError, match="unknown workload"):
        suite.build_plan("quick", ["nope"])
    with pytest.raises(ValueError, match="unknown plan"):
        suite.build_plan("slow")


def test_cases_named_on_the_command_line():
    assert suite.parse_case("dlrm/large/bf16/training") == suite.Case("dlrm", "large", "bf16", "training")
    for wrong in ("dlrm/large/bf16", "dlrm/huge/bf16/training", "nope/small/fp32/inference"):
        with pytest.raises(argparse.ArgumentTypeError):
            suite.parse_case(wrong)


def test_fx_optimus_options_exist_in_torch():
    from torch._inductor.fx_passes import group_batch_fusion, split_cat

    fx_optimus = next(v for v in measure.VARIANTS if v.name == "fx_optimus")
    pre = fx_optimus.inductor_config["pre_grad_fusion_options"]
    post = fx_optimus.inductor_config["post_grad_fusion_options"]
    assert set(pre) <= set(split_cat.PRE_GRAD_PATTERNS) | set(group_batch_fusion.PRE_GRAD_FUSIONS)
    assert set(post) <= set(split_cat.POST_GRAD_PATTERNS) | set(group_batch_fusion.POST_GRAD_FUSIONS)
    with measure.variant_context(fx_optimus):
        assert torch._inductor.config.pre_grad_fusion_options == pre
    assert torch._inductor.config.pre_grad_fusion_options == {}


def test_run_writes_rows_and_skips_past_budget(tmp_path, monkeypatch):
    monkeypatch.setattr(suite, "prepare", lambda case, compiled, device="cuda": (None, [torch.ones(1)], 0.0))

    def fake_measure(case, variant, reference):
        if variant.name == "stock":
            return case.key() | {"variant": variant.name, "error": "RuntimeError: boom"}
        return case.key() | {"variant": variant.name, "kernels/call": 3.0, "ms/call": 0.5, "finite": True}

    monkeypatch.setattr(suite, "measure", fake_measure)
    cases = suite.build_plan("quick", ["tanh_storm"])
    variants = [v for v in measure.VARIANTS if v.name in ("eager", "stock")]
    suite.run(cases, variants, tmp_path, {"command": "test"}, budget_s=None)
    results = json.loads((tmp_path / "suite.json").read_text())
    assert len(results["rows"]) == len(cases) * len(variants) and results["meta"]["skipped"] == []
    assert results["rows"][1]["error"] == "RuntimeError: boom"
    table = (tmp_path / "suite.md").read_text()
    assert "| " + " | ".join(suite.COLUMNS) + " |" in table and "RuntimeError: boom" in table

    suite.run(cases, variants, tmp_path, {"command": "test"}, budget_s=-1.0)
    results = json.loads((tmp_path / "suite.json").read_text())
    assert results["rows"] == [] and results["meta"]["skipped"] == [c.label for c in cases]


def test_measure_records_an_error_instead_of_raising(monkeypatch):
    def failing_prepare(case, compiled, device="cuda"):
        raise RuntimeError("compile failed")

    monkeypatch.setattr(suite, "prepare", failing_prepare)
    variant = next(v for v in measure.VARIANTS if v.name == "optimus_ir")
    row = suite.measure(suite.Case("tanh_storm", "tiny", "fp32", "inference"), variant, [])
    assert row["error"] == "RuntimeError: compile failed" and row["variant"] == "optimus_ir"


def test_suite_help(capsys):
    with pytest.raises(SystemExit) as exit_info:
        suite.main(["--help"])
    assert exit_info.value.code == 0
    help_text = capsys.readouterr().out
    assert "--plan" in help_text and "--only" in help_text and "--budget-s" in help_text


def test_real_default_set_is_issue_30s_and_only_picks_from_every_set():
    assert [m.name for m in real_models.select("issue30", None)] == [
        "hetero-sage", "shufflenet-v2", "inception-v3", "mixnet-s", "mixtral-moe", "dlrm-26"]
    assert [m.name for m in real_models.select("issue30", ["bert", "dlrm-26"])] == ["dlrm-26", "bert"]
    assert len(real_models.select("all", None)) == 26  # hetero-sage is of two sets, and there once
    assert [m.name for m in real_models.select("layers", None)] == ["towers-16", "experts-8"]
    assert [m.name for m in real_models.select("gnn", ["hetero-sage"])] == ["hetero-sage"]
    assert [m.name for m in real_models.select("issue33", None)] == [
        "seed-48x4", "seed-96x8", "seed-192x16", "seed-48x4-bf16", "seed-48x4-unequal", "seed-16x4-bf16-unequal"
    ]
    assert [m.name for m in real_models.select("issue31", None)] == ["sparse-arch-8", "sparse-arch-26", "sparse-arch-100"]


class _TwoHeads(torch.nn.Module):
    """A dict of outputs, as ``to_hetero``'s, and a parameter no output uses."""

    def __init__(self):
        super().__init__()
        self.a, self.b, self.unused = torch.nn.Linear(3, 2), torch.nn.Linear(3, 2), torch.nn.Linear(1, 1)

    def forward(self, x):
        return {"a": self.a(x), "b": self.b(x).relu()}


def test_real_training_step_gives_the_outputs_and_the_gradients_of_one_step():
    """Gradients are set to None before each step, so two steps give the same gradients; the loss is each output's
    mean square, summed over a dict's values; a parameter no output uses gets zeros."""
    torch.manual_seed(0)
    model, x = _TwoHeads(), torch.randn(4, 3)
    params = list(model.parameters())
    step = real_models.make_call(model, (x,), "training", params)
    first, second = step(), step()
    assert len(first) == 2 + len(params) and measure.max_rel_error(first, second) == 0.0
    loss = model.a(x).square().mean() + model.b(x).relu().square().mean()
    expected = torch.autograd.grad(loss, params[:4])
    assert all(torch.allclose(g, e) for g, e in zip(first[2:6], expected)) and not first[-1].any()
    outputs = real_models.make_call(model, (x,), "inference", params)()
    assert len(outputs) == 2 and not outputs[0].requires_grad


class _BreaksInside(torch.nn.Module):
    def forward(self, x):
        x = x + 1
        torch._dynamo.graph_break()
        return x * 2


def test_real_variants_each_compile_the_frames_after_a_graph_break():
    """Each variant's own function compiles the module's frames after a graph break again: under default backends
    (equal to each other) the second reuses the first's compiled frames; under :class:`measure.OwnInductor` it
    compiles its own."""
    module, x = _BreaksInside(), torch.randn(8)

    def graphs_compiled(backends) -> list[int]:
        torch._dynamo.reset()
        graphs = []
        compile_fx = lambda gm, inputs, **kwargs: (graphs.append(gm), gm.forward)[1]  # noqa: E731
        with mock.patch("torch._inductor.compile_fx.compile_fx", compile_fx):
            counts = []
            for tag, backend in zip("ab", backends):
                compiled = torch.compile(measure.own_copy(real_models._forward(module), tag), backend=backend)
                assert torch.equal(compiled(x), (x + 1) * 2)
                counts.append(len(graphs))
        torch._dynamo.reset()
        return counts

    first, second = graphs_compiled(["inductor", "inductor"])
    assert first > 0 and second == first
    first, second = graphs_compiled([measure.OwnInductor(), measure.OwnInductor()])
    assert first > 0 and second == 2 * first


def test_real_summary_has_the_three_variants_in_one_cell():
    def row(variant, **values):
        return {"model": "m", "mode": "training", "variant": variant} | values

    rows = [row("stock", **{"kernels/call": 10.0, "ms/call": 1.5, "GPU ms/call": 0.5, "peak MiB": 2.0}),
            row("combo_kernels", error="E"),
            row("optimus_ir", **{"kernels/call": 4.0, "ms/call": 1.25, "GPU ms/call": 0.25, "peak MiB": 2.0,
                                 "fastest other / this": 1.2}),
            {"model": "n", "mode": "inference", "variant": "eager", "error": "ImportError"}]
    kernels, ms, gpu_ms, peak = real_models.SUMMARY
    fastest = real_models.FASTEST_OTHER
    assert real_models.summary_rows(rows) == [
        {"model/mode": "m/training", kernels: "10 / error / 4", ms: "1.5 / error / 1.25",
         gpu_ms: "0.5 / error / 0.25", peak: "2 / error / 2", fastest: "1.2"},
        {"model/mode": "n/inference", kernels: "- / - / -", ms: "- / - / -", gpu_ms: "- / - / -",
         peak: "- / - / -", fastest: "-"},
    ]


def test_real_timing_interleaves_the_variants_call_by_call_and_compares_within_a_pass(monkeypatch):
    """Each pass times one call of every variant, the order rotating; a variant's ratio to the others is taken
    pass by pass, so that a drift of the host's speed between passes cancels."""
    log = []
    ms = {"stock": iter([2.0, 4.0, 2.0, 4.0]), "combo_kernels": iter([1.0, 3.0, 1.0, 3.0]),
          "optimus_ir": iter([1.1, 2.8, 1.1, 2.8])}
    monkeypatch.setattr(real_models, "cuda_time_ms", lambda call, repeat, warmup: call())
    monkeypatch.setattr(real_models, "WARMUP", 1)
    monkeypatch.setattr(real_models, "REPEAT", 2)
    monkeypatch.setattr(real_models, "ROUNDS", 2)

    table, kept = MemberTable([0], [1], 1), []

    def call_of(name):
        def call():
            log.append(name)
            if name == "optimus_ir":  # new addresses each call: a table written each call
                kept.append(torch.zeros(1))
                table(kept[-1])
            return next(ms[name]) if len(log) > 3 else None

        return (measure.VARIANTS[1], call)

    times = real_models.time_in_turns({name: call_of(name) for name in ms})
    assert log[:3] == ["stock", "combo_kernels", "optimus_ir"]  # the warm-up
    assert log[3:9] == ["stock", "combo_kernels", "optimus_ir", "combo_kernels", "optimus_ir", "stock"]
    ours = times["optimus_ir"]
    assert ours["ms/call"] == pytest.approx(1.95) and ours["ms/call by round"] == "1.950 1.950"
    assert ours["stock / this"] == pytest.approx(statistics.median([2 / 1.1, 4 / 2.8] * 2))
    assert ours["fastest other / this"] == pytest.approx(statistics.median([1 / 1.1, 3 / 2.8] * 2))
    assert ours["table writes/call timed"] == 1 and times["stock"]["table writes/call timed"] == 0


def test_real_run_writes_rows_and_summary_and_fails_on_an_error_row(tmp_path, monkeypatch):
    measured = {"variant": "stock", "kernels/call": 3.0, "ms/call": 1.0, "GPU ms/call": 0.5, "peak MiB": 2.0}
    rows = {"inference": measured, "training": {"variant": "stock", "error": "E"}}
    monkeypatch.setattr(real_models, "measure_case",
                        lambda model, mode, start: [{"model": model.name, "mode": mode} | rows[mode]])
    assert not real_models.run(real_models.select("issue30", ["dlrm-26"]), list(real_models.MODES), tmp_path)
    assert len(json.loads((tmp_path / "real_models.json").read_text())["rows"]) == 2
    summary_table = (tmp_path / "real_models_summary.md").read_text()
    assert "| dlrm-26/inference | 3 / - / - | 1 / - / - | 0.5 / - / - | 2 / - / - | - |" in summary_table


def test_real_codegen_only_reports_launches_and_goes_on_past_a_failure(capsys):
    def linear():
        return torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.Tanh()), (torch.randn(4, 8),)

    def broken():
        raise ImportError("no such library")

    models = [RealModel("broken", broken), RealModel("linear", linear)]
    assert not real_models.codegen_only(models, ["inference", "training"], verbose=False)
    out = capsys.readouterr().out
    assert "broken/inference: FAILED ImportError: no such library" in out
    assert "linear/inference: launches " in out and "linear/training: launches " in out
    assert out.splitlines()[-1] == "failed: broken/inference, broken/training"


def test_plot(tmp_path):
    pytest.importorskip("matplotlib")
    from benchmarks import plot

    rows = [
        {"workload": "dlrm", "mode": "inference", "variant": "stock", "kernels/call": 115.0, "ms/call": 0.4},
        {"workload": "dlrm", "mode": "inference", "variant": "optimus_ir", "error": "boom"},
    ]
    plot.plot({"meta": {"device": "test"}, "rows": rows}, tmp_path / "out.png")
    assert (tmp_path / "out.png").stat().st_size > 0




def _row(variant, ms, peak=4.0, err=1e-7, **case):
    fields = dict(workload="dlrm", size="small", dtype="fp32", mode="inference") | case
    return fields | {"variant": variant, "kernels/call": 10, "ms/call": ms, "replay ms": ms / 2, "peak MiB": peak,
                     "max rel err": err, "first call s": 1.0}


def _run(tmp_path, name, rows):
    path = tmp_path / name / "suite.json"
    path.parent.mkdir()
    path.write_text(json.dumps({"meta": {}, "rows": rows}))
    return path


def test_each_case_comes_from_the_last_run_that_measured_it(tmp_path):
    old = _run(tmp_path, "old", [_row("stock", 2.0), _row("optimus_ir", 1.0), _row("stock", 2.0, mode="training"),
                                 _row("optimus_ir", 1.0, mode="training")])
    new = _run(tmp_path, "new", [_row("stock", 3.0), _row("optimus_ir", 1.5),
                                 _row("stock", 3.0, mode="training"), {**_row("optimus_ir", 1.0, mode="training"),
                                                                       "error": "RuntimeError"}])
    cases = summary.latest_cases([old, new])
    assert cases[("dlrm", "small", "fp32", "inference")][0] == new
    assert cases[("dlrm", "small", "fp32", "training")][0] == old  # the new run's optimus_ir row failed


def test_findings_report_slowdowns_memory_and_errors_beyond_noise_and_tolerance():
    case = ("dlrm", "small", "bf16", "inference")
    same = {"stock": _row("stock", 1.0), "optimus_ir": _row("optimus_ir", 1.04)}
    assert summary.findings(case, same) == []
    worse = {"stock": _row("stock", 1.0, err=1e-3), "optimus_ir": _row("optimus_ir", 1.2, peak=8.0, err=2e-2)}
    notes = summary.findings(case, worse)
    assert len(notes) == 4 and "per call" in notes[0] and "replay" in notes[1] and "peak" in notes[2]
    within_bf16_tolerance = {"stock": _row("stock", 1.0, err=1e-6), "optimus_ir": _row("optimus_ir", 1.0, err=3e-3)}
    assert summary.findings(case, within_bf16_tolerance) == []
    assert summary.findings(("dlrm", "small", "fp32", "inference"), within_bf16_tolerance)


def test_the_benchmarks_count_member_table_writes_through_a_method_the_table_has():
    """per_call_profile counts misses by patching ``MemberTable._write`` (``measure.counting_table_writes``)."""
    from optimus_ir.runtime import MemberTable

    table = MemberTable(starts=[0, 1024], numels=[10, 20], pad_to=2)
    a, b = torch.zeros(1), torch.zeros(1)
    with measure.counting_table_writes() as writes:
        table(a, b)
        table(a, b)
        table(b, a)
    assert writes.call_count == 2


@pytest.mark.parametrize(
    "shapes", [[(4, 3)] * 5, [(2 + i, 3) for i in range(5)], [()] * 5, [(3, 2), (5,), ()]],
    ids=["same shape", "rows of different counts", "0-d", "unalike"],
)
def test_the_ledgers_floor_makes_new_outputs_every_call_and_runs_nothing_else(shapes):
    """per_call's fresh-outputs variant: each call returns new tensors shaped as the function's outputs
    (the last call's are not reused), whatever the inputs hold."""
    def fn(*xs):
        return [x * 2 for x in xs]

    inputs = [torch.randn(shape) for shape in shapes]
    fresh = per_call.compiled_fresh_outputs(fn, fn(*inputs))
    first, second = fresh(*inputs), fresh(*inputs)
    assert [tuple(t.shape) for t in first] == [tuple(t.shape) for t in second] == [tuple(s) for s in shapes]
    assert not {t.data_ptr() for t in first if t.numel()} & {t.data_ptr() for t in second if t.numel()}
    assert not any(t._is_view() for t in first)


def test_every_command_names_a_module_with_a_main(capsys):
    import ast
    import importlib.util

    from benchmarks.__main__ import COMMANDS, main

    for command, (module, _) in COMMANDS.items():
        spec = importlib.util.find_spec(module)
        assert spec is not None, command
        tree = ast.parse(open(spec.origin).read())
        assert any(isinstance(node, ast.FunctionDef) and node.name == "main" for node in tree.body), command
    main(["--help"])
    out = capsys.readouterr().out
    assert all(f"  {command} " in out for command in COMMANDS)


def test_decisions_compare_reports_what_differs():
    from benchmarks.probes.decisions import compare

    old = {"a": {"records": ["r1"], "wrapper": "x\ny\n", "launches": ["k"]}, "b": {"error": "E"},
           "c": {"records": [], "wrapper": "", "launches": []}}
    new = {"a": {"records": ["r1"], "wrapper": "x\nz\n", "launches": ["k"]}, "b": {"error": "E"},
           "d": {"records": [], "wrapper": "", "launches": []}}
    report, identical = compare(old, new)
    assert not identical
    assert "a: DIFFERS in wrapper; identical records, launches" in report
    assert "    wrapper: -y" in report and "    wrapper: +z" in report
    assert "b: identical (both failed the same way)" in report
    assert "c: only before" in report and "d: only after" in report
    assert report[-1] == "1 of 4 keys identical (records, wrapper and launches)"
    assert compare(old, old) == ([f"{k}: identical" + (" (both failed the same way)" if k == "b" else "")
                                  for k in "abc"] + ["3 of 3 keys identical (records, wrapper and launches)"], True)


def test_merge_cost_groups_the_launches_that_changed_by_their_source_nodes():
    """Two stock launches of one kernel and one of another, over source nodes a, b, c; optimus_ir merged the first
    two into one launch: one group (the merged launch against the two), the third launch unchanged."""
    from benchmarks.probes import merge_cost

    def wrapper(kernels, launches):
        defined = "".join(
            f"{name} = async_compile.triton('{name}', '''\n@triton.jit\ndef {name}(in_ptr0):\n    {body}\n''', "
            "device_str='cuda')\n" for name, body in kernels
        )
        calls = "".join(f"        # Topologically Sorted Source Nodes: [{nodes}], Original ATen: [aten.mul]\n"
                        f"        {name}.run(buf0, stream=stream0)\n" for name, nodes in launches)
        return defined + "def call(args):\n" + calls

    stock = merge_cost.launches(wrapper([("k_0", "a"), ("k_1", "b")], [("k_0", "a"), ("k_0", "b"), ("k_1", "c")]), 0)
    ours = merge_cost.launches(wrapper([("m_0", "m"), ("k_1", "b")], [("m_0", "a, b"), ("k_1", "c")]), 0)
    assert [(l.kernel, sorted(l.nodes)) for l in stock] == [("k_0", ["a"]), ("k_0", ["b"]), ("k_1", ["c"])]
    merge_cost.assign(stock, {"k_0": [2.0, 3.0], "k_1": [1.0]})
    merge_cost.assign(ours, {"m_0": [4.0], "k_1": [1.0]})
    ((mine, theirs),) = merge_cost.changed_groups(stock, ours)
    assert [l.kernel for l in mine] == ["m_0"] and [l.kernel for l in theirs] == ["k_0", "k_0"]
    row = merge_cost.row(mine, theirs)
    assert row["optimus_ir µs"] == 4.0 and row["stock µs"] == 5.0 and row["Δ µs"] == -1.0


def _loop_model(name):
    (model,) = [model for model in loops.LOOPS if model.name == name]
    return model


def test_loops_dlrm_stream_changes_its_rows_and_ends_with_a_partial_batch():
    """A full batch first, then batches of other sizes, the last one partial; the same stream from every build."""
    scale = loops.SCALES["full"]
    model = _loop_model("dlrm-26")
    _, stream = model.build(scale, loops.STEPS)
    rows = [dense.shape[0] for dense, _ in stream]
    assert len(stream) == loops.STEPS and rows[0] == scale.batch and 2 <= rows[-1] < scale.batch
    assert len(set(rows)) >= 4 and all(sparse.shape[1] == n for (_, sparse), n in zip(stream, rows))
    _, again = model.build(scale, loops.STEPS)
    assert all(torch.equal(a, b) for batch, other in zip(stream, again) for a, b in zip(batch, other))


def test_loops_sparse_arch_stream_draws_every_bag_so_that_every_tables_id_count_changes():
    """Bags of 0 to 8 ids, drawn per bag: each of the 26 tables gets another id count in every batch (unlike
    ``JaggedSparseArch.example_inputs``, whose totals are fixed); full batches of bags, the last one partial."""
    scale = loops.SCALES["full"]
    module, stream = _loop_model("sparse-arch-26").build(scale, 4)
    assert len(module.tables) == 26
    bags = [len(offsets[0]) for _, offsets in stream]
    assert bags[:-1] == [scale.batch] * 3 and 2 <= bags[-1] < scale.batch
    for ids, offsets in stream:
        for table, table_ids, table_offsets in zip(module.tables, ids, offsets):
            lengths = torch.diff(table_offsets, append=torch.tensor([len(table_ids)]))
            assert table_offsets[0] == 0 and 0 <= lengths.min() and lengths.max() <= loops.MAX_BAG
            assert 0 <= table_ids.min() and table_ids.max() < table.num_embeddings
    totals = [[len(table_ids) for table_ids in ids] for ids, _ in stream]
    assert all(len(set(counts)) > 1 for counts in zip(*totals[:3]))  # every table's, among the full batches


def test_loops_hetero_stream_samples_subgraphs_of_every_type():
    """Every batch has the 8 node types and 16 edge types of the model, node and edge counts drawn per type, each
    edge within its types' nodes; the last batch from the seeds left over is smaller."""
    pytest.importorskip("torch_geometric")
    scale = loops.SCALES["tiny"]
    _, stream = _loop_model("hetero-sage").build(scale, 4)
    for x, edges in stream:
        assert list(x) == real_zoo.HETERO_NODE_TYPES and len(edges) == 16
        assert all(scale.nodes[0] // 2 <= len(features) < scale.nodes[1] for features in x.values())
        for (source, _, target), index in edges.items():
            assert index[0].max() < len(x[source]) and index[1].max() < len(x[target])
    counts = [[len(features) for features in x.values()] for x, _ in stream]
    assert counts[0] != counts[1] and sum(counts[-1]) < len(counts[-1]) * scale.nodes[1] // 2


def test_loops_moe_stream_changes_the_sequence_length_and_ends_with_a_partial_batch():
    pytest.importorskip("transformers")
    scale = loops.SCALES["tiny"]
    _, stream = _loop_model("mixtral-moe").build(scale, 6)
    shapes = [tuple(ids.shape) for (ids,) in stream]
    assert shapes[0] == (scale.moe_batch, scale.moe_lengths[1]) and shapes[-1][0] == scale.moe_batch - 1
    assert len({length for _, length in shapes}) > 2


def _toy_loop(scale, steps):
    """A two-layer MLP over batches of 6, 4, 9 and 3 rows."""
    module = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 4))
    return module, [(torch.randn(rows, 8),) for rows in (6, 6, 4, 6, 9, 3)[:steps]]


def test_loops_run_a_stream_on_the_cpu_count_recompiles_time_and_write_the_rows(tmp_path):
    """The whole benchmark on the CPU, eager, stock and optimus_ir, in a training step (the CPU compiles take most
    of a minute; inference differs by its call alone): each compiled variant compiles a static graph on the first
    batch and one of symbolic sizes on the next shape, then nothing more (the marks a variant's training graph puts
    on the batches it saved reach no other variant); its function of the frozen batch one static graph; errors as
    eager's, gradients too; times on the host's clock; no kernels or peak without CUDA."""
    names = ("eager", "stock", "optimus_ir")
    variants = [v for v in measure.VARIANTS if v.name in names] + [loops.FLOOR]
    toy = loops.LoopModel("toy", _toy_loop)
    assert loops.run([toy], ["training"], variants, tmp_path, "tiny", steps=6, passes=2, device="cpu")
    rows = json.loads((tmp_path / "loops.json").read_text())["rows"]
    assert [row["variant"] for row in rows] == [*names, "floor"]
    compiles = {"graphs": 1, "recompiles": 1, "dynamic compiles": 1, "compiles after warm-up": 0,
                "static recompiles": 0, "static dynamic compiles": 0, "max compiles/frame": 2}
    for row in rows:
        assert "error" not in row and row["steps"] == 6 and "kernels/step" not in row and "peak MiB" not in row
        if row["variant"] == "floor":  # its outputs are its first calls': no error
            assert row["max rel err"] is None and row["static max rel err"] is None
        else:
            assert row["max rel err"] < 1e-5 and row["static max rel err"] < 1e-5
        assert row["ms/step"] > 0 and row["static ms/call"] > 0 and len(row["ms/step by pass"].split()) == 2
        step_over, static_over = map(float, row["over the floor: step, static"].split(", "))
        assert step_over > 0 and static_over > 0
        assert {k: row.get(k) for k in compiles} == (compiles if row["variant"] != "eager" else dict.fromkeys(compiles))
    summary_table = (tmp_path / "loops_summary.md").read_text()
    assert "| recompiles: eager / stock / optimus_ir / floor |" in summary_table
    assert "| toy/training | - / - / - / - | - / - / - / - | " in summary_table


def test_loops_leave_a_failure_in_its_row_and_fail_the_run(tmp_path):
    """A model that cannot be built fails its case's one row; a variant that cannot be set up fails its row, the
    other variants' rows are measured; the run returns False after writing them all. Past its budget a run starts
    no case and lists those it skipped."""
    def unbuildable(scale, steps):
        raise ImportError("no such library")

    eager = next(v for v in measure.VARIANTS if v.name == "eager")
    broken = measure.Variant("broken", True, {"no_such_option": True}, None)
    models = [loops.LoopModel("missing", unbuildable), loops.LoopModel("toy", _toy_loop)]
    assert not loops.run(models, ["inference"], [eager, broken], tmp_path, "tiny", steps=3, passes=1, device="cpu")
    rows = json.loads((tmp_path / "loops.json").read_text())["rows"]
    assert [(row["model"], row["variant"]) for row in rows] == [("missing", "eager"), ("toy", "eager"),
                                                               ("toy", "broken")]
    assert rows[0]["error"] == "ImportError: no such library" and "no_such_option" in rows[2]["error"]
    assert "error" not in rows[1] and rows[1]["ms/step"] > 0

    assert loops.run(models, ["inference"], [eager], tmp_path, "tiny", steps=3, passes=1, device="cpu", budget_s=-1)
    results = json.loads((tmp_path / "loops.json").read_text())
    assert results["rows"] == [] and results["meta"]["skipped"] == ["missing/inference", "toy/inference"]


def test_loops_time_every_variants_step_and_frozen_batch_in_turns(monkeypatch):
    """Each turn is one step of the stream: one call of every variant on its batch and one of every variant's
    static function on the frozen batch, the order rotating each turn; ms per step is the median over passes of a
    pass's mean, the ratios to the other variants are taken turn by turn, loop / static on the frozen batch. The
    warm-up runs the stream's steps; each timed pass steps made anew (new copies of the batches)."""
    log = []

    def calls(name):
        warm = [lambda step=step: log.append((name, step, "warm")) for step in range(2)]
        return loops.Compiled(measure.VARIANTS[1], warm, lambda: log.append((name, "static")),
                              lambda: [lambda step=step: log.append((name, step)) for step in range(2)])

    ms = {("stock", 0): 2.0, ("stock", 1): 4.0, ("stock", "static"): 1.0,
          ("optimus_ir", 0): 1.0, ("optimus_ir", 1): 5.0, ("optimus_ir", "static"): 0.5}

    def timed(call, device):
        call()
        return ms[log[-1]]

    monkeypatch.setattr(loops, "step_ms", timed)
    monkeypatch.setattr(loops, "WARMUP_PASSES", 1)
    times = loops.time_in_turns({"stock": calls("stock"), "optimus_ir": calls("optimus_ir")}, 2, "cpu")
    assert log[:6] == [("stock", 0, "warm"), ("stock", 1, "warm"), ("stock", "static"),
                       ("optimus_ir", 0, "warm"), ("optimus_ir", 1, "warm"), ("optimus_ir", "static")]
    assert log[6:14] == [("stock", 0), ("stock", "static"), ("optimus_ir", 0), ("optimus_ir", "static"),
                         ("stock", "static"), ("optimus_ir", 1), ("optimus_ir", "static"), ("stock", 1)]
    assert len(log) == 6 + 2 * 2 * 4
    ours = times["optimus_ir"]
    assert ours["ms/step"] == 3.0 and ours["ms/step by pass"] == "3.000 3.000" and ours["static ms/call"] == 0.5
    assert ours["loop / static ms"] == 2.0 and ours["table writes/step timed"] == 0
    assert ours["stock / this"] == ours["fastest other / this"] == pytest.approx(statistics.median([2.0, 0.8] * 2))
    assert times["stock"]["fastest other / this"] == pytest.approx(statistics.median([0.5, 1.25] * 2))


def test_loops_time_the_floor_with_the_others_and_leave_it_out_of_the_fastest_other(monkeypatch):
    """The floor (no kernel) is timed in the same turns; it is no variant's "fastest other", and each row says its
    step and its static call over the floor's."""
    ms = {("stock", 0): 2.0, ("stock", "static"): 1.0, ("floor", 0): 0.5, ("floor", "static"): 0.25}
    log = []

    def calls(name):
        steps = [lambda: log.append((name, 0))]
        return loops.Compiled(measure.VARIANTS[1], steps, lambda: log.append((name, "static")), lambda: steps)

    def timed(call, device):
        call()
        return ms[log[-1]]

    monkeypatch.setattr(loops, "step_ms", timed)
    times = loops.time_in_turns({"stock": calls("stock"), "floor": calls("floor")}, 1, "cpu")
    assert times["stock"]["fastest other / this"] is None
    assert times["stock"]["over the floor: step, static"] == "4.00, 4.00"
    assert times["floor"]["over the floor: step, static"] == "1.00, 1.00"


def test_loops_count_compiles_by_frame_and_phase():
    """Recompiles are a frame's compiles after its first in the warm-up; a frame first compiled late is none; any
    compile after the warm-up is counted apart."""
    backend = loops.CountingInductor()
    backend.compiles = [(0, False, "warm-up"), (1, False, "warm-up"), (0, True, "warm-up"), (2, True, "warm-up"),
                        (0, True, "timed")]
    assert backend.counts() == {"graphs": 3, "recompiles": 1, "dynamic compiles": 3, "compiles after warm-up": 1,
                                "max compiles/frame": 3}


@pytest.mark.skipif(torch.cuda.is_available(), reason="the refusal is for machines without CUDA")
def test_loops_refuse_the_full_scale_without_cuda(tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_info:
        loops.main(["--out", str(tmp_path)])
    assert exit_info.value.code == 2 and "--scale tiny runs on the CPU" in capsys.readouterr().err
    assert not list(tmp_path.iterdir())
