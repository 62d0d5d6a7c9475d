"""Where a real model's host time per call differs between variants that launch the same kernels: each variant's
calls timed in turns (as the suite times them) and profiled in turns (cProfile, each round's profile of every
variant taken back to back), and what each variant's extern convolutions are given (their inputs' contiguity and
address alignment), since a convolution's host time depends on its inputs' layout.

    python -m benchmarks host-gap --out DIR mixnet-s/inference --variants combo_kernels optimus_ir optimus_ir_splitcat

``optimus_ir_splitcat``: optimus_ir with the horizontal pass off (``OPTIMUS_IR=splitcat``: no member tables).
Writes DIR/host_gap_<model>_<mode>.{json,md}.
"""

from __future__ import annotations

import argparse
import cProfile
import collections
import contextlib
import pstats
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import torch

from benchmarks import real_models
from benchmarks.measure import (
    VARIANTS,
    OwnInductor,
    Variant,
    cold_compile,
    cuda_time_ms,
    header,
    own_copy,
    variant_context,
    write_results,
)

ROUNDS, CALLS = 4, 30
#: the built-in functions whose own host time per call is compared
BUILTINS = ("convolution", "_launch_kernel", "_empty_strided_cuda", "_reinterpret_tensor", "addmm")


def _variant(name: str) -> Variant:
    if name == "optimus_ir_splitcat":
        return Variant(name, True, {}, "splitcat")
    return next(v for v in VARIANTS if v.name == name)


@contextlib.contextmanager
def _convolution_inputs(seen: collections.Counter) -> Iterator[None]:
    """Counts what each extern convolution is given: the input's and weight's contiguity and their addresses'
    alignment (the largest power of two up to 256 dividing it)."""
    from torch._inductor.select_algorithm import extern_kernels

    stock = extern_kernels.convolution

    def align(t: torch.Tensor) -> int:
        address = t.data_ptr()
        return min(256, address & -address) if address else 256

    def convolution(x, w, *args, **kwargs):
        seen[(x.is_contiguous(), x.is_contiguous(memory_format=torch.channels_last), align(x), w.is_contiguous(),
              align(w))] += 1
        return stock(x, w, *args, **kwargs)

    extern_kernels.convolution = convolution
    try:
        yield
    finally:
        extern_kernels.convolution = stock


def _builtin_us(call: Callable[[], Any]) -> dict[str, float]:
    profiler = cProfile.Profile()
    torch.cuda.synchronize()
    profiler.enable()
    for _ in range(CALLS):
        call()
    torch.cuda.synchronize()
    profiler.disable()
    stats = pstats.Stats(profiler).stats
    result = collections.Counter()
    total = 0.0
    for (_, _, function), (_, _, tottime, _, _) in stats.items():
        total += tottime
        for name in BUILTINS:
            if name in function:
                result[name] += tottime
    result["all"] = total
    return {name: seconds / CALLS * 1e6 for name, seconds in result.items()}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks host-gap", description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("case")
    parser.add_argument("--variants", nargs="+", default=["combo_kernels", "optimus_ir", "optimus_ir_splitcat"])
    args = parser.parse_args(argv)
    name, mode, module, inputs = real_models.prepared_case(args.case, "cuda")
    params = list(module.parameters())
    calls = {}
    with contextlib.ExitStack() as caches:
        for variant in map(_variant, args.variants):
            caches.enter_context(cold_compile(reset=False))
            compiled = torch.compile(own_copy(real_models._forward(module), variant.name), backend=OwnInductor())
            call = real_models.make_call(compiled, inputs, mode, params)
            with variant_context(variant):
                for _ in range(16):
                    call()
            calls[variant.name] = (variant, call)
        ms = {v: [] for v in calls}
        host = {v: [] for v in calls}
        convs = {v: collections.Counter() for v in calls}
        for round_ in range(ROUNDS):
            names = list(calls)
            for v in names[round_ % len(names):] + names[: round_ % len(names)]:
                variant, call = calls[v]
                with variant_context(variant):
                    ms[v].append(cuda_time_ms(call, 20, 3))
                    host[v].append(_builtin_us(call))
                    if round_ == 0:
                        with _convolution_inputs(convs[v]):
                            call()
    rows = []
    for v in calls:
        row = {"variant": v, "ms/call by round": " ".join(f"{t:.3f}" for t in ms[v])}
        for key in ("all", *BUILTINS):
            row[f"{key} us/call by round"] = " ".join(f"{h.get(key, 0.0):.0f}" for h in host[v])
        row["convolution inputs (contig, channels_last, align, w contig, w align): calls"] = "; ".join(
            f"{k}: {n}" for k, n in sorted(convs[v].items()))
        rows.append(row)
    command = "python -m benchmarks host-gap " + " ".join(sys.argv[1:])
    write_results(args.out, f"host_gap_{name}_{mode}", header(command), rows, list(rows[0]))


if __name__ == "__main__":
    main()
