"""Every compile target of the shared registry (``optimus_ir.testing.compile_targets``) compiled with symbolic
sizes, stock and with every pass (``compile_report``; the virtual sm_90 device where there is no GPU): launches per
call, against optimus_ir's with static sizes, the rules that fired, and each rejection that names a symbol.

Two ways to make sizes symbolic. ``--sizes batch`` (the default) marks the batch dimensions of the inputs dynamic
(:func:`mark_batch_dynamic`), as Dynamo does after a loop's batch changes; ``--sizes all`` compiles with
``dynamic=True``, every input size symbolic.

    python -m benchmarks dynamic-shapes --out DIR [--sizes batch|all] [--only SUBSTRING ...]

Writes ``DIR/dynamic_shapes_<sizes>.json`` (rewritten after each target) and ``.md`` (one row a target); exits 1
where optimus_ir launches more than stock, a compile raised, or a wrapper's module-level code reads a size symbol
(it would fail when loaded: the virtual device does not load it).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
from torch.utils._pytree import tree_leaves

#: words of a rejection's reason that say it was a symbol that stopped the rule
SYMBOLIC_WORDS = ("symbolic", "dynamic")


def mark_batch_dynamic(key: str, inputs: Sequence[Any]) -> None:
    """Mark the batch dimensions of a target's input tensors dynamic, as Dynamo's automatic dynamic shapes does once
    the batch changed: a model family's dimensions of its configured batch size, else each input's first. Dynamo
    keeps a dimension static where the code specializes it (``maybe_mark_dynamic``)."""
    from optimus_ir.testing import WORKLOADS

    kind, name, *rest = key.split(":")
    batch = WORKLOADS[name].configs[rest[0]]["batch"] if kind == "workload" else None
    for leaf in tree_leaves(list(inputs)):
        if isinstance(leaf, torch.Tensor):
            for dim, size in enumerate(leaf.shape):
                if size > 1 and (size == batch if batch is not None else dim == 0):
                    torch._dynamo.maybe_mark_dynamic(leaf, dim)


def row_of(key: str, build: Any, sizes: str) -> dict[str, Any]:
    """One target's launches stock → optimus_ir, rules fired, rejections naming a symbol, or the error."""
    from optimus_ir.codegen_text import module_level_size_symbols
    from optimus_ir.inspect import compile_report

    row: dict[str, Any] = {"target": key}
    try:
        fn, inputs = build()
        row["optimus_ir static"] = len(compile_report(fn, tuple(inputs)).launches)
        counts = []
        for passes in (None, "all"):
            fn, inputs = build()
            if sizes == "batch":
                mark_batch_dynamic(key, inputs)
            start = time.perf_counter()
            report = compile_report(fn, tuple(inputs), passes=passes, dynamic=sizes == "all")
            counts.append(len(report.launches))
            row[f"compile s ({'stock' if passes is None else 'optimus_ir'})"] = round(time.perf_counter() - start, 1)
        row["stock"], row["optimus_ir"] = counts
        unbound = sorted(set().union(*(module_level_size_symbols(g.wrapper) for g in report.graphs)))
        if unbound:  # (the virtual device never loads the module; a GPU would fail there)
            row["error"] = f"the wrapper's module-level code reads size symbols {unbound}"
        row["fired"] = sorted({r.rule for r in report.rewrites if r.fired})
        row["symbolic rejections"] = sorted({
            f"{r.rule}: {r.detail}"[:160] for r in report.rewrites
            if not r.fired and any(word in r.detail for word in SYMBOLIC_WORDS)
        })
    except Exception as error:  # the row says so; the other targets go on
        row["error"] = f"{type(error).__name__}: {str(error).strip().splitlines()[0] if str(error).strip() else ''}"
    return row


def markdown(rows: list[dict[str, Any]], sizes: str) -> str:
    lines = [
        f"# Launches per call with symbolic sizes ({sizes}), stock → optimus_ir",
        "",
        "| target | stock | optimus_ir | optimus_ir, static sizes | rules fired | rejections naming a symbol | error |",
        "|---|---|---|---|---|---|---|",
    ]
    for row in rows:
        lines.append(
            f"| {row['target']} | {row.get('stock', '')} | {row.get('optimus_ir', '')} | "
            f"{row.get('optimus_ir static', '')} | "
            f"{', '.join(row.get('fired', []))} | {'; '.join(row.get('symbolic rejections', []))} | "
            f"{row.get('error', '')} |"
        )
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks dynamic-shapes", description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--sizes", choices=("batch", "all"), default="batch")
    parser.add_argument("--only", nargs="*", help="targets whose key contains one of these")
    args = parser.parse_args(argv)
    from optimus_ir.testing import compile_targets

    args.out.mkdir(parents=True, exist_ok=True)
    rows: list[dict[str, Any]] = []
    for key, build in compile_targets():
        if args.only and not any(part in key for part in args.only):
            continue
        rows.append(row_of(key, build, args.sizes))
        print(json.dumps(rows[-1]), flush=True)
        (args.out / f"dynamic_shapes_{args.sizes}.json").write_text(json.dumps(rows, indent=1))
    (args.out / f"dynamic_shapes_{args.sizes}.md").write_text(markdown(rows, args.sizes))
    bad = [r["target"] for r in rows if "error" in r or r["optimus_ir"] > r["stock"]]
    print(f"{len(rows)} targets; more launches than stock or an error: {bad or 'none'}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
