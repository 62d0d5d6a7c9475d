"""compile_report through Dynamo: what torch.compile accepts, it accepts (module attributes that are neither
parameters nor buffers, closures, graph breaks); what cannot be traced is one TraceError naming the op."""

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from optimus_ir.inspect import TraceError, compile_report

ROOT = Path(__file__).resolve().parent.parent


class ReadsATensorAttribute(torch.nn.Module):
    """As torch_geometric's ``to_hetero`` models hold edge indices: a plain tensor attribute."""

    def __init__(self):
        super().__init__()
        self.index = torch.randint(0, 64, (32,))
        self.scale = torch.randn(16)
        self.linear = torch.nn.Linear(16, 16)

    def forward(self, x):
        return [torch.tanh(self.linear(x)[self.index] * self.scale) for _ in range(2)]


def test_a_module_reading_plain_tensor_attributes_compiles_forward_and_backward():
    report = compile_report(ReadsATensorAttribute(), (torch.randn(64, 16),))
    assert [graph.name for graph in report.graphs] == ["forward", "backward"]
    assert report.launches and any(r.fired for r in report.rewrites)


def test_a_closure_over_tensors_compiles():
    tables = [torch.randn(32, 8) for _ in range(8)]

    def features(*xs):
        return [torch.sigmoid(x + table) for x, table in zip(xs, tables)]

    inputs = tuple(torch.randn(32, 8) for _ in tables)
    report = compile_report(features, inputs)
    stock = compile_report(features, inputs, passes=None)
    assert len(stock.launches) == 8 and len(report.launches) == 1


def test_a_graph_break_gives_one_report_per_graph():
    def two_graphs(x):
        y = torch.tanh(x)
        if y.sum() > 0:  # data-dependent: Dynamo breaks the graph here
            return torch.sigmoid(y)
        return torch.relu(y)

    report = compile_report(two_graphs, (torch.ones(8, 8),))
    assert [graph.name for graph in report.graphs] == ["inference", "inference"]


def _grouped_mm(a, b, offs):
    return torch._grouped_mm(a, b, offs=offs)


_FP32_GROUPED_MM = (torch.randn(32, 16), torch.randn(4, 16, 8), torch.tensor([8, 16, 24, 32], dtype=torch.int32))


@pytest.mark.skipif(torch.cuda.is_available(), reason="traces the CPU's kernel choice")
def test_an_op_the_cpu_cannot_trace_is_named_with_the_way_out():
    with pytest.raises(TraceError) as raised:
        compile_report(_grouped_mm, _FP32_GROUPED_MM)
    message = str(raised.value)
    assert message.startswith("tracing failed in aten._grouped_mm.default (RuntimeError: Expected inputs of BF16")
    assert message.endswith("on a machine with a GPU, pass CUDA tensors (and the module on the GPU) to trace as "
                            "torch.compile does there")


@pytest.mark.skipif(torch.cuda.is_available(), reason="traces the CPU's kernel choice")
def test_the_command_line_answers_an_untraceable_target_in_one_line():
    environ = {k: v for k, v in os.environ.items() if not k.startswith("OPTIMUS_IR")}
    inputs = ("torch.randn(32, 16), torch.randn(4, 16, 8), torch.tensor([8, 16, 24, 32], dtype=torch.int32)")
    result = subprocess.run(
        [sys.executable, "-m", "optimus_ir", "report", "tests.test_inspect:_grouped_mm", "--inputs", inputs],
        cwd=ROOT, env=environ, capture_output=True, text=True, timeout=600,
    )
    assert result.returncode == 2
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith("python -m optimus_ir: error: tracing failed in aten._grouped_mm.default"), last
    assert "Traceback" not in result.stderr


@torch.library.custom_op("optimus_ir_test::doubled", mutates_args=())
def _doubled(x: torch.Tensor, counts: torch.Tensor) -> torch.Tensor:
    return x * 2


@_doubled.register_fake
def _(x, counts):
    return torch.empty_like(x)


def _backward_reading_a_count(ctx, grad):
    # data-dependent, as transformers' grouped-mm fallback's backward on CUDA
    return grad * int(ctx.counts.sum().item()), None


_doubled.register_autograd(_backward_reading_a_count, setup_context=lambda ctx, inputs, output: setattr(
    ctx, "counts", inputs[1]))


def test_a_graph_torch_compile_leaves_to_eager_is_named_not_raised():
    def f(x, counts):
        return torch.tanh(_doubled(torch.sigmoid(x), counts)) + 1

    inputs = (torch.randn(8, 16, requires_grad=True), torch.tensor([1, 2]))
    with pytest.warns(UserWarning, match=r"left to eager, as torch.compile leaves it: tracing failed in "
                                         r"aten._local_scalar_dense.default \(DataDependentOutputException"):
        report = compile_report(f, inputs)
    assert report.graphs == []


def test_a_mix_order_reductions_partial_sums_count_as_launches():
    """Inductor fuses a large layer norm's weight and bias gradients into its row kernel (a mix-order reduction,
    at least 4096 rows and 5M elements), whose partial sums the wrapper adds with one ATen ``sum`` each."""
    norm = torch.nn.LayerNorm(640)
    report = compile_report(norm, (torch.randn(8192, 640, requires_grad=True),), passes=None)
    backward = report.graphs[1]
    assert "workspace_0" in backward.wrapper
    assert backward.launches[1:] == ["aten.sum", "aten.sum"]
    assert backward.launches[0].startswith("triton_per_fused_native_layer_norm")
