"""On a real GPU: member tables stay right when every call brings new addresses, and cost no memory once warm.

    python benchmarks/table_slots_check.py --out benchmarks/results/<date>

A merged kernel's table is cached by its tensors' addresses in a few slots (``optimus_ir.runtime.MemberTable``); a
miss rewrites the least recently used slot with a copy queued behind the kernels that read it. Each scenario calls
one compiled function (12 tanh members of 7 row counts, its forward and backward) many more times than there are
slots, each call with new tensors at new addresses, without synchronizing between calls, and checks every call's
outputs and gradients against eager. Scenarios: all calls on the default stream; calls alternating between two
streams (a slot last read on the other stream); the forward captured in a CUDA graph and replayed with new data
(the table filled outside the graph: no copy in a replay); calls from several threads at once, on the default
stream or each thread on a stream of its own (one thread's miss may not rewrite a table another thread's call
has looked up and not launched yet); inputs at addresses that are not 16-byte aligned,
which the kernel takes as aligned (its table copies them: Inductor's own check before the call is left out for
inputs only tables read), called and captured in a CUDA graph; and the peak memory of a warm call against stock
Inductor's. Last, the host time of one table lookup that hits and of one that misses, for tables of 8 to 256
tensors.
"""

from __future__ import annotations

import sys
import threading
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))

import optimus_ir  # noqa: E402
from measure import cold_compile, gpu_check_out_dir, header, peak_memory_bytes, write_results  # noqa: E402
from optimus_ir.registry import recording  # noqa: E402
from optimus_ir.runtime import MemberTable  # noqa: E402

ROWS = (64, 64, 128, 256, 512, 1024, 2048, 64, 128, 256, 512, 1024)
CALLS = 64  # four times the slots of a table (cache_size=16)
THREADS = 8


def fn(*xs: torch.Tensor) -> list[torch.Tensor]:
    return [torch.tanh(x) * 2 for x in xs]


def new_inputs(step: int) -> list[torch.Tensor]:
    generator = torch.Generator(device="cuda").manual_seed(step)
    return [torch.randn(r, 256, device="cuda", generator=generator, requires_grad=True) for r in ROWS]


def run_calls(compiled, streams: list[torch.cuda.Stream]) -> tuple[int, float]:
    """Calls ``compiled`` CALLS times on ``streams`` in turn (no synchronization between calls); the number of calls
    whose outputs or gradients differ from eager's, and the largest absolute difference."""
    results = []
    for step in range(CALLS):
        stream = streams[step % len(streams)]
        inputs = new_inputs(step)
        stream.wait_stream(torch.cuda.current_stream())
        for x in inputs:
            x.record_stream(stream)  # freed on the default stream while this stream may still read them
        with torch.cuda.stream(stream):
            outputs = compiled(*inputs)
            sum(o.sum() for o in outputs).backward()
        results.append((step, [o.detach() for o in outputs], [x.grad for x in inputs]))
        # the inputs go out of scope: the next call's come at addresses the allocator picks again
    torch.cuda.synchronize()
    mismatches, worst = 0, 0.0
    for step, outputs, grads in results:
        inputs = new_inputs(step)
        expected = fn(*inputs)
        sum(e.sum() for e in expected).backward()
        diffs = [(a - e).abs().max().item() for a, e in zip(outputs, expected)]
        diffs += [(a - x.grad).abs().max().item() for a, x in zip(grads, inputs)]
        worst = max(worst, *diffs)
        mismatches += any(d > 1e-5 for d in diffs)
    return mismatches, worst


def threads_calls(threads: int, calls: int, own_streams: bool) -> tuple[int, float]:
    """The inference graph compiled once, then called ``calls`` times by each of ``threads`` threads at once, each
    call with new inputs (kept with its outputs, so that no two calls share addresses and nearly every call misses
    its table), on the default stream or on a stream of each thread's own: the calls whose outputs differ from
    eager's, and the largest absolute difference."""
    compiled = torch.compile(fn)
    with torch.no_grad():
        compiled(*[x.detach() for x in new_inputs(0)])
    torch.cuda.synchronize()
    start = threading.Barrier(threads)
    results: list[list[tuple[int, list[torch.Tensor]]]] = [[] for _ in range(threads)]
    errors: list[BaseException] = []

    def work(thread: int) -> None:
        try:
            stream = torch.cuda.Stream() if own_streams else torch.cuda.default_stream()
            start.wait()
            with torch.no_grad(), torch.cuda.stream(stream):
                for call in range(calls):
                    step = 1 + thread * calls + call
                    results[thread].append((step, compiled(*[x.detach() for x in new_inputs(step)])))
            stream.synchronize()
        except BaseException as error:  # reported by the main thread
            errors.append(error)

    workers = [threading.Thread(target=work, args=(t,)) for t in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    if errors:
        raise errors[0]
    torch.cuda.synchronize()
    mismatches, worst = 0, 0.0
    with torch.no_grad():
        for step, outputs in [result for thread in results for result in thread]:
            diffs = [(a - e).abs().max().item() for a, e in zip(outputs, fn(*new_inputs(step)))]
            worst = max(worst, *diffs)
            mismatches += any(d > 1e-5 for d in diffs)
    return mismatches, worst


def graph_replays(replays: int = 8) -> tuple[int, float, float]:
    """The forward captured in a CUDA graph (``torch.cuda.graph``, global capture mode, on the stream PyTorch's pool
    would hand out next: a table filled on a pool stream would invalidate the capture) and replayed with new data
    copied into its inputs: the replays whose outputs differ from eager's, the largest absolute difference, and the
    copies per replay besides those inputs' (the member table is filled outside the graph: none)."""
    compiled = torch.compile(fn)
    static = [x.detach() for x in new_inputs(0)]
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for _ in range(3):
            compiled(*static)
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    capture = torch.cuda.Stream()
    for _ in range(31):  # PyTorch's pool hands out its 32 streams in turn: the next one is `capture` again
        torch.cuda.Stream()
    with torch.cuda.graph(graph, stream=capture):
        outputs = compiled(*static)
    mismatches, worst = 0, 0.0
    for step in range(1, replays + 1):
        for x, new in zip(static, new_inputs(step)):
            x.copy_(new.detach())
        graph.replay()
        diffs = [(a - e).abs().max().item() for a, e in zip(outputs, fn(*static))]
        worst = max(worst, *diffs)
        mismatches += any(d > 1e-5 for d in diffs)
    torch.cuda.synchronize()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        for _ in range(replays):
            graph.replay()
        torch.cuda.synchronize()
    copies = [e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA and "emcpy" in e.name]
    return mismatches, worst, len(copies) / replays


def misaligned(rows: int, step: int) -> torch.Tensor:
    """A [rows, 256] tensor of new values that starts 4 bytes past a 16-byte boundary."""
    generator = torch.Generator(device="cuda").manual_seed(step)
    return torch.randn(rows * 256 + 1, device="cuda", generator=generator)[1:].view(rows, 256)


def misaligned_inputs(calls: int = 16) -> tuple[int, float, int]:
    """The inference graph compiled for aligned inputs, then called with every other input misaligned, in turn
    with aligned calls, and captured in a CUDA graph with misaligned inputs and replayed with new data in them: the
    calls whose outputs differ from eager's, the largest absolute difference, and the graphs compiled."""
    compiled = torch.compile(fn)
    with torch.no_grad():
        aligned = [x.detach() for x in new_inputs(0)]
        compiled(*aligned)
        results = []
        for step in range(calls):
            inputs = [misaligned(r, step) if i % 2 and step % 2 else x for i, (r, x) in enumerate(zip(ROWS, aligned))]
            results.append((inputs, compiled(*inputs)))
        static = [misaligned(r, 1000 + i) if i % 2 else x.clone() for i, (r, x) in enumerate(zip(ROWS, aligned))]
        compiled(*static)
        torch.cuda.synchronize()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            outputs = compiled(*static)
        for step in range(4):
            for i, x in enumerate(static):
                x.copy_(misaligned(ROWS[i], 2000 + step) if i % 2 else new_inputs(step)[i].detach())
            graph.replay()
            results.append(([x.clone() for x in static], [o.clone() for o in outputs]))
    torch.cuda.synchronize()
    mismatches, worst = 0, 0.0
    for inputs, outputs in results:
        diffs = [(a - e).abs().max().item() for a, e in zip(outputs, fn(*inputs))]
        worst = max(worst, *diffs)
        mismatches += any(d > 1e-5 for d in diffs)
    return mismatches, worst, torch._dynamo.utils.counters["stats"]["unique_graphs"]


def warm_peak_mib(passes_on: bool) -> float:
    compiled = torch.compile(fn)

    def step() -> None:
        inputs = new_inputs(0)
        sum(o.sum() for o in compiled(*inputs)).backward()

    with cold_compile(), optimus_ir.enabled("all" if passes_on else None):
        for _ in range(CALLS):
            step()
        return peak_memory_bytes(step) / 2**20


def lookup_host_us(tensors: int, hit: bool, calls: int = 2000) -> float:
    """Host µs of one ``MemberTable`` call for ``tensors`` tensors (two per member): the same tensors every call
    (hits), or 64 sets of tensors in turn, four times the cache (misses)."""
    members = tensors // 2
    table = MemberTable(list(range(0, 1024 * members, 1024)), [1000] * members, pad_to=members)
    pool = torch.empty(64 * tensors, device="cuda")
    sets = [list(pool[i * tensors : (i + 1) * tensors].split(1)) for i in range(1 if hit else 64)]
    for tensors_of_call in sets:
        table(*tensors_of_call)
    torch.cuda.synchronize()
    start = time.perf_counter()
    for i in range(calls):
        table(*sets[i % len(sets)])
    seconds = time.perf_counter() - start
    torch.cuda.synchronize()
    return seconds / calls * 1e6


def merges(records: list) -> int:
    """The merges among a compile's records (not its other decisions)."""
    return sum(r.fired and "→ one kernel" in r.detail for r in records if r.rule == "IdenticalKernelsToMemberTableKernel")


def main() -> None:
    out = gpu_check_out_dir()
    rows = []
    for name, streams in (
        ("default stream", [torch.cuda.current_stream()]),
        ("two streams in turn", [torch.cuda.current_stream(), torch.cuda.Stream()]),
    ):
        with cold_compile(), optimus_ir.enabled(), recording() as records:
            mismatches, worst = run_calls(torch.compile(fn), streams)
        fired = merges(records)
        rows.append({"scenario": name, "calls": CALLS, "merges fired": fired, "mismatched calls": mismatches,
                     "max abs diff": worst})
        print(rows[-1], flush=True)
    for own_streams in (False, True):
        for passes in ("all", None):  # stock Inductor too: the harness's own check
            with cold_compile(), optimus_ir.enabled(passes), recording() as records:
                mismatches, worst = threads_calls(THREADS, CALLS, own_streams)
            where = "a stream each" if own_streams else "the default stream"
            rows.append({"scenario": f"{THREADS} threads at once, {CALLS} calls each, on {where}"
                         + ("" if passes else " (stock Inductor)"), "calls": THREADS * CALLS,
                         "merges fired": merges(records) if passes else "", "mismatched calls": mismatches,
                         "max abs diff": worst})
            print(rows[-1], flush=True)
    with cold_compile(), optimus_ir.enabled(), recording() as records:
        mismatches, worst, copies = graph_replays()
    rows.append({"scenario": "CUDA graph (global capture mode), replays with new data", "calls": 8,
                 "merges fired": merges(records),
                 "mismatched calls": mismatches, "max abs diff": worst, "copies per replay": copies})
    print(rows[-1], flush=True)
    torch._dynamo.utils.counters.clear()
    with cold_compile(), optimus_ir.enabled(), recording() as records:
        mismatches, worst, graphs = misaligned_inputs()
    rows.append({"scenario": f"inputs not 16-byte aligned: 16 calls, 4 graph replays ({graphs} graph(s) compiled)",
                 "calls": 20, "merges fired": merges(records),
                 "mismatched calls": mismatches, "max abs diff": worst})
    print(rows[-1], flush=True)
    stock, ours = warm_peak_mib(False), warm_peak_mib(True)
    rows.append({"scenario": "warm call's peak MiB: stock / optimus_ir", "calls": CALLS, "merges fired": "",
                 "mismatched calls": "", "max abs diff": "", "peak MiB": f"{stock:.6f} / {ours:.6f}"})
    print(rows[-1], flush=True)
    for tensors in (8, 32, 96, 256):
        rows.append({"scenario": f"table of {tensors} tensors: host us per lookup, hit / miss", "calls": 2000,
                     "merges fired": "", "mismatched calls": "", "max abs diff": "",
                     "host us": f"{lookup_host_us(tensors, True):.2f} / {lookup_host_us(tensors, False):.2f}"})
        print(rows[-1], flush=True)
    columns = ["scenario", "calls", "merges fired", "mismatched calls", "max abs diff", "copies per replay",
               "peak MiB", "host us"]
    write_results(out, "table_slots_check", header(" ".join(sys.argv)), rows, columns)
    ok = all(r["mismatched calls"] in ("", 0) for r in rows) and all(r["merges fired"] != 0 for r in rows)
    ok = ok and copies == 0
    sys.exit(0 if ok and ours <= stock else 1)


if __name__ == "__main__":
    main()
