"""Does GPU-less code generation (``optimus_ir.inspect.compile_report``, :mod:`optimus_ir.virtual_cuda`) give the
graphs that ``torch.compile`` gives? Both compile ``output_loss(model(*inputs))`` of a workload for training, or
``model(*inputs)`` under ``torch.no_grad()`` for inference, with stock Inductor and with optimus_ir; nothing runs.

    python -m benchmarks virtual-vs-compile --out DIR CASE...
    (CASE: workload/size[/inference], e.g. multitask/small, dlrm/small/inference; training unless it says so)

* ``torch.compile``: Dynamo, AOTAutograd and Inductor on the machine's device (CUDA where there is one; else the CPU
  with ``cpu_backend="triton"``), the backward compiled with the forward; the wrapper code is captured instead of
  loaded (``virtual_cuda._capture_wrapper_code``).
* ``compile_report``: the same module through ``virtual_cuda`` on the virtual sm_90 device.

For each graph: the launches of one call, the distinct kernels, how many of one's kernels the other defines with the
same source, the pass's first estimate of the graph's peak memory, and its merges and rejections for memory. Where
the two flows' graphs differ, both wrappers are written to ``DIR/differing/``.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from unittest import mock

import torch
import torch._functorch.config as functorch_config
import torch._inductor.config as inductor_config
from torch._inductor.virtualized import V

from benchmarks.measure import header, write_results
from optimus_ir import interpret, switch, virtual_cuda
from optimus_ir.codegen_text import GraphCode, normalize, parse_wrapper
from optimus_ir.inspect import report_for
from optimus_ir.records import RewriteRecord, recording
from optimus_ir.scheduler_hooks.horizontal import memory, merging
from optimus_ir.testing.workloads import WORKLOADS, WithLoss


@contextlib.contextmanager
def first_peaks() -> Iterator[list[int]]:
    """Yields the list of each graph's first peak estimate by the horizontal pass, graph after graph."""
    peaks: list[int] = []
    graphs: list[Any] = []  # kept, so that no later graph takes a freed one's id
    estimate = merging.peak_memory

    def logged(nodes: list[Any], bytes_of: Any) -> memory.MemoryEstimate:
        result = estimate(nodes, bytes_of)
        if not any(graph is V.graph for graph in graphs):
            graphs.append(V.graph)
            peaks.append(result.peak)
        return result

    with mock.patch.object(merging, "peak_memory", logged):
        yield peaks


def compiled(
    module: torch.nn.Module, inputs: tuple[torch.Tensor, ...], passes: str | None, names: list[str]
) -> list[GraphCode]:
    """The graphs (``names``: forward and backward, or inference) ``torch.compile`` makes of ``module(*inputs)``,
    not run."""
    torch._dynamo.reset()
    on_cpu = inputs[0].device.type == "cpu"
    with (
        switch.enabled(passes),
        inductor_config.patch(fx_graph_cache=False, fx_graph_remote_cache=False, compile_threads=1,
                              **({"cpu_backend": "triton"} if on_cpu else {})),
        functorch_config.patch(enable_autograd_cache=False, force_non_lazy_backward_lowering=True),
        interpret._driver_for_codegen() if on_cpu else contextlib.nullcontext(),
        virtual_cuda._capture_wrapper_code() as wrappers,
        torch.no_grad() if names == ["inference"] else contextlib.nullcontext(),
    ):
        try:
            torch.compile(module)(*inputs)
        except RuntimeError as error:  # the captured code does not run
            if "not runnable" not in str(error):
                raise
    torch._dynamo.reset()
    return [parse_wrapper(normalize(code), name) for code, name in zip(wrappers, names, strict=True)]


def memory_records(records: list[RewriteRecord]) -> tuple[int, int]:
    fired = sum(r.fired and r.rule == "IdenticalKernelsToMemberTableKernel" for r in records)
    rejected = sum(not r.fired and "estimated peak memory" in r.detail for r in records)
    return fired, rejected


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("cases", nargs="+")
    args = parser.parse_args()
    device = "cuda" if torch.cuda.is_available() else "cpu"
    rows = []
    for case in args.cases:
        name, size, *mode = case.split("/")
        names = ["inference"] if mode == ["inference"] else ["forward", "backward"]
        model, inputs = WORKLOADS[name].make(size, device=device)
        # inference: parameters that do not require grad, in both flows (an op may trace to another one by it:
        # ``_embedding_bag_forward_only`` for ``_embedding_bag``)
        module = model.requires_grad_(False) if names == ["inference"] else WithLoss(model)
        module_on_cpu = copy.deepcopy(module).cpu()  # compile_report's tensors stand for CUDA tensors
        for passes in (None, "all"):
            results = {}
            for flow in ("torch.compile", "compile_report"):
                with first_peaks() as peaks, recording() as records:
                    if flow == "torch.compile":
                        graphs = compiled(module, inputs, passes, names)
                    else:
                        cpu_inputs = tuple(x.cpu() for x in inputs)
                        graphs = report_for(module_on_cpu, cpu_inputs, passes=passes, virtual=True).graphs
                results[flow] = graphs, peaks, memory_records(records)
            for index, graph_name in enumerate(names):
                real, virtual = (results[flow][0][index] for flow in ("torch.compile", "compile_report"))
                real_sources = {k.source for k in real.kernels}
                virtual_sources = {k.source for k in virtual.kernels}
                row: dict[str, Any] = {
                    "case": case, "passes": passes or "stock", "graph": graph_name,
                    "kernels same source": f"{len(real_sources & virtual_sources)} of {len(real_sources)}, "
                                           f"{len(virtual_sources)}",
                    "launches same order": real.launches == virtual.launches,
                }
                if real.launches != virtual.launches or real_sources != virtual_sources:  # to read the difference
                    stem = f"{case.replace('/', '_')}_{passes or 'stock'}_{graph_name}"
                    (args.out / "differing").mkdir(parents=True, exist_ok=True)
                    (args.out / "differing" / f"{stem}_torch_compile.py").write_text(real.wrapper)
                    (args.out / "differing" / f"{stem}_compile_report.py").write_text(virtual.wrapper)
                for flow in ("torch.compile", "compile_report"):
                    graphs, peaks, (fired, rejected) = results[flow]
                    row[f"launches: {flow}"] = len(graphs[index].launches)
                    if passes:
                        row[f"first peak: {flow}"] = peaks[index] if index < len(peaks) else None
                        row[f"merges, rejections for memory (both graphs): {flow}"] = f"{fired}, {rejected}"
                rows.append(row)
                print(row, flush=True)
    columns = list(rows[-1])
    write_results(args.out, "virtual_vs_compile", header(" ".join(sys.argv)), rows, columns)


if __name__ == "__main__":
    main()
