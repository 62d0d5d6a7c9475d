"""On a real GPU: the random storms and odd cases of ``tests/test_horizontal_random.py``, with their tensors on CUDA
(0-d tensors stay on the CPU), through the horizontal pass against stock Inductor and eager.

    python benchmarks/random_storms_check.py --out DIR [--storms N] [--odd-cases N] [--first-storm S]
        [--first-odd-case S] [--budget-s SECONDS]

(the seeds of the test by default; ``--storms 200`` checks seeds 0-199, ``--first-storm 24 --storms 50`` seeds
24-73, beyond the test's; ``--budget-s``: no case is started once that many seconds are spent, the checked ones
are written).

The interpreter that runs them in CI does not fault on a misaligned address or race between blocks; the GPU does,
and the cases include inputs at odd offsets (sliced, split, offset views). For each case: the groups the pass
merged, the largest difference from stock's result and from eager's, each over what the dtype allows (below 1
passes): stock, 1e-5 relative for fp32 and float64 (a merged reduction may take another config, so another
order of additions), one 16-bit rounding step otherwise; eager, ``test_horizontal_random``'s tolerances, or
stock's own distance from eager where that is larger (a long sum in bf16 can be beyond the tolerance for stock too).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))
sys.path.insert(0, str(ROOT / "tests"))
from measure import header, write_results  # noqa: E402
from test_horizontal_random import (  # noqa: E402
    ODD_CASES,
    STORMS,
    low_precision,
    odd_case,
    run_compiled,
    run_eager,
    storm,
)


def worst(actual: tuple, expected: tuple, atol: float, rtol: float) -> float:
    """The largest ``|a - e| / (atol + rtol * |e|)`` over the floating-point tensors (integers and bools: 0 where
    equal, inf where not)."""
    result = 0.0
    for a, e in zip(actual, expected, strict=True):
        if a.dtype != e.dtype or a.shape != e.shape:
            return float("inf")
        if not a.dtype.is_floating_point:
            result = max(result, 0.0 if torch.equal(a, e) else float("inf"))
            continue
        a64, e64 = a.detach().double(), e.detach().double()
        result = max(result, float(((a64 - e64).abs() / (atol + rtol * e64.abs())).max()) if a.numel() else 0.0)
    return result


def check(case: str, seed: int, device: str = "cuda") -> dict:
    fn, inputs, description = (storm if case == "storm" else odd_case)(seed, device)
    dynamic, backward = description["kind"] == "dynamic", description["kind"] == "training"
    actual, actual_inputs, records = run_compiled(fn, inputs, True, dynamic, backward)
    stock, stock_inputs, _ = run_compiled(fn, inputs, False, dynamic, backward)
    eager, eager_inputs = run_eager(fn, inputs, backward)
    sixteen_bit = low_precision(description)
    stock_tolerance = (1e-2, 1e-2) if sixteen_bit else (1e-6, 1e-5)
    eager_tolerance = (2e-2, 2e-2) if sixteen_bit else (1e-4, 1e-4)
    versus_stock = max(worst(actual, stock, *stock_tolerance), worst(actual_inputs, stock_inputs, *stock_tolerance))
    versus_eager = max(worst(actual, eager, *eager_tolerance), worst(actual_inputs, eager_inputs, *eager_tolerance))
    stock_versus_eager = max(worst(stock, eager, *eager_tolerance), worst(stock_inputs, eager_inputs, *eager_tolerance))
    errors = [r.detail for r in records if "internal error" in r.detail]
    return {
        "case": f"{case} {seed}",
        "description": " ".join(f"{k}={v}" for k, v in description.items()).replace("torch.", ""),
        "merged groups (members each)": " ".join(str(len(r.nodes)) for r in records if r.fired),
        "vs stock / allowed": versus_stock,
        "vs eager / allowed": versus_eager,
        "stock vs eager / allowed": stock_versus_eager,
        # no further from eager than stock is, where stock too is beyond the tolerance (a long bf16 sum)
        "ok": versus_stock < 1 and versus_eager < max(1.0, stock_versus_eager * (1 + 1e-9)) and not errors,
        "errors": "; ".join(errors),
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--storms", type=int, default=len(STORMS))
    parser.add_argument("--odd-cases", type=int, default=len(ODD_CASES))
    parser.add_argument("--first-storm", type=int, default=0, help="the first storm's seed")
    parser.add_argument("--first-odd-case", type=int, default=0, help="the first odd case's seed")
    parser.add_argument("--budget-s", type=float, default=None, help="check no case once this many seconds are spent")
    args = parser.parse_args()
    assert torch.cuda.is_available(), "run this on a GPU machine"
    start = time.monotonic()
    rows = []
    for case, seeds in (
        ("storm", range(args.first_storm, args.first_storm + args.storms)),
        ("odd", range(args.first_odd_case, args.first_odd_case + args.odd_cases)),
    ):
        for seed in seeds:
            if args.budget_s is not None and time.monotonic() - start > args.budget_s:
                break
            try:
                rows.append(check(case, seed))
            except Exception as error:  # record it, check the rest
                rows.append({"case": f"{case} {seed}", "ok": False, "errors": f"{error!r}"[:500]})
            print(rows[-1], flush=True)
    print(f"{sum(bool(r.get('ok')) for r in rows)} of {len(rows)} ok", flush=True)
    columns = ["case", "ok", "merged groups (members each)", "vs stock / allowed", "vs eager / allowed",
               "stock vs eager / allowed", "description", "errors"]
    write_results(args.out, "random_storms_check", header(" ".join(sys.argv)), rows, columns)


if __name__ == "__main__":
    main()
