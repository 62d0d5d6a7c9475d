"""What a member-table kernel's block size costs on the GPU: hand-written Triton kernels shaped like the ones
``IdenticalKernelsToMemberTableKernel`` emits, against the same op on ONE tensor of all the members' rows, under
CUDA-graph replay, for the configs Inductor's heuristics offer and larger ones.

    python -m benchmarks table-blocks --out benchmarks/results/<date>

Workloads (the horizontal benchmark's): 128 × tanh [256, 512] in fp32 and bf16, 64 × layer norm [256, 512] fp32.
Kernels, per workload:

- ``one tensor``: the op on one contiguous tensor of all rows (no table);
- ``table``: the member-table prologue (member from the block, then each tensor's address loaded from the table);
- ``table, output by offset``: addresses of inputs from the table, the output one allocation at member × numel
  (what members whose outputs are allocated together could do).

Every row: the config (elements or rows per block, warps), µs per launch (median of replays of a graph of 20
launches) and that over the floor (bytes in + out over a 2 GiB copy's bandwidth, measured in the same run) and over
a copy of the same bytes. ``--check`` runs small sizes once and compares with eager (on CPU: ``TRITON_INTERPRET=1``).
"""

from __future__ import annotations

import argparse
import contextlib
import sys
from pathlib import Path

import torch
import triton
import triton.language as tl
from triton.language.extra import libdevice

from benchmarks.measure import (
    captured_graph,
    copy_bandwidth_bytes_per_ms,
    cuda_time_ms,
    header,
    same_bytes_copy_replay_ms,
    write_results,
)
from optimus_ir.interpret import cpu_triton_interpreter


@triton.jit
def tanh_one_tensor(x_ptr, y_ptr, XBLOCK: tl.constexpr):
    offsets = tl.program_id(0) * XBLOCK + tl.arange(0, XBLOCK)
    value = tl.load(x_ptr + offsets).to(tl.float32)
    tl.store(y_ptr + offsets, libdevice.tanh(value).to(y_ptr.dtype.element_ty))


@triton.jit
def tanh_table(table_ptr, y_ptr, N: tl.constexpr, NUMEL: tl.constexpr, OUT_BY_OFFSET: tl.constexpr,
               DTYPE: tl.constexpr, XBLOCK: tl.constexpr):
    xstart = tl.program_id(0) * XBLOCK
    member = xstart // NUMEL
    block = (xstart - member * NUMEL) // XBLOCK
    x_ptr = tl.multiple_of(tl.load(table_ptr + member).to(tl.pointer_type(DTYPE)), 16)
    offsets = block * XBLOCK + tl.arange(0, XBLOCK)
    if OUT_BY_OFFSET:
        out = y_ptr + member * NUMEL + offsets
    else:
        out = tl.multiple_of(tl.load(table_ptr + N + member).to(tl.pointer_type(DTYPE)), 16) + offsets
    value = tl.load(x_ptr + offsets).to(tl.float32)
    tl.store(out, libdevice.tanh(value).to(DTYPE))


@triton.jit
def _layer_norm_rows(x_ptr, w_ptr, b_ptr, y_ptr, rows, R: tl.constexpr):
    cols = tl.arange(0, R)[None, :]
    value = tl.load(x_ptr + rows * R + cols)
    mean = tl.sum(value, 1)[:, None] / R
    centred = value - mean
    rstd = libdevice.rsqrt(tl.sum(centred * centred, 1)[:, None] / R + 1e-5)
    out = centred * rstd * tl.load(w_ptr + cols) + tl.load(b_ptr + cols)
    tl.store(y_ptr + rows * R + cols, out)


@triton.jit
def layer_norm_one_tensor(x_ptr, w_ptr, b_ptr, y_ptr, R: tl.constexpr, XBLOCK: tl.constexpr):
    rows = tl.program_id(0) * XBLOCK + tl.arange(0, XBLOCK)[:, None]
    _layer_norm_rows(x_ptr, w_ptr, b_ptr, y_ptr, rows, R)


@triton.jit
def layer_norm_table(table_ptr, y_ptr, N: tl.constexpr, ROWS: tl.constexpr, R: tl.constexpr,
                     OUT_BY_OFFSET: tl.constexpr, XBLOCK: tl.constexpr):
    xstart = tl.program_id(0) * XBLOCK
    member = xstart // ROWS
    rows = xstart - member * ROWS + tl.arange(0, XBLOCK)[:, None]
    x_ptr = tl.multiple_of(tl.load(table_ptr + member).to(tl.pointer_type(tl.float32)), 16)
    w_ptr = tl.multiple_of(tl.load(table_ptr + N + member).to(tl.pointer_type(tl.float32)), 16)
    b_ptr = tl.multiple_of(tl.load(table_ptr + 2 * N + member).to(tl.pointer_type(tl.float32)), 16)
    if OUT_BY_OFFSET:
        out_ptr = y_ptr + member * ROWS * R
    else:
        out_ptr = tl.multiple_of(tl.load(table_ptr + 3 * N + member).to(tl.pointer_type(tl.float32)), 16)
    _layer_norm_rows(x_ptr, w_ptr, b_ptr, out_ptr, rows, R)


_TL = {torch.float32: tl.float32, torch.bfloat16: tl.bfloat16}


def _table(*slots: list[torch.Tensor]) -> torch.Tensor:
    return torch.tensor([t.data_ptr() for slot in slots for t in slot], dtype=torch.int64, device=slots[0][0].device)


def tanh_launchers(n: int, rows: int, cols: int, dtype: torch.dtype, device: str, configs):
    xs = [torch.randn(rows, cols, device=device).to(dtype) for _ in range(n)]
    whole = torch.cat(xs)
    expected = torch.tanh(whole.float()).to(dtype)
    ys = [torch.empty_like(x) for x in xs]
    y_whole = torch.empty_like(whole)
    table = _table(xs, ys)
    numel = rows * cols
    total = n * numel
    launchers = {}
    for xblock, warps in configs:
        grid = (total // xblock,)
        launchers[("one tensor", xblock, warps)] = (
            lambda g=grid, b=xblock, w=warps: tanh_one_tensor[g](whole, y_whole, XBLOCK=b, num_warps=w),
            lambda: y_whole,
        )
        launchers[("table", xblock, warps)] = (
            lambda g=grid, b=xblock, w=warps: tanh_table[g](
                table, y_whole, N=n, NUMEL=numel, OUT_BY_OFFSET=False, DTYPE=_TL[dtype], XBLOCK=b, num_warps=w),
            lambda: torch.cat(ys),
        )
        launchers[("table, output by offset", xblock, warps)] = (
            lambda g=grid, b=xblock, w=warps: tanh_table[g](
                table, y_whole, N=n, NUMEL=numel, OUT_BY_OFFSET=True, DTYPE=_TL[dtype], XBLOCK=b, num_warps=w),
            lambda: y_whole,
        )
    nbytes = 2 * whole.numel() * whole.element_size()
    return launchers, expected, nbytes, (xs, ys, table)


def layer_norm_launchers(n: int, rows: int, cols: int, device: str, configs):
    xs = [torch.randn(rows, cols, device=device) for _ in range(n)]
    ws = [torch.randn(cols, device=device) for _ in range(n)]
    bs = [torch.randn(cols, device=device) for _ in range(n)]
    expected = torch.cat([torch.nn.functional.layer_norm(x, (cols,), w, b) for x, w, b in zip(xs, ws, bs)])
    whole = torch.cat(xs)
    ys = [torch.empty_like(x) for x in xs]
    y_whole = torch.empty_like(whole)
    table = _table(xs, ws, bs, ys)
    launchers = {}
    for xblock, warps in configs:
        grid = (n * rows // xblock,)
        # one tensor: every member's rows with member 0's weight and bias (same bytes, same work)
        launchers[("one tensor", xblock, warps)] = (
            lambda g=grid, b=xblock, w=warps: layer_norm_one_tensor[g](
                whole, ws[0], bs[0], y_whole, R=cols, XBLOCK=b, num_warps=w),
            None,
        )
        launchers[("table", xblock, warps)] = (
            lambda g=grid, b=xblock, w=warps: layer_norm_table[g](
                table, y_whole, N=n, ROWS=rows, R=cols, OUT_BY_OFFSET=False, XBLOCK=b, num_warps=w),
            lambda: torch.cat(ys),
        )
        launchers[("table, output by offset", xblock, warps)] = (
            lambda g=grid, b=xblock, w=warps: layer_norm_table[g](
                table, y_whole, N=n, ROWS=rows, R=cols, OUT_BY_OFFSET=True, XBLOCK=b, num_warps=w),
            lambda: y_whole,
        )
    nbytes = (2 * whole.numel() + 2 * n * cols) * whole.element_size()
    return launchers, expected, nbytes, (xs, ws, bs, ys, table)


def replay_us(launch, launches: int = 20, repeat: int = 30) -> float:
    """Median µs per launch of a CUDA graph of ``launches`` launches, replayed ``repeat`` times."""

    def in_a_row() -> None:
        for _ in range(launches):
            launch()

    return cuda_time_ms(captured_graph(in_a_row).replay, repeat=repeat) * 1000 / launches


POINTWISE_CONFIGS = [(512, 8), (1024, 4), (1024, 8), (2048, 4), (2048, 8), (4096, 4), (4096, 8), (4096, 16)]
ROW_CONFIGS = [(1, 1), (1, 2), (1, 4), (2, 1), (2, 2), (2, 4), (4, 2), (4, 4), (8, 4), (8, 8), (16, 8)]


def workloads(check: bool, device: str):
    n, rows = (4, 16) if check else (128, 256)
    pointwise = POINTWISE_CONFIGS[:2] if check else POINTWISE_CONFIGS
    row_configs = ROW_CONFIGS[:4] if check else ROW_CONFIGS
    yield f"{n}x tanh [{rows}x512] float32", tanh_launchers(n, rows, 512, torch.float32, device, pointwise)
    yield f"{n}x tanh [{rows}x512] bfloat16", tanh_launchers(n, rows, 512, torch.bfloat16, device, pointwise)
    n = n // 2
    yield f"{n}x layer_norm [{rows}x512] float32", layer_norm_launchers(n, rows, 512, device, row_configs)


def check(device: str) -> None:
    for workload, (launchers, expected, _, _) in workloads(True, device):
        for key, (launch, result) in launchers.items():
            if result is None:
                continue
            launch()
            error = float((result().float() - expected.float()).abs().max())
            print(workload, key, "max abs error", error)
            assert error < 2e-2, (workload, key, error)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path)
    parser.add_argument("--check", action="store_true", help="small sizes, numerics only")
    args = parser.parse_args()
    device = "cuda" if torch.cuda.is_available() else "cpu"
    if args.check:
        with contextlib.ExitStack() as stack:
            if device == "cpu":  # run with TRITON_INTERPRET=1 set before the kernels are defined
                stack.enter_context(cpu_triton_interpreter())
            check(device)
        return
    bandwidth = copy_bandwidth_bytes_per_ms()
    meta = header(" ".join(sys.argv)) | {"copy bandwidth GB/s": round(bandwidth / 1e6, 1)}
    rows = []
    for workload, (launchers, expected, nbytes, _) in workloads(False, device):
        floor_us = nbytes / bandwidth * 1000
        copy_us = same_bytes_copy_replay_ms(nbytes) * 1000
        for (kernel, block, warps), (launch, result) in launchers.items():
            launch()
            error = None if result is None else float((result().float() - expected.float()).abs().max())
            us = replay_us(launch)
            rows.append({
                "workload": workload, "kernel": kernel, "block": block, "warps": warps, "us": us,
                "us / floor": us / floor_us, "us / copy": us / copy_us, "floor us": floor_us, "copy us": copy_us,
                "max abs err": error,
            })
            print(rows[-1], flush=True)
    columns = ["workload", "kernel", "block", "warps", "us", "us / floor", "us / copy", "floor us", "copy us",
               "max abs err"]
    write_results(args.out, "member_table_blocks", meta, rows, columns)


if __name__ == "__main__":
    main()
