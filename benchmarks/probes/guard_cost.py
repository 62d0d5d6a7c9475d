"""What the stock guard costs a compile: seconds of ``compile_report`` (code generation, no Triton compile) with the
guard (a graph a lowering rule changed is lowered a second time, stock) and without it (``GUARD_MAX_NODES = 0``),
each the best of ``--repeats`` alternating runs, on golden cases and a suite workload.

    python -m benchmarks guard-cost --out benchmarks/results/<date>
"""

from __future__ import annotations

import argparse
import contextlib
import sys
import time
from pathlib import Path
from unittest import mock

import torch

from benchmarks.measure import header, write_results
from optimus_ir import stock_guard
from optimus_ir.inspect import compile_report
from optimus_ir.testing.golden_cases import CASES
from optimus_ir.testing.workloads import WORKLOADS

GOLDEN = ("split64_relu_cat_reversed", "split_ops_cat_chain3", "embedding_bags_training")


def _targets() -> dict[str, tuple]:
    targets = {c.name: (c.fn, c.make_inputs, False) for c in CASES if c.name in GOLDEN}
    model, inputs = WORKLOADS["dlrm"].make("small", torch.float32, "cpu")
    targets["dlrm small, inference"] = (model, lambda: inputs, True)
    return targets


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--repeats", type=int, default=2)
    args = parser.parse_args()
    rows = []
    for name, (fn, make_inputs, inference) in _targets().items():
        seconds: dict[bool, list[float]] = {True: [], False: []}
        for _ in range(args.repeats):
            for guarded in (False, True):
                limit = stock_guard.GUARD_MAX_NODES if guarded else 0
                with mock.patch.object(stock_guard, "GUARD_MAX_NODES", limit), \
                        torch.no_grad() if inference else contextlib.nullcontext():
                    start = time.perf_counter()
                    compile_report(fn, make_inputs())
                    seconds[guarded].append(time.perf_counter() - start)
        without, with_guard = min(seconds[False]), min(seconds[True])
        rows.append({"target": name, "without guard, s": round(without, 2), "with guard, s": round(with_guard, 2),
                     "ratio": round(with_guard / without, 2)})
    write_results(args.out, "guard_cost", header(" ".join(sys.argv)), rows,
                  ["target", "without guard, s", "with guard, s", "ratio"])


if __name__ == "__main__":
    main()
