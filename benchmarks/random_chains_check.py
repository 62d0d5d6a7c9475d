"""On a real GPU: the random split → op → cat chains of ``tests/test_split_cat_random.py`` on CUDA, through all
passes, against stock Inductor and eager.

    python benchmarks/random_chains_check.py --out DIR [--chains N]

For each chain: the rules that fired, and the largest difference from stock's and from eager's result over what
the test allows (below 1 passes): 1e-5 in fp32, 2e-2 in bf16 (a fused chain keeps fp32 between layers).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))
sys.path.insert(0, str(ROOT / "tests"))
from measure import header, write_results  # noqa: E402
from random_storms_check import worst  # noqa: E402
from test_split_cat_random import CHAINS, chain  # noqa: E402

import optimus_ir  # noqa: E402
from optimus_ir.registry import recording  # noqa: E402


def check(seed: int) -> dict:
    fn, x, description = chain(seed, "cuda")
    expected = fn(x.clone())
    results = {}
    for passes in (None, "all"):
        torch._dynamo.reset()
        with optimus_ir.enabled(passes), recording() as records:
            results[passes] = torch.compile(fn)(x.clone())
    tolerance = (1e-5, 1e-5) if description["dtype"] == torch.float32 else (2e-2, 2e-2)
    versus_stock = worst((results["all"],), (results[None],), *tolerance)
    versus_eager = worst((results["all"],), (expected,), *tolerance)
    errors = [r.detail for r in records if "internal error" in r.detail]
    return {
        "chain": seed,
        "ok": versus_stock < 1 and versus_eager < 1 and not errors,
        "fired": " ".join(sorted({r.rule for r in records if r.fired})),
        "vs stock / allowed": versus_stock,
        "vs eager / allowed": versus_eager,
        "description": " ".join(f"{k}={v}" for k, v in description.items()).replace("torch.", ""),
        "errors": "; ".join(errors),
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--chains", type=int, default=len(CHAINS))
    args = parser.parse_args()
    assert torch.cuda.is_available(), "run this on a GPU machine"
    rows = []
    for seed in range(args.chains):
        try:
            rows.append(check(seed))
        except Exception as error:  # record it, check the rest
            rows.append({"chain": seed, "ok": False, "errors": f"{error!r}"[:500]})
        print(rows[-1], flush=True)
    print(f"{sum(bool(r.get('ok')) for r in rows)} of {len(rows)} ok", flush=True)
    columns = ["chain", "ok", "fired", "vs stock / allowed", "vs eager / allowed", "description", "errors"]
    write_results(args.out, "random_chains_check", header(" ".join(sys.argv)), rows, columns)


if __name__ == "__main__":
    main()
