"""Split → pointwise → cat on the GPU (the vertical issue's chains, ``optimus_ir.testing.storms.CHAINS``): eager,
stock Inductor, combo kernels and optimus_ir in one run.

    python -m benchmarks chains --out benchmarks/results/<date> [--match split16_chain12]

For each workload and variant: kernels per call (profiler), time per call (CUDA events, median), GPU time under
CUDA-graph replay, compile time (first call), max relative error against eager, and the memory floor (bytes in +
out over the device-to-device copy bandwidth measured in the same run). Writes split_cat.{json,md}.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

from benchmarks.measure import (
    VARIANTS,
    copy_bandwidth_bytes_per_ms,
    header,
    measure_inference,
    measure_training_step,
    write_results,
)
from optimus_ir.testing.storms import CHAINS, TRAINING_CHAINS


def training_rows(match: str) -> list[dict]:
    """Forward + backward of each training workload: kernels and time per step, max error of the input grad."""
    rows = []
    for name, fn, shape, dtype in TRAINING_CHAINS:
        if match not in name:
            continue
        x = torch.randn(shape, dtype=dtype, device="cuda", requires_grad=True)
        grad = torch.randn(shape, dtype=dtype, device="cuda")
        for variant in VARIANTS:
            rows.append(measure_training_step(name, variant, fn, (x,), grad))
            print(rows[-1], flush=True)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--match", default="", help="only the workloads whose name contains this")
    args = parser.parse_args()
    bandwidth = copy_bandwidth_bytes_per_ms()
    rows = training_rows(args.match)
    for name, fn, shape, dtype in CHAINS:
        if args.match not in name:
            continue
        x = torch.randn(shape, dtype=dtype, device="cuda")
        floor_ms = 2 * x.numel() * x.element_size() / bandwidth
        for variant in VARIANTS:
            rows.append(measure_inference(name, variant, fn, (x,), fn(x), floor_ms))
            print(rows[-1], flush=True)
    meta = header(" ".join(sys.argv)) | {"copy bandwidth GB/s": round(bandwidth / 1e6, 1)}
    columns = list(rows[-1])
    write_results(args.out, "split_cat", meta, rows, columns)


if __name__ == "__main__":
    main()
