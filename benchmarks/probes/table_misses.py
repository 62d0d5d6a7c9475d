"""How often a merged kernel's member table must be rebuilt: for each table of a compiled case, the addresses its
tensors have over many calls (how many distinct sets, after how many calls one repeats), and how many calls miss
a cache of the tables of the last N address sets, for several N.

    python -m benchmarks table-misses --out DIR --cases layernorm_storm/small/fp32/training [--calls 200]
"""

from __future__ import annotations

import argparse
import collections
import sys
from pathlib import Path
from unittest import mock

import torch

from benchmarks.measure import VARIANTS, cold_compile, header, variant_context, write_results
from benchmarks.suite import parse_case, prepare
from optimus_ir.runtime import MemberTable

CACHE_SIZES = (16, 64, 256)


def lru_misses(keys: list[tuple], size: int) -> int:
    cache: collections.OrderedDict[tuple, None] = collections.OrderedDict()
    misses = 0
    for key in keys:
        if key in cache:
            cache.move_to_end(key)
            continue
        misses += 1
        cache[key] = None
        if len(cache) > size:
            cache.popitem(last=False)
    return misses


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--cases", nargs="+", type=parse_case, required=True, metavar="W/S/D/M")
    parser.add_argument("--calls", type=int, default=200)
    args = parser.parse_args()
    ours = next(v for v in VARIANTS if v.name == "optimus_ir")
    rows = []
    for case in args.cases:
        torch._dynamo.reset()
        keys: dict[int, list[tuple]] = collections.defaultdict(list)
        real_call = MemberTable.__call__

        def recorded(self, *tensors, **kwargs):
            keys[id(self)].append(tuple(t.data_ptr() for t in tensors))
            return real_call(self, *tensors, **kwargs)

        with cold_compile(), variant_context(ours), mock.patch.object(MemberTable, "__call__", recorded):
            call, _, _ = prepare(case, ours.compile)
            for _ in range(10):
                call()
            keys.clear()
            for _ in range(args.calls):
                call()
            torch.cuda.synchronize()
        for index, sequence in enumerate(keys.values()):
            first_repeat = next((i for i, k in enumerate(sequence) if k in sequence[:i]), None)
            rows.append(
                {
                    "case": case.label,
                    "table": index,
                    "tensors": len(sequence[0]),
                    "calls": len(sequence),
                    "distinct address sets": len(set(sequence)),
                    "first repeat at call": first_repeat,
                    **{f"misses, cache {n}": lru_misses(sequence, n) for n in CACHE_SIZES},
                }
            )
            print(rows[-1], flush=True)
    write_results(args.out, "table_misses", header(" ".join(sys.argv)), rows, list(rows[0]))


if __name__ == "__main__":
    main()
