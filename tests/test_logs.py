"""What a user of Inductor looks at to see what a pass did: ``TORCH_LOGS`` and ``torch._dynamo.utils.counters``."""

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import torch
from torch._dynamo.utils import counters

from optimus_ir.inspect import compile_report

ROOT = Path(__file__).resolve().parent.parent

_PROGRAM = textwrap.dedent(
    """
    import torch
    from optimus_ir.inspect import compile_report

    def f(*xs):
        return [torch.tanh(x) for x in xs]

    compile_report(f, tuple(torch.randn(64, 256) for _ in range(4)))
    """
)


def _stderr_with(torch_logs: str) -> list[str]:
    environ = {k: v for k, v in os.environ.items() if not k.startswith("OPTIMUS_IR")}
    environ["TORCH_LOGS"] = torch_logs
    result = subprocess.run(
        [sys.executable, "-c", _PROGRAM], cwd=ROOT, env=environ, capture_output=True, text=True, timeout=600
    )
    assert result.returncode == 0, result.stderr
    return [line for line in result.stderr.splitlines() if "records.py" in line or "merging.py" in line]


def test_torch_logs_optimus_ir_logs_each_decision_in_one_line():
    lines = _stderr_with("optimus_ir")
    assert any("FIRED    IdenticalKernelsToMemberTableKernel on op0, op1, op2, op3: 4 kernels → one kernel" in line
               for line in lines), lines
    assert any("FIRED    InputAssertsToOneCheck" in line for line in lines), lines
    assert not any("merging.py" in line for line in lines), lines  # the details are DEBUG


def test_torch_logs_plus_optimus_ir_adds_the_details():
    lines = _stderr_with("+optimus_ir")
    assert any("merging.py" in line and "estimated" in line for line in lines), lines
    assert any("FIRED    IdenticalKernelsToMemberTableKernel" in line for line in lines), lines


def test_counters_count_each_rule_fired_and_rejected():
    counters.clear()
    xs = tuple(torch.randn(64, 256) for _ in range(4)) + (torch.randn(2048, 2048), torch.randn(2056, 2048))
    # four tanh merge: one decision; two transposes of different tiles do not run over one flat index (they would
    # cost the device more than a launch): one decision each, with its estimate; then the tanh's group and the
    # transposes, each kept in its tiles, are one kernel of classes: one decision
    compile_report(lambda *xs: [torch.tanh(x) for x in xs[:4]] + [(x.t() * 2).contiguous() for x in xs[4:]], xs)
    assert counters["optimus_ir"]["IdenticalKernelsToMemberTableKernel"] == 2
    assert counters["optimus_ir"]["IdenticalKernelsToMemberTableKernel_rejected"] == 2
    assert counters["optimus_ir"]["InputAssertsToOneCheck"] == 1
    counters.clear()
    compile_report(lambda x: torch.cat([torch.relu(p) for p in x.split(8, 1)], 1), (torch.randn(4, 64),))
    assert counters["optimus_ir"]["SplitCatToPointwise"] == 1
    assert "IdenticalKernelsToMemberTableKernel" not in counters["optimus_ir"]
