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


def test_a_user_who_set_nothing_else_sees_one_line_a_process(monkeypatch, caplog):
    """Each compiled graph logs one line at INFO: its launches, stock's where the compile lowered it both ways, the
    decisions fired for it; the process's first at WARNING (printed where no logging is configured), and
    ``OPTIMUS_IR_QUIET=1`` keeps that one at INFO too. The counters add them up."""
    from optimus_ir import summary

    monkeypatch.setattr(summary, "_state", {"shown": False})
    monkeypatch.delenv(summary.QUIET_ENV, raising=False)
    counters.clear()
    caplog.set_level("INFO", logger="optimus_ir")
    compile_report(lambda *xs: [torch.tanh(x) for x in xs], tuple(torch.randn(64, 256) for _ in range(4)))
    compile_report(lambda *xs: [torch.sigmoid(x) for x in xs], tuple(torch.randn(32, 256) for _ in range(3)))
    lines = [(r.levelname, r.getMessage()) for r in caplog.records if r.getMessage().startswith("optimus_ir: ")]
    assert [level for level, _ in lines] == ["WARNING", "INFO"], lines
    assert lines[0][1].startswith("optimus_ir: inference graph compiled: 1 kernel launch per call, 3 rule decisions "
                                  "fired"), lines
    assert "OPTIMUS_IR_QUIET=1" in lines[0][1] and "OPTIMUS_IR_QUIET" not in lines[1][1]
    assert counters["optimus_ir"]["graphs"] == 2 and counters["optimus_ir"]["launches"] == 2
    caplog.clear()
    monkeypatch.setattr(summary, "_state", {"shown": False})
    monkeypatch.setenv(summary.QUIET_ENV, "1")
    compile_report(lambda *xs: [torch.tanh(x) for x in xs], tuple(torch.randn(64, 256) for _ in range(4)))
    assert [r.levelname for r in caplog.records if r.getMessage().startswith("optimus_ir: ")] == ["INFO"]


def test_the_line_gives_stocks_launches_where_the_compile_lowered_the_graph_both_ways(caplog):
    # two mean aggregations into convolutions: a rule that may raise the peak fired, so the stock guard lowered
    # the graph without the rules too and compared their peaks
    from optimus_ir.testing.golden_cases import CASES

    (case,) = [c for c in CASES if c.name == "summed_mean_convs"]
    caplog.set_level("INFO", logger="optimus_ir")
    compile_report(case.fn, case.make_inputs())
    (line,) = [r.getMessage() for r in caplog.records if r.getMessage().startswith("optimus_ir: ")]
    assert (f"inference graph compiled: {case.stock_launches} -> {case.launches} kernel launch"
            f"{'' if case.launches == 1 else 'es'} per call (stock Inductor -> optimus_ir)") in line, line


def test_a_rule_that_runs_long_says_so_while_it_runs(monkeypatch, caplog):
    import time

    from optimus_ir import drivers

    monkeypatch.setattr(drivers, "PROGRESS_AFTER_S", 0.05)
    monkeypatch.delenv("OPTIMUS_IR_QUIET", raising=False)
    caplog.set_level("INFO", logger="optimus_ir")
    with drivers._running("SomeRule", 1234):
        time.sleep(0.5)
    with drivers._running("FastRule", 5):
        pass
    time.sleep(0.2)  # (past the fast rule's timer, had it not been cancelled)
    lines = [(r.levelname, r.getMessage()) for r in caplog.records if "still running" in r.getMessage()]
    assert lines == [("WARNING", "optimus_ir: SomeRule still running on 1234 nodes (0 s so far)")]
