"""Host time per call, stock Inductor against optimus_ir: where per-call time is the host's (launch-bound
workloads), what the member tables cost there. For each case: microseconds of host time per call (a loop of calls
timed on the host, the GPU never the bottleneck for these sizes: checked by the replay column of suite.py), how
much of it is spent inside Inductor's compiled graphs (the rest is Dynamo's guards and AOTAutograd's wrappers), and
how many member tables were written per call (a table is written only when its tensors' addresses are new).

    python benchmarks/host_overhead.py --out DIR [--only multitask tanh_storm]
"""

from __future__ import annotations

import argparse
import cProfile
import sys
import time
from pathlib import Path
from typing import Any
from unittest import mock

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from measure import VARIANTS, cold_compile, header, variant_context, write_results  # noqa: E402
from suite import Case, prepare  # noqa: E402

from torch._inductor.output_code import CompiledFxGraph  # noqa: E402

from optimus_ir.runtime import MemberTable  # noqa: E402

CASES = [
    Case(name, "small", "fp32", "inference")
    for name in ("multitask", "tanh_storm", "dlrm", "gelu_storm", "layernorm_storm", "rowsum_storm")
]
WARMUP, CALLS = 20, 300


def counting_table_writes() -> Any:
    """``MemberTable._write`` patched to count its calls (``.call_count``): the tables written (a lookup that
    missed the cache), not taken from it."""
    return mock.patch.object(MemberTable, "_write", autospec=True, side_effect=MemberTable._write)


def host_us_per_call(call, calls: int = CALLS) -> float:
    for _ in range(WARMUP):
        call()
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(calls):
        call()
    host = time.perf_counter() - start
    torch.cuda.synchronize()
    return host / calls * 1e6


def inductor_call_us_per_call(call, calls: int = CALLS) -> float:
    """Host microseconds per call spent inside Inductor's compiled graphs (``CompiledFxGraph.__call__``: the
    wrapper's ``call``, its asserts, allocations, tables and launches); the rest of a call is Dynamo's guards and
    the AOTAutograd wrappers, which no kernel-level rewrite changes."""
    inside = [0.0]
    real_call = CompiledFxGraph.__call__

    def timed(self, inputs):
        start = time.perf_counter()
        try:
            return real_call(self, inputs)
        finally:
            inside[0] += time.perf_counter() - start

    with mock.patch.object(CompiledFxGraph, "__call__", timed):
        for _ in range(WARMUP):
            call()
        inside[0] = 0.0
        for _ in range(calls):
            call()
        torch.cuda.synchronize()
    return inside[0] / calls * 1e6


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--only", nargs="*")
    parser.add_argument("--profile", action="store_true", help="print where optimus_ir's host time goes (cProfile)")
    args = parser.parse_args()
    rows = []
    for case in [c for c in CASES if not args.only or c.workload in args.only]:
        for variant in [v for v in VARIANTS if v.name in ("stock", "optimus_ir")]:
            torch._dynamo.reset()
            with cold_compile(), variant_context(variant):
                call, _, _ = prepare(case, variant.compile)
                with counting_table_writes() as writes:
                    us = host_us_per_call(call)
                inside_us = inductor_call_us_per_call(call)
                if args.profile and variant.name == "optimus_ir":
                    cProfile.runctx("host_us_per_call(call, 1000)", globals(), {"call": call}, sort="tottime")
            rows.append({
                "workload": case.workload, "variant": variant.name, "host us/call": round(us, 1),
                "in Inductor's call us": round(inside_us, 1),
                "tables written/call": round(writes.call_count / (WARMUP + CALLS), 3),
            })
            print(rows[-1], flush=True)
    write_results(args.out, "host_overhead", header(" ".join(sys.argv)), rows, list(rows[0]))


if __name__ == "__main__":
    main()
