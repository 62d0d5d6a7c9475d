"""Seconds of a real-suite model's first compile without a GPU: ``compile_report`` on the virtual sm_90 device (no
Triton kernel compiled), stock Inductor and optimus_ir, next to the floor no Inductor pass can go below: the same
model through Dynamo and AOTAutograd alone (``backend="aot_eager"``, the first call). Each case and variant runs in
a process of its own, one after another, so that nothing one compiled is cached for the next.

    python -m benchmarks compile-times --out DIR seed-48x4/inference seed-96x8/inference

Writes DIR/compile_times.{json,md}.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

import torch

from benchmarks import real_models
from benchmarks.measure import header, write_results
from optimus_ir.inspect import compile_report
from optimus_ir.testing.workloads import output_loss

VARIANTS = ("dynamo + aot_autograd", "stock", "optimus_ir")


def one(case: str, variant: str) -> dict[str, object]:
    """The first compile of ``case`` under ``variant``, in this process: seconds, and launches per call."""
    _, mode, module, inputs = real_models.prepared_case(case, "cpu")
    with torch.set_grad_enabled(mode == "training"):
        start = time.perf_counter()
        if variant == VARIANTS[0]:
            outputs = torch.compile(module, backend="aot_eager")(*inputs)
            if mode == "training":
                output_loss(real_models.outputs_of(outputs)).backward()
            launches = None
        else:
            report = compile_report(module, inputs, passes=None if variant == "stock" else "all")
            launches = len(report.launches)
        seconds = time.perf_counter() - start
    return {"case": case, "variant": variant, "first compile s": seconds, "launches": launches}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path)
    parser.add_argument("--one", nargs=2, metavar=("CASE", "VARIANT"), help=argparse.SUPPRESS)
    parser.add_argument("cases", nargs="*", help="model/mode of the real suite")
    args = parser.parse_args()
    if args.one:
        print(json.dumps(one(*args.one)))
        return
    if args.out is None or not args.cases:
        parser.error("--out and at least one case are needed")
    rows = []
    for case in args.cases:
        for variant in VARIANTS:
            command = [sys.executable, "-m", "benchmarks", "compile-times", "--one", case, variant]
            done = subprocess.run(command, capture_output=True, text=True, check=False)
            if done.returncode != 0:
                rows.append({"case": case, "variant": variant, "error": done.stderr.strip().splitlines()[-1:]})
            else:
                rows.append(json.loads(done.stdout.strip().splitlines()[-1]))
            print(rows[-1], flush=True)
            write_results(args.out, "compile_times", header(" ".join(sys.argv)), rows,
                          ["case", "variant", "first compile s", "launches", "error"], echo=False)
    write_results(args.out, "compile_times", header(" ".join(sys.argv)), rows,
                  ["case", "variant", "first compile s", "launches", "error"])


if __name__ == "__main__":
    main()
