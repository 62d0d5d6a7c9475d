"""How a real model's Triton kernels are launched, by variant: Inductor's static launcher (one C++ call) or
Triton's Python launcher (the binder and its checks on every call), with each kernel's argument count. A kernel
the static launcher refuses (launch hooks, scratch memory, several CTAs, a user-defined kernel) costs the host
more per launch: a candidate for a host gap between variants that launch the same kernels.

    python -m benchmarks launchers --out DIR mixtral-moe/inference shufflenet-v2/inference

Writes DIR/launchers.{json,md}: per case and variant, the kernels by launcher, and those not launched statically.
"""

from __future__ import annotations

import argparse
import contextlib
import sys
from pathlib import Path
from typing import Any

import torch
from torch._inductor.codecache import PyCodeCache
from torch._inductor.runtime.triton_heuristics import CachingAutotuner

from benchmarks.measure import OwnInductor, cold_compile, header, own_copy, variant_context, write_results
from benchmarks.real_models import SUITE_VARIANTS, make_call, prepared_case


def _kernels() -> dict[str, CachingAutotuner]:
    """Every Triton kernel of the modules Inductor has loaded, by name."""
    return {name: value for module in PyCodeCache.modules for name, value in vars(module).items()
            if isinstance(value, CachingAutotuner)}


def _launch(kernel: CachingAutotuner) -> tuple[str, int]:
    launcher = kernel.launchers[0] if kernel.launchers else None
    if launcher is None:
        return "not compiled", 0
    kind = "static" if getattr(launcher, "_is_static", False) else "python"
    return kind, len(getattr(launcher, "def_args", None) or kernel.fn.arg_names)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("cases", nargs="+", help="model/mode, as the real suite names them")
    args = parser.parse_args()
    rows: list[dict[str, Any]] = []
    for case in args.cases:
        name, mode, module, inputs = prepared_case(case, "cuda")
        params = list(module.parameters())
        torch._dynamo.reset()
        with contextlib.ExitStack() as caches:
            for variant in SUITE_VARIANTS:
                caches.enter_context(cold_compile(reset=False))
                before, graphs = set(_kernels()), torch._dynamo.utils.counters["stats"]["unique_graphs"]
                with variant_context(variant):
                    compiled = torch.compile(own_copy(lambda *a: module(*a), variant.name), backend=OwnInductor())
                    make_call(compiled, inputs, mode, params)()
                kernels = {k: v for k, v in _kernels().items() if k not in before}
                launches = {k: _launch(v) for k, v in kernels.items()}
                kinds = [kind for kind, _ in launches.values()]
                graphs = torch._dynamo.utils.counters["stats"]["unique_graphs"] - graphs
                rows.append({"case": case, "variant": variant.name, "graphs": graphs, "kernels": len(kernels),
                             "static": kinds.count("static"), "python": kinds.count("python"),
                             "arguments (sum)": sum(n for _, n in launches.values()),
                             "not static": " ".join(sorted(k for k, (kind, _) in launches.items()
                                                           if kind != "static"))})
                print(rows[-1], flush=True)
        torch._dynamo.reset()
    write_results(args.out, "launchers", header(" ".join(sys.argv)), rows, list(rows[0]))


if __name__ == "__main__":
    main()
