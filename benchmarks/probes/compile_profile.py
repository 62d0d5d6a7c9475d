"""Where one compile of a real-suite model goes, without a GPU: ``compile_report`` (the virtual sm_90 device on a
machine without one) of a model and mode under cProfile, stock Inductor or optimus_ir. Writes Inductor's timed
phases (``torch._dynamo.utils.compile_times``) and the functions of the scheduler's fusion, the memory planning
and optimus_ir's rules by cumulative time. Seconds are cProfile's (slower than a plain compile), and no Triton
kernel is compiled; compare variants within one machine.

    python -m benchmarks compile-profile --out DIR seed-48x4/training [--variant stock]
"""

from __future__ import annotations

import argparse
import cProfile
import io
import pstats
import sys
import time
from pathlib import Path

import torch
from torch._dynamo.utils import compile_times

from benchmarks import real_models
from benchmarks.measure import header
from optimus_ir.inspect import compile_report

#: what the function table keeps: the fusion search, the memory planning, optimus_ir's own code
FUNCTIONS = (
    r"optimus_ir|scheduler_hooks|lowering/|memory.py"
    r"|scheduler.py:\d+\((fuse|can_fuse|get_possible|score_fusion|_init)"
)
TOP = 40


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("case", help="model/mode of the real suite")
    parser.add_argument("--variant", choices=["stock", "optimus_ir"], default="optimus_ir")
    args = parser.parse_args()
    name, mode, module, inputs = real_models.prepared_case(args.case, "cpu")
    profiler = cProfile.Profile()
    start = time.perf_counter()
    with torch.set_grad_enabled(mode == "training"):
        profiler.enable()
        report = compile_report(module, inputs, passes=None if args.variant == "stock" else "all")
        profiler.disable()
    seconds = time.perf_counter() - start
    table = io.StringIO()
    pstats.Stats(profiler, stream=table).sort_stats("cumtime").print_stats(FUNCTIONS, TOP)
    launches = ", ".join(f"{graph.name} {len(graph.launches)}" for graph in report.graphs)
    lines = [
        f"# compile_profile {args.case} {args.variant}\n",
        *(f"- {key}: `{value}`" for key, value in header(" ".join(sys.argv)).items()),
        f"\n{seconds:.1f} s under cProfile; launches: {launches}\n",
        "## Inductor's timed phases\n", "```", compile_times(repr="str", aggregate=True), "```\n",
        "## Functions by cumulative time\n", "```", table.getvalue(), "```",
    ]
    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / f"compile_profile_{name}_{mode}_{args.variant}.md"
    path.write_text("\n".join(lines))
    print(f"{seconds:.1f} s; {launches}; written to {path}")


if __name__ == "__main__":
    main()
