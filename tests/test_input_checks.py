"""InputAssertsToOneCheck: a graph's input asserts as one check in its wrapper (golden), where it must not fire,
and the run-time check (``optimus_ir.runtime.InputChecks``): stock's asserts and errors wherever it cannot vouch.

InputAlignmentCheckedByMemberTables: the inputs only merged kernels read leave Inductor's alignment check before
each call (golden), where it must not fire, and the member table's own check (``MemberTable``'s ``aligned``)."""

import gc
import weakref
from unittest import mock

import pytest
import torch
from torch._inductor import output_code
from torch._inductor.graph import GraphLowering

import optimus_ir
from optimus_ir.inspect import compile_report
from optimus_ir.interpret import cpu_triton_interpreter
from optimus_ir.records import recording
from optimus_ir.runtime import InputChecks, MemberTable
from optimus_ir.scheduler_hooks.horizontal.kernel import MemberTableKernel
from optimus_ir.scheduler_hooks.horizontal.tuning import MAX_DIRECT_MEMBERS

from golden import assert_golden

RULE = "InputAssertsToOneCheck"
ALIGNMENT_RULE = "InputAlignmentCheckedByMemberTables"


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


def test_inputs_of_symbolic_sizes_are_checked_in_the_one_check_their_symbols_in_one_tuple():
    codes = []
    stock_asserts = mock.patch.object(InputChecks, "assert_size_stride", autospec=True,
                                      side_effect=InputChecks.assert_size_stride)
    with optimus_ir.enabled(), cpu_triton_interpreter(), recording() as records, stock_asserts as asserted, \
            mock.patch.object(GraphLowering, "save_output_code", codes.append):
        compiled = torch.compile(tanh_scale_each)
        for rows in (64, 48, 48, 40):
            inputs = [torch.randn(rows, 256), torch.randn(64, 256), torch.randn(64, 256)]
            torch._dynamo.mark_dynamic(inputs[0], 0)
            torch.testing.assert_close(compiled(*inputs), tanh_scale_each(*inputs))
    [code] = codes  # one compile: the first input's rows are a symbol
    [fired] = [r for r in records if r.rule == RULE]
    assert fired.detail == ("3 inputs' assert_size_stride → one check (1 symbolic sizes or strides compared in one "
                            "tuple)")
    assert _checks_in(code)[1:] == [
        "if not (input_checks.check(arg1_1, arg2_1, arg3_1) and (arg1_1.size(0),) == (s31,)):",
        "input_checks.assert_size_stride(arg1_1, arg2_1, arg3_1, symbols=(s31,))",
    ]
    assert asserted.call_count == 1  # the first call only: the check passes at each new size


def test_input_checks_of_a_symbolic_size_raise_stocks_error_for_a_wrong_one():
    a, b = torch.randn(4, 8), torch.randn(8)
    checks = InputChecks([((None, 8), (8, 1)), ((8,), (1,))])
    checks.assert_size_stride(a, b, symbols=(4,))
    assert checks.check(torch.randn(6, 8), b)  # the symbolic rows: the wrapper compares them with the call's symbol
    assert not checks.check(torch.randn(6, 9)[:, :8], b)  # a static stride differs
    with pytest.raises(AssertionError, match=r"expected size 4==5, stride 8==8 at dim=0"):
        checks.assert_size_stride(a, b, symbols=(5,))


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


def test_input_checks_vouch_for_a_dimension_of_size_one_whatever_its_stride_as_stocks_asserts_do():
    a = torch.randn(1, 8).as_strided((1, 8), (99, 1))  # stock's assert ignores a size-1 dimension's stride
    checks = InputChecks([((1, 8), (8, 1)), ((None, 8), (8, 1))])
    checks.assert_size_stride(a, torch.randn(3, 8), symbols=(3,))
    assert checks.check(a, torch.randn(5, 8))


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


# ------------------------------------------------------------------------------------- alignment in the tables


def _alignment_checked(fn, inputs, passes="all"):
    """The compile's report, and the inputs its compiled graph checks for alignment before each call."""
    checked = []
    stock = output_code.align_inputs_from_check_idxs

    def spy(model, inputs_to_check, mutated):
        checked.append(list(inputs_to_check))
        return stock(model, inputs_to_check, mutated)

    with mock.patch.object(output_code, "align_inputs_from_check_idxs", spy):
        report = compile_report(fn, inputs, passes=passes)
    [inputs_to_check] = checked
    return report, inputs_to_check


def test_golden_alignment_of_inputs_only_merged_kernels_read():
    # the sixth input is read by a stock kernel too (its row sum): Inductor keeps checking it
    def fn(*xs):
        return [torch.tanh(x) * 2.0 for x in xs] + [xs[5].sum(1)]

    inputs = [torch.randn(64, 256) for _ in range(6)]
    _, stock_checked = _alignment_checked(fn, inputs, passes=None)
    report, checked = _alignment_checked(fn, inputs)
    assert (stock_checked, checked) == ([0, 1, 2, 3, 4, 5], [5])
    [fired] = [r for r in report.rewrites if r.rule == ALIGNMENT_RULE]
    assert fired.fired and fired.nodes == ("arg0_1", "arg1_1", "arg2_1", "arg3_1", "arg4_1")
    [table] = [line.strip() for line in report.wrapper.splitlines() if " = MemberTable(" in line]
    assert_golden("input_alignment_tanh_6", f"inputs_to_check = {checked}\n{table}\n")


def test_inputs_updated_in_place_keep_inductors_alignment_check():
    # Inductor copies a misaligned input it updates back after the call; a table's copy would not be
    def fn(*params):
        for p in params:
            p.mul_(0.5)

    count = MAX_DIRECT_MEMBERS + 1  # (fewer: no table, their tensors the kernel's arguments, Inductor's to check)
    report, checked = _alignment_checked(fn, [torch.randn(64, 256) for _ in range(count)])
    assert any(r.rule == "IdenticalKernelsToMemberTableKernel" and r.fired for r in report.rewrites)
    assert checked == list(range(count))
    [kept] = [r for r in report.rewrites if r.rule == ALIGNMENT_RULE]
    assert not kept.fired and "updated in place" in kept.detail


def test_inputs_of_a_merged_kernel_that_fell_back_are_checked_by_inductor_again(rule_errors_fall_back):
    with mock.patch.object(MemberTableKernel, "codegen_static_numels", side_effect=RuntimeError("boom")):
        report, checked = _alignment_checked(tanh_scale_each, [torch.randn(64, 256) for _ in range(4)])
    assert len(report.launches) == 4 and checked == [0, 1, 2, 3]
    fired, again = [r for r in report.rewrites if r.rule == ALIGNMENT_RULE]
    assert fired.fired and not again.fired and "fell back" in again.detail


def test_member_table_copies_a_misaligned_input_to_aligned_memory_for_that_call_only():
    table = MemberTable(starts=[0, 1024], numels=[10, 10], pad_to=2, aligned=[0, 1])
    aligned, storage = torch.randn(16), torch.randn(17)
    misaligned = storage[1:11]  # 4 bytes past a 16-byte boundary
    assert aligned.data_ptr() % 16 == 0 and misaligned.data_ptr() % 16 == 4
    first = table(aligned, misaligned)
    [_, copy] = first.optimus_ir_copies  # alive as long as the table the call uses
    assert copy.data_ptr() % 16 == 0 and torch.equal(copy, misaligned)
    assert first.tolist()[4:] == [aligned.data_ptr(), copy.data_ptr()]
    storage.add_(1)  # new values at the same address: a new copy, not the last call's table
    second = table(aligned, misaligned)
    assert torch.equal(second.optimus_ir_copies[1], misaligned) and not torch.equal(copy, misaligned)
    cached = table(aligned, aligned)  # all aligned: cached by the addresses, no copies
    assert table(aligned, aligned) is cached and not hasattr(cached, "optimus_ir_copies")
    assert cached.tolist()[4:] == [aligned.data_ptr(), aligned.data_ptr()]

