"""First-call (cold compile) seconds of real models (inference) or of the suite's cases, stock Inductor and
optimus_ir alternating (S O O S S O O S), to tell a real compile-time cost from the spread of single cold compiles
on one machine.

    python -m benchmarks first-call --out DIR llama convnext_tiny layernorm_storm/large/fp32/training

A suite case's first call is the suite's (:func:`suite.prepare`): a training case compiles its whole training step.
The results are rewritten after each model or case: ``first_call_repeats`` (seconds of each first call) and
``first_call_phases`` (where they went: the median seconds and count per call of each compile phase that Inductor
times with ``dynamo_timed`` (``torch._dynamo.utils.compilation_time_metrics``), optimus_ir's scheduler rules
included, for phases of at least 0.05 s in either variant). Autotuning happens at the first call, so
``CachingAutotuner.benchmark_all_configs`` counts the kernels autotuned and ``async_compile.precompile`` those
compiled.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import torch

from benchmarks.measure import VARIANTS, cold_compile, header, variant_context, write_results
from benchmarks.real_models import prepared_case
from benchmarks.suite import parse_case, prepare
from optimus_ir.records import recording

ORDER = "SOOSSOOS"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("models", nargs="+", help="real models (python -m benchmarks real) or suite cases W/S/D/M")
    args = parser.parse_args()
    variants = {v.name: v for v in VARIANTS}
    rows, phase_rows = [], []
    for name in args.models:
        first_call = _suite_first_call(name) if name.count("/") > 1 else _model_first_call(name)
        seconds: dict[str, list[float]] = {"stock": [], "optimus_ir": []}
        phases: dict[str, list[dict[str, tuple[float, int]]]] = {"stock": [], "optimus_ir": []}
        for letter in ORDER:
            variant = variants["stock" if letter == "S" else "optimus_ir"]
            with cold_compile(), variant_context(variant), recording() as records:  # Dynamo's reset clears them
                seconds[variant.name].append(first_call())
                phases[variant.name].append(_phase_totals())
            print(name, variant.name, f"{seconds[variant.name][-1]:.2f} s",
                  f"fired {sum(r.fired for r in records)}", flush=True)
        for variant_name, values in seconds.items():
            rows.append({
                "model": name, "variant": variant_name, "first call s, each": " ".join(f"{v:.2f}" for v in values),
                "median s": statistics.median(values), "min s": min(values), "max s": max(values),
            })
        phase_rows.extend(_phase_rows(name, phases))
        meta = header(" ".join(sys.argv))
        write_results(args.out, "first_call_repeats", meta, rows, list(rows[0]))
        write_results(args.out, "first_call_phases", meta, phase_rows, list(phase_rows[0]), echo=False)


def _phase_totals() -> dict[str, tuple[float, int]]:
    """Seconds and count of each phase Inductor has timed since Dynamo's last reset."""
    from torch._dynamo.utils import compilation_time_metrics

    return {key: (sum(values), len(values)) for key, values in compilation_time_metrics.items()}


def _phase_rows(name: str, phases: dict[str, list[dict[str, tuple[float, int]]]]) -> list[dict[str, object]]:
    """One row per phase of at least 0.05 s (median) in either variant: each variant's median seconds and count."""

    def median(variant: str, key: str, part: int) -> float:
        return statistics.median(call.get(key, (0.0, 0))[part] for call in phases[variant])

    keys = sorted({key for calls in phases.values() for call in calls for key in call})
    rows = []
    for key in keys:
        if max(median(variant, key, 0) for variant in phases) < 0.05:
            continue
        row: dict[str, object] = {"model": name, "phase": key}
        for variant in phases:
            row[f"{variant} s"] = median(variant, key, 0)
            row[f"{variant} count"] = median(variant, key, 1)
        rows.append(row)
    return rows


def _model_first_call(name: str) -> Callable[[], float]:
    """Seconds of a real model's first call in inference (``name``, or ``name/inference``), compiled in the current
    settings."""
    torch.manual_seed(0)
    _, _, module, inputs = prepared_case(f"{name.partition('/')[0]}/inference", "cuda")
    with torch.no_grad():
        module(*inputs)

    def first_call() -> float:
        with torch.no_grad():
            compiled = torch.compile(module)
            torch.cuda.synchronize()
            start = time.perf_counter()
            compiled(*inputs)
            torch.cuda.synchronize()
            return time.perf_counter() - start

    return first_call


def _suite_first_call(text: str) -> Callable[[], float]:
    """Seconds of a suite case's first call, compiled in the current settings (a fresh model each time)."""
    case = parse_case(text)

    def first_call() -> float:
        return prepare(case, compiled=True)[2]

    return first_call


if __name__ == "__main__":
    main()
