"""The benchmark suite: the model families of ``optimus_ir.testing.workloads``, in inference and in a training step, under every variant
(eager, stock Inductor, combo kernels, PyTorch's FX "Optimus" passes, optimus_ir), in one process on one GPU (or in
several, one per GPU: ``--shard``).

    python -m benchmarks suite --out DIR                     # quick plan (about 8 minutes on an H200)
    python -m benchmarks suite --out DIR --plan full --only dlrm multitask
    python -m benchmarks suite --out DIR --plan full --shard 1/2   # the second of two processes (GPUs)
    python -m benchmarks plot DIR/suite.json DIR/suite.png   # afterwards, anywhere with matplotlib

A plan is a list of cases (workload, size, dtype, mode). For each case and variant one row: kernels per call
(profiler), ms per call (CUDA events, median), GPU ms under CUDA-graph replay, the first call's seconds (the cold
compile: fresh caches, no autotuning), peak GPU memory of a call, max relative error against eager (inference: the
outputs; training: the loss and every parameter's update of one step from the same state), whether the results are
all finite, the graphs Dynamo compiled, and the rewrites made by the FX Optimus passes and by optimus_ir.

A failing variant leaves its error in its row; the run goes on. DIR/suite.json and DIR/suite.md are rewritten after
every row, so a run that is cut short still leaves its data; ``--budget-s`` skips the cases (and variants) that
would start past that many seconds, so the run ends by itself.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import gc
import sys
import time
import traceback
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch

from benchmarks.measure import (
    FX_OPTIMUS_POST_GRAD,
    FX_OPTIMUS_PRE_GRAD,
    VARIANTS,
    Variant,
    all_finite,
    cold_compile,
    cuda_time_ms,
    graph_replay_ms,
    header,
    kernels_per_call,
    max_rel_error,
    peak_memory_bytes,
    timed_first_call,
    variant_context,
    write_results,
)
from optimus_ir.records import recording
from optimus_ir.testing.workloads import WORKLOADS, make_optimizer, train_step

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}
MODES = ("inference", "training")
PLANS = ("quick", "full")

#: The quick plan's default ``--budget-s``: it then ends within about 9 minutes, under a 10-minute command limit.
QUICK_BUDGET_S = 480.0

COLUMNS = [
    "workload",
    "size",
    "dtype",
    "mode",
    "variant",
    "kernels/call",
    "ms/call",
    "replay ms",
    "first call s",
    "peak MiB",
    "max rel err",
    "finite",
    "graphs",
    "fx rewrites",
    "optimus_ir rewrites",
    "wall s",
    "error",
]

#: The FX Optimus passes' counters in ``counters["inductor"]`` that count rewrites (normalisation passes only
#: canonicalise arguments; batch fusions count under ``batch_<op>``).
_FX_REWRITE_COUNTERS = frozenset(FX_OPTIMUS_PRE_GRAD + FX_OPTIMUS_POST_GRAD) - {
    "normalization_pass",
    "normalization_aten_pass",
}


@dataclasses.dataclass(frozen=True)
class Case:
    """One workload at one size, dtype and mode; measured under each variant."""

    workload: str
    size: str
    dtype: str
    mode: str

    @property
    def label(self) -> str:
        return f"{self.workload}[{self.size},{self.dtype}] {self.mode}"

    def key(self) -> dict[str, str]:
        return dataclasses.asdict(self)


def build_plan(
    plan: str,
    only: Sequence[str] | None = None,
    sizes: Sequence[str] | None = None,
    dtypes: Sequence[str] | None = None,
    modes: Sequence[str] | None = None,
    shard: tuple[int, int] | None = None,
) -> list[Case]:
    """The cases of ``plan``, in the order they run, restricted to the workloads in ``only`` (all when None).

    ``quick``: every workload in inference at the small size in fp32; the DLRM model also in a training step and in
    bf16, the layer-norm storm in a training step and the tanh storm in bf16. The DLRM cases come first, the
    other storm cases last. ``full``: every workload at both sizes, in both dtypes and both modes. ``sizes``,
    ``dtypes`` and ``modes`` keep only the cases with one of those (a full plan run in parts). ``shard=(k, n)``
    keeps every n-th of the remaining cases from the k-th on (0-based): n processes, one per GPU, run a plan together.
    """
    if plan == "quick":
        cases = [
            Case("dlrm", "small", "fp32", "inference"),
            Case("dlrm", "small", "fp32", "training"),
            Case("dlrm", "small", "bf16", "inference"),
        ]
        cases += [Case(name, "small", "fp32", "inference") for name in WORKLOADS if name != "dlrm"]
        cases += [
            Case("layernorm_storm", "small", "fp32", "training"),
            Case("tanh_storm", "small", "bf16", "inference"),
        ]
    elif plan == "full":
        cases = [
            Case(name, size, dtype, mode)
            for name in WORKLOADS
            for size in ("small", "large")
            for mode in MODES
            for dtype in DTYPES
        ]
    else:
        raise ValueError(f"unknown plan {plan!r}; known: {list(PLANS)}")
    if only:
        unknown = sorted(set(only) - set(WORKLOADS))
        if unknown:
            raise ValueError(f"unknown workload(s) {unknown}; known: {list(WORKLOADS)}")
        cases = [case for case in cases if case.workload in only]
    cases = [
        case
        for case in cases
        if (sizes is None or case.size in sizes)
        and (dtypes is None or case.dtype in dtypes)
        and (modes is None or case.mode in modes)
    ]
    if shard is None:
        return cases
    index, count = shard
    if not 0 <= index < count:
        raise ValueError(f"shard {index}/{count}: the index must be in [0, {count})")
    return cases[index::count]


def parse_case(text: str) -> Case:
    """``"workload/size/dtype/mode"`` → that case."""
    parts = text.split("/")
    if len(parts) != 4:
        raise argparse.ArgumentTypeError(f"{text!r}: expected workload/size/dtype/mode")
    workload, size, dtype, mode = parts
    for value, known in ((workload, WORKLOADS), (size, ("small", "large")), (dtype, DTYPES), (mode, MODES)):
        if value not in known:
            raise argparse.ArgumentTypeError(f"{text!r}: {value!r} is not one of {list(known)}")
    return Case(workload, size, dtype, mode)


def _shard(text: str) -> tuple[int, int]:
    """``"K/N"`` → ``(K, N)``."""
    index, _, count = text.partition("/")
    try:
        return int(index), int(count)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected K/N (e.g. 0/2), got {text!r}") from None


def prepare(
    case: Case, compiled: bool, device: str = "cuda"
) -> tuple[Callable[[], Any], list[torch.Tensor], float]:
    """Build ``case`` on ``device`` and make its first call, through ``torch.compile`` if ``compiled``.

    Returns the call that repeats it, what the first call produced, and the first call's wall seconds. Inference:
    the call is a forward pass under ``no_grad``; it produces the outputs. Training: the call is
    :func:`optimus_ir.testing.workloads.train_step`, after one eager step (so that the momentum buffers exist and the compiled step
    sees its steady state); the first call produces the loss and every parameter's update.
    """
    model, inputs = WORKLOADS[case.workload].make(case.size, DTYPES[case.dtype], device)
    if case.mode == "inference":
        model.eval()
        forward = torch.compile(model) if compiled else model

        def call() -> Any:
            with torch.no_grad():
                return forward(*inputs)

        output, seconds = timed_first_call(call)
        return call, list(output) if isinstance(output, tuple) else [output], seconds
    optimizer = make_optimizer(model)
    train_step(model, optimizer, inputs)
    before = [p.detach().clone() for p in model.parameters()]
    step = torch.compile(train_step) if compiled else train_step
    call = functools.partial(step, model, optimizer, inputs)
    loss, seconds = timed_first_call(call)
    return call, [loss] + [p.detach() - b for p, b in zip(model.parameters(), before)], seconds


def measure(case: Case, variant: Variant, reference: list[torch.Tensor]) -> dict[str, Any]:
    """One row: ``case`` under ``variant``, compiled cold; errors against ``reference`` (eager's first call)."""
    from torch._dynamo.utils import counters

    row: dict[str, Any] = case.key() | {"variant": variant.name}
    start = time.perf_counter()
    try:
        counters.clear()
        with cold_compile(), variant_context(variant), recording() as rewrites:
            row |= _metrics(case, variant, reference)
        row["graphs"] = counters["stats"]["unique_graphs"]
        row["fx rewrites"] = sum(
            n for name, n in counters["inductor"].items() if name in _FX_REWRITE_COUNTERS or name.startswith("batch_")
        )
        row["optimus_ir rewrites"] = sum(record.fired for record in rewrites)
    except Exception as error:  # one failing variant must not end the run: its row says why
        traceback.print_exc()
        row["error"] = f"{type(error).__name__}: {error}"[:500]
    finally:
        gc.collect()
        torch.cuda.empty_cache()
    row["wall s"] = time.perf_counter() - start
    return row


def _metrics(case: Case, variant: Variant, reference: list[torch.Tensor]) -> dict[str, Any]:
    call, result, first_call_s = prepare(case, variant.compile)
    metrics = {
        "first call s": first_call_s,
        "max rel err": max_rel_error(result, reference),
        "finite": all_finite(result),
    }
    del result
    metrics["kernels/call"] = kernels_per_call(call)
    metrics["ms/call"] = cuda_time_ms(call)
    metrics["peak MiB"] = peak_memory_bytes(call) / 2**20
    metrics["replay ms"] = graph_replay_ms(call)
    return metrics


def run(cases: list[Case], variants: list[Variant], out: Path, meta: dict[str, Any], budget_s: float | None) -> None:
    """Measure every case under every variant, rewriting ``out``/suite.{json,md} after each row. Past ``budget_s``
    seconds, the cases and variants not started yet are skipped (listed in the results' ``skipped``)."""
    start = time.perf_counter()
    rows: list[dict[str, Any]] = []
    skipped: list[str] = []

    def over_budget() -> bool:
        return budget_s is not None and time.perf_counter() - start > budget_s

    for case in cases:
        if over_budget():
            skipped.append(case.label)
            continue
        try:
            reference = prepare(case, compiled=False)[1]
        except Exception as error:
            traceback.print_exc()
            rows.append(case.key() | {"variant": "eager (reference)", "error": f"{type(error).__name__}: {error}"})
            continue
        for variant in variants:
            if over_budget():
                skipped.append(f"{case.label} {variant.name}")
                continue
            print(f"[{time.perf_counter() - start:6.0f} s] {case.label} {variant.name} ...", flush=True)
            rows.append(measure(case, variant, reference))
            elapsed = time.perf_counter() - start
            print(f"[{elapsed:6.0f} s] {case.label} {variant.name}: {_summary(rows[-1])}", flush=True)
            write_results(out, "suite", meta | {"skipped": skipped}, rows, COLUMNS, echo=False)
        del reference
        gc.collect()
        torch.cuda.empty_cache()
    write_results(out, "suite", meta | {"skipped": skipped}, rows, COLUMNS)


def _summary(row: dict[str, Any]) -> str:
    if "error" in row:
        return f"ERROR {row['error']}"
    fields = ("kernels/call", "ms/call", "replay ms", "first call s", "peak MiB", "max rel err")
    return ", ".join(f"{name} {_format(row.get(name))}" for name in fields)


def _format(value: Any) -> str:
    return f"{value:.4g}" if isinstance(value, float) else str(value)


def main(argv: Sequence[str] | None = None) -> None:
    variant_names = [v.name for v in VARIANTS]
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, required=True, help="directory for suite.json and suite.md")
    parser.add_argument("--plan", choices=PLANS, default="quick")
    parser.add_argument("--only", nargs="+", metavar="WORKLOAD", choices=list(WORKLOADS), help="these workloads only")
    parser.add_argument("--sizes", nargs="+", choices=("small", "large"), help="cases of these sizes only")
    parser.add_argument("--dtypes", nargs="+", choices=list(DTYPES), help="cases of these dtypes only")
    parser.add_argument("--modes", nargs="+", choices=MODES, help="cases of these modes only")
    parser.add_argument("--variants", nargs="+", choices=variant_names, default=variant_names)
    parser.add_argument(
        "--cases",
        nargs="+",
        type=parse_case,
        metavar="W/S/D/M",
        help="exactly these cases (workload/size/dtype/mode), in this order, instead of a plan (--shard applies)",
    )
    parser.add_argument("--shard", type=_shard, metavar="K/N", help="every N-th case from the K-th on (0-based)")
    parser.add_argument(
        "--budget-s",
        type=float,
        help=f"start no measurement after this many seconds (default: {QUICK_BUDGET_S:.0f} for the quick plan, "
        "none for the full one)",
    )
    args = parser.parse_args(argv)
    budget_s = args.budget_s if args.budget_s is not None else (QUICK_BUDGET_S if args.plan == "quick" else None)
    if args.cases:
        index, count = args.shard or (0, 1)
        cases = args.cases[index::count]
    else:
        cases = build_plan(args.plan, args.only, args.sizes, args.dtypes, args.modes, args.shard)
    variants = [v for v in VARIANTS if v.name in args.variants]
    meta = header(" ".join(sys.argv)) | {"plan": "cases" if args.cases else args.plan, "variants": [v.name for v in variants]}
    print(f"{len(cases)} cases x {len(variants)} variants, budget {budget_s} s", flush=True)
    run(cases, variants, args.out, meta, budget_s)


if __name__ == "__main__":
    main()
