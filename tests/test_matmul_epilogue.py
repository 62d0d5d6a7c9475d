"""MatmulBiasReluToAddmmActivation: nn.Linear then nn.ReLU as one ATen call, what it refuses, and the numerics
against eager through Triton's interpreter (where ATen's call on the CPU is addmm then relu)."""

import torch
import torch.nn as nn

import optimus_ir
from optimus_ir.inspect import compile_report
from optimus_ir.interpret import cpu_triton_interpreter
from optimus_ir.records import recording

RULE = "MatmulBiasReluToAddmmActivation"


def _mlp() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 32), nn.ReLU(), nn.Linear(32, 1))


def test_linear_then_relu_is_one_call_instead_of_a_matmul_and_a_kernel():
    x = torch.randn(256, 64)
    with torch.no_grad():
        stock = compile_report(_mlp(), (x,), passes=None)
        report = compile_report(_mlp(), (x,), passes="splitcat")
    assert stock.launches == ["extern_kernels.mm", "triton_poi_fused_addmm_relu_0", "extern_kernels.mm",
                              "triton_poi_fused_addmm_relu_1", "extern_kernels.addmm"]
    assert report.launches == ["torch.ops.aten._addmm_activation.default"] * 2 + ["extern_kernels.addmm"]
    assert "extern_kernels.mm(" not in report.wrapper  # the matmuls left unread are gone
    assert len([r for r in report.rewrites if r.rule == RULE and r.fired]) == 2


def test_numerics_in_the_interpreter_inference_and_training():
    x = torch.randn(256, 64)
    eager = _mlp()
    expected = eager(x)
    expected.sum().backward()
    model = _mlp()
    with optimus_ir.enabled("splitcat"), cpu_triton_interpreter(), recording() as records:
        actual = torch.compile(model)(x)
        actual.sum().backward()
    assert len([r for r in records if r.rule == RULE and r.fired]) == 2
    torch.testing.assert_close(actual, expected)
    for got, want in zip(model.parameters(), eager.parameters(), strict=True):
        torch.testing.assert_close(got.grad, want.grad)


def test_a_batch_that_changes_keeps_the_epilogue_and_its_numerics():
    # rows symbolic (automatic dynamic shapes): the same calls; the compiled code serves other batch sizes as eager
    x = torch.randn(256, 64)
    torch._dynamo.mark_dynamic(x, 0)
    with torch.no_grad():
        report = compile_report(_mlp(), (x,), passes="splitcat")
    assert report.launches == ["torch.ops.aten._addmm_activation.default"] * 2 + ["extern_kernels.addmm"]
    model = _mlp()
    torch._dynamo.utils.counters.clear()
    with optimus_ir.enabled("splitcat"), cpu_triton_interpreter(), recording() as records, torch.no_grad():
        compiled = torch.compile(model)  # static, then the batch a symbol (automatic dynamic shapes), then that
        for rows in (256, 100, 37):
            x = torch.randn(rows, 64)
            torch.testing.assert_close(compiled(x), model(x))
    assert torch._dynamo.utils.counters["stats"]["unique_graphs"] == 2
    assert len([r for r in records if r.rule == RULE and r.fired]) == 4


def test_a_pre_activation_read_elsewhere_or_a_computed_bias_stay_stock_with_the_reason():
    w, b = torch.randn(32, 64), torch.randn(32)

    def read_twice(x):
        h = x @ w.t() + b
        return torch.relu(h), h  # the pre-activation is an output too

    def computed_bias(x, b):
        return torch.relu(x @ w.t() + b * 2)

    x = torch.randn(16, 64)
    assert not [r for r in compile_report(read_twice, (x,)).rewrites if r.rule == RULE]
    report = compile_report(computed_bias, (x, b))
    (rejected,) = [r for r in report.rewrites if r.rule == RULE]
    assert not rejected.fired and "computed in the graph" in rejected.detail
