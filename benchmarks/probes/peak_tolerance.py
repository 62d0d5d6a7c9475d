"""What the horizontal pass's peak tolerance buys and costs, measured: the same cases at several tolerances.

    python -m benchmarks peak-tolerance --out DIR CASE... [--tolerances 0 0.01]
    (CASE: workload/size/dtype/mode, e.g. layernorm_storm/small/fp32/training)

A merge may raise the graph's estimated peak memory to ``1 + OPTIMUS_IR_PEAK_TOLERANCE`` times the peak before any
merge. Each case is measured as the suite measures it (``suite.measure``: compiled cold; kernels, ms per call, peak
MiB above what was allocated before the call, first call s, error against eager's first call), by stock Inductor
and by optimus_ir at each tolerance.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from pathlib import Path
from unittest import mock

from benchmarks.measure import VARIANTS, header, write_results
from benchmarks.suite import measure, parse_case, prepare
from optimus_ir.settings import PEAK_TOLERANCE_ENV


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--tolerances", type=float, nargs="+", default=[0.0, 0.01])
    parser.add_argument("cases", type=parse_case, nargs="+")
    args = parser.parse_args()
    variants = {v.name: v for v in VARIANTS}
    columns = ["case", "variant", "kernels/call", "ms/call", "peak MiB", "first call s", "max rel err",
               "optimus_ir rewrites", "error"]
    rows = []
    for case in args.cases:
        _, reference, _ = prepare(case, compiled=False)
        runs = [("stock", variants["stock"], 0.0)]
        runs += [(f"optimus_ir, tolerance {t:g}", variants["optimus_ir"], t) for t in args.tolerances]
        for name, variant, tolerance in runs:
            with mock.patch.dict("os.environ", {PEAK_TOLERANCE_ENV: repr(tolerance)}):
                row = measure(case, dataclasses.replace(variant, name=name), reference)
            rows.append({"case": case.label, **row})
            print({k: rows[-1].get(k) for k in columns}, flush=True)
            write_results(args.out, "peak_tolerance_probe", header(" ".join(sys.argv)), rows, columns, echo=False)
    write_results(args.out, "peak_tolerance_probe", header(" ".join(sys.argv)), rows, columns)


if __name__ == "__main__":
    main()
