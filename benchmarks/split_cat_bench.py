"""Split → pointwise → cat on the GPU: eager, stock Inductor, combo kernels and optimus_ir in one run.

    python benchmarks/split_cat_bench.py --out benchmarks/results/<date> [--match split16_chain12]

For each workload and variant: kernels per call (profiler), time per call (CUDA events, median), GPU time under
CUDA-graph replay, compile time (first call), max relative error against eager, and the memory floor (bytes in +
out over the device-to-device copy bandwidth measured in the same run).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from measure import (  # noqa: E402
    VARIANTS,
    copy_bandwidth_bytes_per_ms,
    header,
    measure_inference,
    measure_training_step,
    write_results,
)


def split_relu_cat_reversed(x: torch.Tensor, pieces: int = 64) -> torch.Tensor:
    return torch.cat([torch.relu(p) for p in reversed(x.chunk(pieces, dim=1))], dim=1)


def split_mixed_cat(x: torch.Tensor, pieces: int = 64) -> torch.Tensor:
    ops = (torch.tanh, torch.sigmoid)
    return torch.cat([ops[i % 2](p) for i, p in enumerate(x.chunk(pieces, dim=1))], dim=1)


_CHAIN_OPS = (torch.relu, torch.tanh, torch.sigmoid, torch.nn.functional.silu, torch.abs, torch.neg, torch.exp,
              torch.nn.functional.gelu, torch.sin, torch.cos, torch.square, torch.nn.functional.softplus,
              torch.erf, torch.atan, torch.expm1, torch.log1p)


def split16_chain12(x: torch.Tensor) -> torch.Tensor:
    """12 layers of: split into 16 → a different pointwise op per piece → cat → scale (the vertical issue's case)."""
    for _ in range(12):
        x = torch.cat([op(p) for op, p in zip(_CHAIN_OPS, x.chunk(16, dim=1))], dim=1) * 0.5
    return x


WORKLOADS = [
    ("split64_relu_cat_reversed[64x4096,fp32]", split_relu_cat_reversed, (64, 4096), torch.float32),
    ("split64_relu_cat_reversed[8192x4096,fp32]", split_relu_cat_reversed, (8192, 4096), torch.float32),
    ("split64_relu_cat_reversed[8192x4096,bf16]", split_relu_cat_reversed, (8192, 4096), torch.bfloat16),
    ("split64_tanh_sigmoid_cat[8192x4096,fp32]", split_mixed_cat, (8192, 4096), torch.float32),
    ("split16_chain12[1024x1024,fp32]", split16_chain12, (1024, 1024), torch.float32),
]


TRAINING_WORKLOADS = [("split16_chain12[1024x1024,fp32] training step", split16_chain12, (1024, 1024), torch.float32)]


def training_rows(match: str) -> list[dict]:
    """Forward + backward of each training workload: kernels and time per step, max error of the input grad."""
    rows = []
    for name, fn, shape, dtype in TRAINING_WORKLOADS:
        if match not in name:
            continue
        x = torch.randn(shape, dtype=dtype, device="cuda", requires_grad=True)
        grad = torch.randn(shape, dtype=dtype, device="cuda")
        for variant in VARIANTS:
            rows.append(measure_training_step(name, variant, fn, (x,), grad))
            print(rows[-1], flush=True)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--match", default="", help="only the workloads whose name contains this")
    args = parser.parse_args()
    bandwidth = copy_bandwidth_bytes_per_ms()
    rows = training_rows(args.match)
    for name, fn, shape, dtype in WORKLOADS:
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
