"""InputAssertsToOneCheck: a graph's input asserts as one check in its wrapper (golden), where it must not fire,
and the run-time check (``optimus_ir.runtime.InputChecks``): stock's asserts and errors wherever it cannot vouch."""

import gc
import weakref
from unittest import mock

import pytest
import torch
from torch._inductor.graph import GraphLowering

import optimus_ir
from optimus_ir.inspect import compile_report
from optimus_ir.interpret import cpu_triton_interpreter
from optimus_ir.registry import recording
from optimus_ir.runtime import InputChecks

from golden import assert_golden

RULE = "InputAssertsToOneCheck"


def tanh_scale_each(*xs):
    return [torch.tanh(x) * 2.0 for x in xs]


def _checks_in(wrapper):
    """The lines of a wrapper that check its inputs (the module's InputChecks, and the start of ``call``)."""
    return [line.strip() for line in wrapper.splitlines()
            if "input_checks" in line or line.strip().startswith("assert_size_stride(")]


def test_golden_input_checks_of_a_storm():
    inputs = [torch.randn(64, 256) for _ in range(5)] + [torch.randn(32, 96).t()]
    stock = compile_report(tanh_scale_each, inputs, passes=None)
    report = compile_report(tanh_scale_each, inputs, passes="all")
    assert len(_checks_in(stock.wrapper)) == 6  # one assert per input
    [fired] = [r for r in report.rewrites if r.rule == RULE]
    assert fired.fired and fired.detail == "6 inputs' assert_size_stride → one check"
    assert_golden("input_checks_tanh_6", "\n".join(_checks_in(report.wrapper)) + "\n")


def test_a_graph_of_one_input_keeps_its_assert():
    report = compile_report(tanh_scale_each, [torch.randn(64, 256)], passes="all")
    assert not [r for r in report.rewrites if r.rule == RULE]
    assert _checks_in(report.wrapper) == ["assert_size_stride(arg0_1, (64, 256), (256, 1))"]


def test_inputs_of_symbolic_sizes_keep_their_asserts():
    codes = []
    with optimus_ir.enabled(), cpu_triton_interpreter(), recording() as records, \
            mock.patch.object(GraphLowering, "save_output_code", codes.append):
        compiled = torch.compile(tanh_scale_each)
        for rows in (64, 48):
            inputs = [torch.randn(rows, 256), torch.randn(64, 256), torch.randn(64, 256)]
            torch._dynamo.mark_dynamic(inputs[0], 0)
            torch.testing.assert_close(compiled(*inputs), tanh_scale_each(*inputs))
    [code] = codes  # one compile: the first input's rows are a symbol
    [fired] = [r for r in records if r.rule == RULE]
    assert fired.detail == "2 inputs' assert_size_stride → one check; 1 line(s) kept (symbolic sizes)"
    checks = _checks_in(code)
    assert [line for line in checks if line.startswith("assert_size_stride(")] == [
        "assert_size_stride(arg1_1, (s31, 256), (256, 1))"]
    assert "if not input_checks.check(arg2_1, arg3_1):" in checks


def test_the_compiled_call_checks_once_with_stocks_asserts_then_in_one_call():
    inputs = [torch.randn(rows, 32) for rows in (4, 8, 8, 16)]
    expected = tanh_scale_each(*inputs)
    stock_asserts = mock.patch.object(InputChecks, "assert_size_stride", autospec=True,
                                      side_effect=InputChecks.assert_size_stride)
    with optimus_ir.enabled(), cpu_triton_interpreter(), recording() as records, stock_asserts as asserted:
        compiled = torch.compile(tanh_scale_each)
        for call in range(3):
            torch.testing.assert_close(compiled(*inputs), expected)
            assert asserted.call_count == 1, call  # the first call only
    assert [r.fired for r in records if r.rule == RULE] == [True]


# ------------------------------------------------------------------------------------------- InputChecks


def _checks_of(*tensors):
    return InputChecks([(tuple(t.shape), t.stride()) for t in tensors])


def test_input_checks_vouch_only_for_the_layouts_of_inputs_that_passed_stocks_asserts():
    a, b = torch.randn(4, 8), torch.randn(8)
    checks = _checks_of(a, b)
    assert not checks.check(a, b)  # nothing passed yet
    checks.assert_size_stride(a, b)
    assert checks.check(torch.randn(4, 8), torch.randn(8))
    assert not checks.check(torch.randn(8, 4).t(), torch.randn(8))  # other strides
    assert not checks.check(torch.randn(4, 9)[:, :8], torch.randn(8))
    assert not checks.check(torch.randn(4, 8, dtype=torch.float64), torch.randn(8))


def test_input_checks_raise_stocks_error_for_a_wrong_layout():
    a = torch.randn(4, 8)
    checks = _checks_of(a, a)
    with pytest.raises(AssertionError, match=r"expected size 4==4, stride 1==8 at dim=0"):
        checks.assert_size_stride(a, torch.randn(8, 4).t())
    assert not checks.check(a, torch.randn(4, 8))  # a failed assert arms nothing


def test_input_checks_follow_a_change_of_mode_and_stop_remaking_after_a_few():
    a, b = torch.randn(4, 8), torch.randn(4, 8)
    checks = _checks_of(a, b)
    checks.assert_size_stride(a, b)
    assert checks.check(a, b) and not checks.check(a, a)  # the same tensor twice: stock's asserts run
    with torch.inference_mode():
        assert not checks.check(a, b)  # other dispatch keys: stock's asserts run ...
        checks.assert_size_stride(a, b)
        assert checks.check(a, b)  # ... and the check follows
    for _ in range(InputChecks._REMADE_AT_MOST):
        checks.assert_size_stride(a, b)
    with torch.inference_mode():
        checks.assert_size_stride(a, b)
        assert not checks.check(a, b)  # remade at most _REMADE_AT_MOST times: the last stays


def test_input_checks_keep_no_input_alive():
    a, b = torch.randn(4, 8), torch.randn(4, 8)
    checks = _checks_of(a, b)
    checks.assert_size_stride(a, b)
    gone = weakref.ref(a)
    del a
    gc.collect()
    assert gone() is None
    assert checks.check(torch.randn(4, 8), b)
