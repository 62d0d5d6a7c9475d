"""Which calls of a real model launch what: a variant compiled as the real suite compiles it, its first call kept
alive (as the suite keeps it for the errors), then ``--calls`` calls each profiled on its own. Per call: its CUDA
events (kernels and copies), and by name those it launched more of than the call that launched fewest (a member
table rebuilt on a miss is a host-to-device copy). Answers where a fractional kernels-per-call comes from; with ``--by-name``, also what the last call launched, by
name (which kernels an extern call launches on the device, where the wrapper counts one).

    python -m benchmarks call-events --out DIR shufflenet-v2/inference mixnet-s/inference --variant optimus_ir
"""

from __future__ import annotations

import argparse
import collections
import sys
from pathlib import Path

import torch

from benchmarks import real_models
from benchmarks.measure import VARIANTS, cold_compile, cuda_events, header, variant_context, write_results

COLUMNS = ["case", "variant", "call", "events", "more than in the fewest call", "by name"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("cases", nargs="+", help="model/mode of the real suite")
    parser.add_argument("--variant", nargs="+", default=["optimus_ir"], choices=[v.name for v in VARIANTS])
    parser.add_argument("--calls", type=int, default=8)
    parser.add_argument("--by-name", action="store_true", help="the last call's events counted by name")
    args = parser.parse_args()
    variants = {v.name: v for v in VARIANTS}
    rows = []
    for case in args.cases:
        name, mode, module, inputs = real_models.prepared_case(case, "cuda")
        params = list(module.parameters())
        for variant_name in args.variant:
            with cold_compile(), variant_context(variants[variant_name]):
                call = real_models.make_call(torch.compile(module), inputs, mode, params)
                first = call()  # noqa: F841  (kept alive, as the suite keeps it)
                names = [[e.name for e in cuda_events(call)] for _ in range(args.calls)]
            counts = [collections.Counter(n) for n in names]
            for index, count in enumerate(counts, start=1):
                # an event's count in this call against its fewest in any call: what this call launched more of
                fewest = {name: min(c[name] for c in counts) for name in count}
                odd = {name: n - fewest[name] for name, n in count.items() if n > fewest[name]}
                by_name = count.most_common() if args.by_name and index == len(counts) else []
                rows.append({"case": case, "variant": variant_name, "call": index, "events": count.total(),
                             "more than in the fewest call": ", ".join(f"{n} x{c}" for n, c in odd.items()),
                             "by name": ", ".join(f"{n[:80]} x{c}" for n, c in by_name)})
                print(rows[-1], flush=True)
            real_models.drop_grads(params)
    write_results(args.out, "call_events", header(" ".join(sys.argv)), rows, COLUMNS)


if __name__ == "__main__":
    main()
