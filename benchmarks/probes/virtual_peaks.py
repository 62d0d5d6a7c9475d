"""Launches and peak bytes per graph on the virtual sm_90 device (no GPU needed), by compiled variant of
:data:`benchmarks.measure.VARIANTS` (stock Inductor, combo kernels, optimus_ir, ...) for cases of the real-model
suite, each graph's wrapper replayed (:mod:`optimus_ir.testing.wrapper_memory`), and the compile's seconds. What this
machine can say of a change's kernels and memory before the H200 measures them.

    python -m benchmarks virtual-peaks --out DIR --cases seed-48x4/training [--variants stock optimus_ir]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import torch
import torch._inductor.config

from benchmarks.measure import VARIANTS, header, write_results
from benchmarks.real_models import prepared_case
from optimus_ir.inspect import compile_report
from optimus_ir.testing.wrapper_memory import peak_bytes

#: the variants that compile, by name
COMPILED = {variant.name: variant for variant in VARIANTS if variant.compile}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--cases", nargs="+", required=True)
    parser.add_argument("--variants", nargs="+", default=["stock", "optimus_ir"], choices=list(COMPILED))
    args = parser.parse_args()
    meta = {**header(" ".join(sys.argv)), "device": "virtual sm_90 (code generated on this machine's CPU)"}
    rows = []
    for case in args.cases:
        for name in args.variants:
            variant = COMPILED[name]
            _, mode, module, inputs = prepared_case(case, "cpu")
            start = time.perf_counter()
            with torch.set_grad_enabled(mode == "training"), torch._inductor.config.patch(variant.inductor_config):
                report = compile_report(module, inputs, passes=variant.passes)
            seconds = time.perf_counter() - start
            for graph in report.graphs:
                rows.append({"case": case, "variant": name, "graph": graph.name, "launches": len(graph.launches),
                             "peak bytes": peak_bytes(graph.wrapper), "compile s": round(seconds, 1)})
            write_results(args.out, "virtual_peaks", meta, rows, list(rows[0]), echo=False)
            print(rows[-len(report.graphs):], flush=True)


if __name__ == "__main__":
    main()
