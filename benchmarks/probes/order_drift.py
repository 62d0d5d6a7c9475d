"""Whether a variant's ms per call in the real suite depends on when in the run it is measured: variants of one
real model and mode compiled and timed in the order given, a variant more than once (stock first and last, say).
Each is timed as the suite times it (CUDA events around each call, median), then again with Python's collector
frozen (``gc.freeze``: the objects earlier compiles left are no longer walked); the kernels' profiled durations
are the device's part. With ``--host-profile``, each variant's calls also run under cProfile, and the functions
that take the most host time per call are written after the table.

    python -m benchmarks order-drift --out DIR shufflenet-v2/inference --order stock optimus_ir stock [--host-profile]
"""

from __future__ import annotations

import argparse
import cProfile
import gc
import io
import pstats
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from benchmarks import real_models
from benchmarks.measure import (
    VARIANTS,
    cold_compile,
    cuda_time_ms,
    header,
    kernel_ms_per_call,
    kernels_per_call,
    variant_context,
    write_results,
)

REPEAT = 50
COLUMNS = ["position", "variant", "kernels/call", "ms/call", "ms/call, gc frozen", "GPU ms/call", "since start s"]
#: functions listed per variant by ``--host-profile``
PROFILED_TOP = 20


def host_profile(call: Callable[[], Any], calls: int = REPEAT) -> str:
    """The functions with the most host time of their own over ``calls`` calls (cProfile), as pstats prints them."""
    profiler = cProfile.Profile()
    profiler.enable()
    for _ in range(calls):
        call()
    torch.cuda.synchronize()
    profiler.disable()
    text = io.StringIO()
    pstats.Stats(profiler, stream=text).sort_stats("tottime").print_stats(PROFILED_TOP)
    return text.getvalue()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("case", help="model/mode of the real suite")
    parser.add_argument("--order", nargs="+", default=["stock", "optimus_ir", "stock"],
                        choices=[v.name for v in VARIANTS])
    parser.add_argument("--host-profile", action="store_true")
    args = parser.parse_args()
    name, mode, module, inputs = real_models.prepared_case(args.case, "cuda")
    params = list(module.parameters())
    variants = {v.name: v for v in VARIANTS}
    rows, profiles, start = [], [], time.perf_counter()
    for position, variant_name in enumerate(args.order):
        variant = variants[variant_name]
        with cold_compile(), variant_context(variant):
            call = real_models.make_call(torch.compile(module), inputs, mode, params)
            call()
            row = {"position": position, "variant": variant_name, "kernels/call": kernels_per_call(call),
                   "ms/call": cuda_time_ms(call, REPEAT, 5)}
            gc.collect()
            gc.freeze()
            try:
                row["ms/call, gc frozen"] = cuda_time_ms(call, REPEAT, 5)
            finally:
                gc.unfreeze()
            row["GPU ms/call"] = kernel_ms_per_call(call)
            if args.host_profile:
                profiles.append(f"## {position}: {variant_name}, {REPEAT} calls\n\n```\n{host_profile(call)}```\n")
        row["since start s"] = time.perf_counter() - start
        real_models.drop_grads(params)
        rows.append(row)
        print(row, flush=True)
    stem = f"order_drift_{name}_{mode}"
    write_results(args.out, stem, header(" ".join(sys.argv)), rows, COLUMNS)
    if profiles:
        (args.out / f"{stem}_host_profile.md").write_text("\n".join(profiles))
        print("\n".join(profiles))


if __name__ == "__main__":
    main()
