"""On a real GPU: the virtual sm_90 target's kernels equal the real device's, and the golden cases' numerics hold.

    python benchmarks/gpu_check.py --out benchmarks/results/<date>

For every golden case (tests/cases.py):
1. kernels: ``virtual_cuda.generate(..., virtual=True)`` (what CI sees) against the same call on the real GPU, and
   both against the golden file; normalized text must be identical;
2. numerics: ``torch.compile`` with optimus_ir on CUDA tensors against eager (and gradients for training cases),
   with the rules that must fire checked in the records.
"""

from __future__ import annotations

import difflib
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "benchmarks"))

import optimus_ir  # noqa: E402
from cases import CASES, backward_with_same_grads  # noqa: E402
from golden import GOLDEN_DIR, render  # noqa: E402
from measure import gpu_check_out_dir, header, write_results  # noqa: E402
from optimus_ir.inspect import report_for  # noqa: E402
from optimus_ir.registry import recording  # noqa: E402


def check_kernels(case) -> dict:
    real = report_for(case.fn, case.make_inputs(), passes="all", virtual=False)
    virtual = report_for(case.fn, case.make_inputs(), passes="all", virtual=True)
    stock_real = report_for(case.fn, case.make_inputs(), passes=None, virtual=False)
    stock_virtual = report_for(case.fn, case.make_inputs(), passes=None, virtual=True)
    real_text, virtual_text = render(real, stock_real), render(virtual, stock_virtual)
    golden_path = GOLDEN_DIR / f"{case.name}.txt"
    golden = golden_path.read_text() if golden_path.exists() else None
    diff = "".join(difflib.unified_diff(virtual_text.splitlines(True), real_text.splitlines(True), "virtual", "real"))
    return {
        "case": case.name,
        "launches real": len(real.launches),
        "launches virtual": len(virtual.launches),
        "virtual == real": real_text == virtual_text,
        "golden == real": golden == real_text,
        "diff": diff[:4000],
    }


def check_numerics(case) -> dict:
    inputs = tuple(x.detach().cuda().requires_grad_(x.requires_grad) for x in case.make_inputs())
    eager_inputs = tuple(x.detach().clone().requires_grad_(x.requires_grad) for x in inputs)
    expected = case.fn(*eager_inputs)
    torch._dynamo.reset()
    with optimus_ir.enabled(), recording() as records:
        actual = torch.compile(case.fn, fullgraph=True)(*inputs)
        backward_with_same_grads(actual, expected)
    fired = {r.rule for r in records if r.fired}
    ok = set(case.fired) <= fired
    try:
        torch.testing.assert_close(actual, expected, atol=case.atol, rtol=case.rtol)
        for x, x_eager in zip(inputs, eager_inputs):
            if x.requires_grad:
                torch.testing.assert_close(x.grad, x_eager.grad, atol=case.atol, rtol=case.rtol)
        error = ""
    except AssertionError as mismatch:
        ok, error = False, str(mismatch)[:500]
    return {"case": case.name, "numerics ok": ok, "fired": sorted(fired), "error": error}


def main() -> None:
    out = gpu_check_out_dir()
    rows = []
    for case in CASES:
        row = check_kernels(case) | check_numerics(case)
        rows.append(row)
        print({k: v for k, v in row.items() if k != "diff"}, flush=True)
        if row["diff"]:
            print(row["diff"])
    columns = ["case", "launches real", "launches virtual", "virtual == real", "golden == real", "numerics ok", "error"]
    write_results(out, "gpu_check", header(" ".join(sys.argv)), rows, columns)
    sys.exit(0 if all(r["virtual == real"] and r["numerics ok"] for r in rows) else 1)


if __name__ == "__main__":
    main()
