"""What a tolerance in the horizontal pass's memory check would buy and cost: data for the issue owner's decision.

    python -m benchmarks peak-tolerance --out DIR CASE... [--tolerances 0 0.01]
    (CASE: workload/size/dtype/mode, e.g. layernorm_storm/small/fp32/training)

The pass merges a group only where the estimated peak memory does not rise at all (``MemoryEstimate.no_higher_than``).
For this probe only, that check is patched to allow the peak (and the peak with incoming gradients freed) to rise
to ``1 + tolerance`` times the graph's peak before any merge of this pass (a bound on the sum of the rises, not on
each one), and the pass's shortcut that splits a group whose own bytes are above the peak takes the same
tolerance; what is live across an ATen fallback still may not rise. Each case is measured as the suite measures it
(``suite.measure``: compiled cold; kernels, ms per call, peak MiB above what was allocated before the call, first
call s, error against eager's first call), by stock Inductor and by optimus_ir at each tolerance (0: the pass as
it is). Nothing here changes the pass.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import sys
from collections.abc import Iterator
from pathlib import Path
from unittest import mock

from benchmarks.measure import VARIANTS, header, write_results
from benchmarks.suite import measure, parse_case, prepare
from optimus_ir.scheduler_hooks.horizontal import memory, merging


@contextlib.contextmanager
def peak_tolerance(tolerance: float) -> Iterator[None]:
    """Inside, the pass's memory check allows the peak to rise to ``1 + tolerance`` times each graph's first
    estimate (nothing patched for 0)."""
    if not tolerance:
        yield
        return
    from torch._inductor.virtualized import V

    # by graph: the graph (kept, so that a later graph cannot take the id of a freed one: a backward compiled after
    # its forward's graph is gone would be held to the forward's peak) and its peaks before any merge
    first: dict[int, tuple[object, int, int]] = {}

    def no_higher_than(self: memory.MemoryEstimate, before: memory.MemoryEstimate) -> bool:
        graph = V.graph
        _, peak, peak_tangents_freed = first.setdefault(id(graph), (graph, before.peak, before.peak_tangents_freed))
        return (
            self.peak <= max(before.peak, peak * (1 + tolerance))
            and self.peak_tangents_freed <= max(before.peak_tangents_freed, peak_tangents_freed * (1 + tolerance))
            and all(live <= before.at_fallbacks.get(name, live) for name, live in self.at_fallbacks.items())
        )

    live_while_running = merging.live_while_running

    def scaled_live_while_running(*args: object) -> tuple[float, float]:
        # the pass's shortcut (a group whose own bytes are above the peak is split without an estimate), with the
        # same tolerance: above the peak times 1 + tolerance
        own, tangents = live_while_running(*args)
        return own / (1 + tolerance), tangents / (1 + tolerance)

    with (
        mock.patch.object(memory.MemoryEstimate, "no_higher_than", no_higher_than),
        mock.patch.object(merging, "live_while_running", scaled_live_while_running),
    ):
        yield


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--tolerances", type=float, nargs="+", default=[0.0, 0.01])
    parser.add_argument("cases", type=parse_case, nargs="+")
    args = parser.parse_args()
    variants = {v.name: v for v in VARIANTS}
    columns = ["case", "variant", "kernels/call", "ms/call", "peak MiB", "first call s", "max rel err",
               "optimus_ir rewrites", "error"]
    rows = []
    for case in args.cases:
        _, reference, _ = prepare(case, compiled=False)
        runs = [("stock", variants["stock"], 0.0)]
        runs += [(f"optimus_ir, tolerance {t:g}", variants["optimus_ir"], t) for t in args.tolerances]
        for name, variant, tolerance in runs:
            with peak_tolerance(tolerance):
                row = measure(case, dataclasses.replace(variant, name=name), reference)
            rows.append({"case": case.label, **row})
            print({k: rows[-1].get(k) for k in columns}, flush=True)
            write_results(args.out, "peak_tolerance_probe", header(" ".join(sys.argv)), rows, columns, echo=False)
    write_results(args.out, "peak_tolerance_probe", header(" ".join(sys.argv)), rows, columns)


if __name__ == "__main__":
    main()
