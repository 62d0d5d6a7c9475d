"""Kernels Inductor tiles in 2-d (transposes, conv weights laid out for channels-last, slices of a channel split laid
out for convolutions) merged: in those tiles where the members have the same ones, else by running them over their
flat index where the cost model says the launch saved is worth more than the strided side's extra sectors
(``scheduler_hooks/horizontal/cost.py``), else as a class of a kernel of several bodies kept in its tiles: what
merges, what stays stock and why, numerics through Triton's interpreter."""

from unittest import mock

import torch

import optimus_ir
from optimus_ir.inspect import compile_report
from optimus_ir.interpret import cpu_triton_interpreter
from optimus_ir.records import recording
from optimus_ir.scheduler_hooks.horizontal import cost, tuning
from optimus_ir.scheduler_hooks.horizontal import rule as horizontal_rule

RULE = "IdenticalKernelsToMemberTableKernel"


def transposes(*xs):
    return [(x.t() * 2).contiguous() for x in xs]


def channels_last(*ws):
    return [torch.relu(w).contiguous(memory_format=torch.channels_last) for w in ws]


def _interpreted(fn, inputs):
    expected = fn(*inputs)
    torch._dynamo.reset()
    with optimus_ir.enabled("horizontal"), cpu_triton_interpreter():
        actual = torch.compile(fn)(*inputs)
    return actual, expected


def _refusals(report):
    return [r for r in report.rewrites if r.rule == RULE and not r.fired and "tiling ('y', 'x')" in r.detail]


def test_small_transposes_of_three_sizes_become_one_kernel_over_their_flat_index():
    inputs = [torch.randn(64 + 8 * (i % 3), 96) for i in range(32)]
    stock = compile_report(transposes, inputs, passes=None)
    report = compile_report(transposes, inputs, passes="horizontal")
    assert len(stock.launches) == 32 and "YBLOCK" in stock.kernels[0].source
    assert len(report.launches) == 1 and not _refusals(report)
    (kernel,) = report.kernels
    assert "YBLOCK" not in kernel.source and "xmember" in kernel.source
    actual, expected = _interpreted(transposes, inputs)
    torch.testing.assert_close(actual, expected)


def test_conv_weights_of_several_shapes_laid_out_for_channels_last_become_one_kernel():
    shapes = [(64, 32, 3, 3), (96, 64, 3, 3), (48, 16, 5, 5), (32, 32, 3, 3), (64, 48, 1, 7), (24, 8, 7, 1)]
    inputs = [torch.randn(shape) for shape in shapes]
    report = compile_report(channels_last, inputs, passes="horizontal")
    assert len(report.launches) == 1
    actual, expected = _interpreted(channels_last, inputs)
    torch.testing.assert_close(actual, expected)
    assert all(a.is_contiguous(memory_format=torch.channels_last) for a in actual)


def test_a_transpose_whose_flat_run_costs_more_than_a_launch_is_a_class_in_its_own_tiles():
    inputs = [torch.randn(64 + 8 * i, 96) for i in range(4)] + [torch.randn(500, 770)]
    report = compile_report(transposes, inputs, passes="horizontal")
    assert len(report.launches) == 1  # the four small ones over their flat index, the large one in 2-d tiles
    (kernel,) = report.kernels
    assert "xtile = xpid % " in kernel.source and f"XBLOCK // {tuning.CLASS_TILE_ROWS}" in kernel.source
    actual, expected = _interpreted(transposes, inputs)
    torch.testing.assert_close(actual, expected)


def test_a_transpose_that_whole_tiles_would_pad_too_much_keeps_its_2d_kernel():
    # 33 of x pad to 64 in tiles of its narrow width (1.94 times its work; to 128 in tiles of 32 rows): more than a
    # padding allowed at 1.5 (at the default 2 the tiles of one of those ways always fit a transpose this large)
    inputs = [torch.randn(64, 96), torch.randn(33, 4100)]
    with mock.patch.object(horizontal_rule, "MAX_PADDING", 1.5):
        report = compile_report(transposes, inputs, passes="horizontal")
    (refusal,) = _refusals(report)
    assert refusal.detail.startswith("no class of a kernel of several bodies")
    assert "more than the launch a merge saves" in refusal.detail and "more than 1.5 times its work" in refusal.detail
    assert len(report.launches) == 2 and not any("xtile" in k.source for k in report.kernels)


def test_conv_weights_whose_flat_run_costs_more_than_a_launch_are_classes_in_tiles_of_their_narrow_width():
    # a launch made worth nothing: every weight keeps its tiles, [out * in, kh * kw] with x the narrow kh * kw
    shapes = [(64, 32, 3, 3), (48, 16, 5, 5), (64, 16, 7, 1)]
    inputs = [torch.randn(shape) for shape in shapes * 2]
    with mock.patch.object(cost, "LAUNCH_DEVICE_US", 0.0):
        report = compile_report(channels_last, inputs, passes="horizontal")
        actual, expected = _interpreted(channels_last, inputs)
    assert len(report.launches) == 1
    (kernel,) = report.kernels
    # x of 9, 25 and 7: whole in tiles 16, 32 and 8 wide, rows as many as the block holds
    assert all(f"XBLOCK // {width}, {width})" in kernel.source for width in (16, 32, 8))
    torch.testing.assert_close(actual, expected)
    assert all(a.is_contiguous(memory_format=torch.channels_last) for a in actual)


def split_to_channels_last(x):
    """A channel split whose pieces are laid out for channels-last convolutions (MixNet's mixed depthwise convs)."""
    return [piece.contiguous(memory_format=torch.channels_last) for piece in torch.chunk(torch.sigmoid(x), 4, 1)]


def test_pieces_of_a_channel_split_laid_out_for_channels_last_become_one_kernel_in_tiles():
    x = torch.randn(4, 320, 28, 28)
    stock = compile_report(split_to_channels_last, [x], passes=None)
    report = compile_report(split_to_channels_last, [x], passes="horizontal")
    assert all("YBLOCK" in k.source for k in stock.kernels) and len(stock.launches) >= 4
    assert len(report.launches) == len(stock.launches) - 3
    assert any("ystart" in k.source for k in report.kernels)
    actual, expected = _interpreted(split_to_channels_last, [x])
    torch.testing.assert_close(actual, expected)
    assert all(a.is_contiguous(memory_format=torch.channels_last) for a in actual)


def test_transposes_of_symbolic_sizes_stay_stock_with_the_reason():
    """Dynamic shapes leave size symbols in the flat indices: their sectors are not known, so the model cannot weigh
    a flat run, and the kernels stay Inductor's 2-d ones."""
    inputs = [torch.randn(48 + 8 * i, 96) for i in range(4)]
    expected = transposes(*inputs)
    torch._dynamo.reset()
    with optimus_ir.enabled("horizontal"), cpu_triton_interpreter(), recording() as records:
        actual = torch.compile(transposes, dynamic=True)(*inputs)
    torch.testing.assert_close(actual, expected)
    assert not [r for r in records if r.rule == RULE and r.fired]
    (refusal,) = [r for r in records if "not known" in r.detail]
    assert refusal.nodes == ("op0", "op1", "op2", "op3")
