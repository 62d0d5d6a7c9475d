"""Where a real model's device time moves under optimus_ir, launch by launch: stock and optimus_ir compiled in one
process, optimus_ir with the kernel dump on, each call's Triton kernels profiled. Each profiled kernel is matched to
its launch in the dump's wrapper code (``stock.py``, ``optimus_ir.py``: the k-th run of a kernel name to its k-th
launch), where the comment Inductor writes before it names its source nodes. Launches of the same kernel source over
the same source nodes on both sides are unchanged; the others are grouped by the source nodes they share (a merged
kernel with the stock kernels of its members), and each group's device time is set against stock's.

    python -m benchmarks merge-cost --out DIR mixnet-s/inference [--calls 10]

Rows: one per group that changed, costliest first (optimus_ir's µs minus stock's). Extern kernels (convolutions,
matmuls) and copies are not Triton launches, and not in the rows; the header's totals are over Triton kernels.
"""

from __future__ import annotations

import argparse
import collections
import os
import re
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

import torch

from benchmarks import real_models
from benchmarks.measure import VARIANTS, cold_compile, header, variant_context, write_results
from optimus_ir.codegen_text import parse_wrapper
from optimus_ir.dump import DUMP_ENV
from optimus_ir.testing.measure import cuda_events

COLUMNS = ["optimus_ir kernels", "optimus_ir µs", "stock launches", "stock µs", "Δ µs", "ratio", "source nodes"]
#: calls profiled per variant (after one)
CALLS = 10
#: source nodes listed per row
LISTED = 6
_SOURCE_NODES = re.compile(r"#\s*(?:Topologically Sorted|Unsorted) Source Nodes: \[(?P<nodes>[^\]]*)\]")
_RUN = re.compile(r"\b(?P<name>\w+)\.run\(")


@dataclass
class Launch:
    """One Triton launch of a wrapper: its kernel, the kernel's source with its name taken out, the source nodes of
    the comment before it, and its profiled µs per call (None where no profiled run matched it)."""

    graph: int
    kernel: str
    source: str
    nodes: frozenset[str]
    us: float | None = None


def launches(wrapper: str, graph: int) -> list[Launch]:
    """The Triton launches of one call of ``wrapper``, in order, each with the source nodes named before it."""
    code = parse_wrapper(wrapper)
    sources = {k.name: k.source.replace(k.name, "KERNEL") for k in code.kernels}
    found, nodes = [], frozenset()
    for line in wrapper.splitlines():
        if (comment := _SOURCE_NODES.search(line)) is not None:
            nodes = frozenset(n.strip() for n in comment["nodes"].split(",") if n.strip())
        elif (run := _RUN.search(line)) is not None and run["name"] in sources:
            found.append(Launch(graph, run["name"], sources[run["name"]], nodes))
            nodes = frozenset()
    return found


def profiled_us(call: object, calls: int) -> dict[str, list[float]]:
    """Per kernel name, the µs of its k-th run in one call, averaged over ``calls`` profiled calls."""
    call()
    events = [e for e in cuda_events(call, calls) if e.name.startswith("triton")]
    runs: dict[str, list[float]] = collections.defaultdict(list)
    for event in events:
        runs[event.name].append(event.time_range.elapsed_us())
    per_call = {}
    for name, times in runs.items():
        if len(times) % calls:
            print(f"{name}: {len(times)} runs in {calls} calls; left out", file=sys.stderr)
            continue
        n = len(times) // calls
        per_call[name] = [sum(times[i::n]) / calls for i in range(n)]
    return per_call


def assign(found: list[Launch], per_call: dict[str, list[float]]) -> None:
    """The k-th profiled run of each kernel name to its k-th launch, where the counts agree."""
    by_name: dict[str, list[Launch]] = collections.defaultdict(list)
    for launch in found:
        by_name[launch.kernel].append(launch)
    for name, named in by_name.items():
        times = per_call.get(name, [])
        if len(times) == len(named):
            for launch, us in zip(named, times):
                launch.us = us
        else:
            print(f"{name}: {len(named)} launches, {len(times)} profiled runs; not timed", file=sys.stderr)


def changed_groups(stock: list[Launch], optimus: list[Launch]) -> list[tuple[list[Launch], list[Launch]]]:
    """The launches that differ between the sides (same source over the same nodes: unchanged), grouped by
    shared source nodes: each group's optimus_ir launches and stock launches."""
    unmatched_stock = collections.Counter((l.graph, l.source, l.nodes) for l in stock)
    unmatched_optimus = collections.Counter((l.graph, l.source, l.nodes) for l in optimus)
    common = unmatched_stock & unmatched_optimus
    left: list[tuple[str, Launch]] = []
    for side, found in (("stock", stock), ("optimus_ir", optimus)):
        kept = collections.Counter(common)
        for launch in found:
            key = (launch.graph, launch.source, launch.nodes)
            if kept[key] > 0:
                kept[key] -= 1
            else:
                left.append((side, launch))
    parent = list(range(len(left)))

    def root(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    owner: dict[tuple[int, str], int] = {}
    for i, (_, launch) in enumerate(left):
        for node in launch.nodes or {f"<no comment {i}>"}:
            j = owner.setdefault((launch.graph, node), i)
            parent[root(i)] = root(j)
    groups: dict[int, tuple[list[Launch], list[Launch]]] = {}
    for i, (side, launch) in enumerate(left):
        optimus_side, stock_side = groups.setdefault(root(i), ([], []))
        (optimus_side if side == "optimus_ir" else stock_side).append(launch)
    return list(groups.values())


def row(optimus: list[Launch], stock: list[Launch]) -> dict[str, object]:
    def total(found: list[Launch]) -> float | None:
        return None if any(l.us is None for l in found) else sum(l.us for l in found)

    mine, theirs = total(optimus), total(stock)
    nodes = sorted({n for l in optimus + stock for n in l.nodes})
    return {
        "optimus_ir kernels": ", ".join(sorted({l.kernel for l in optimus})) or "(none)",
        "optimus_ir µs": mine, "stock launches": len(stock), "stock µs": theirs,
        "Δ µs": None if mine is None or theirs is None else mine - theirs,
        "ratio": None if not mine or not theirs else mine / theirs,
        "source nodes": ", ".join(nodes[:LISTED]) + (f" (+{len(nodes) - LISTED})" if len(nodes) > LISTED else ""),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("case", help="model/mode of the real suite")
    parser.add_argument("--calls", type=int, default=CALLS)
    args = parser.parse_args()
    name, mode, module, inputs = real_models.prepared_case(args.case, "cuda")
    params = list(module.parameters())
    variants = {v.name: v for v in VARIANTS}
    dump = Path(tempfile.mkdtemp(prefix="merge_cost_dump_"))
    profiles = {}
    for variant_name in ("stock", "optimus_ir"):
        previous = os.environ.get(DUMP_ENV)
        if variant_name == "optimus_ir":
            os.environ[DUMP_ENV] = str(dump)
        try:
            with cold_compile(), variant_context(variants[variant_name]):
                call = real_models.make_call(torch.compile(module), inputs, mode, params)
                call()
                profiles[variant_name] = profiled_us(call, args.calls)
        finally:
            if previous is None:
                os.environ.pop(DUMP_ENV, None)
            else:
                os.environ[DUMP_ENV] = previous
        real_models.drop_grads(params)
    graphs = sorted(dump.glob("graph_*"), key=lambda p: int(p.name.split("_")[1]))
    sides = {"stock": [], "optimus_ir": []}
    for graph, folder in enumerate(graphs):
        for side, found in sides.items():
            found.extend(launches((folder / f"{side}.py").read_text(), graph))
    for side, found in sides.items():
        assign(found, profiles[side])
    rows = [row(o, s) for o, s in changed_groups(sides["stock"], sides["optimus_ir"])]
    rows.sort(key=lambda r: -(r["Δ µs"] or 0))
    meta = header(" ".join(sys.argv))
    for side, found in sides.items():
        meta[f"{side}: Triton launches, µs per call"] = (
            f"{len(found)}, {sum(l.us or 0 for l in found):.1f} ({sum(l.us is None for l in found)} not timed)"
        )
    meta["dump"] = str(dump)
    write_results(args.out, f"merge_cost_{name}_{mode}", meta, rows, COLUMNS)


if __name__ == "__main__":
    main()
