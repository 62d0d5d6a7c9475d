"""Time per call of the horizontal issue's storms, stock Inductor, combo kernels and optimus_ir side by side in one
process, in interleaved rounds, with what any compiled call of the same inputs and outputs costs before a kernel.

Per call is mostly host time here, and a machine's host speed drifts between runs and within one (the same code
measured 0.282 and 0.683 ms per call in two runs). So the three variants are compiled once each, all alive at once
(each its own copy of the function, so Dynamo keeps each one's graph), and timed in ``--rounds`` rounds, the order
rotating each round: the ratios compare calls made minutes apart at most. Stock and optimus_ir are also timed
under ``mode="reduce-overhead"`` (cudagraph trees: a call replays a CUDA graph, after copying its inputs into the
graph's own buffers). Per round and variant:

- ms per call: CUDA events around each call, median of 50 (as the suite and ``python -m benchmarks storms``);
- host µs per call: a loop of 300 calls timed on the host;
- µs in Inductor's call (``CompiledFxGraph.__call__``: the wrapper's asserts, allocations, tables, launches).

A ratio of two variants is the median over rounds of the ratio of their ms per call in the same round: the host's
drift during the run cancels in each round's ratio where it would not in a ratio of medians.

And, as a fourth variant, **nothing**: the same function through Dynamo and AOTAutograd, whose compiled graph
returns tensors made before (no Inductor: no assert, allocation or launch). What it costs is paid by every compiled
call of these inputs and outputs, stock's and optimus_ir's alike. And a fifth, **fresh outputs**: the same, but the
compiled graph makes new output tensors each call, as cheaply as optimus_ir's wrapper makes them (one allocation
split into tensors), and they are freed when the next call replaces them: the least any compiled call that returns
these outputs costs, kernel or not. ``stock / this`` on its row is the most any kernel-level rewrite can gain
per call over stock.

    python -m benchmarks per-call --out DIR [--only tanh layer_norm] [--rounds 7]

Writes per_call_ledger.{json,md}.
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from torch._dynamo.backends.common import aot_autograd

from benchmarks.measure import (
    VARIANTS,
    cold_compile,
    cuda_time_ms,
    header,
    host_us_per_call,
    inductor_call_us_per_call,
    max_rel_error,
    own_copy,
    runs_nothing_backend,
    variant_context,
    write_results,
)
from optimus_ir.runtime import tensors_of
from optimus_ir.testing.storms import STORMS

_BY_NAME = {v.name: v for v in VARIANTS}
#: what is timed: name, variant (its Inductor settings and passes), ``torch.compile`` keywords
COMPILED = [
    ("stock", _BY_NAME["stock"], {}),
    ("combo_kernels", _BY_NAME["combo_kernels"], {}),
    ("optimus_ir", _BY_NAME["optimus_ir"], {}),
    ("stock, reduce-overhead", _BY_NAME["stock"], {"mode": "reduce-overhead"}),
    ("optimus_ir, reduce-overhead", _BY_NAME["optimus_ir"], {"mode": "reduce-overhead"}),
]
NOTHING = "nothing (Dynamo + AOTAutograd only)"
FRESH = "fresh outputs, no kernel (Dynamo + AOTAutograd + making and freeing the outputs)"


def compiled_nothing(fn: Callable) -> Callable:
    """``fn`` through Dynamo and AOTAutograd with a compiled graph that returns its first call's outputs
    (:func:`~benchmarks.measure.runs_nothing_backend`)."""
    return torch.compile(own_copy(fn, "nothing"), backend=runs_nothing_backend(), dynamic=False)


def fresh_like(outputs: list[torch.Tensor]) -> Callable[[], list[torch.Tensor]]:
    """A maker of new tensors shaped as ``outputs``, as cheaply as optimus_ir's wrapper makes outputs: one
    allocation split below autograd's view tracking (``runtime.tensors_of``) where they differ at most in their row
    counts, else one allocation each (as stock's wrapper)."""
    first = outputs[0]
    alike = all(o.dtype == first.dtype and o.device == first.device and o.is_contiguous() for o in outputs)
    if alike and first.dim() == 0 and all(o.dim() == 0 for o in outputs):
        def each_0d() -> list[torch.Tensor]:
            with torch._C._AutoDispatchBelowADInplaceOrView():
                return list(torch.empty(len(outputs), dtype=first.dtype, device=first.device).unbind(0))

        return each_0d
    if alike and first.dim() > 0 and all(o.dim() > 0 and o.shape[1:] == first.shape[1:] for o in outputs):
        rows = tuple(o.shape[0] for o in outputs)
        shape = (sum(rows), *first.shape[1:])
        return lambda: list(tensors_of(torch.empty(shape, dtype=first.dtype, device=first.device), rows))
    return lambda: [torch.empty_strided(o.shape, o.stride(), dtype=o.dtype, device=o.device) for o in outputs]


def compiled_fresh_outputs(fn: Callable, outputs: list[torch.Tensor]) -> Callable:
    """``fn`` through Dynamo and AOTAutograd with a compiled graph that makes new tensors like ``outputs`` and launches
    nothing: what any compiled call that returns these outputs costs before its first kernel (:func:`fresh_like`)."""
    make = fresh_like(outputs)

    def compiler(gm: torch.fx.GraphModule, example_inputs: Any) -> Callable:
        def run(args: list[Any]) -> list[torch.Tensor]:
            args.clear()
            return make()

        run._boxed_call = True  # type: ignore[attr-defined]
        return run

    return torch.compile(own_copy(fn, "fresh"), backend=aot_autograd(fw_compiler=compiler), dynamic=False)


def storm_rows(name: str, fn: Callable, inputs: list[torch.Tensor], rounds: int) -> list[dict[str, Any]]:
    expected = fn(*inputs)
    calls: dict[str, Callable[[], Any]] = {}
    errors: dict[str, float] = {}
    contexts = {}
    for label, variant, options in COMPILED:
        run = torch.compile(own_copy(fn, label.replace(", ", "_").replace("-", "_")), **options)
        with variant_context(variant):
            errors[label] = max(max_rel_error(run(*inputs), expected) for _ in range(3))  # graphs: recorded, replayed
        calls[label] = lambda run=run: run(*inputs)
        contexts[label] = variant
    nothing = compiled_nothing(fn)
    nothing(*inputs)
    calls[NOTHING] = lambda: nothing(*inputs)
    fresh = compiled_fresh_outputs(fn, list(expected))
    fresh(*inputs)
    calls[FRESH] = lambda: fresh(*inputs)
    names = list(calls)
    measured: dict[str, dict[str, list[float]]] = {n: {"ms": [], "host": [], "inductor": []} for n in names}
    frames_before = torch._dynamo.utils.counters["stats"]["unique_graphs"]
    for round_ in range(rounds):
        for name_ in names[round_ % len(names) :] + names[: round_ % len(names)]:
            with variant_context(contexts[name_]) if name_ in contexts else contextlib.nullcontext():
                measured[name_]["ms"].append(cuda_time_ms(calls[name_]))
                measured[name_]["host"].append(host_us_per_call(calls[name_]))
                if name_ in contexts:
                    measured[name_]["inductor"].append(inductor_call_us_per_call(calls[name_]))
    recompiled = torch._dynamo.utils.counters["stats"]["unique_graphs"] - frames_before
    median = {n: statistics.median(m["ms"]) for n, m in measured.items()}

    def by_round(reference: str, name_: str) -> float:
        """The median over rounds of ``reference``'s ms per call over ``name_``'s in the same round."""
        return statistics.median(a / b for a, b in zip(measured[reference]["ms"], measured[name_]["ms"]))

    rows = []
    for name_ in names:
        m = measured[name_]
        rows.append(
            {
                "workload": name,
                "variant": name_,
                "ms/call median": median[name_],
                "ms/call min": min(m["ms"]),
                "ms/call max": max(m["ms"]),
                "host us/call median": statistics.median(m["host"]),
                "in Inductor's call us median": statistics.median(m["inductor"]) if m["inductor"] else None,
                "above nothing ms": median[name_] - median[NOTHING],
                "stock / this": by_round("stock", name_),
                "combo / this": by_round("combo_kernels", name_),
                "stock reduce-overhead / this": by_round("stock, reduce-overhead", name_),
                "ms/call by round": " ".join(f"{ms:.3f}" for ms in m["ms"]),
                "max rel err": errors.get(name_),
                "graphs compiled while timing": recompiled,
            }
        )
        print(rows[-1], flush=True)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--only", nargs="*", help="substrings of the storm names (optimus_ir.testing.storms.STORMS)")
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args()
    rows = []
    for name, fn, make, dtype in STORMS:
        if args.only and not any(part in name for part in args.only):
            continue
        with cold_compile():
            rows += storm_rows(f"{name} {str(dtype).removeprefix('torch.')}", fn, make(dtype, False), args.rounds)
        write_results(args.out, "per_call_ledger", header(" ".join(sys.argv)), rows, list(rows[0]), echo=False)
    write_results(args.out, "per_call_ledger", header(" ".join(sys.argv)), rows, list(rows[0]))


if __name__ == "__main__":
    main()
