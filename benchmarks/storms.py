"""N independent copies of one small op (the horizontal issue's storms, ``optimus_ir.testing.storms.STORMS``):
eager, stock Inductor, combo kernels and optimus_ir in one run, plus correctness under CUDA graphs
(``mode="reduce-overhead"``) and dynamic shapes.

    python -m benchmarks storms --out benchmarks/results/<date> [--parts inference,training,graphs] [--only tanh]

For each workload and variant: kernels per call (profiler), time per call (CUDA events, median), GPU time under
CUDA-graph replay (each replay timed alone; replays queued back to back, where each one's launch overlaps the one
before; and the work in a replay: its kernels' and copies' durations, without the graph's own launch),
compile time (first call), max relative error against eager, and the memory floor (bytes in +
out over the device-to-device copy bandwidth of a 2 GiB copy measured in the same run), the replay time of one
copy of the workload's bytes (what one kernel moving them takes at that size), and the replay time of stock
Inductor's kernel for the same op on ONE tensor holding every member's rows (what a merge can at best reach: the
op at this size with nothing left to merge). Writes horizontal.{json,md}, horizontal_training.{json,md} and
horizontal_cuda_graphs_dynamic.{json,md}.
"""

from __future__ import annotations

import argparse
import sys
import traceback
from collections.abc import Callable
from pathlib import Path

import torch

import optimus_ir
from benchmarks.measure import (
    VARIANTS,
    cold_compile,
    copy_bandwidth_bytes_per_ms,
    cuda_time_ms,
    graph_replay_measures,
    header,
    max_rel_error,
    measure_inference,
    measure_training_step,
    same_bytes_copy_replay_ms,
    write_results,
)
from optimus_ir.records import recording
from optimus_ir.testing.storms import STORMS, TRAINING_STORMS, layer_norm_each, storm_tensors, tanh_each


def _bytes(tensors: list[torch.Tensor]) -> int:
    return sum(t.numel() * t.element_size() for t in tensors)


def _as_one_tensor(fn: Callable, inputs: list[torch.Tensor]) -> tuple[torch.Tensor, ...]:
    """``fn``'s arguments for one member holding every member's rows (the layer norms: the first one's weight and
    bias)."""
    if fn is layer_norm_each:
        n = len(inputs) // 3
        return torch.cat(inputs[:n]), inputs[n], inputs[2 * n]
    return (torch.cat(inputs),)


def one_tensor_replay_ms(fn: Callable, inputs: list[torch.Tensor]) -> tuple[float | None, ...]:
    """GPU ms under CUDA-graph replay of stock Inductor's kernel for ``fn`` on one tensor of all members' rows: a
    replay alone, among replays queued back to back, and the work in it (:func:`graph_replay_measures`)."""
    args = _as_one_tensor(fn, inputs)
    torch._dynamo.reset()
    with optimus_ir.enabled(None):
        run = torch.compile(fn)
        run(*args)
        return graph_replay_measures(lambda: run(*args))


def inference_rows(bandwidth: float, only: list[str] | None = None) -> list[dict]:
    rows = []
    for name, fn, make, dtype in STORMS:
        if only and not any(part in name for part in only):
            continue
        inputs = make(dtype, False)
        expected = fn(*inputs)
        floor_ms = (_bytes(inputs) + _bytes(expected)) / bandwidth
        copy_ms = same_bytes_copy_replay_ms(_bytes(inputs) + _bytes(expected))
        one_tensor_ms, one_tensor_back_to_back_ms, one_tensor_work_ms = one_tensor_replay_ms(fn, inputs)
        workload = f"{name} {str(dtype).removeprefix('torch.')}"
        for variant in VARIANTS:
            row = measure_inference(workload, variant, fn, tuple(inputs), expected, floor_ms, copy_ms)
            replay = row["graph replay ms"]
            row["one tensor (stock) ms"] = one_tensor_ms
            row["replay / one tensor"] = replay / one_tensor_ms if replay and one_tensor_ms else None
            row["one tensor (stock) work ms"] = one_tensor_work_ms
            work = row["replay work ms"]
            row["work / one tensor"] = work / one_tensor_work_ms if work and one_tensor_work_ms else None
            row["one tensor (stock) back to back ms"] = one_tensor_back_to_back_ms
            rows.append(row)
            print(rows[-1], flush=True)
    return rows


def training_rows(only: list[str] | None = None) -> list[dict]:
    """Forward + backward: kernels and time per step, max error of the input grads."""
    rows = []
    for name, fn, make, dtype in STORMS:
        if name not in TRAINING_STORMS or dtype != torch.float32 or only and not any(part in name for part in only):
            continue
        inputs = tuple(make(dtype, True))
        grads = [torch.randn_like(out) for out in fn(*inputs)]
        for variant in VARIANTS:
            rows.append(measure_training_step(f"{name} training step", variant, fn, inputs, grads))
            print(rows[-1], flush=True)
    return rows


def reduce_overhead_rows(only: list[str] | None = None) -> list[dict]:
    """``mode="reduce-overhead"`` (CUDA graphs): each call with NEW input tensors and new values must match eager
    (the member table holds addresses; cudagraph trees copy inputs into the graph's own buffers)."""
    rows = []
    for name, fn, make, dtype in STORMS:
        if dtype != torch.float32 or only and not any(part in name for part in only):
            continue
        for passes in (None, "all"):
            row = {"workload": f"{name} reduce-overhead", "variant": "optimus_ir" if passes else "stock"}
            try:
                with cold_compile(), optimus_ir.enabled(passes), recording() as records:
                    run = torch.compile(fn, mode="reduce-overhead")
                    worst = 0.0
                    for _ in range(5):
                        inputs = make(dtype, False)
                        worst = max(worst, max_rel_error(run(*inputs), fn(*inputs)))
                    inputs = make(dtype, False)
                    row["ms/call"] = cuda_time_ms(lambda: run(*inputs))
                row["max rel err (5 calls, new inputs)"] = worst
                row["merged"] = sum(r.fired for r in records)
            except Exception as error:  # record it, measure the rest
                traceback.print_exc()
                row["error"] = repr(error)[:300]
            rows.append(row)
            print(rows[-1], flush=True)
    return rows


def dynamic_rows() -> list[dict]:
    """``dynamic=True``: sizes are symbols; pointwise members and row reductions whose row count is the symbol merge
    (their table is filled per call from their sizes), whatever is not provable falls back, results stay right over
    calls of new sizes."""
    _FP32 = torch.float32

    def layer_norms(rows_count: int) -> list[torch.Tensor]:
        xs = storm_tensors([(rows_count + i, 512) for i in range(8)], _FP32)
        for x in xs:  # the row counts are symbols, the width stays 512
            torch._dynamo.mark_dynamic(x, 0)
        return xs + storm_tensors([(512,)] * 16, _FP32)

    def tanhs(rows_count: int) -> list[torch.Tensor]:
        return storm_tensors([(rows_count + i, 256) for i in range(16)], _FP32)

    cases = [
        ("16x tanh dynamic=True, 3 sizes", tanh_each, tanhs, True),
        ("8x layer_norm, row counts dynamic, 3 row counts", layer_norm_each, layer_norms, None),
    ]
    rows = []
    for name, fn, make, dynamic in cases:
        with cold_compile(), optimus_ir.enabled("all"), recording() as records:
            run = torch.compile(fn, dynamic=dynamic)
            worst = 0.0
            for rows_count in (64, 96, 128):
                inputs = make(rows_count)
                worst = max(worst, max_rel_error(run(*inputs), fn(*inputs)))
        reasons = sorted({r.detail for r in records if not r.fired})
        merged = [r.detail for r in records if r.fired and r.rule == "IdenticalKernelsToMemberTableKernel"]
        row = {"workload": name, "max rel err": worst, "merged": "; ".join(merged), "reasons": "; ".join(reasons)}
        rows.append(row)
        print(rows[-1], flush=True)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--parts", default="inference,training,graphs", help="comma list of the parts to run")
    parser.add_argument("--only", nargs="+", help="the workloads whose name contains one of these")
    args = parser.parse_args()
    bandwidth = copy_bandwidth_bytes_per_ms()
    meta = header(" ".join(sys.argv)) | {"copy bandwidth GB/s": round(bandwidth / 1e6, 1)}
    if "inference" in args.parts:
        inference = inference_rows(bandwidth, args.only)
        write_results(args.out, "horizontal", meta, inference, list(inference[0]))
    if "training" in args.parts:
        training = training_rows(args.only)
        write_results(args.out, "horizontal_training", meta, training, list(training[0]))
    if "graphs" in args.parts:
        graphs = reduce_overhead_rows(args.only) + dynamic_rows()
        columns = list(dict.fromkeys(k for r in graphs for k in r))
        write_results(args.out, "horizontal_cuda_graphs_dynamic", meta, graphs, columns)


if __name__ == "__main__":
    main()
