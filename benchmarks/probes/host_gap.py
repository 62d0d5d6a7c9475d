"""Where a real model's host time per call differs between variants that launch the same kernels: the variants'
calls interleaved one by one, as the real suite times them (:func:`benchmarks.real_models.time_in_turns`), where a
variant may be compiled under one variant's settings and called under another's: ``optimus_ir@stock`` is the code
optimus_ir compiled, called with optimus_ir switched off; ``stock@optimus_ir`` stock's code called with it on. So
the code's own cost is told from that of the settings around its calls.

    python -m benchmarks host-gap --out DIR mixtral-moe/inference \\
        --variants stock combo_kernels optimus_ir optimus_ir_splitcat optimus_ir@stock stock@optimus_ir

``optimus_ir_splitcat``: optimus_ir with the horizontal pass off (``OPTIMUS_IR=splitcat``: no member tables).
``optimus_ir_dict_tables``: optimus_ir's code with each member table's lookup replaced by a dict get by its
tensors' addresses (no capture check, no thread's own slots, no recency kept): the least a lookup by addresses
costs.
Writes DIR/host_gap_<model>_<mode>.{json,md}.
"""

from __future__ import annotations

import argparse
import contextlib
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from benchmarks import real_models
from benchmarks.measure import (
    VARIANTS,
    OwnInductor,
    Variant,
    cold_compile,
    header,
    own_copy,
    variant_context,
    write_results,
)
from optimus_ir.runtime import MemberTable

#: warm-up calls of each variant under the settings it was compiled with, before any is timed
WARMUP = 16


def _variant(name: str) -> Variant:
    if name == "optimus_ir_splitcat":
        return Variant(name, True, {}, "splitcat")
    if name == "optimus_ir_dict_tables":
        return Variant(name, True, {}, "all")
    return next(v for v in VARIANTS if v.name == name)


def _dict_lookup(self: MemberTable, *tensors: torch.Tensor, numels: tuple[int, ...] | None = None) -> torch.Tensor:
    found = self.__dict__.setdefault("_probe_tables", {})
    key = (numels, *map(_data_ptr, tensors))
    table = found.get(key)
    if table is None:
        table = _LOOKUP(self, *tensors, numels=numels)
        found[key] = table
        if len(found) > self.cache_size:  # a miss may now rewrite a slot whose table the dict holds: no more dict
            found.clear()
            self.__dict__["_probe_tables"] = _NEVER_FOUND
    return table


class _NeverFound(dict):
    def __setitem__(self, key: Any, value: Any) -> None:
        pass


_NEVER_FOUND = _NeverFound()


_LOOKUP = MemberTable.__call__
_data_ptr = torch.Tensor.data_ptr


def _with_dict_lookups(call: Callable[[], Any]) -> Callable[[], Any]:
    def with_dict_lookups() -> Any:
        MemberTable.__call__ = _dict_lookup
        try:
            return call()
        finally:
            MemberTable.__call__ = _LOOKUP

    return with_dict_lookups


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks host-gap", description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("case")
    parser.add_argument("--variants", nargs="+", default=["stock", "combo_kernels", "optimus_ir", "optimus_ir@stock"],
                        help="COMPILED[@CALLED]: compiled under one variant's settings, called under another's")
    args = parser.parse_args(argv)
    name, mode, module, inputs = real_models.prepared_case(args.case, "cuda")
    params = list(module.parameters())
    calls = {}
    with contextlib.ExitStack() as caches:
        for spec in args.variants:
            compiled_as, _, called_in = spec.partition("@")
            compiler = _variant(compiled_as)
            caches.enter_context(cold_compile(reset=False))
            compiled = torch.compile(own_copy(real_models._forward(module), spec.replace("@", "_at_")),
                                     backend=OwnInductor())
            call = real_models.make_call(compiled, inputs, mode, params)
            if compiled_as == "optimus_ir_dict_tables":
                call = _with_dict_lookups(call)
            with variant_context(compiler):
                for _ in range(WARMUP):
                    call()
            calls[spec] = (_variant(called_in) if called_in else compiler, call)
        timed = real_models.time_in_turns(calls)
    rows = [{"variant": spec} | times for spec, times in timed.items()]
    command = "python -m benchmarks host-gap " + " ".join(sys.argv[1:])
    write_results(args.out, f"host_gap_{name}_{mode}", header(command), rows, list(rows[0]))


if __name__ == "__main__":
    main()
