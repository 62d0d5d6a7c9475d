"""What is allocated at the peak of one call, stock Inductor against optimus_ir: where the suite's ``peak MiB`` of a
case differs, this says which allocations make the difference. For each variant, one call of the case (after the
calls that warm it up) is traced with the CUDA caching allocator's history; the trace is replayed to find the
moment the memory allocated during the call peaked, and the blocks alive then are listed with the line of the
compiled code (wrapper or eager) that allocated them.

    python -m benchmarks memory --out DIR tanh_storm/small/fp32/training [more cases]
    python -m benchmarks memory --out DIR seed-48x4/training       # a model of the real suite, and its mode

Writes peak_trace.md.
"""

from __future__ import annotations

import argparse
import collections
import linecache
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from benchmarks import real_models
from benchmarks.measure import VARIANTS, cold_compile, header, peak_memory_bytes, variant_context
from benchmarks.suite import parse_case, prepare

#: calls before the traced one: enough for the member tables' addresses to settle (the hetero GNN's inference misses
#: its caches in each of its first 14 calls), as the suite's peak is measured after its counted calls
WARMUP = 50
#: the caching allocator's block granularity: what ``memory_allocated`` counts for a request
_BLOCK = 512


def _where(frames: list[dict[str, Any]]) -> str:
    """The innermost frame in generated code (Inductor's wrapper, ``/tmp/...py``) or else in this repository."""
    for frame in frames:
        name = frame["filename"]
        if "torchinductor" in name or name.startswith("/tmp/"):
            return f"{Path(name).name}:{frame['line']} `{linecache.getline(name, frame['line']).strip()[:120]}`"
    for frame in frames:
        if "site-packages" not in frame["filename"] and "<" not in frame["filename"]:
            return f"{Path(frame['filename']).name}:{frame['line']} {frame['name']}"
    return "?"


def alive_at_peak(call: Any) -> tuple[int, int, int, list[tuple[int, str]]]:
    """One ``call()`` traced: the caching allocator's peak above its start; the same peak from the trace's events;
    the bytes allocated before the call and freed by it before that peak; and the blocks the call allocated that
    are alive at that peak: (bytes, where)."""
    torch.cuda.memory._record_memory_history(max_entries=200_000, stacks="python")
    try:
        peak = peak_memory_bytes(call)
        snapshot = torch.cuda.memory._snapshot()
    finally:
        torch.cuda.memory._record_memory_history(enabled=None)
    live: dict[int, tuple[int, str]] = {}
    now = freed_before = best = best_freed = 0
    best_live: list[tuple[int, str]] = []
    for event in (e for trace in snapshot["device_traces"] for e in trace):
        size = -(-event["size"] // _BLOCK) * _BLOCK
        if event["action"] == "alloc":
            live[event["addr"]] = (size, _where(event.get("frames", [])))
            now += size
        elif event["action"] == "free_requested":
            now -= size
            if live.pop(event["addr"], None) is None:
                freed_before += size
        if now > best:
            best, best_freed, best_live = now, freed_before, list(live.values())
    return peak, best, best_freed, sorted(best_live, reverse=True)


def traced_case(text: str) -> tuple[str, Callable[[bool], Callable[[], Any]]]:
    """``"model/mode"`` of the real suite, or a suite case: its label, and what makes its call (compiled or not)."""
    name, _, mode = text.partition("/")
    models = real_models.select("all", [name])
    if not models or mode not in real_models.MODES:
        case = parse_case(text)
        return case.label, lambda compiled: prepare(case, compiled)[0]

    def make(compiled: bool) -> Callable[[], Any]:
        module, inputs = real_models.prepared(models[0], mode, "cuda")
        # a training step sets the gradients to None first: its peak counts from none alive, as the suite's
        return real_models.make_call(torch.compile(module) if compiled else module, inputs, mode,
                                     list(module.parameters()))

    return text, make


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--warmup", type=int, default=WARMUP, help=f"calls before the traced one (default {WARMUP})")
    parser.add_argument("--hold-first", action="store_true",
                        help="keep the first call's result alive through the rest, as the real suite does")
    parser.add_argument("cases", nargs="+", type=traced_case,
                        help="workload/size/dtype/mode of the suite, or model/mode of the real suite")
    args = parser.parse_args()
    lines = ["# peak_trace\n", *(f"- {key}: `{value}`" for key, value in header(" ".join(sys.argv)).items()), ""]
    for label, make in args.cases:
        for variant in [v for v in VARIANTS if v.name in ("stock", "optimus_ir")]:
            torch._dynamo.reset()
            with cold_compile(), variant_context(variant):
                call = make(variant.compile)
                held = [call()]  # the first call's result
                for _ in range(args.warmup - 1):
                    call()
                if not args.hold_first:
                    held.clear()
                peak, traced, freed, alive = alive_at_peak(call)
            grouped = collections.Counter()
            for size, where in alive:
                grouped[(size, where)] += 1
            lines.append(f"## {label}, {variant.name}\n\npeak {peak} bytes above the call's start ({traced} from "
                         f"the trace); at that peak the call had freed {freed} bytes allocated before it, and "
                         f"{len(alive)} blocks it allocated were alive, {sum(s for s, _ in alive)} bytes:\n")
            lines.extend(f"- {count} × {size} bytes: {where}" for (size, where), count in grouped.most_common())
            lines.append("")
            print("\n".join(lines[-len(grouped) - 2:]), flush=True)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "peak_trace.md").write_text("\n".join(lines))


if __name__ == "__main__":
    main()
