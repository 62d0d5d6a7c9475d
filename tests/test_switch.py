"""The switch: OPTIMUS_IR through torch's backend entry point, enable/disable, and the cache keys."""

import json
import os
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

import pytest
import torch

import optimus_ir
from optimus_ir import passes, patches
from optimus_ir.inspect import compile_report
from optimus_ir.records import recording


def _run_python(code: str, **env: str) -> dict:
    """Run ``code`` in a fresh interpreter with ``env`` (None values unset); it prints one JSON line."""
    environ = {k: v for k, v in os.environ.items() if not k.startswith("OPTIMUS_IR")}
    environ.update(env)
    result = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)], env=environ, capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout.strip().splitlines()[-1])


_PROBE = """
import json, sys, warnings
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    import torch
state = {
    "inductor_imported": "torch._inductor" in sys.modules,
    "our_modules": sorted(m for m in sys.modules if m.startswith("optimus_ir")),
    "warnings": [str(w.message) for w in caught if "optimus_ir" in str(w.message)],
}
import optimus_ir
state["enabled"] = sorted(optimus_ir.enabled_passes())
import torch._inductor.config as config
state["post_grad_pass"] = type(config.post_grad_custom_post_pass).__name__
print(json.dumps(state))
"""


def test_unset_variable_touches_nothing():
    state = _run_python(_PROBE)
    assert state["inductor_imported"] is False
    # the entry point ran (optimus_ir.switch is imported) and did nothing else
    assert state["our_modules"] == [
        "optimus_ir", "optimus_ir.after_import", "optimus_ir.passes", "optimus_ir.records", "optimus_ir.switch",
        "optimus_ir.torch_versions", "optimus_ir.version",
    ]
    assert state["enabled"] == []
    assert state["post_grad_pass"] == "NoneType"


@pytest.mark.parametrize(
    "value, expected",
    [("1", ["horizontal", "splitcat"]), ("splitcat", ["splitcat"]), ("all,-SplitCatToPointwise", ["horizontal",
     "splitcat"]), ("0", [])],
)
def test_variable_enables_passes_lazily(value, expected):
    state = _run_python(_PROBE, OPTIMUS_IR=value)
    assert state["inductor_imported"] is False  # import torch stays light even when enabled
    assert state["enabled"] == expected
    assert state["post_grad_pass"] == ("OptimusGraphPass" if expected else "NoneType")


def test_bad_variable_warns_and_leaves_torch_importable():
    state = _run_python(_PROBE, OPTIMUS_IR="splitcat,nonsense")
    assert state["enabled"] == []
    assert any("nonsense" in w for w in state["warnings"])


def test_parse_passes():
    assert passes.parse_passes("all") == set(passes.PASSES)
    assert passes.parse_passes(" Splitcat , horizontal ") == {"splitcat", "horizontal"}
    assert passes.parse_passes("off") == set()
    assert passes.parse_passes(None) == set()
    with pytest.raises(ValueError, match="nonsense"):
        passes.parse_passes(["nonsense"])


def test_parse_switch_names_rules_one_by_one():
    every = frozenset(passes.PASSES)
    off = passes.parse_switch("all,-SplitCatToPointwise")
    assert off == passes.Switch(every, every, frozenset(), frozenset({"SplitCatToPointwise"}))
    assert passes.parse_switch("-SplitCatToPointwise") == off
    assert not off.applies("SplitCatToPointwise", "splitcat") and off.applies("CatConsumerIntoPieces", "splitcat")
    one_more = passes.parse_switch("splitcat, IndependentMatmulsToGroupedMatmul")
    assert one_more.passes == every  # the named rule's pass runs, its other rules do not apply
    assert one_more.applies("IndependentMatmulsToGroupedMatmul", "horizontal")
    assert not one_more.applies("IdenticalKernelsToMemberTableKernel", "horizontal")
    assert one_more.applies("SplitCatToPointwise", "splitcat")
    with pytest.raises(ValueError, match="'splitcats'"):
        passes.parse_switch("all,splitcats")


def _rules_recorded(spec):
    torch._dynamo.reset()
    report = compile_report(_split_relu_cat, (torch.randn(64, 4096),), passes=spec)
    return {r.rule for r in report.rewrites}, len(report.launches)


def test_a_rule_switched_off_or_alone_on_the_virtual_device():
    every, launches = _rules_recorded("all")
    assert "SplitCatToPointwise" in every and launches == 1
    without, _ = _rules_recorded("all,-SplitCatToPointwise")  # the horizontal pass merges the 64 relus instead
    assert "SplitCatToPointwise" not in without and "IdenticalKernelsToMemberTableKernel" in without
    alone, launches = _rules_recorded("SplitCatToPointwise")
    assert alone == {"SplitCatToPointwise"} and launches == 1


def test_the_rules_switched_are_in_the_cache_key_and_an_unknown_name_is_warned_of(caplog):
    graph_pass = patches._pass_classes()[0](None)
    with optimus_ir.enabled("all"):
        every = graph_pass.uuid()
    with optimus_ir.enabled("all,-SplitCatToPointwise"):
        assert graph_pass.uuid() != every
    with optimus_ir.enabled("all,-NoSuchRule"), caplog.at_level("WARNING", logger="optimus_ir"):
        graph_pass(torch.fx.Graph())
        graph_pass(torch.fx.Graph())
    assert [r.getMessage() for r in caplog.records if "NoSuchRule" in r.getMessage()] == [
        "optimus_ir: the switch names no rule NoSuchRule (`python -m optimus_ir rules` lists them)"]


def test_enable_disable_and_context_restore_every_hook():
    import torch._inductor.config as config
    from torch._inductor.codegen.wrapper import PythonWrapperCodegen
    from torch._inductor.lowering import lowerings

    stock_cat = lowerings[torch.ops.aten.cat.default]
    stock_asserts = PythonWrapperCodegen.codegen_input_size_asserts
    user_pass = config.post_grad_custom_post_pass
    assert optimus_ir.enabled_passes() == set()
    with optimus_ir.enabled("splitcat") as passes:
        assert passes == {"splitcat"}
        ours = config.post_grad_custom_post_pass
        assert type(ours).__name__ == "OptimusGraphPass"
        assert type(config.joint_custom_post_pass).__name__ == "OptimusJointPass"
        ours(torch.fx.Graph())  # what Inductor does before lowering: installs the lowering override
        assert lowerings[torch.ops.aten.cat.default] is not stock_cat
        assert PythonWrapperCodegen.codegen_input_size_asserts is not stock_asserts
        with optimus_ir.enabled(None):
            assert optimus_ir.enabled_passes() == set()
            assert lowerings[torch.ops.aten.cat.default] is stock_cat
            assert PythonWrapperCodegen.codegen_input_size_asserts is stock_asserts
        assert optimus_ir.enabled_passes() == {"splitcat"}
    assert optimus_ir.enabled_passes() == set()
    assert config.post_grad_custom_post_pass is user_pass
    assert lowerings[torch.ops.aten.cat.default] is stock_cat
    assert PythonWrapperCodegen.codegen_input_size_asserts is stock_asserts
    assert config._post_fusion_custom_pass is None
    assert config.joint_custom_post_pass is None


def test_disable_puts_back_every_patched_object_and_enabling_twice_patches_once():
    """Every replacement goes through ``patches.PATCHES``: after a compile with every pass and the dump on, each
    replaced attribute and lowering is what it was before, and enabling again replaces nothing twice."""
    import torch._inductor.config as config
    from torch._inductor import memory
    from torch._inductor.codecache import FxGraphCache
    from torch._inductor.codegen import triton as triton_codegen
    from torch._inductor.codegen.simd import SIMDScheduling
    from torch._inductor.codegen.triton_combo_kernel import ComboKernel
    from torch._inductor.codegen.wrapper import PythonWrapperCodegen
    from torch._inductor.graph import GraphLowering
    from torch._inductor.lowering import lowerings

    from optimus_ir.inspect import compile_report

    watched = [
        (config, "post_grad_custom_post_pass"), (config, "joint_custom_post_pass"),
        (config, "_pre_fusion_custom_pass"), (config, "_post_fusion_custom_pass"),
        (GraphLowering, "_update_scheduler"), (GraphLowering, "save_output_code"),
        (PythonWrapperCodegen, "codegen_input_size_asserts"), (PythonWrapperCodegen, "codegen_free"),
        (SIMDScheduling, "codegen_combo_kernel"), (triton_codegen, "get_fused_kernel_name"),
        (FxGraphCache, "load_with_key"), (ComboKernel, "__init__"),
        (memory, "compute_size_for_scheduler_buffer"), (memory, "get_freeable_input_buf"),
    ]
    before = {(id(owner), name): getattr(owner, name) for owner, name in watched}
    stock_lowerings = dict(lowerings)
    with pytest.MonkeyPatch.context() as env:
        env.setenv("OPTIMUS_IR_DUMP", str(Path(tempfile.mkdtemp())))
        with optimus_ir.enabled():
            compile_report(_split_relu_cat, (torch.randn(4, 96),), passes="all")
            optimus_ir.enable()  # again: nothing is replaced twice
            config.post_grad_custom_post_pass(torch.fx.Graph())
            applied = patches.PATCHES.applied()
            keys = [(id(a.owner), a.name) for a in applied]
            assert len(keys) == len(set(keys))
            assert {(id(owner), name) for owner, name in watched[:-3]} <= set(keys)
            for a in applied:  # each replacement wraps the original, never one of ours
                assert a.original is not a.replacement
    assert patches.PATCHES.applied() == []
    for owner, name in watched:
        assert getattr(owner, name) is before[(id(owner), name)], name
    assert dict(lowerings) == stock_lowerings


def _many_ops(x: torch.Tensor) -> torch.Tensor:
    y = x.sin().cos().tanh().sigmoid().exp().log1p().abs().neg().relu().floor().ceil().round()
    y = y.sqrt().rsqrt().reciprocal().sign().erf().expm1().trunc().frac().atan().asinh().sinh()
    return y.cosh().acos().asin().atanh().lgamma().digamma()


def test_kernel_names_fit_tritons_cubin_file_names():
    """A kernel fused from many ops is named within the 150 characters of Triton's cubin file names (so that the
    static launcher finds it); stock's name of the same kernel is longer."""
    from optimus_ir.inspect import compile_report

    (stock,) = compile_report(_many_ops, (torch.randn(64, 64),), passes=None).kernels
    (ours,) = compile_report(_many_ops, (torch.randn(64, 64),), passes="all").kernels
    assert len(stock.name) > 150
    assert len(ours.name) <= 150 and stock.name.startswith(ours.name.rsplit("_", 1)[0])


def test_user_post_grad_pass_is_chained_and_keyed():
    import torch._inductor.config as config
    from torch._inductor.custom_graph_pass import CustomGraphPass

    calls = []

    class UserPass(CustomGraphPass):
        def __call__(self, graph):
            calls.append(graph)

        def uuid(self):
            return "user-pass-v1"

    with torch._inductor.config.patch(post_grad_custom_post_pass=UserPass()):
        with optimus_ir.enabled():
            ours = config.post_grad_custom_post_pass
            graph = torch.fx.Graph()
            ours(graph)
            assert calls == [graph]
            assert "user-pass-v1" in ours.uuid()
        assert isinstance(config.post_grad_custom_post_pass, UserPass)


def _split_relu_cat(x):
    return torch.cat([torch.relu(p) for p in reversed(x.split(8, 1))], 1)


def test_cache_keys_separate_passes_and_package_versions(tmp_path, monkeypatch):
    """With the FX-graph and AOTAutograd caches on, a graph compiled with other passes, or by another
    optimus_ir, must never be served."""
    from torch._dynamo.utils import counters

    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path))
    x = torch.randn(4, 96)

    def compile_once():
        torch._dynamo.reset()
        counters.clear()
        with recording() as records:
            out = torch.compile(_split_relu_cat)(x)
        torch.testing.assert_close(out, _split_relu_cat(x))
        fired = any(r.fired and r.rule == "SplitCatToPointwise" for r in records)
        return counters["inductor"]["fxgraph_cache_hit"], counters["aot_autograd"]["autograd_cache_hit"], fired

    with torch._inductor.config.patch(fx_graph_cache=True, force_disable_caches=False), \
            torch._functorch.config.patch(enable_autograd_cache=True):
        assert compile_once() == (0, 0, False)  # stock, cold
        assert compile_once()[:2] != (0, 0)  # stock again: served from a cache
        with optimus_ir.enabled("splitcat"):
            assert compile_once() == (0, 0, True)  # passes on: a miss, and the rule ran
            assert compile_once()[:2] != (0, 0)  # same passes: a hit
            patches.package_identity.cache_clear()
            monkeypatch.setattr(patches, "package_identity", lambda: "0.0.0+older")
            assert compile_once() == (0, 0, True)  # another optimus_ir: a miss
        assert compile_once()[:2] != (0, 0)  # off again: the stock entry is served


def test_scheduler_and_graph_rules_seconds_are_in_inductors_compile_time_metrics():
    """Each scheduler rule's and graph rule's time is a ``dynamo_timed`` entry of its own, beside Inductor's phases,
    so that ``torch._dynamo.utils.compile_times()`` shows what optimus_ir adds to a compile."""
    from torch._dynamo.utils import compilation_time_metrics

    from optimus_ir.registry import RULES
    from optimus_ir.rule import GraphRule, SchedulerRule

    x = torch.randn(4, 96)
    with torch._inductor.config.patch(force_disable_caches=True):
        compilation_time_metrics.clear()
        torch._dynamo.reset()
        torch.compile(_split_relu_cat)(x)
        assert not [key for key in compilation_time_metrics if key.startswith("optimus_ir.")]
        with optimus_ir.enabled():
            torch._dynamo.reset()
            torch.compile(_split_relu_cat)(x)
    timed = {key: values for key, values in compilation_time_metrics.items() if key.startswith("optimus_ir.")}
    assert set(timed) == {f"optimus_ir.{rule.name}" for rule in RULES if isinstance(rule, (SchedulerRule, GraphRule))}
    assert all(len(values) == 1 and values[0] >= 0 for values in timed.values())
    assert "Scheduler.__init__" in compilation_time_metrics


@pytest.mark.parametrize("version", ["2.10.0", "2.15.0+cu130"])
def test_a_torch_optimus_ir_is_not_checked_with_gets_one_warning_and_stock_inductor(monkeypatch, caplog, version):
    from optimus_ir import records

    monkeypatch.setattr(torch, "__version__", version)
    monkeypatch.setattr(records, "_warned", set())

    def fn(*xs):
        return [torch.tanh(x) for x in xs]

    inputs = tuple(torch.randn(64, 256) for _ in range(4))
    with caplog.at_level("WARNING", logger="optimus_ir"):
        optimus_ir.enable()
        assert optimus_ir.enabled_passes() == frozenset()
        optimus_ir.enable("splitcat")
        report = compile_report(fn, inputs, passes="all")
    warnings = [r.getMessage() for r in caplog.records if "is not a release" in r.getMessage()]
    assert warnings == [f"optimus_ir: torch {version} is not a release optimus_ir is checked with (2.11); optimus_ir "
                        "stays off and Inductor compiles as shipped"]
    assert len(report.launches) == 4 and not report.rewrites
