"""What running a transpose over its flat index costs against Inductor's 2-d tiles, measured: the calibration of
``cost.EXTRA_SECTOR_BYTES_PER_US`` (the horizontal pass merges a 2-d tiled kernel only where a flat run's extra
sectors cost less than the launch it saves).

    python -m benchmarks flat-transpose-cost --out DIR

Each case is compiled twice, by stock Inductor (2-d tiles) and with ``triton.max_tiles = 1`` (one flat index, as a
merged kernel runs it); device time per call from ``triton.testing.do_bench``. The extra sectors are the model's
(``cost.extra_sector_bytes`` of the strided side's index over the flat index); the rate is those bytes over the
measured difference, for the cases whose difference is above 2 µs.
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
from pathlib import Path

import sympy
import torch
import triton.testing

from benchmarks.measure import header, write_results
from optimus_ir import index_math
from optimus_ir.scheduler_hooks.horizontal import cost
from optimus_ir.scheduler_hooks.horizontal.structure import FLAT_INDEX

#: (name, shape, what a call computes, the strided side's index over the loop variables of that shape)
CASES = [
    *[(f"t {n}x{n}", (n, n), lambda x: (x.t() * 2).contiguous(), lambda p, s: p[1] * s[0] + p[0])
      for n in (256, 512, 1024, 2048, 4096)],
    *[(f"weight {co}x{ci}x{k}x{k} to channels-last", (co, ci, k, k),
       lambda w: w.contiguous(memory_format=torch.channels_last),
       lambda p, s: p[1] + s[1] * p[3] + s[1] * s[3] * p[2] + s[1] * s[2] * s[3] * p[0])
      for co, ci, k in ((64, 32, 3), (192, 64, 3), (384, 384, 3), (192, 160, 7), (768, 768, 3))],
]


def extra_bytes(shape: tuple[int, ...], strided: object, itemsize: int) -> float:
    """The model's extra bytes of a flat run: the strided side's sectors beyond a contiguous access's."""
    loops = [sympy.Symbol(f"p{i}", integer=True, nonnegative=True) for i in range(len(shape))]
    expr = index_math.flatten_loops(strided(loops, shape), dict(zip(loops, shape)), FLAT_INDEX)
    return cost.extra_sector_bytes(expr, math.prod(shape), itemsize)


def device_us(fn, x) -> float:
    fn(x)
    return triton.testing.do_bench(lambda: fn(x), warmup=50, rep=200) * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    rows = []
    for dtype in (torch.float32, torch.bfloat16):
        for name, shape, fn, strided in CASES:
            x = torch.randn(shape, device="cuda", dtype=dtype)
            torch._dynamo.reset()
            tiled = device_us(torch.compile(fn), x)
            torch._dynamo.reset()
            with torch._inductor.config.patch({"triton.max_tiles": 1}):
                flat = device_us(torch.compile(fn), x)
            extra = extra_bytes(shape, strided, x.element_size())
            rows.append({"case": name, "dtype": str(dtype).removeprefix("torch."), "tiled us": tiled,
                         "flat us": flat, "model's extra MB": extra / 1e6,
                         "bytes per us": extra / (flat - tiled) if flat - tiled > 2 else None})
            print(rows[-1], flush=True)
    rates = [r["bytes per us"] for r in rows if r["bytes per us"]]
    meta = header(" ".join(sys.argv))
    meta["median bytes per us (cases over 2 us apart)"] = statistics.median(rates) if rates else None
    columns = ["case", "dtype", "tiled us", "flat us", "model's extra MB", "bytes per us"]
    write_results(args.out, "flat_transpose_cost", meta, rows, columns)


if __name__ == "__main__":
    main()
