"""DLRM's interaction (the lower triangle of each sample's Gram matrix, then the cat after the bottom MLP's output)
on the GPU: eager, stock Inductor (a bmm and a gather), and optimus_ir's dot products of the kept pairs
(``SelectedGramEntriesToDotProducts``) with Inductor's default reduction hint and with the rule's, each compiled
cold: GPU time per call under CUDA-graph replay and the largest error against eager in fp64. Then whole models
(``--models``, real-suite names, inference) compiled by optimus_ir with and without the rule, timed per call in
turns as the real suite times its variants.

    python -m benchmarks gram-entries --out DIR [--models dlrm-26]
"""

from __future__ import annotations

import argparse
import contextlib
import sys
from pathlib import Path
from unittest import mock

import torch
from torch._inductor.runtime.hints import ReductionHint

from benchmarks.measure import (
    VARIANTS,
    cold_compile,
    graph_replay_ms,
    header,
    max_rel_error,
    variant_context,
    write_results,
)
from benchmarks.real_models import with_and_without_rule
from optimus_ir.lowering import gram_entries
from optimus_ir.rule import NotApplicable
from optimus_ir.records import recording
from optimus_ir.testing.golden_horizontal import dlrm_interaction_and_logit


_RULES = ("SelectedGramEntriesToDotProducts", "MatvecToRowReduction")


def interaction(stacked: torch.Tensor, rows: torch.Tensor, cols: torch.Tensor) -> torch.Tensor:
    dots = torch.bmm(stacked, stacked.transpose(1, 2))
    return torch.cat([stacked[:, 0], dots[:, rows, cols]], dim=1)


def _cases():
    for batch, count in ((2048, 27), (2048, 101), (16384, 27)):
        rows, cols = torch.tril_indices(count, count, offset=-1, device="cuda")
        stacked = torch.randn(batch, count, 64, device="cuda")
        yield f"interaction {batch}x{count}x64", interaction, (stacked, rows, cols)
        w, b = torch.randn(1, rows.numel(), device="cuda"), torch.randn(1, device="cuda")
        yield f"interaction and logit {batch}x{count}x64", dlrm_interaction_and_logit, (stacked, rows, cols, w, b)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--models", nargs="*", default=["dlrm-26"])
    args = parser.parse_args()
    variants = {v.name: v for v in VARIANTS}
    runs = [("eager", None, None), ("stock", variants["stock"], None),
            ("optimus_ir, default hint", variants["optimus_ir"], ReductionHint.DEFAULT),
            ("optimus_ir, inner hint", variants["optimus_ir"], ReductionHint.INNER)]
    rows = []
    for name, fn, inputs in _cases():
        expected = fn(*(t.double() if t.is_floating_point() else t for t in inputs))
        for label, variant, hint in runs:
            context = variant_context(variant) if variant else contextlib.nullcontext()
            hinted = mock.patch.object(gram_entries, "REDUCTION_HINT", hint or gram_entries.REDUCTION_HINT)
            with cold_compile(), context, recording() as records, hinted:
                run = torch.compile(fn) if variant else fn
                actual = run(*inputs)
                replay = graph_replay_ms(lambda: run(*inputs))
            rows.append({"case": name, "variant": label, "GPU ms (replay)": replay,
                         "rules fired": sorted({r.rule for r in records if r.fired and r.rule in _RULES}),
                         "max rel err": max_rel_error(actual, expected)})
            print(rows[-1], flush=True)
    write_results(args.out, "gram_entries", header(" ".join(sys.argv)), rows, list(rows[0]))
    refused = mock.patch.object(gram_entries.SelectedGramEntriesToDotProducts, "rewrite",
                                side_effect=NotApplicable("refused by the probe"))
    models = [row for name in args.models for row in with_and_without_rule(name, refused, _RULES)]
    write_results(args.out, "gram_entries_models", header(" ".join(sys.argv)), models, list(models[0]))


if __name__ == "__main__":
    main()
