"""Measurement on a CUDA GPU, shared by the benchmarks: kernels per call, time per call, GPU time under CUDA-graph
replay, host time per call, compile time, the memory floor; and the results files. Every variant of a workload is
compiled and measured in the same process, one after the other, so the numbers compare.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import datetime
import functools
import json
import platform
import statistics
import sys
import time
import types
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any
from unittest import mock

import torch

import optimus_ir
from optimus_ir.records import recording
from optimus_ir.testing.measure import (  # noqa: F401  (the benchmarks import them from here)
    COLD_COMPILE_CONFIG,
    cold_compile,
    cuda_events,
    kernel_ms_per_call,
    kernels_per_call,
    max_rel_error,
    peak_memory_bytes,
    tensors_of,
)


@dataclasses.dataclass
class Variant:
    """A way to run a workload: ``eager``, ``stock`` Inductor, ``combo_kernels`` (combo_kernels=True),
    ``fx_optimus`` (PyTorch's own FX-level split/cat and batch fusion passes, the "Optimus" passes), ``optimus_ir``."""

    name: str
    compile: bool
    inductor_config: dict[str, Any]
    passes: str | None


#: Every pre-grad pass of ``torch._inductor.fx_passes`` in torch 2.11 that merges split/cat/stack/unbind junk or
#: batches parallel ops (``split_cat.pre_grad_pass_names``, ``group_batch_fusion.PRE_GRAD_FUSIONS``); Inductor runs
#: ``normalization_pass`` first, then the batch fusions, then the other passes, each group in this order.
#: ``einsum_to_pointwise_pass`` is left out (no split/cat or batching).
FX_OPTIMUS_PRE_GRAD = [
    "normalization_pass",
    "remove_split_with_size_one_pass",
    "merge_getitem_cat_pass",
    "merge_stack_tahn_unbind_pass",
    "merge_splits_pass",
    "mutate_cat_pass",
    "split_cat_pass",
    "unbind_stack_pass",
    "split_cat_to_slices_pass",
    "unbind_cat_to_view_pass",
    "split_stack_to_cats_pass",
    "unbind_stack_to_slices_pass",
    "move_reshape_out_of_split_stack_pass",
    "batch_linear",
    "batch_linear_lhs",
    "batch_layernorm",
    "batch_tanh",
    "batch_relu",
    "batch_sigmoid",
    "batch_clamp",
    "batch_nan_to_num",
    "batch_detach",
    "batch_dropout",
]

#: The post-grad counterparts (``split_cat.post_grad_pass_names``, ``group_batch_fusion.POST_GRAD_FUSIONS``). Left
#: out: ``group_linear`` (needs fbgemm), ``decompose_mm_pass``, ``pad_aten_mm_pass`` and
#: ``shape_padding_multiplier`` (matmul rewrites, not split/cat or batching).
FX_OPTIMUS_POST_GRAD = [
    "normalization_aten_pass",
    "split_cat_aten_pass",
    "select_cat_aten_pass",
    "move_view_after_cat_aten_pass",
    "unbind_stack_aten_pass",
    "batch_linear_post_grad",
    "batch_aten_add",
    "batch_aten_sub",
    "batch_aten_mul",
    "batch_aten_div",
    "batch_aten_tanh",
    "batch_aten_sigmoid",
    "batch_aten_relu",
]

VARIANTS = [
    Variant("eager", False, {}, None),
    Variant("stock", True, {}, None),
    Variant("combo_kernels", True, {"combo_kernels": True}, None),
    Variant(
        "fx_optimus",
        True,
        {
            "pre_grad_fusion_options": {name: {} for name in FX_OPTIMUS_PRE_GRAD},
            "post_grad_fusion_options": {name: {} for name in FX_OPTIMUS_POST_GRAD},
        },
        None,
    ),
    Variant("optimus_ir", True, {}, "all"),
]

@contextlib.contextmanager
def variant_context(variant: Variant) -> Iterator[None]:
    with torch._inductor.config.patch(variant.inductor_config), optimus_ir.enabled(variant.passes):
        yield


def own_copy(fn: Callable, tag: str) -> Callable:
    """``fn`` with a code object of its own: Dynamo caches compiled graphs per code object, so each copy keeps the
    graph compiled for it."""
    code = fn.__code__.replace(co_name=f"{fn.__name__}_{tag}")
    return types.FunctionType(code, fn.__globals__, code.co_name, fn.__defaults__, fn.__closure__)


class OwnInductor(torch._TorchCompileInductorWrapper):
    """Inductor as ``torch.compile``'s default backend, in an object equal to no other backend.

    Dynamo runs a cached frame only under a backend equal to the one that compiled it (its BACKEND_MATCH check), and
    every default ``torch.compile`` backend equals every other. Variants compiled one after another through
    functions of their own (:func:`own_copy`) still share the frames Dynamo enters on its own (a module's forward
    after a graph break inside it, say): under equal backends the later variants run the first variant's compiled
    code for those. Mixtral's training step measured stock's 362 kernels and errors for all three variants so."""

    def __init__(self) -> None:
        super().__init__(None, None, None)

    def __eq__(self, other: object) -> bool:
        return self is other

    __hash__ = object.__hash__


#: What Inductor's wrapper code allocates a buffer with, by device type (its ``empty_strided_cuda`` lines).
_WRAPPER_ALLOCATORS = {
    "cuda": torch._C._dynamo.guards._empty_strided_cuda,
    "cpu": torch._C._dynamo.guards._empty_strided_cpu,
}


def runs_nothing_backend() -> Any:
    """A ``torch.compile`` backend whose compiled graphs run no kernel after their first call: Dynamo and AOTAutograd
    as Inductor's calls have them (Inductor's partition of a training graph), each graph returning what its first
    call returned; a backward's gradients are new tensors each call (autograd takes a gradient over as the weight's
    ``.grad`` only where nobody else holds it, and copies one that is held), allocated as any compiled backward
    must, by the call Inductor's wrapper allocates with (``torch.empty_like`` costs more host time a tensor than a
    compiled backward pays). What any compiled call of a function costs before its first kernel: the floor of its
    time per call."""
    from torch._dynamo.backends.common import aot_autograd
    from torch._functorch.partitioners import min_cut_rematerialization_partition

    def compiler(graph: torch.fx.GraphModule, example_inputs: Any, new: bool = False) -> Callable:
        returned: list[Any] = []
        makers: list[Callable[[], Any]] = []  # with ``new``: per output, what makes it anew

        def run(args: list[Any]) -> list[Any]:
            if not returned:
                returned.extend(graph(*args))
                makers.extend(
                    functools.partial(_WRAPPER_ALLOCATORS[t.device.type], tuple(t.size()), tuple(t.stride()), t.dtype)
                    if new and isinstance(t, torch.Tensor) else functools.partial(lambda value: value, t)
                    for t in returned
                )
            args.clear()
            return [make() for make in makers]

        run._boxed_call = True  # type: ignore[attr-defined]
        return run

    return aot_autograd(
        fw_compiler=compiler, bw_compiler=lambda graph, example_inputs: compiler(graph, example_inputs, new=True),
        partition_fn=min_cut_rematerialization_partition,
    )


def cuda_time_ms(fn: Callable[[], Any], repeat: int = 50, warmup: int = 5) -> float:
    """Median milliseconds of one ``fn()`` call, timed with CUDA events around each call (launch overhead in)."""
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(repeat):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return statistics.median(times)


def captured_graph(fn: Callable[[], Any]) -> torch.cuda.CUDAGraph | None:
    """``fn`` captured once in a CUDA graph (after three calls on a side stream), or None where it can't be."""
    try:
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            for _ in range(3):
                fn()
        torch.cuda.current_stream().wait_stream(stream)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            fn()
    except Exception as error:  # some workloads can't be captured; report, don't fail the run
        print(f"graph capture failed: {error!r}", file=sys.stderr)
        return None
    return graph


def graph_replay_ms(fn: Callable[[], Any], repeat: int = 50) -> float | None:
    """Median GPU milliseconds of ``fn`` captured once in a CUDA graph and replayed (launch gaps mostly gone)."""
    graph = captured_graph(fn)
    return None if graph is None else cuda_time_ms(graph.replay, repeat=repeat)


def graph_replay_measures(fn: Callable[[], Any]) -> tuple[float | None, float | None, float | None]:
    """``fn`` captured once in a CUDA graph: median GPU milliseconds of a replay timed alone (its launch latency
    in), of a replay among replays queued back to back (each one's launch overlapping the one before), and of the
    work in a replay (its kernels' and copies' durations as the profiler records them, the replay's own launch and
    the gaps between its nodes left out). Nones where it can't be captured."""
    graph = captured_graph(fn)
    if graph is None:
        return None, None, None
    return cuda_time_ms(graph.replay), _replays_back_to_back_ms(graph), _replay_work_ms(graph)


def _replays_back_to_back_ms(graph: torch.cuda.CUDAGraph, replays: int = 20, repeat: int = 10) -> float:
    graph.replay()
    torch.cuda.synchronize()
    times = []
    for _ in range(repeat):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(replays):
            graph.replay()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) / replays)
    return statistics.median(times)


def _replay_work_ms(graph: torch.cuda.CUDAGraph, replays: int = 20) -> float:
    graph.replay()
    torch.cuda.synchronize()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        for _ in range(replays):
            graph.replay()
        torch.cuda.synchronize()
    work = [e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]
    return sum(e.time_range.elapsed_us() for e in work) / 1000 / replays


def copy_bandwidth_bytes_per_ms() -> float:
    """Device-to-device copy bandwidth (bytes read + written per ms), measured on a 2 GiB copy."""
    src = torch.empty(2**29, dtype=torch.float32, device="cuda").uniform_()
    dst = torch.empty_like(src)
    ms = cuda_time_ms(lambda: dst.copy_(src), repeat=20)
    return 2 * src.numel() * src.element_size() / ms


def same_bytes_copy_replay_ms(nbytes: int) -> float | None:
    """GPU milliseconds, under CUDA-graph replay, of one device-to-device copy that reads and writes ``nbytes`` in
    all: what one kernel moving a workload's bytes takes at that size (launch and ramp-up included, which a 2 GiB
    copy's bandwidth leaves out)."""
    src = torch.empty(max(1, nbytes // 2), dtype=torch.uint8, device="cuda")
    dst = torch.empty_like(src)
    return graph_replay_ms(lambda: dst.copy_(src))


def all_finite(output: Any) -> bool:
    """Whether every element of ``output`` (a tensor, or a tuple or list of them) is finite (no inf, no NaN)."""
    return all(bool(torch.isfinite(t).all()) for t in tensors_of(output))


def gpu_out_dir(argv: Sequence[str] | None = None, description: str | None = None) -> Path:
    """The ``--out`` directory of a command line that takes nothing else; the command needs a GPU machine."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--out", type=Path, required=True)
    out = parser.parse_args(argv).out
    assert torch.cuda.is_available(), "run this on a GPU machine"
    return out


def header(command: str) -> dict[str, Any]:
    return {
        "date": datetime.date.today().isoformat(),
        "torch": torch.__version__,
        "triton": __import__("triton").__version__,
        "device": torch.cuda.get_device_name() if torch.cuda.is_available() else "cpu",
        "python": platform.python_version(),
        "command": command,
    }


def write_results(
    out_dir: Path, stem: str, meta: dict[str, Any], rows: list[dict[str, Any]], columns: list[str], echo: bool = True
) -> None:
    """Write ``<stem>.json`` and ``<stem>.md`` (a table of ``columns``) into ``out_dir``; print the table if ``echo``."""
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / f"{stem}.json").write_text(json.dumps({"meta": meta, "rows": rows}, indent=2))
    lines = [f"# {stem}", ""] + [f"- {k}: `{v}`" for k, v in meta.items()] + [""]
    lines.append("| " + " | ".join(columns) + " |")
    lines.append("|" + "---|" * len(columns))
    for row in rows:
        lines.append("| " + " | ".join(_fmt(row.get(c)) for c in columns) + " |")
    (out_dir / f"{stem}.md").write_text("\n".join(lines) + "\n")
    if echo:
        print("\n".join(lines))


def _fmt(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    return "" if value is None else str(value)


#: host timing: calls before the timed ones, and the timed calls
HOST_WARMUP, HOST_CALLS = 20, 300


def host_us_per_call(call: Callable[[], Any], calls: int = HOST_CALLS) -> float:
    """Host microseconds per call of a loop of ``calls`` calls (after ``HOST_WARMUP`` calls; the GPU synchronized
    before and after the loop, not in it)."""
    for _ in range(HOST_WARMUP):
        call()
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(calls):
        call()
    host = time.perf_counter() - start
    torch.cuda.synchronize()
    return host / calls * 1e6


def inductor_call_us_per_call(call: Callable[[], Any], calls: int = HOST_CALLS) -> float:
    """Host microseconds per call spent inside Inductor's compiled graphs (``CompiledFxGraph.__call__``: the
    wrapper's ``call``, its asserts, allocations, tables and launches); the rest of a call is Dynamo's guards and
    the AOTAutograd wrappers, which no kernel-level rewrite changes."""
    from torch._inductor.output_code import CompiledFxGraph

    inside = [0.0]
    real_call = CompiledFxGraph.__call__

    def timed(self, inputs):
        start = time.perf_counter()
        try:
            return real_call(self, inputs)
        finally:
            inside[0] += time.perf_counter() - start

    with mock.patch.object(CompiledFxGraph, "__call__", timed):
        for _ in range(HOST_WARMUP):
            call()
        inside[0] = 0.0
        for _ in range(calls):
            call()
        torch.cuda.synchronize()
    return inside[0] / calls * 1e6


def counting_table_writes() -> Any:
    """``MemberTable._write`` patched to count its calls (``.call_count``): the tables written (a lookup that
    missed the cache), not taken from it."""
    from optimus_ir.runtime import MemberTable

    return mock.patch.object(MemberTable, "_write", autospec=True, side_effect=MemberTable._write)


def timed_first_call(fn: Callable[[], Any]) -> tuple[Any, float]:
    """Run ``fn`` once (the compile happens here) and return its result and the wall seconds it took."""
    torch.cuda.synchronize()
    start = time.perf_counter()
    result = fn()
    torch.cuda.synchronize()
    return result, time.perf_counter() - start


def measure_inference(
    workload: str,
    variant: Variant,
    fn: Callable[..., Any],
    inputs: tuple[Any, ...],
    expected: Any,
    floor_ms: float,
    copy_ms: float | None = None,
) -> dict[str, Any]:
    """One row: ``fn(*inputs)`` under ``variant``, compiled fresh: kernels and time per call, GPU time under graph
    replay against the memory floor (and against ``copy_ms``, a copy of the same bytes, where given), compile time,
    error against ``expected``, optimus_ir rules fired."""
    torch._dynamo.reset()
    with variant_context(variant), recording() as records:
        run = torch.compile(fn) if variant.compile else fn
        actual, compile_s = timed_first_call(lambda: run(*inputs))
    call = lambda: run(*inputs)  # noqa: E731
    replay, back_to_back, work = graph_replay_measures(call)
    return {
        "workload": workload,
        "variant": variant.name,
        "kernels/call": kernels_per_call(call),
        "ms/call": cuda_time_ms(call),
        "graph replay ms": replay,
        "floor ms": floor_ms,
        "replay / floor": replay / floor_ms if replay else None,
        "replay back to back ms": back_to_back,
        "back to back / floor": back_to_back / floor_ms if back_to_back else None,
        "replay work ms": work,
        "work / floor": work / floor_ms if work else None,
        **({"copy ms": copy_ms, "replay / copy": replay / copy_ms if replay else None} if copy_ms else {}),
        "first call s": compile_s,
        "max rel err": max_rel_error(actual, expected),
        "rules fired": sum(r.fired for r in records),
    }


def measure_training_step(
    workload: str, variant: Variant, fn: Callable[..., Any], inputs: tuple[torch.Tensor, ...], grads: Any
) -> dict[str, Any]:
    """One row: forward + backward of ``fn`` (gradients of ``inputs`` for output gradients ``grads``) under
    ``variant``, compiled fresh: kernels and time per step, compile time, error of the gradients against eager."""
    expected = torch.autograd.grad(fn(*inputs), inputs, grads)
    torch._dynamo.reset()
    with variant_context(variant):
        run = torch.compile(fn) if variant.compile else fn
        step = lambda: torch.autograd.grad(run(*inputs), inputs, grads)  # noqa: E731
        actual, compile_s = timed_first_call(step)
    return {
        "workload": workload,
        "variant": variant.name,
        "kernels/call": kernels_per_call(step),
        "ms/call": cuda_time_ms(step),
        "first call s": compile_s,
        "max rel err": max_rel_error(list(actual), list(expected)),
    }
