"""benchmarks/summary.py: which run each case comes from, and what it reports against optimus_ir; the other
benchmark scripts' hooks into optimus_ir."""

import json
import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))

import summary  # noqa: E402


def _row(variant, ms, peak=4.0, err=1e-7, **case):
    fields = dict(workload="dlrm", size="small", dtype="fp32", mode="inference") | case
    return fields | {"variant": variant, "kernels/call": 10, "ms/call": ms, "replay ms": ms / 2, "peak MiB": peak,
                     "max rel err": err, "first call s": 1.0}


def _run(tmp_path, name, rows):
    path = tmp_path / name / "suite.json"
    path.parent.mkdir()
    path.write_text(json.dumps({"meta": {}, "rows": rows}))
    return path


def test_each_case_comes_from_the_last_run_that_measured_it(tmp_path):
    old = _run(tmp_path, "old", [_row("stock", 2.0), _row("optimus_ir", 1.0), _row("stock", 2.0, mode="training"),
                                 _row("optimus_ir", 1.0, mode="training")])
    new = _run(tmp_path, "new", [_row("stock", 3.0), _row("optimus_ir", 1.5),
                                 _row("stock", 3.0, mode="training"), {**_row("optimus_ir", 1.0, mode="training"),
                                                                       "error": "RuntimeError"}])
    cases = summary.latest_cases([old, new])
    assert cases[("dlrm", "small", "fp32", "inference")][0] == new
    assert cases[("dlrm", "small", "fp32", "training")][0] == old  # the new run's optimus_ir row failed


def test_findings_report_slowdowns_memory_and_errors_beyond_noise_and_tolerance():
    case = ("dlrm", "small", "bf16", "inference")
    same = {"stock": _row("stock", 1.0), "optimus_ir": _row("optimus_ir", 1.04)}
    assert summary.findings(case, same) == []
    worse = {"stock": _row("stock", 1.0, err=1e-3), "optimus_ir": _row("optimus_ir", 1.2, peak=8.0, err=2e-2)}
    notes = summary.findings(case, worse)
    assert len(notes) == 4 and "per call" in notes[0] and "replay" in notes[1] and "peak" in notes[2]
    within_bf16_tolerance = {"stock": _row("stock", 1.0, err=1e-6), "optimus_ir": _row("optimus_ir", 1.0, err=3e-3)}
    assert summary.findings(case, within_bf16_tolerance) == []
    assert summary.findings(("dlrm", "small", "fp32", "inference"), within_bf16_tolerance)


def test_the_benchmarks_count_member_table_writes_through_a_method_the_table_has():
    """host_overhead.py and per_call_profile.py count misses by patching ``MemberTable._write``."""
    import host_overhead
    from optimus_ir.runtime import MemberTable

    table = MemberTable(starts=[0, 1024], numels=[10, 20], pad_to=2)
    a, b = torch.zeros(1), torch.zeros(1)
    with host_overhead.counting_table_writes() as writes:
        table(a, b)
        table(a, b)
        table(b, a)
    assert writes.call_count == 2


@pytest.mark.parametrize(
    "shapes", [[(4, 3)] * 5, [(2 + i, 3) for i in range(5)], [()] * 5, [(3, 2), (5,), ()]],
    ids=["same shape", "rows of different counts", "0-d", "unalike"],
)
def test_the_ledgers_floor_makes_new_outputs_every_call_and_runs_nothing_else(shapes):
    """per_call_ledger.py's fresh-outputs variant: each call returns new tensors shaped as the function's outputs
    (the last call's are not reused), whatever the inputs hold."""
    import per_call_ledger

    def fn(*xs):
        return [x * 2 for x in xs]

    inputs = [torch.randn(shape) for shape in shapes]
    fresh = per_call_ledger.compiled_fresh_outputs(fn, fn(*inputs))
    first, second = fresh(*inputs), fresh(*inputs)
    assert [tuple(t.shape) for t in first] == [tuple(t.shape) for t in second] == [tuple(s) for s in shapes]
    assert not {t.data_ptr() for t in first if t.numel()} & {t.data_ptr() for t in second if t.numel()}
    assert not any(t._is_view() for t in first)
