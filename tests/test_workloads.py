"""The benchmark suite's workloads and the parts of its runner that need no GPU, on the CPU, at the tiny size."""

import argparse
import json
import sys
from pathlib import Path

import pytest
import torch

BENCHMARKS = Path(__file__).resolve().parent.parent / "benchmarks"
sys.path.insert(0, str(BENCHMARKS))

import measure  # noqa: E402
import suite  # noqa: E402
from workloads import SIZES, WORKLOADS, make_optimizer, output_loss, train_step  # noqa: E402


@pytest.mark.parametrize("name", list(WORKLOADS))
def test_workload_forward_and_training_step(name):
    model, inputs = WORKLOADS[name].make("tiny")
    with torch.no_grad():
        output = model(*inputs)
    outputs = output if isinstance(output, tuple) else (output,)
    assert all(torch.isfinite(o).all() for o in outputs)

    optimizer = make_optimizer(model)
    losses = [float(train_step(model, optimizer, inputs)) for _ in range(3)]
    grads = [p.grad for p in model.parameters()]
    assert all(g is not None and torch.isfinite(g).all() for g in grads)
    assert losses[-1] < losses[0]


def test_every_workload_has_every_size():
    assert all(tuple(workload.configs) == SIZES for workload in WORKLOADS.values())


def test_make_is_seeded():
    first_model, first_inputs = WORKLOADS["dlrm"].make("tiny")
    second_model, second_inputs = WORKLOADS["dlrm"].make("tiny")
    assert all(torch.equal(a, b) for a, b in zip(first_inputs, second_inputs))
    assert all(torch.equal(a, b) for a, b in zip(first_model.parameters(), second_model.parameters()))


def test_output_loss_sums_every_output():
    outputs = (torch.full((2, 3), 2.0), torch.full((4,), 3.0, dtype=torch.bfloat16))
    assert output_loss(outputs).item() == 4.0 + 9.0
    assert output_loss(outputs[0]).item() == 4.0


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
    assert suite._case("dlrm/large/bf16/training") == suite.Case("dlrm", "large", "bf16", "training")
    for wrong in ("dlrm/large/bf16", "dlrm/huge/bf16/training", "nope/small/fp32/inference"):
        with pytest.raises(argparse.ArgumentTypeError):
            suite._case(wrong)


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


def test_plot(tmp_path):
    pytest.importorskip("matplotlib")
    import plot

    rows = [
        {"workload": "dlrm", "mode": "inference", "variant": "stock", "kernels/call": 115.0, "ms/call": 0.4},
        {"workload": "dlrm", "mode": "inference", "variant": "optimus_ir", "error": "boom"},
    ]
    plot.plot({"meta": {"device": "test"}, "rows": rows}, tmp_path / "out.png")
    assert (tmp_path / "out.png").stat().st_size > 0


def test_split_chain_backward_in_bf16_folds_pieces_that_read_buffers_of_undecided_layout():
    """In the bf16 backward of two layers of the split chain ([256, 256]), some pieces read buffers whose layout
    Inductor had not fixed yet; the rule fixes them as they are and folds every cat (a rejection before), and the
    gradients are eager's."""
    from workloads import SplitActivationChain

    from optimus_ir import enabled
    from optimus_ir.inspect import compile_report
    from optimus_ir.interpret import cpu_triton_interpreter

    torch.manual_seed(0)
    model = SplitActivationChain(256, 2).to(torch.bfloat16)
    x = torch.randn(256, 256, dtype=torch.bfloat16)

    def loss(x, *scales):
        return output_loss(torch.func.functional_call(model, dict(zip(names, scales)), (x,)))

    names = [name for name, _ in model.named_parameters()]
    scales = [p.detach().clone().requires_grad_() for p in model.parameters()]
    report = compile_report(loss, (x, *scales))
    decisions = [r for r in report.rewrites if r.rule == "SplitCatToPointwise"]
    assert len(decisions) == 3 and all(r.fired for r in decisions), [r.detail for r in decisions]
    expected = torch.autograd.grad(loss(x, *scales), scales)
    with enabled(), cpu_triton_interpreter():
        actual = torch.autograd.grad(torch.compile(loss)(x, *scales), scales)
    torch.testing.assert_close(actual, expected, rtol=2e-2, atol=2e-2)
