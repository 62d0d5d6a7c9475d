"""Measurement on a CUDA GPU, shared by the benchmark scripts: kernels per call, time per call, GPU time under
CUDA-graph replay, compile time, the memory floor. Every variant of a workload is compiled and measured in the
same process, one after the other, so the numbers compare.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime
import json
import platform
import statistics
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import torch

import optimus_ir


@dataclasses.dataclass
class Variant:
    """A way to run a workload: ``eager``, ``stock`` Inductor, ``combo`` (combo_kernels=True), ``optimus_ir``."""

    name: str
    compile: bool
    inductor_config: dict[str, Any]
    passes: str | None


VARIANTS = [
    Variant("eager", False, {}, None),
    Variant("stock", True, {}, None),
    Variant("combo_kernels", True, {"combo_kernels": True}, None),
    Variant("optimus_ir", True, {}, "all"),
]


@contextlib.contextmanager
def variant_context(variant: Variant) -> Iterator[None]:
    with torch._inductor.config.patch(variant.inductor_config), optimus_ir.enabled(variant.passes):
        yield


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


def graph_replay_ms(fn: Callable[[], Any], repeat: int = 50) -> float | None:
    """Median GPU milliseconds of ``fn`` captured once in a CUDA graph and replayed (launch gaps mostly gone)."""
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
    return cuda_time_ms(graph.replay, repeat=repeat)


def kernels_per_call(fn: Callable[[], Any], calls: int = 3) -> float:
    """GPU kernels launched per call, counted with the profiler."""
    fn()
    torch.cuda.synchronize()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        for _ in range(calls):
            fn()
        torch.cuda.synchronize()
    kernels = [e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]
    return len(kernels) / calls


def copy_bandwidth_bytes_per_ms() -> float:
    """Device-to-device copy bandwidth (bytes read + written per ms), measured on a 2 GiB copy."""
    src = torch.empty(2**29, dtype=torch.float32, device="cuda").uniform_()
    dst = torch.empty_like(src)
    ms = cuda_time_ms(lambda: dst.copy_(src), repeat=20)
    return 2 * src.numel() * src.element_size() / ms


def max_rel_error(actual: Any, expected: Any) -> float:
    actual = actual if isinstance(actual, (tuple, list)) else [actual]
    expected = expected if isinstance(expected, (tuple, list)) else [expected]
    worst = 0.0
    for a, e in zip(actual, expected):
        a64, e64 = a.detach().double(), e.detach().double()
        worst = max(worst, float((a64 - e64).norm() / e64.norm().clamp_min(1e-30)))
    return worst


def header(command: str) -> dict[str, Any]:
    return {
        "date": datetime.date.today().isoformat(),
        "torch": torch.__version__,
        "triton": __import__("triton").__version__,
        "device": torch.cuda.get_device_name() if torch.cuda.is_available() else "cpu",
        "python": platform.python_version(),
        "command": command,
    }


def write_results(out_dir: Path, stem: str, meta: dict[str, Any], rows: list[dict[str, Any]], columns: list[str]) -> None:
    """Write ``<stem>.json`` and ``<stem>.md`` (a table of ``columns``) into ``out_dir``."""
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / f"{stem}.json").write_text(json.dumps({"meta": meta, "rows": rows}, indent=2))
    lines = [f"# {stem}", ""] + [f"- {k}: `{v}`" for k, v in meta.items()] + [""]
    lines.append("| " + " | ".join(columns) + " |")
    lines.append("|" + "---|" * len(columns))
    for row in rows:
        lines.append("| " + " | ".join(_fmt(row.get(c)) for c in columns) + " |")
    (out_dir / f"{stem}.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


def _fmt(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    return "" if value is None else str(value)


def timed_first_call(fn: Callable[[], Any]) -> tuple[Any, float]:
    """Run ``fn`` once (the compile happens here) and return its result and the wall seconds it took."""
    torch.cuda.synchronize()
    start = time.perf_counter()
    result = fn()
    torch.cuda.synchronize()
    return result, time.perf_counter() - start
