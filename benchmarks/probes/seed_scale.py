"""Issue 33's seed at full size on the GPU: eager's time per call, and per variant the first call's seconds (a cold
compile, Triton's included), kernels and ms per call and the error against eager. Each variant runs in a process of
its own under a time limit, so that a compile that does not finish (stock's at 192 × 16) is a row that says so and
the next variant still runs.

The variant ``floor`` is the least any compiled call of the case costs: Dynamo's guards on every weight, the
weights passed as inputs, and compiled graphs that run no kernel after their first call
(``measure.runs_nothing_backend``). ``floor-no-guards`` the same called with Dynamo's guards skipped
(``torch.compiler.set_stance(skip_guard_eval_unsafe=True)``): what the guards on the weights cost. Neither runs a
kernel after the first call, so both are timed by the host's clock and run on the CPU too (``--device cpu``; the
other variants need a GPU).

    python -m benchmarks seed-scale --out DIR --cases seed-192x16/inference --variants optimus_ir stock --limit 400
    python -m benchmarks seed-scale --out DIR --device cpu --variants floor --cases seed-48x4/training ...
"""

from __future__ import annotations

import argparse
import contextlib
import json
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from benchmarks.measure import (
    VARIANTS,
    cold_compile,
    cuda_time_ms,
    header,
    max_rel_error,
    runs_nothing_backend,
    variant_context,
    write_results,
)
from benchmarks.real_models import make_call, prepared_case
from optimus_ir.records import recording
from optimus_ir.testing.measure import kernels_per_call


FLOOR, FLOOR_NO_GUARDS = "floor", "floor-no-guards"
#: calls timed for the floor, after as many warm-up calls
FLOOR_CALLS = 100


def _floor_ms(call_of: Callable[[torch.nn.Module], Callable[[], Any]], module: torch.nn.Module, guards: bool) -> float:
    """Host milliseconds per call of ``module`` compiled with graphs that run nothing after their first call
    (:func:`~benchmarks.measure.runs_nothing_backend`; the median of ``FLOOR_CALLS`` calls after as many), its
    guards evaluated or (``guards`` False) skipped; ``call_of`` makes one call (inference or a training step)."""
    call = call_of(torch.compile(module, backend=runs_nothing_backend()))
    call()
    cuda = next(module.parameters()).device.type == "cuda"
    times = []
    with contextlib.nullcontext() if guards else torch.compiler.set_stance(skip_guard_eval_unsafe=True):
        for _ in range(2 * FLOOR_CALLS):
            start = time.perf_counter()
            call()
            if cuda:
                torch.cuda.synchronize()  # (the loss's kernels, outside the compiled graphs)
            times.append(time.perf_counter() - start)
    return statistics.median(times[FLOOR_CALLS:]) * 1000


def _one(case: str, variant_name: str, device: str = "cuda") -> dict:
    """One variant of ``case`` measured in this process (eager too, where ``variant_name`` is ``eager``)."""
    name, mode, module, inputs = prepared_case(case, device)
    params = list(module.parameters()) if mode == "training" else []
    eager = make_call(module, inputs, mode, params)
    expected = eager()
    if variant_name in (FLOOR, FLOOR_NO_GUARDS):
        ms = _floor_ms(lambda compiled: make_call(compiled, inputs, mode, params), module, variant_name == FLOOR)
        return {"case": case, "variant": variant_name, "device": device, "kernels/call": 0, "ms/call": ms}
    if device != "cuda":
        raise ValueError(f"{variant_name} is timed on a GPU")
    if variant_name == "eager":
        return {"case": case, "variant": "eager", "kernels/call": kernels_per_call(eager),
                "ms/call": cuda_time_ms(eager, repeat=5)}
    variant = next(v for v in VARIANTS if v.name == variant_name)
    with cold_compile(), variant_context(variant), recording() as records:
        call = make_call(torch.compile(module), inputs, mode, params)
        torch.cuda.synchronize()
        start = time.perf_counter()
        actual = call()
        torch.cuda.synchronize()
        first = time.perf_counter() - start
        row = {"case": case, "variant": variant_name, "first call s": first, "kernels/call": kernels_per_call(call),
               "ms/call": cuda_time_ms(call, repeat=20), "max rel err": max_rel_error(actual, expected),
               "rules fired": sum(r.fired for r in records)}
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path)
    parser.add_argument("--cases", nargs="+", default=["seed-192x16/inference"])
    parser.add_argument("--variants", nargs="+", default=["optimus_ir", "stock"])
    parser.add_argument("--limit", type=float, default=400, help="seconds a variant's process may take")
    parser.add_argument("--device", default="cuda", help="cpu: the floor alone")
    parser.add_argument("--one", nargs=3, metavar=("CASE", "VARIANT", "DEVICE"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        print(json.dumps(_one(*args.one)), flush=True)
        return
    rows = []
    for case in args.cases:
        for variant in ["eager", *args.variants] if args.device == "cuda" else args.variants:
            command = [sys.executable, "-m", "benchmarks.probes.seed_scale", "--one", case, variant, args.device]
            try:
                done = subprocess.run(command, capture_output=True, text=True, timeout=args.limit)
                lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
                row = json.loads(lines[-1]) if lines else {"case": case, "variant": variant,
                                                           "error": done.stderr.strip().splitlines()[-1:]}
            except subprocess.TimeoutExpired:
                row = {"case": case, "variant": variant, "first call s": f"> {args.limit:.0f} (stopped)"}
            rows.append(row)
            print(row, flush=True)
            columns = list(dict.fromkeys(key for r in rows for key in r))
            write_results(args.out, "seed_scale", header(" ".join(sys.argv)), rows, columns)


if __name__ == "__main__":
    main()
