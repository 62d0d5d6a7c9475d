"""The real-model suite (issue 30): models nobody here wrote, in inference and in a training step, under stock
Inductor, Inductor with ``combo_kernels=True`` and optimus_ir, in the same run, each compiled cold. The models are
in ``benchmarks/real_zoo.py``: by default the issue-30 set (a torch_geometric ``to_hetero`` GraphSAGE,
ShuffleNetV2, Inception-v3, MixNet-S, a tiny Mixtral MoE, the DLRM-style model with 26 tables); ``--set issue33``:
split → layer norm → tanh → cat at three scales, at 48 × 4 in bf16 and with pieces of unequal widths, and at
16 × 4 in bf16 with pieces of unequal widths and 8192 rows (issue 33); ``--set gnn``: the hetero GNN with SAGE
(mean and max aggregation) and GAT convolutions; ``--set more``: the transformers and timm models measured
first (BERT, GPT-2, T5 encoder, Llama, ViT, ResNet-50, ConvNeXt-tiny); ``--set layers``: replicated layers (16
per-feature towers, 8 dense experts over one input).
Random weights, no downloads.

Inference: a forward under ``no_grad``. Training: one step, the model compiled and the loss outside it, in eager
(the mean square of each output, summed), then ``backward()``; gradients set to None before each step. The model
stays in ``eval()`` in both modes (BatchNorm on its running statistics, no dropout), so that eager and every variant
compute the same function and their gradients compare.

Per row: kernels per call (training: per step, the forward's, the backward's and the eager loss's), ms per call (per
step; CUDA events around each call, the host's launches in; the variants timed in turns, and stock's time over
each variant's taken round by round), GPU ms per call (the kernels' profiled durations
summed: the device's part alone), peak MiB of one call above what was allocated before it, first call seconds (the
compile, forward and backward), max relative error against eager (training: of the outputs and of every
parameter's gradient) and against stock, and optimus_ir's rule decisions. A variant that fails leaves its error in
its row; the script goes on and exits 1 after writing the results. A short summary table (three ways per cell) is
printed last.

    python -m benchmarks real --out benchmarks/results/<date>/real_suite     # on a GPU
    python -m benchmarks real --out DIR --only dlrm-26 mixnet-s --modes training   # a part of it
    python -m benchmarks real --codegen-only [--verbose]                     # anywhere: virtual sm_90 kernels

Any failure or slowdown is a bug to fix, not a row to drop.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import statistics
import sys
import time
import traceback
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from torch import nn
from torch.utils._pytree import tree_leaves, tree_map

from benchmarks.measure import (
    OwnInductor,
    VARIANTS,
    Variant,
    cold_compile,
    counting_table_writes,
    cuda_time_ms,
    header,
    kernel_ms_per_call,
    kernels_per_call,
    max_rel_error,
    own_copy,
    peak_memory_bytes,
    timed_first_call,
    variant_context,
    write_results,
)
from benchmarks.real_zoo import SETS, RealModel
from optimus_ir.inspect import CompileReport, compile_report
from optimus_ir.records import RewriteRecord, recording
from optimus_ir.testing.workloads import output_loss

MODES = ("inference", "training")
SUITE_VARIANTS = [v for v in VARIANTS if v.name in ("stock", "combo_kernels", "optimus_ir")]
COLUMNS = ["model", "mode", "variant", "kernels/call", "ms/call", "stock / this", "fastest other / this",
           "GPU ms/call", "peak MiB", "first call s", "max rel err", "vs stock", "rules fired", "rules rejected",
           "ms/call by round", "table writes/call timed", "error"]
#: the summary's columns: each cell is stock / combo_kernels / optimus_ir of a row's column
SUMMARY = {"kernels: stock / combo / optimus_ir": "kernels/call", "ms: stock / combo / optimus_ir": "ms/call",
           "GPU ms: stock / combo / optimus_ir": "GPU ms/call", "peak MiB: stock / combo / optimus_ir": "peak MiB"}
#: the summary's column of optimus_ir's row: the median over passes of min(stock, combo kernels) over optimus_ir
FASTEST_OTHER = "min(stock, combo) / optimus_ir, by pass"
#: calls of each variant before the timed ones, timed passes of a round, and rounds (:func:`time_in_turns`): few,
#: so that the default run fits in about 8 minutes on one H200
WARMUP, REPEAT, ROUNDS = 3, 20, 5


def select(set_name: str, only: list[str] | None) -> list[RealModel]:
    """The models named in ``only`` (of any set), else those of ``set_name`` ("all": every set); a model of
    several sets once."""
    by_name: dict[str, RealModel] = {}
    for model in (model for models in SETS.values() for model in models):
        by_name.setdefault(model.name, model)
    every = list(by_name.values())
    if only:
        return [model for model in every if model.name in only]
    return every if set_name == "all" else SETS[set_name]


def prepared(model: RealModel, mode: str, device: str) -> tuple[nn.Module, tuple[Any, ...]]:
    """The module, in ``eval()`` in both modes (no dropout, BatchNorm on running statistics: results compare),
    with gradients required for training only, and its inputs, on ``device``."""
    module, inputs = model.build()
    module = module.eval().requires_grad_(mode == "training").to(device)
    return module, tree_map(lambda x: x.to(device) if isinstance(x, torch.Tensor) else x, inputs)


def prepared_case(case: str, device: str) -> tuple[str, str, nn.Module, tuple[Any, ...]]:
    """A case of the suite named ``model/mode`` (``mixnet-s/inference``): the model's name, the mode, and the module
    and its inputs (:func:`prepared`)."""
    name, _, mode = case.partition("/")
    (model,) = select("all", [name])
    return name, mode, *prepared(model, mode, device)


def outputs_of(output: Any) -> list[torch.Tensor]:
    """A model's output as a flat list of tensors: one tensor, a tuple, or a dict (``to_hetero``: one a node type)."""
    return [x for x in tree_leaves(output) if isinstance(x, torch.Tensor)]


def make_call(
    module: Callable[..., Any], inputs: tuple[Any, ...], mode: str, params: list[nn.Parameter]
) -> Callable[[], list[torch.Tensor]]:
    """One call of ``module`` (eager or compiled) returning what the errors compare. Inference: the outputs of a
    forward under ``no_grad``. Training: a step (gradients set to None, the forward, the loss in eager,
    ``backward()``): the outputs, then the gradient of each of ``params`` (zeros where there is none)."""

    def infer() -> list[torch.Tensor]:
        with torch.no_grad():
            return outputs_of(module(*inputs))

    def step() -> list[torch.Tensor]:
        drop_grads(params)
        outputs = outputs_of(module(*inputs))
        output_loss(outputs).backward()
        grads = [torch.zeros_like(p) if p.grad is None else p.grad for p in params]
        return [output.detach() for output in outputs] + grads

    return infer if mode == "inference" else step


def drop_grads(params: list[nn.Parameter]) -> None:
    """``zero_grad(set_to_none=True)``: each step writes fresh gradients, no accumulation into the last step's."""
    for param in params:
        param.grad = None


def measure_case(model: RealModel, mode: str, start: float) -> list[dict[str, Any]]:
    """The rows of one model in one mode: eager's result first (the reference), then each variant, compiled cold
    on the same module, each through a function and a backend of its own (:func:`own_copy`, :class:`OwnInductor`),
    so that all stay compiled and none runs another's code; then the variants' ms per call, timed in turns
    (:func:`time_in_turns`). A failure goes in its row (eager's: the case's only row)."""
    case = {"model": model.name, "mode": mode}
    try:
        module, inputs = prepared(model, mode, "cuda")
        params = list(module.parameters())
        expected = make_call(module, inputs, mode, params)()
    except Exception as error:  # the case's row says why; the other cases go on
        traceback.print_exc()
        return [case | {"variant": "eager", "error": _error(error)}]
    rows: dict[str, dict[str, Any]] = {}
    results: dict[str, list[torch.Tensor]] = {}
    calls: dict[str, tuple[Variant, Callable[[], list[torch.Tensor]]]] = {}
    torch._dynamo.reset()
    # each variant's cache directories stay until the timing is done: its kernels were loaded from them
    with contextlib.ExitStack() as caches:
        for variant in SUITE_VARIANTS:
            row = rows[variant.name] = case | {"variant": variant.name}
            try:
                caches.enter_context(cold_compile(reset=False))
                compiled = torch.compile(own_copy(_forward(module), variant.name), backend=OwnInductor())
                call = make_call(compiled, inputs, mode, params)
                row |= measure_variant(variant, call, params, expected, results)
                calls[variant.name] = (variant, call)
            except Exception as error:  # the row says why; the other variants go on
                traceback.print_exc()
                row["error"] = _error(error)
            finally:
                drop_grads(params)
                gc.collect()
                torch.cuda.empty_cache()
            print(f"[{time.perf_counter() - start:5.0f} s] {_progress(row)}", flush=True)
        try:
            for name, times in time_in_turns(calls).items():
                rows[name] |= times
                print(f"[{time.perf_counter() - start:5.0f} s] {_progress(rows[name])}", flush=True)
        except Exception as error:  # the rows say why; the other cases go on
            traceback.print_exc()
            for name in calls:
                rows[name]["error"] = _error(error)
        finally:
            drop_grads(params)
    torch._dynamo.reset()
    return list(rows.values())


def with_and_without_rule(
    name: str, without: contextlib.AbstractContextManager, rules: tuple[str, ...], mode: str = "inference"
) -> list[dict[str, Any]]:
    """Model ``name`` compiled by optimus_ir as it is and inside ``without`` (a patch that refuses or bounds a
    rule), each cold through a function and a backend of its own; kernels per call, GPU ms per call, which of
    ``rules`` fired and the error against eager, then ms per call timed in turns (:func:`time_in_turns`)."""
    (model,) = select("all", [name])
    module, inputs = prepared(model, mode, "cuda")
    params = list(module.parameters())
    optimus_ir = next(v for v in VARIANTS if v.name == "optimus_ir")
    expected = make_call(module, inputs, mode, params)()
    rows: dict[str, dict[str, Any]] = {}
    calls: dict[str, tuple[Variant, Callable[[], list[torch.Tensor]]]] = {}
    torch._dynamo.reset()
    with contextlib.ExitStack() as caches:
        for label, patch in (("with the rule", contextlib.nullcontext()), ("without the rule", without)):
            caches.enter_context(cold_compile(reset=False))
            with patch, variant_context(optimus_ir), recording() as records:
                compiled = torch.compile(own_copy(_forward(module), label.replace(" ", "_")), backend=OwnInductor())
                call = make_call(compiled, inputs, mode, params)
                actual = call()
                rows[label] = {"model": name, "mode": mode, "variant": label, "kernels/call": kernels_per_call(call),
                               "GPU ms/call": kernel_ms_per_call(call),
                               "rules fired": sorted({r.rule for r in records if r.fired and r.rule in rules}),
                               "max rel err": max_rel_error(actual, expected)}
            calls[label] = (optimus_ir, call)
        for label, times in time_in_turns(calls).items():
            rows[label] |= {"ms/call": times["ms/call"], "fastest other / this": times["fastest other / this"]}
            print(rows[label], flush=True)
        drop_grads(params)
    torch._dynamo.reset()
    return list(rows.values())


def _forward(module: Callable[..., Any]) -> Callable[..., Any]:
    def forward(*args: Any) -> Any:
        return module(*args)

    return forward


def time_in_turns(calls: dict[str, tuple[Variant, Callable[[], Any]]]) -> dict[str, dict[str, Any]]:
    """Each variant's ms per call (CUDA events around a synchronized call), the variants' calls interleaved one by
    one: ``ROUNDS`` × ``REPEAT`` passes, each pass one call of every variant, the order rotating each pass. The
    host's speed drifts within a run by up to 2x within seconds (``2026-12-04/host_gap/``: one variant's 20-call
    medians 5.85 and 10.18 ms), more than a variant differs from another; a pass's calls meet the same drift.
    Per variant: the median of its calls; the median over passes of stock's time over its own and of the fastest
    other variant's over its own (the pass's); the medians of each round's ``REPEAT`` passes; the member tables
    written per timed call (a call whose addresses miss a table's cache copies one). A call that compiles
    again while timed fails the case: the variants no longer run what was measured."""
    names = list(calls)
    for name in names:
        variant, call = calls[name]
        with variant_context(variant):
            for _ in range(WARMUP):
                call()
    times: dict[str, list[float]] = {name: [] for name in names}
    writes = dict.fromkeys(names, 0)
    graphs_before = torch._dynamo.utils.counters["stats"]["unique_graphs"]
    with counting_table_writes() as written:
        for turn in range(ROUNDS * REPEAT):
            for name in names[turn % len(names):] + names[: turn % len(names)]:
                variant, call = calls[name]
                before = written.call_count
                with variant_context(variant):
                    times[name].append(cuda_time_ms(call, repeat=1, warmup=0))
                writes[name] += written.call_count - before
    recompiled = torch._dynamo.utils.counters["stats"]["unique_graphs"] - graphs_before
    if recompiled:
        raise RuntimeError(f"{recompiled} graph(s) compiled while timing the variants in turns")

    def over(others: list[str], name: str) -> float | None:
        if not others:
            return None
        return statistics.median(min(times[o][i] for o in others) / t for i, t in enumerate(times[name]))

    return {
        name: {
            "ms/call": statistics.median(own),
            "stock / this": over(["stock"] if "stock" in times else [], name),
            "fastest other / this": over([o for o in names if o != name], name),
            "ms/call by round": " ".join(
                f"{statistics.median(own[i : i + REPEAT]):.3f}" for i in range(0, len(own), REPEAT)
            ),
            "table writes/call timed": writes[name] / len(own),
        }
        for name, own in times.items()
    }


def measure_variant(
    variant: Variant,
    call: Callable[[], list[torch.Tensor]],
    params: list[nn.Parameter],
    expected: list[torch.Tensor],
    results: dict[str, list[torch.Tensor]],
) -> dict[str, Any]:
    """One variant's measures of ``call`` (a compiled call, not called yet, inside a cold compile) but its time per
    call; its first result goes in ``results``. The first call is timed: the backward is compiled at its first call
    too. The peak is measured from no gradient alive (``params``'), as in eager's first step, the same for every
    variant."""
    with variant_context(variant), recording() as records:
        result, first_call_s = timed_first_call(call)
        metrics = {"kernels/call": kernels_per_call(call), "GPU ms/call": kernel_ms_per_call(call)}
        drop_grads(params)
        metrics["peak MiB"] = peak_memory_bytes(call) / 2**20
    results[variant.name] = result
    return metrics | {
        "first call s": first_call_s,
        "max rel err": max_rel_error(result, expected),
        "vs stock": max_rel_error(result, results["stock"]) if "stock" in results else None,
        "rules fired": sum(r.fired for r in records),
        "rules rejected": sum(not r.fired for r in records),
    }


def _error(error: Exception) -> str:
    return f"{type(error).__name__}: {error}"[:500]


def _error_line(error: Exception) -> str:
    return f"{type(error).__name__}: {(str(error).strip().splitlines() or [''])[0][:200]}"


def _progress(row: dict[str, Any]) -> str:
    label = f"{row['model']}/{row['mode']} {row['variant']}"
    if "error" in row:
        return f"{label}: ERROR {row['error'][:200]}"
    return f"{label}: " + ", ".join(f"{k} {_number(row[k])}" for k in COLUMNS[3:11] if k in row)


def _number(value: Any) -> str:
    return f"{value:.4g}" if isinstance(value, float) else str(value)


def run(models: list[RealModel], modes: list[str], out: Path) -> bool:
    """Measure every model in every mode under every variant; write the rows after each case, then the summary.
    False if any row failed."""
    start, meta, rows = time.perf_counter(), header(" ".join(sys.argv)), []
    for model in models:
        for mode in modes:
            rows += measure_case(model, mode, start)
            write_results(out, "real_models", meta, rows, COLUMNS, echo=False)
    write_results(out, "real_models", meta, rows, COLUMNS)
    write_results(out, "real_models_summary", meta, summary_rows(rows), ["model/mode", *SUMMARY, FASTEST_OTHER])
    failed = [row for row in rows if "error" in row]
    for row in failed:
        print(f"FAILED {row['model']}/{row['mode']} {row['variant']}: {row['error'][:150]}")
    print(f"{len(rows) - len(failed)} of {len(rows)} rows measured in {time.perf_counter() - start:.0f} s")
    return not failed


def summary_rows(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per model and mode: kernels, ms and peak MiB of stock / combo_kernels / optimus_ir in one cell
    each ("error" for a failed variant, "-" for one not measured), and optimus_ir's time against the faster of the
    others call by call (:data:`FASTEST_OTHER`)."""
    cases: dict[tuple[str, str], dict[str, dict[str, Any]]] = {}
    for row in rows:
        cases.setdefault((row["model"], row["mode"]), {})[row["variant"]] = row
    return [
        {"model/mode": f"{model}/{mode}"}
        | {title: " / ".join(_cell(variants.get(v.name), column) for v in SUITE_VARIANTS)
           for title, column in SUMMARY.items()}
        | {FASTEST_OTHER: _cell(variants.get("optimus_ir"), "fastest other / this")}
        for (model, mode), variants in cases.items()
    ]


def _cell(row: dict[str, Any] | None, column: str) -> str:
    if row is None:
        return "-"
    return "error" if "error" in row else _number(row[column])


def codegen_only(models: list[RealModel], modes: list[str], verbose: bool) -> bool:
    """``compile_report`` of each model and mode with CPU inputs, stock Inductor (``passes=None``) and every pass:
    code for the virtual sm_90 device where there is no GPU, nothing run but one eager call. Prints the launches
    stock → optimus_ir and the rule decisions counted by rule (every decision with ``verbose``); a failure prints
    its error line and the next one goes on. False if any failed."""
    failed = []
    for model in models:
        for mode in modes:
            label, start = f"{model.name}/{mode}", time.perf_counter()
            try:
                stock, ours = _reports(model, mode)
            except Exception as error:  # the line says why; the other models go on
                failed.append(label)
                print(f"{label}: FAILED {_error_line(error)}", flush=True)
                continue
            print(f"{label}: launches {len(stock.launches)} → {len(ours.launches)} ({len(ours.graphs)} graphs, "
                  f"{time.perf_counter() - start:.0f} s); {_decisions(ours.rewrites)}", flush=True)
            for record in ours.rewrites if verbose else []:
                print(f"    {record}")
    print(f"failed: {', '.join(failed)}" if failed else "every model and mode reported")
    return not failed


def _reports(model: RealModel, mode: str) -> tuple[CompileReport, CompileReport]:
    module, inputs = prepared(model, mode, "cpu")
    with torch.set_grad_enabled(mode == "training"):  # parameters that require grad: a training compile
        return compile_report(module, inputs, passes=None), compile_report(module, inputs)


def _decisions(records: list[RewriteRecord]) -> str:
    """``fired N (rule n, ...), rejected M (rule m, ...)``."""
    parts = []
    for verdict, fired in (("fired", True), ("rejected", False)):
        by_rule = Counter(r.rule for r in records if r.fired == fired)
        detail = ", ".join(f"{rule} {n}" for rule, n in by_rule.most_common())
        parts.append(f"{verdict} {sum(by_rule.values())}" + (f" ({detail})" if detail else ""))
    return ", ".join(parts)


def main() -> None:
    every = [model.name for models in SETS.values() for model in models]
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, help="results directory (needed unless --codegen-only)")
    parser.add_argument("--set", choices=[*SETS, "all"], default="issue30", help="which models (default: issue30)")
    parser.add_argument("--only", nargs="+", choices=every, metavar="NAME",
                        help=f"these models, of any set, instead of --set: {', '.join(every)}")
    parser.add_argument("--modes", nargs="+", choices=MODES, default=list(MODES))
    parser.add_argument("--codegen-only", action="store_true",
                        help="no GPU needed: launches and rule decisions from compile_report, nothing measured")
    parser.add_argument("--verbose", action="store_true", help="with --codegen-only: every rule decision")
    args = parser.parse_args()
    models = select(args.set, args.only)
    if args.codegen_only:
        sys.exit(0 if codegen_only(models, args.modes, args.verbose) else 1)
    if args.out is None:
        parser.error("--out is needed to measure (or --codegen-only)")
    if not torch.cuda.is_available():
        parser.error("measuring needs a CUDA GPU; --codegen-only runs anywhere")
    sys.exit(0 if run(models, args.modes, args.out) else 1)


if __name__ == "__main__":
    main()
