"""On a real GPU: host µs of one Triton launch, by grid size, stock Inductor's kernels and a member-table kernel.

    python -m benchmarks launch-cost --out DIR

Under cProfile the merged kernel's launch (``_launch_kernel``, Inductor's static launcher) took about 20 µs of host
time per call on the H200's host (``host_overhead_profile_h200_host.txt``), several times a typical launch. This
times the launch alone: each kernel's launcher (``CachingAutotuner.run``) called ``CALLS`` times in a row with the
arguments of a real call, host time per launch, the GPU synchronized before and after (few enough launches that
the launch queue never fills). Kernels: stock's ``tanh`` on one tensor of 2^12 to 2^24 elements (grids of 4 to
16384 blocks), and the member-table kernel of 128 × tanh of [256, 512] (16384 blocks: the 2^24 elements end to
end), whose arguments are its table and the grid's extent.
"""

from __future__ import annotations

import sys
import time

import torch

import optimus_ir
from benchmarks.measure import gpu_out_dir, header, write_results
from optimus_ir.testing.storms import tanh_each

CALLS = 200


def launches(fn, inputs) -> list[tuple[object, tuple, dict]]:
    """Every Triton launch one call of ``fn`` (compiled) makes: the launcher and its arguments."""
    seen = []
    from torch._inductor.runtime import triton_heuristics

    real_run = triton_heuristics.CachingAutotuner.run

    def run(self, *args, **kwargs):
        seen.append((self, args, kwargs))
        return real_run(self, *args, **kwargs)

    compiled = torch.compile(fn)
    with torch.no_grad():
        compiled(*inputs)  # compiled and autotuned
        triton_heuristics.CachingAutotuner.run = run
        try:
            outputs = compiled(*inputs)
        finally:
            triton_heuristics.CachingAutotuner.run = real_run
    return seen, outputs


def host_us_per_launch(launcher, args, kwargs) -> float:
    best = float("inf")
    for _ in range(5):
        torch.cuda.synchronize()
        start = time.perf_counter()
        for _ in range(CALLS):
            launcher.run(*args, **kwargs)
        seconds = time.perf_counter() - start
        torch.cuda.synchronize()
        best = min(best, seconds / CALLS * 1e6)
    return best


def main() -> None:
    out = gpu_out_dir(description=__doc__)
    rows = []
    for log2 in (12, 16, 20, 24):
        with optimus_ir.enabled(None):
            seen, outputs = launches(torch.tanh, [torch.randn(2**log2, device="cuda")])
        (launcher, args, kwargs), = seen
        rows.append({"kernel": f"stock tanh, 2^{log2} elements", "launches per call": len(seen),
                     "host us per launch (best of 5)": host_us_per_launch(launcher, args, kwargs)})
        print(rows[-1], flush=True)
    inputs = [torch.randn(256, 512, device="cuda") for _ in range(128)]
    with optimus_ir.enabled("all"):
        seen, outputs = launches(tanh_each, inputs)
    (launcher, args, kwargs), = seen
    rows.append({"kernel": "optimus_ir member-table tanh, 128 x [256, 512]", "launches per call": len(seen),
                 "host us per launch (best of 5)": host_us_per_launch(launcher, args, kwargs)})
    print(rows[-1], flush=True)
    write_results(out, "launch_cost", header(" ".join(sys.argv)), rows, list(rows[0]))


if __name__ == "__main__":
    main()
