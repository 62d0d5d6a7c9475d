"""Where the time of a call under ``torch.compile(mode="reduce-overhead")`` goes, stock Inductor against optimus_ir:
whether cudagraph trees skipped the graph (and why), host and CUDA-event time per call, and the profiler's busiest
host ops and GPU kernels over 20 calls.

    python benchmarks/reduce_overhead_probe.py [--only layer_norm]
"""

from __future__ import annotations

import argparse
import logging
import sys
import time
from pathlib import Path

import torch
from torch._dynamo.utils import counters

sys.path.insert(0, str(Path(__file__).resolve().parent))
from horizontal_bench import WORKLOADS  # noqa: E402
from measure import cold_compile, cuda_time_ms  # noqa: E402

import optimus_ir  # noqa: E402


def probe(name: str, fn, inputs: list[torch.Tensor], passes: str | None) -> None:
    counters.clear()
    with cold_compile(), optimus_ir.enabled(passes):
        run = torch.compile(fn, mode="reduce-overhead")
        for _ in range(5):
            run(*inputs)
        torch.cuda.synchronize()
        start = time.perf_counter()
        for _ in range(100):
            run(*inputs)
        host_us = (time.perf_counter() - start) / 100 * 1e6
        torch.cuda.synchronize()
        ms = cuda_time_ms(lambda: run(*inputs))
        with torch.profiler.profile(
            activities=[torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA]
        ) as prof:
            for _ in range(20):
                run(*inputs)
            torch.cuda.synchronize()
    variant = "optimus_ir" if passes else "stock"
    print(f"== {name} {variant}: host {host_us:.1f} us/call, {ms:.4f} ms/call (CUDA events), "
          f"cudagraph skips {dict(counters['inductor']).get('cudagraph_skips', 0)}", flush=True)
    print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=12), flush=True)
    print(prof.key_averages().table(sort_by="self_device_time_total", row_limit=8), flush=True)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--only", nargs="*", help="substrings of the workload names (default: all)")
    args = parser.parse_args()
    torch._logging.set_logs(perf_hints=True)  # cudagraph trees log why they skip a graph
    logging.getLogger("torch._inductor.cudagraph_utils").setLevel(logging.INFO)
    for name, fn, make, dtype in WORKLOADS:
        if dtype != torch.float32 or (args.only and not any(s in name for s in args.only)):
            continue
        inputs = make(dtype, False)
        for passes in (None, "all"):
            probe(name, fn, inputs, passes)


if __name__ == "__main__":
    main()
