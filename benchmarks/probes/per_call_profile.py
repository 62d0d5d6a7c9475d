"""Where a call's time goes, stock Inductor against optimus_ir, for cases whose time per call differs more than
their GPU time does: the suite's per-call timing (CUDA events around each call, synchronized), host time of a loop
of calls, member tables written per call, and a profile of synchronized calls (host ops and GPU kernels).

    python -m benchmarks per-call-profile --out DIR --cases multitask/small/fp32/inference \
        [--order optimus_ir stock optimus_ir stock]
    python -m benchmarks per-call-profile --out DIR --cases sparse-arch-100/training   # a real model's case

Variants are measured in ``--order``, each compiled cold (the suite measures optimus_ir last, after four others: a
variant measured again after another tells the order's effect from the variant's). Writes
DIR/per_call_profile.{json,md} and DIR/per_call_profile_<case>_<position>_<variant>.txt (the profiles).
"""

from __future__ import annotations

import argparse
import gc
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from torch.profiler import ProfilerActivity, profile

from benchmarks.measure import (
    VARIANTS,
    cold_compile,
    counting_table_writes,
    cuda_time_ms,
    header,
    host_us_per_call,
    variant_context,
    write_results,
)
from benchmarks.real_models import make_call, prepared_case
from benchmarks.suite import parse_case, prepare

PROFILED_CALLS = 20


def profile_text(call) -> str:
    """Profile of ``PROFILED_CALLS`` calls, each synchronized: the top host ops by self CPU time, then the top GPU
    kernels by their time."""
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for _ in range(PROFILED_CALLS):
            call()
            torch.cuda.synchronize()
    averages = prof.key_averages()
    return "\n\n".join(
        (
            f"{PROFILED_CALLS} synchronized calls; by self CPU time",
            averages.table(sort_by="self_cpu_time_total", row_limit=30, max_name_column_width=80),
            "by self CUDA time",
            averages.table(sort_by="self_device_time_total", row_limit=20, max_name_column_width=80),
        )
    )


def _call(case: str) -> tuple[Callable[[], Any], str]:
    """The compiled call of ``case`` (first call made) and its label: a suite case (``W/S/D/M``) or a real model's
    (``model/mode``: the real suite's call, a training step's loss in eager)."""
    if case.count("/") != 1:
        parsed = parse_case(case)
        return prepare(parsed, True)[0], parsed.label
    _, mode, module, inputs = prepared_case(case, "cuda")
    call = make_call(torch.compile(module), inputs, mode, list(module.parameters()))
    call()
    return call, case


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--cases", nargs="+", required=True, metavar="W/S/D/M|MODEL/MODE",
                        help="suite cases (workload/size/dtype/mode) or real models' (model/mode)")
    parser.add_argument("--order", nargs="+", choices=("stock", "optimus_ir"), default=["stock", "optimus_ir"])
    args = parser.parse_args()
    variants = {v.name: v for v in VARIANTS}
    args.out.mkdir(parents=True, exist_ok=True)
    rows = []
    for case in args.cases:
        for position, variant in enumerate(variants[name] for name in args.order):
            torch._dynamo.reset()
            with cold_compile(), variant_context(variant), counting_table_writes() as writes:
                call, label = _call(case)
                written_at_compile = writes.call_count
                synced_ms = cuda_time_ms(call)
                host_us = host_us_per_call(call)
                synced_again_ms = cuda_time_ms(call)
                text = profile_text(call)
            name = f"{label.replace('/', '_')}_{position}_{variant.name}"
            (args.out / f"per_call_profile_{name}.txt").write_text(text)
            rows.append(
                {
                    "case": label,
                    "variant": variant.name,
                    "position": position,
                    "ms/call (synchronized)": synced_ms,
                    "host us/call (loop)": host_us,
                    "ms/call (synchronized, again)": synced_again_ms,
                    "tables written after the first call": writes.call_count - written_at_compile,
                }
            )
            print(rows[-1], flush=True)
            del call
            gc.collect()
            torch.cuda.empty_cache()
    write_results(args.out, "per_call_profile", header(" ".join(sys.argv)), rows, list(rows[0]))


if __name__ == "__main__":
    main()
