"""Kernels Inductor tiles in 2-d (transposes, conv weights laid out for channels-last, slices of a channel split laid
out for convolutions) merged: in those tiles where the members have the same ones, else by running them over their
flat index where the cost model says the launch saved is worth more than the strided side's extra sectors
(``scheduler_hooks/horizontal/cost.py``): what merges, what stays stock and why, numerics through Triton's
interpreter."""

import torch

import optimus_ir
from optimus_ir.inspect import compile_report
from optimus_ir.interpret import cpu_triton_interpreter
from optimus_ir.records import recording
from optimus_ir.scheduler_hooks.horizontal import cost

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


def test_a_transpose_whose_flat_run_costs_more_than_a_launch_keeps_its_2d_kernel():
    inputs = [torch.randn(64 + 8 * i, 96) for i in range(4)] + [torch.randn(2048, 2048)]
    report = compile_report(transposes, inputs, passes="horizontal")
    (refusal,) = _refusals(report)
    assert len(refusal.nodes) == 1 and refusal.detail.startswith("no class of a kernel of several bodies")
    assert "more than the launch a merge saves" in refusal.detail
    assert len(report.launches) == 2  # the four small ones as one, the large one in 2-d tiles
    large = [k for k in report.kernels if "YBLOCK" in k.source]
    assert len(large) == 1


def test_the_cost_of_a_flat_run_grows_with_the_transposes_size():
    """Two transposes of different sizes (no common tiles): merged over their flat index while the model's extra
    device time stays under the launch saved."""
    model = {}
    for n in (64, 128, 512, 2048):
        report = compile_report(transposes, [torch.randn(n, n), torch.randn(n + 8, n)], passes="horizontal")
        model[n] = (_refusals(report), len(report.launches))
    assert model[64] == ([], 1) and model[128] == ([], 1)
    assert all(refusals and launches == 2 for refusals, launches in (model[512], model[2048]))
    assert cost.LAUNCH_DEVICE_US > 0 and cost.EXTRA_SECTOR_BYTES_PER_US > 0


def _tiles_kernel(report):
    (kernel,) = report.kernels
    assert "YBLOCK" in kernel.source and "ystart" in kernel.source and "xmember" in kernel.source
    return kernel


def test_transposes_of_one_size_become_one_kernel_in_their_2d_tiles():
    """Large transposes whose flat run the model refuses: one kernel that keeps Inductor's tiles, the members one
    after another along y."""
    inputs = [torch.randn(640, 784) for _ in range(5)]
    report = compile_report(transposes, inputs, passes="horizontal")
    assert len(report.launches) == 1 and not _refusals(report)
    kernel = _tiles_kernel(report)
    assert "ystart // 1024" in kernel.source and "tl.program_id(2)" not in kernel.source
    (merge,) = [r for r in report.rewrites if r.rule == RULE and r.fired]
    assert "784 × 640 in 2-d tiles each" in merge.detail
    actual, expected = _interpreted(transposes, inputs)
    torch.testing.assert_close(actual, expected)


def test_members_in_2d_tiles_beyond_the_y_grid_spread_over_y_and_z():
    """70 members of 1000 rows padded to 1024: more rows than a y grid of 65535 blocks of one row can hold, so the
    grid goes over y and z, and blocks past the last member find no rows."""
    inputs = [torch.randn(4, 1000) for _ in range(70)]
    report = compile_report(transposes, inputs, passes="horizontal")
    assert len(report.launches) == 1
    kernel = _tiles_kernel(report)
    assert "tl.program_id(2)" in kernel.source and "Grid2DWithYZOverflow" in kernel.source
    actual, expected = _interpreted(transposes, inputs)
    torch.testing.assert_close(actual, expected)


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
