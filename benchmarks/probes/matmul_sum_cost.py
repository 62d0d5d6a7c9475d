"""The calibration of ``SummedSmallMatmulsToOneReduction``'s bound: a sum of ``terms`` Linears of ``rows`` × ``inner``
inputs to ``cols`` outputs (a hetero GNN's sum per node type and sizes past it), compiled cold by eager, stock Inductor,
optimus_ir with the rule unbounded and optimus_ir without it (``MAX_REDUCTION_PRODUCTS`` 0: the shared-operand
rule or cuBLAS); GPU ms per call under CUDA-graph replay, kernels per call and the error against fp64. The bound
is the multiply-adds where the reduction stops being faster. Then whole models (``--models``, real-suite names)
compiled by optimus_ir with the rule and without it, timed per call in turns.

    python -m benchmarks matmul-sum-cost --out DIR [--models hetero-sage] [--modes inference training]
"""

from __future__ import annotations

import argparse
import contextlib
import sys
from pathlib import Path
from unittest import mock

import torch
import torch.nn.functional as F

from benchmarks.measure import (
    VARIANTS,
    cold_compile,
    graph_replay_ms,
    header,
    kernels_per_call,
    max_rel_error,
    variant_context,
    write_results,
)
from benchmarks.real_models import with_and_without_rule
from optimus_ir.lowering import matmul_sum
from optimus_ir.records import recording

_RULES = ("SummedSmallMatmulsToOneReduction", "SharedOperandMatmulsToOneMatmul")
#: (rows, inner, cols, terms): the GNN's sums (up to 1900 rows, 64 wide, 4-6 terms) and sizes up to 32x past them
_SHAPES = [(2048, 64, 64, 4), (4096, 64, 64, 4), (16384, 64, 64, 4), (65536, 64, 64, 4),
           (2048, 64, 32, 6), (8192, 64, 32, 6), (4096, 256, 64, 2), (4096, 512, 128, 2), (16384, 512, 128, 2)]


def summed_linears(*args: torch.Tensor) -> torch.Tensor:
    """``relu(sum_i linear(x_i, w_i))``, one bias: ``to_hetero``'s per-node-type sum and the next layer's
    activation (with no pointwise reader, Inductor folds the sum into a chain of addmms)."""
    *pairs, bias = args
    total = F.linear(pairs[0], pairs[1], bias)
    for x, w in zip(pairs[2::2], pairs[3::2]):
        total = total + F.linear(x, w)
    return total.relu()


def _inputs(rows: int, inner: int, cols: int, terms: int) -> tuple[torch.Tensor, ...]:
    pairs = [t for _ in range(terms) for t in (torch.randn(rows, inner, device="cuda"),
                                               torch.randn(cols, inner, device="cuda") / inner**0.5)]
    return (*pairs, torch.randn(cols, device="cuda"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--models", nargs="*", default=["hetero-sage"])
    parser.add_argument("--modes", nargs="*", default=["inference"])
    args = parser.parse_args()
    variants = {v.name: v for v in VARIANTS}
    unbounded = mock.patch.object(matmul_sum, "MAX_REDUCTION_PRODUCTS", 1 << 62)
    without = mock.patch.object(matmul_sum, "MAX_REDUCTION_PRODUCTS", 0)
    runs = [("eager", None, contextlib.nullcontext()), ("stock", variants["stock"], contextlib.nullcontext()),
            ("optimus_ir, reduction", variants["optimus_ir"], unbounded),
            ("optimus_ir, no reduction", variants["optimus_ir"], without)]
    rows = []
    for shape in _SHAPES:
        inputs = _inputs(*shape)
        expected = summed_linears(*(t.double() for t in inputs))
        rows_, inner, cols, terms = shape
        for label, variant, bound in runs:
            context = variant_context(variant) if variant else contextlib.nullcontext()
            with cold_compile(), context, bound, recording() as records:
                run = torch.compile(summed_linears) if variant else summed_linears
                actual = run(*inputs)
                replay = graph_replay_ms(lambda: run(*inputs))
                kernels = kernels_per_call(lambda: run(*inputs))
            rows.append({"rows x inner x cols x terms": "x".join(map(str, shape)),
                         "multiply-adds": rows_ * inner * cols * terms, "variant": label,
                         "GPU ms (replay)": replay, "kernels/call": kernels,
                         "rules fired": sorted({r.rule for r in records if r.fired and r.rule in _RULES}),
                         "max rel err": max_rel_error(actual, expected)})
            print(rows[-1], flush=True)
    write_results(args.out, "matmul_sum_cost", header(" ".join(sys.argv)), rows, list(rows[0]))
    models = [row for name in args.models for mode in args.modes
              for row in with_and_without_rule(name, mock.patch.object(matmul_sum, "MAX_REDUCTION_PRODUCTS", 0),
                                               _RULES, mode)]
    write_results(args.out, "matmul_sum_cost_models", header(" ".join(sys.argv)), models, list(models[0]))


if __name__ == "__main__":
    main()
