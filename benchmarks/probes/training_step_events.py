"""CUDA events per training step over a run's first steps, kernels and member-table copies apart, and the peak
memory of a step: stock Inductor, combo kernels and optimus_ir, on the horizontal issue's training storms.

    python -m benchmarks step-events --out DIR [--only "full sum"] [--windows 2 12 22 42] [--drop-outputs]

A merged kernel's member table is copied to the GPU when a call brings addresses it has not cached. A training
step's tensors may take new addresses from step to step until the caching allocator's blocks settle, so the CUDA
events a step launches can change over its first steps. Each window counts the events of 3 steps, from the step
given on (step 1 is the compiling one).

A step takes the gradients of the outputs (``torch.autograd.grad(outputs, inputs, grads)``), which holds the outputs
through the backward. With ``--drop-outputs`` it takes those of each output's dot product with its gradient, computed
eagerly (``(output * grad).sum()``, which saves the gradient, not the output), so the outputs are dropped before the
backward: a backward's saved outputs are then held by it alone. Each row also says how many of the inputs'
gradients of a step are at an address one of its outputs had (written over it; or, once the output is freed, given
its block by the caching allocator), and their largest relative error against eager's.
"""

from __future__ import annotations

import argparse
import collections
import sys
from pathlib import Path

import torch

from benchmarks.measure import (
    VARIANTS,
    cold_compile,
    cuda_events,
    header,
    max_rel_error,
    peak_memory_bytes,
    variant_context,
    write_results,
)
from optimus_ir.testing.storms import STORMS, TRAINING_STORMS

STEPS_PER_WINDOW = 3


def events_per_step(step, windows: list[int]) -> dict[int, collections.Counter]:
    """By window start: the CUDA events of ``STEPS_PER_WINDOW`` steps from that step on, per step, by kind."""
    done, counts = 1, {}  # the first step (the compile) is done
    for start in windows:
        for _ in range(start - done - 1):
            step()
        names = [event.name for event in cuda_events(step, STEPS_PER_WINDOW)]
        counts[start] = collections.Counter("copy" if "Memcpy" in name else "kernel" for name in names)
        done = start + STEPS_PER_WINDOW - 1
    return counts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--only", nargs="*", help="substrings of the training storms' names")
    parser.add_argument("--windows", nargs="+", type=int, default=[2, 12, 22, 42])
    parser.add_argument("--drop-outputs", action="store_true", help="drop the outputs before the backward")
    args = parser.parse_args()
    rows = []
    for name, fn, make, dtype in STORMS:
        if name not in TRAINING_STORMS or dtype != torch.float32 or args.only and not any(p in name for p in args.only):
            continue
        inputs = tuple(make(dtype, True))
        grads = [torch.randn_like(out) for out in fn(*inputs)]
        expected = torch.autograd.grad(fn(*inputs), inputs, grads)
        for variant in VARIANTS:
            if variant.name not in ("stock", "combo_kernels", "optimus_ir"):
                continue
            with cold_compile(), variant_context(variant):
                run = torch.compile(fn)

                def step() -> tuple[tuple[torch.Tensor, ...], set[int]]:
                    """The inputs' gradients, and the addresses of the outputs."""
                    outputs = run(*inputs)
                    addresses = {out.data_ptr() for out in outputs}
                    if args.drop_outputs:
                        losses = [(out * g).sum() for out, g in zip(outputs, grads)]
                        del outputs
                        return torch.autograd.grad(losses, inputs), addresses
                    return torch.autograd.grad(outputs, inputs, grads), addresses

                step()
                counts = events_per_step(step, args.windows)
                peak = peak_memory_bytes(step)
                gradients, addresses = step()
            caller = ", outputs dropped before the backward" if args.drop_outputs else ""
            row = {
                "workload": f"{name} training step{caller}", "variant": variant.name, "peak MiB of a step": peak / 2**20,
                "input gradients at an output's address": sum(g.data_ptr() in addresses for g in gradients),
                "max rel err against eager": max_rel_error(gradients, expected),
            }
            for start, count in counts.items():
                row[f"steps {start}-{start + STEPS_PER_WINDOW - 1}: kernels, copies per step"] = (
                    f"{count['kernel'] / STEPS_PER_WINDOW:g}, {count['copy'] / STEPS_PER_WINDOW:g}"
                )
            rows.append(row)
            print(rows[-1], flush=True)
    columns = ["workload", "variant"] + [
        f"steps {start}-{start + STEPS_PER_WINDOW - 1}: kernels, copies per step" for start in args.windows
    ] + ["peak MiB of a step", "input gradients at an output's address", "max rel err against eager"]
    name = "training_step_events_outputs_dropped" if args.drop_outputs else "training_step_events"
    write_results(args.out, name, header(" ".join(sys.argv)), rows, columns)


if __name__ == "__main__":
    main()
