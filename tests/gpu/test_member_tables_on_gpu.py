"""On a real GPU: member tables stay right when every call brings new addresses, and cost no memory once warm.

A merged kernel's table is cached by its tensors' addresses in a few slots (``optimus_ir.runtime.MemberTable``); a
miss rewrites the least recently used slot with a copy queued behind the kernels that read it. Each scenario calls
one compiled function (12 tanh members of 7 row counts, its forward and backward) many more times than there are
slots, each call with new tensors at new addresses, without synchronizing between calls, and checks every call's
outputs and gradients against eager. Scenarios: all calls on the default stream; calls alternating between two
streams (a slot last read on the other stream); calls from several threads at once, on the default stream or each
thread on a stream of its own (one thread's miss may not rewrite a table another thread's call has looked up and
not launched yet; stock Inductor the same way, the harness's own check); the forward captured in a CUDA graph and
replayed with new data (the table filled outside the graph: no copy in a replay); inputs at addresses that are not
16-byte aligned, which the kernel takes as aligned (its table copies them), called and captured in a CUDA graph;
and the peak memory of a warm call against stock Inductor's. (The host time of a table lookup:
``python -m benchmarks host-parts``.)
"""

import threading

import pytest
import torch

import optimus_ir
from optimus_ir.records import recording
from tests.gpu.helpers import CUDA, cold_compile, cuda_events, merges, peak_memory_bytes

pytestmark = CUDA

ROWS = (64, 64, 128, 256, 512, 1024, 2048, 64, 128, 256, 512, 1024)
CALLS = 64  # four times the slots of a table (cache_size=16)
THREADS = 8


def fn(*xs: torch.Tensor) -> list[torch.Tensor]:
    return [torch.tanh(x) * 2 for x in xs]


def new_inputs(step: int) -> list[torch.Tensor]:
    generator = torch.Generator(device="cuda").manual_seed(step)
    return [torch.randn(r, 256, device="cuda", generator=generator, requires_grad=True) for r in ROWS]


def _mismatches(pairs) -> tuple[int, float]:
    """The pairs of (actual, expected) tensor lists that differ by more than 1e-5 somewhere, and the largest
    absolute difference."""
    mismatches, worst = 0, 0.0
    for actual, expected in pairs:
        diffs = [(a - e).abs().max().item() for a, e in zip(actual, expected, strict=True)]
        worst = max(worst, *diffs)
        mismatches += any(d > 1e-5 for d in diffs)
    return mismatches, worst


def run_calls(compiled, streams: list[torch.cuda.Stream]) -> tuple[int, float]:
    """Calls ``compiled`` CALLS times on ``streams`` in turn (no synchronization between calls); the calls whose
    outputs or gradients differ from eager's, and the largest absolute difference."""
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
    pairs = []
    for step, outputs, grads in results:
        inputs = new_inputs(step)
        expected = fn(*inputs)
        sum(e.sum() for e in expected).backward()
        pairs.append((outputs + grads, [e.detach() for e in expected] + [x.grad for x in inputs]))
    return _mismatches(pairs)


@pytest.mark.parametrize("two_streams", [False, True], ids=["default stream", "two streams in turn"])
def test_new_addresses_every_call(two_streams):
    streams = [torch.cuda.current_stream()] + ([torch.cuda.Stream()] if two_streams else [])
    with cold_compile(), optimus_ir.enabled(), recording() as records:
        mismatches, worst = run_calls(torch.compile(fn), streams)
    assert merges(records) > 0
    assert mismatches == 0, f"{mismatches} of {CALLS} calls differ from eager, by up to {worst}"


def threads_calls(threads: int, calls: int, own_streams: bool) -> tuple[int, float]:
    """The inference graph compiled once, then called ``calls`` times by each of ``threads`` threads at once, each
    call with new inputs (kept with its outputs, so that no two calls share addresses and nearly every call misses
    its table), on the default stream or on a stream of each thread's own."""
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
        except BaseException as error:  # raised by the main thread
            errors.append(error)

    workers = [threading.Thread(target=work, args=(t,)) for t in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    if errors:
        raise errors[0]
    torch.cuda.synchronize()
    with torch.no_grad():
        return _mismatches([(outputs, fn(*new_inputs(step))) for thread in results for step, outputs in thread])


@pytest.mark.parametrize("passes", ["all", None], ids=["optimus_ir", "stock"])
@pytest.mark.parametrize("own_streams", [False, True], ids=["default stream", "a stream each"])
def test_threads_calling_at_once(own_streams, passes):
    with cold_compile(), optimus_ir.enabled(passes), recording() as records:
        mismatches, worst = threads_calls(THREADS, CALLS, own_streams)
    assert passes is None or merges(records) > 0
    assert mismatches == 0, f"{mismatches} of {THREADS * CALLS} calls differ from eager, by up to {worst}"


def test_cuda_graph_replays_with_new_data_copy_no_table(replays: int = 8):
    """The forward captured in a CUDA graph (``torch.cuda.graph``, global capture mode, on the stream PyTorch's pool
    would hand out next: a table filled on a pool stream would invalidate the capture) and replayed with new data
    copied into its inputs: each replay is eager's, and a replay copies nothing besides those inputs (the member
    table is filled outside the graph)."""
    with cold_compile(), optimus_ir.enabled(), recording() as records:
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
        pairs = []
        for step in range(1, replays + 1):
            for x, new in zip(static, new_inputs(step)):
                x.copy_(new.detach())
            graph.replay()
            pairs.append(([o.clone() for o in outputs], fn(*static)))
        copies = [e for e in cuda_events(graph.replay, replays) if "emcpy" in e.name]
    mismatches, worst = _mismatches(pairs)
    assert merges(records) > 0
    assert mismatches == 0, f"{mismatches} of {replays} replays differ from eager, by up to {worst}"
    assert not copies, f"{len(copies) / replays} copies per replay"


def misaligned(rows: int, step: int) -> torch.Tensor:
    """A [rows, 256] tensor of new values that starts 4 bytes past a 16-byte boundary."""
    generator = torch.Generator(device="cuda").manual_seed(step)
    return torch.randn(rows * 256 + 1, device="cuda", generator=generator)[1:].view(rows, 256)


def test_inputs_not_16_byte_aligned(calls: int = 16):
    """The inference graph compiled for aligned inputs, then called with every other input misaligned, in turn
    with aligned calls, and captured in a CUDA graph with misaligned inputs and replayed with new data in them."""
    with cold_compile(), optimus_ir.enabled(), recording() as records, torch.no_grad():
        compiled = torch.compile(fn)
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
        mismatches, worst = _mismatches([(outputs, fn(*inputs)) for inputs, outputs in results])
    assert merges(records) > 0
    assert mismatches == 0, f"{mismatches} of {calls + 4} calls differ from eager, by up to {worst}"


def warm_peak_bytes(passes: str | None) -> int:
    compiled = torch.compile(fn)

    def step() -> None:
        inputs = new_inputs(0)
        sum(o.sum() for o in compiled(*inputs)).backward()

    with cold_compile(), optimus_ir.enabled(passes):
        for _ in range(CALLS):
            step()
        return peak_memory_bytes(step)


def test_warm_call_peak_memory_no_higher_than_stock():
    stock, ours = warm_peak_bytes(None), warm_peak_bytes("all")
    assert ours <= stock, f"peak MiB: stock {stock / 2**20:.6f}, optimus_ir {ours / 2**20:.6f}"


def new_address_call_peaks(passes: str | None, calls: int = 4) -> list[int]:
    """The peak bytes of inference calls whose inputs are at new addresses, each call's inputs kept alive (so the
    allocator cannot hand the same addresses out again): every call after the first misses each table's cache."""
    compiled = torch.compile(fn)
    kept = []
    peaks = []
    with cold_compile(), optimus_ir.enabled(passes), torch.no_grad():
        for step in range(calls + 1):
            inputs = [x.detach() for x in new_inputs(step)]
            kept.append(inputs)
            peak = peak_memory_bytes(lambda: compiled(*inputs))
            peaks += [peak] if step else []  # the first call's is the compile's
    return peaks


def test_a_call_at_new_addresses_allocates_no_table():
    """The first miss makes every slot's table; a later call whose addresses miss (the allocator's addresses
    settling over a model's first calls) holds what stock's call holds, no 512-byte table more."""
    stock, ours = new_address_call_peaks(None), new_address_call_peaks("all")
    assert ours == stock


def layer_norms_squared(*args: torch.Tensor) -> torch.Tensor:
    n = len(args) // 3
    xs, weights, biases = args[:n], args[n : 2 * n], args[2 * n :]
    return sum((torch.nn.functional.layer_norm(x, (64,), w, b) ** 2).sum() for x, w, b in zip(xs, weights, biases))


def test_partial_sums_in_one_allocation_give_eager_gradients(calls: int = 6):
    # 20 layer norms' backward: the weights' and biases' partial sums [64, 8] of strides (1, 64), one allocation
    # per slot that the merged second stage's table reads (tests/test_horizontal.py shows the code), new inputs at
    # new addresses each call, no synchronization between calls
    def new_args(step: int) -> list[torch.Tensor]:
        generator = torch.Generator(device="cuda").manual_seed(step)
        shapes = [(1024, 64)] * 20 + [(64,)] * 40
        return [torch.randn(s, device="cuda", generator=generator, requires_grad=True) for s in shapes]

    with cold_compile(), optimus_ir.enabled(), recording() as records:
        compiled = torch.compile(layer_norms_squared)
        kept = []
        for step in range(calls):
            args = new_args(step)
            compiled(*args).backward()
            kept.append(args)
    assert merges(records) > 0
    for step, args in enumerate(kept):
        expected = new_args(step)
        layer_norms_squared(*expected).backward()
        for actual, eager in zip(args, expected, strict=True):
            torch.testing.assert_close(actual.grad, eager.grad, rtol=1e-4, atol=1e-3)
