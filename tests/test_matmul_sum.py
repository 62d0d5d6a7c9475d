"""SharedOperandMatmulsToOneMatmul: matmuls of one left operand summed as one matmul (the node's own features in a
hetero GNN's per-type sum), what it leaves alone, and the numerics against eager through Triton's interpreter."""

import torch
import torch.nn as nn

import optimus_ir
from optimus_ir.inspect import compile_report
from optimus_ir.interpret import cpu_triton_interpreter
from optimus_ir.records import recording

RULE = "SharedOperandMatmulsToOneMatmul"


class TwoConvsIntoOneType(nn.Module):
    """Two SAGE-like convolutions summed into one node type: a Linear of each mean message, a Linear of the
    node's own features ``x`` per convolution (as torch_geometric's ``to_hetero`` writes them)."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.messages = nn.ModuleList(nn.Linear(64, 32) for _ in range(2))
        self.roots = nn.ModuleList(nn.Linear(64, 32, bias=False) for _ in range(2))

    def forward(self, x, s1, c1, s2, c2):
        first, second = ((message(s / c.clamp(min=1)) + root(x))
                         for (s, c), message, root in zip(((s1, c1), (s2, c2)), self.messages, self.roots))
        return torch.relu(first + second)


def _inputs(requires_grad: bool = False) -> tuple[torch.Tensor, ...]:
    torch.manual_seed(1)
    x, s1, s2 = (torch.randn(300, 64, requires_grad=requires_grad) for _ in range(3))
    return x, s1, torch.rand(300, 1) * 3, s2, torch.rand(300, 1) * 3


def test_the_node_features_go_through_one_matmul_instead_of_one_per_convolution():
    with torch.no_grad():
        stock = compile_report(TwoConvsIntoOneType(), _inputs(), passes=None)
        report = compile_report(TwoConvsIntoOneType(), _inputs(), passes="horizontal")
    assert stock.launches.count("extern_kernels.mm") == 4
    assert report.launches.count("extern_kernels.mm") == 3
    assert report.wrapper.count("extern_kernels.mm(arg0_1,") == 1  # x, the node's features: read by one matmul
    (fired,) = [r for r in report.rewrites if r.rule == RULE]
    assert fired.fired and fired.detail.startswith("2 matmuls of 1 left operand(s) (300x32) → 1,")


def test_on_the_cpu_inductor_writes_the_sum_as_addmms_the_rule_leaves():
    """Inductor's post-grad passes fold each add into an addmm on the CPU (a chain of them), so the interpreter's
    compile has no sum of matmuls; the numerics on a GPU are ``tests/gpu/test_matmul_rules_on_gpu.py``'s."""
    eager = TwoConvsIntoOneType()
    inputs = _inputs()
    with torch.no_grad(), optimus_ir.enabled("horizontal"), cpu_triton_interpreter(), recording() as records:
        actual = torch.compile(TwoConvsIntoOneType())(*inputs)
    assert not [r for r in records if r.rule == RULE and r.fired]
    torch.testing.assert_close(actual, eager(*inputs))


def test_products_read_elsewhere_or_of_other_operands_stay_stock():
    w1, w2, w3 = torch.randn(32, 64), torch.randn(32, 64), torch.randn(32, 64)

    def product_read_twice(x):
        p = x @ w1.t()
        return p + x @ w2.t(), p

    def other_operands(x, y):
        return x @ w1.t() + y @ w2.t()

    x, y = torch.randn(16, 64), torch.randn(16, 64)
    for fn, inputs in ((product_read_twice, (x,)), (other_operands, (x, y))):
        report = compile_report(fn, inputs)
        assert not [r for r in report.rewrites if r.rule == RULE]
        assert len([name for name in report.launches if name.startswith("extern_kernels.")]) == 2


def test_a_term_computed_inline_is_refused_with_the_reason():
    w1, w2 = torch.randn(32, 64), torch.randn(32, 64)

    def fn(x, y):
        return x @ w1.t() + x @ w2.t() + y * 2

    report = compile_report(fn, (torch.randn(16, 64), torch.randn(16, 32)))
    (rejected,) = [r for r in report.rewrites if r.rule == RULE]
    assert not rejected.fired and "computed inline" in rejected.detail
    assert report.launches.count("extern_kernels.mm") == 2
