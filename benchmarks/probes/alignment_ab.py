"""Does declaring member addresses 16-byte aligned (``tl.multiple_of`` in the member-table prologue) make the merged
kernels faster? The same storms compiled twice with optimus_ir, with and without the declaration (the second with
``MemberTableKernel._aligned_args`` patched to declare nothing), each compiled cold, at two sizes: GPU time under
CUDA-graph replay, against one copy of the same bytes.

    python -m benchmarks alignment-ab --out DIR
"""

from __future__ import annotations

import argparse
import contextlib
import sys
from pathlib import Path
from unittest import mock

import torch

from benchmarks.measure import (
    VARIANTS,
    cold_compile,
    graph_replay_ms,
    header,
    max_rel_error,
    same_bytes_copy_replay_ms,
    variant_context,
    write_results,
)
from optimus_ir.records import recording
from optimus_ir.scheduler_hooks.horizontal.kernel import MemberTableKernel
from optimus_ir.testing.storms import layer_norm_each, layer_norm_inputs, storm_tensors, tanh_each


def _storms():
    for rows in (256, 2048):
        for dtype in (torch.float32, torch.bfloat16):
            yield f"128x tanh [{rows}x512] {str(dtype)[6:]}", tanh_each, storm_tensors([(rows, 512)] * 128, dtype)
        yield f"64x layer_norm [{rows}x512] float32", layer_norm_each, layer_norm_inputs(64, rows, 512, torch.float32)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    optimus_ir = next(v for v in VARIANTS if v.name == "optimus_ir")
    rows = []
    for name, fn, inputs in _storms():
        expected = fn(*inputs)
        nbytes = sum(t.numel() * t.element_size() for t in [*inputs, *expected])
        copy_ms = same_bytes_copy_replay_ms(nbytes)
        for declared in (True, False):
            patch = (
                contextlib.nullcontext() if declared
                else mock.patch.object(MemberTableKernel, "_aligned_args", lambda self: set())
            )
            with cold_compile(), variant_context(optimus_ir), recording() as records, patch:
                run = torch.compile(fn)
                actual = run(*inputs)
                replay = graph_replay_ms(lambda: run(*inputs))
            rows.append({
                "workload": name, "aligned declared": declared, "rules fired": sum(r.fired for r in records),
                "replay ms": replay, "copy of same bytes ms": copy_ms, "replay / copy": replay / copy_ms,
                "max rel err": max_rel_error(actual, expected),
            })
            print(rows[-1], flush=True)
    write_results(args.out, "alignment_ab", header(" ".join(sys.argv)), rows, list(rows[0]))


if __name__ == "__main__":
    main()
