"""A benchmark that is a loop: each model run over a stream of batches whose shapes change as real data's do, in
inference and in a training step, under stock Inductor, Inductor with ``combo_kernels=True`` and optimus_ir, in the
same run, each compiled cold. The models (``LOOPS``):

- ``dlrm-26``: the DLRM-style model of the workload registry (26 tables, bags of 8 ids), batches of 2048 rows and of
  other sizes, the last one partial;
- ``sparse-arch-26``: the sparse arch of 26 embedding-bag tables with runtime offsets (``real_zoo.JaggedSparseArch``),
  batches of 2048 bags of 0 to 8 ids each, drawn at random, so that every table's id count changes every batch; the
  last batch partial;
- ``hetero-sage``: real_zoo's ``to_hetero`` GraphSAGE over sampled subgraphs: every batch a HeteroData of the same 8
  node types and 16 edge types, its node count per node type and edge count per edge type drawn at random;
- ``mixtral-moe``: real_zoo's tiny Mixtral, the sequence length drawn every batch (and so the tokens each expert
  gets), the last batch partial.

Each stream is made up front from a fixed seed: eager and every variant run the same batches. ``--scale tiny`` makes
every stream (and the sparse arch's tables) small enough for a CPU: where there is no CUDA device the command runs
there at that scale, compile, recompile counts, timing (host clock) and errors, without kernels or peak memory.

Per model and mode, eager runs the stream once (the reference). Then each variant, through a function and a backend
of its own (``own_copy``, ``OwnInductor``), runs it once: the warm-up, where Dynamo compiles a static graph on the
first batch and, on the first batch of another shape, one with symbolic sizes, as ``torch.compile``'s automatic
dynamic shapes do (no ``dynamic=True``), and again wherever a guard of those fails. Then, the steady state: kernels
and GPU ms per step over one pass of the stream (profiled), the peak memory of a pass above what was allocated
before it, the errors of every step against eager's (outputs; training: and every parameter's gradient) over the
warm-up pass and a steady one. The static comparison: the first batch of the stream, frozen, through a second
function of the variant's own compiled on that batch alone (static shapes, what a program that only ever sees that
batch runs), called again and again: its kernels per call, peak and error. Last, ms per step: the variants' steps and
their frozen-batch calls interleaved call by call (:func:`time_in_turns`), each timed pass over new copies of the
stream's batches, as a loader gives new tensors every step. The ``floor`` variant runs the same
stream through Dynamo and AOTAutograd with no kernel (:data:`FLOOR`): each variant's step and static call over the
floor's say how much of a step a kernel-level rewrite could still remove.

Per row (a model, a mode, a variant): kernels per step and ms per step, the static function's kernels and ms per
call, and the loop's over them (``loop / static``); stock's and the fastest other variant's time over this one's,
turn by turn; GPU ms per step; the peak MiB of a pass and of a static call; the frames compiled (``graphs``), their
recompiles, the compiles of symbolic sizes, any compile after the warm-up, the static function's recompiles and
compiles of symbolic sizes (none: it is static), the most compiles of one frame (:class:`CountingInductor`); the
warm-up pass's seconds; the max relative errors against eager over the stream and of the static call; optimus_ir's
rules fired; the member tables written per timed step.

Training step: the model compiled, the loss outside it in eager (``output_loss``), ``backward()``, gradients set to
None before each step; the model in ``eval()`` in both modes (``real_models.make_call``).

A variant that fails leaves its error in its row; the run goes on and exits 1 after writing the results
(``loops.json``, ``loops.md``, and a summary, ``loops_summary.*``, printed last); the rows are written after each
case too (a run cut short still leaves its data), and ``--budget-s`` skips the cases that would start past that
many seconds (the run ends by itself).

    python -m benchmarks loops --out benchmarks/results/<date>/loops             # on a GPU
    python -m benchmarks loops --out DIR --only sparse-arch-26 --modes training --steps 8 --passes 3
    python -m benchmarks loops --out DIR --scale tiny --variants eager stock optimus_ir   # anywhere (CPU)
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import gc
import statistics
import sys
import time
import traceback
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import torch
import torch._functorch.config
from torch import nn
from torch._dynamo.pgo import reset_code_state
from torch.utils._pytree import tree_map

from benchmarks import real_models, real_zoo
from benchmarks.measure import (
    VARIANTS,
    OwnInductor,
    Variant,
    cold_compile,
    counting_table_writes,
    cuda_events,
    cuda_time_ms,
    header,
    kernels_per_call,
    max_rel_error,
    own_copy,
    peak_memory_bytes,
    runs_nothing_backend,
    variant_context,
    write_results,
)
from benchmarks.real_models import MODES, SUITE_VARIANTS, drop_grads, make_call
from optimus_ir.records import recording
from optimus_ir.testing.workloads import WORKLOADS

Batch = tuple[Any, ...]
Step = Callable[[], list[torch.Tensor]]
Loop = tuple[nn.Module, list[Batch]]

#: the seed of every model's weights and stream: each build gives the same ones
STREAM_SEED = 0
#: the most ids in one bag of the sparse arch
MAX_BAG = 8
#: the stream's batch that is frozen for the static comparison: the first, a full batch
FROZEN = 0
#: sizes a DLRM-style batch takes besides a full one, as fractions of it
DLRM_FRACTIONS = (0.25, 0.5, 0.75, 1.5, 2.0)
#: default batches per stream and timed passes over it: few; the compiles take most of a run's minutes, these steps
#: little (``--steps``, ``--passes``)
STEPS, PASSES = 12, 5
#: untimed passes of the stream after the warm-up, before each measure: a merged kernel's member tables are cached by
#: the addresses of its tensors, which settle in the first calls after a compile
WARMUP_PASSES = 2
#: no kernel: Dynamo and AOTAutograd over the same stream, symbolic sizes and all, each graph returning its first
#: call's outputs (:func:`~benchmarks.measure.runs_nothing_backend`): the floor of a step, and of a static call, that
#: no kernel-level rewrite goes below
FLOOR = Variant("floor", True, {}, None)
#: a row's columns, one row per model, mode and variant
COLUMNS = ["model", "mode", "variant", "steps", "kernels/step", "static kernels/call", "loop / static kernels",
           "ms/step", "static ms/call", "loop / static ms", "over the floor: step, static", "stock / this",
           "fastest other / this", "GPU ms/step",
           "peak MiB", "static peak MiB", "graphs", "recompiles", "dynamic compiles", "compiles after warm-up",
           "static recompiles", "static dynamic compiles", "max compiles/frame", "warm-up pass s", "max rel err",
           "static max rel err", "rules fired", "table writes/step timed", "ms/step by pass", "error"]
#: the columns a progress line shows
PROGRESS = COLUMNS[COLUMNS.index("kernels/step"): COLUMNS.index("static max rel err") + 1]
#: the summary's columns: each cell holds a column's values of the variants, in the order they ran
SUMMARY = ("kernels/step", "loop / static kernels", "ms/step", "loop / static ms", "recompiles", "peak MiB",
           "max rel err")
#: the summary's column of optimus_ir's row: the median over turns of the fastest other variant's time over its own
FASTEST_OTHER = "fastest other / optimus_ir, by turn"


@dataclasses.dataclass(frozen=True)
class Scale:
    """The sizes of every stream at one scale."""

    dlrm: str  # the registry's size of the DLRM-style model
    batch: int  # rows of a full batch of the DLRM-style model, bags of one of the sparse arch
    tables: int  # tables of the sparse arch
    dim: int  # their embedding dimension
    nodes: tuple[int, int]  # nodes per node type of a sampled subgraph: from, up to (excluded)
    edges: tuple[int, int]  # edges per edge type, likewise
    moe_batch: int  # sequences of a full batch of the MoE
    moe_lengths: tuple[int, int]  # tokens per sequence: from, up to (included; the first batch's)


SCALES = {
    "full": Scale("small", 2048, 26, 64, (400, 2000), (2000, 6000), 4, (32, 128)),
    "tiny": Scale("tiny", 8, 3, 8, (4, 24), (8, 48), 3, (4, 16)),
}


@dataclasses.dataclass(frozen=True)
class LoopModel:
    """A model of the benchmark: ``make(scale, steps)`` returns the module and its stream of ``steps`` batches (each
    the module's positional inputs), on the CPU."""

    name: str
    make: Callable[[Scale, int], Loop]

    def build(self, scale: Scale, steps: int) -> Loop:
        """The module and its stream, seeded: every build (eager reference, each variant, each run) the same."""
        torch.manual_seed(STREAM_SEED)
        return self.make(scale, steps)


def _draw(low: int, high: int) -> int:
    """An integer from ``low`` up to ``high`` (excluded), from the global generator (seeded by the build)."""
    return int(torch.randint(low, high, ()))


def _partial(batch: int) -> int:
    """The size of a stream's last batch, what is left of the data: 2 up to ``batch`` (excluded; no batch of 1, on
    which Dynamo would specialize)."""
    return _draw(2, batch)


def _dlrm(scale: Scale, steps: int) -> Loop:
    """The registry's DLRM-style model; a full batch first, then each batch full or of a size of
    :data:`DLRM_FRACTIONS` (one in two), the last one partial."""
    model, _ = WORKLOADS["dlrm"].make(scale.dlrm)
    sizes = [scale.batch]
    for _ in range(steps - 2):
        fraction = 1.0 if _draw(0, 2) else DLRM_FRACTIONS[_draw(0, len(DLRM_FRACTIONS))]
        sizes.append(int(scale.batch * fraction))
    sizes.append(_partial(scale.batch))
    return model, [model.example_inputs(size, torch.float32, torch.device("cpu")) for size in sizes]


def jagged_batch(model: real_zoo.JaggedSparseArch, bags: int) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    """A batch of ``model``'s jagged features as a loader gives them: per table ``bags`` bags of 0 to
    :data:`MAX_BAG` ids each, drawn at random, so that the table's id count changes from batch to batch
    (``JaggedSparseArch.example_inputs`` keeps it fixed on purpose); the ids and the bags' offsets."""
    ids, offsets = [], []
    for table in model.tables:
        lengths = torch.randint(0, MAX_BAG + 1, (bags,))
        offsets.append(torch.cat([torch.zeros(1, dtype=torch.long), lengths.cumsum(0)[:-1]]))
        ids.append(torch.randint(0, table.num_embeddings, (int(lengths.sum()),)))
    return ids, offsets


def _sparse_arch(scale: Scale, steps: int) -> Loop:
    """``JaggedSparseArch`` of ``scale.tables`` tables; full batches of jagged features, the last one partial."""
    model = real_zoo.JaggedSparseArch(scale.tables, scale.dim)
    sizes = [scale.batch] * (steps - 1) + [_partial(scale.batch)]
    return model, [jagged_batch(model, size) for size in sizes]


def sampled_subgraph(nodes: tuple[int, int], edges: tuple[int, int]) -> Batch:
    """A HeteroData of real_zoo's node and edge types (``HETERO_NODE_TYPES``, ``HETERO_HOPS``) as a neighbour
    sampler gives one: per node type a node count drawn from ``nodes``, per edge type an edge count drawn from
    ``edges``, random features and edges; its features and edges by type, the inputs of a ``to_hetero`` model."""
    from torch_geometric.data import HeteroData

    data = HeteroData()
    for node_type in real_zoo.HETERO_NODE_TYPES:
        data[node_type].x = torch.randn(_draw(*nodes), real_zoo.HETERO_FEATURES)
    for i, source in enumerate(real_zoo.HETERO_NODE_TYPES):
        for relation, hop in real_zoo.HETERO_HOPS.items():
            target = real_zoo.HETERO_NODE_TYPES[(i + hop) % len(real_zoo.HETERO_NODE_TYPES)]
            count = _draw(*edges)
            ends = [torch.randint(0, data[t].num_nodes, (count,)) for t in (source, target)]
            data[source, relation, target].edge_index = torch.stack(ends)
    return data.x_dict, data.edge_index_dict


def _hetero_sage(scale: Scale, steps: int) -> Loop:
    """real_zoo's hetero GraphSAGE, built once (its node and edge types are every subgraph's); sampled subgraphs,
    the last one from the seeds left over (half the nodes and edges)."""
    model, _ = real_zoo._hetero_sage()
    halved = [tuple(n // 2 for n in scale.nodes), tuple(n // 2 for n in scale.edges)]
    stream = [sampled_subgraph(scale.nodes, scale.edges) for _ in range(steps - 1)]
    return model, [*stream, sampled_subgraph(*halved)]


def _mixtral(scale: Scale, steps: int) -> Loop:
    """real_zoo's tiny Mixtral; token ids of ``scale.moe_batch`` sequences, the first batch's of the longest length,
    each later one's drawn, the last batch partial (one sequence fewer)."""
    model, _ = real_zoo._mixtral()
    low, high = scale.moe_lengths
    lengths = [high] + [_draw(low, high + 1) for _ in range(steps - 1)]
    batches = [scale.moe_batch] * (steps - 1) + [scale.moe_batch - 1]
    return model, [real_zoo._ids(batch, length) for batch, length in zip(batches, lengths)]


LOOPS = [
    LoopModel("dlrm-26", _dlrm),
    LoopModel("sparse-arch-26", _sparse_arch),
    LoopModel("hetero-sage", _hetero_sage),
    LoopModel("mixtral-moe", _mixtral),
]


def prepared(model: LoopModel, mode: str, scale: Scale, steps: int, device: str) -> Loop:
    """The module, in ``eval()`` in both modes, with gradients required for training only, and its stream, all
    on ``device`` (every batch moved there up front: no copy in the loop)."""
    module, stream = model.build(scale, steps)
    module = module.eval().requires_grad_(mode == "training").to(device)
    return module, [tree_map(lambda x: x.to(device) if isinstance(x, torch.Tensor) else x, b) for b in stream]


class CountingInductor(OwnInductor):
    """:class:`OwnInductor` that records each graph Dynamo hands it: the id of the frame it was compiled from (one
    per code object), whether its sizes are symbolic, and the phase of the benchmark set in :attr:`phase`.

    Dynamo calls its backend once per graph it compiles, a first compile or a recompile of a frame alike (torch
    2.11: ``OutputGraph.call_user_compiler``, where it adds one to ``counters["stats"]["unique_graphs"]`` too). That
    counter is the process's: the variants' functions share code objects (a module's forward entered after a graph
    break), run interleaved while timed, and the counter cannot tell whose graph it counted; each variant's own
    backend can. A compile of a frame that makes no graph (nothing but a graph break) reaches no backend and costs
    no Inductor compile: it is not counted."""

    def __init__(self) -> None:
        super().__init__()
        self.phase = "warm-up"
        self.compiles: list[tuple[int | None, bool, str]] = []

    def __call__(self, model_: torch.fx.GraphModule, inputs_: list[Any]) -> Any:
        compile_id = torch._guards.CompileContext.current_compile_id()
        sizes = [s for x in inputs_ if isinstance(x, torch.Tensor) for s in x.shape]
        dynamic = any(isinstance(s, torch.SymInt) for s in [*inputs_, *sizes])
        self.compiles.append((None if compile_id is None else compile_id.frame_id, dynamic, self.phase))
        return self.compile_graph(model_, inputs_)

    def compile_graph(self, model_: torch.fx.GraphModule, inputs_: list[Any]) -> Any:
        return super().__call__(model_, inputs_)

    def counts(self) -> dict[str, int]:
        """``graphs``: the frames compiled in the warm-up; ``recompiles``: their compiles after each one's first;
        ``dynamic compiles``: the compiles of graphs with symbolic sizes; ``compiles after warm-up``: any compile
        later (none is expected); ``max compiles/frame``: the most compiles of one frame, to be read against
        Dynamo's ``recompile_limit`` (8), past which a program runs the frame in eager (this benchmark raises the
        limit: its variants compile the same frames, each up to the limit)."""
        warm = [frame for frame, _, phase in self.compiles if phase == "warm-up"]
        frames = [frame for frame, _, _ in self.compiles]
        return {"graphs": len(set(warm)), "recompiles": len(warm) - len(set(warm)),
                "dynamic compiles": sum(dynamic for _, dynamic, _ in self.compiles),
                "compiles after warm-up": len(frames) - len(warm),
                "max compiles/frame": max((frames.count(f) for f in set(frames)), default=0)}


class CountingFloor(CountingInductor):
    """:class:`CountingInductor` whose graphs run no kernel (:data:`FLOOR`)."""

    def __init__(self) -> None:
        super().__init__()
        self._nothing = runs_nothing_backend()

    def compile_graph(self, model_: torch.fx.GraphModule, inputs_: list[Any]) -> Any:
        return self._nothing(model_, inputs_)


@dataclasses.dataclass
class Compiled:
    """A variant's calls: ``steps``, one per batch of the stream, through a function compiled over the stream;
    ``static``, the frozen batch, through a function compiled on it alone; ``new_steps``, the steps again over new
    copies of the stream's batches, made when called; their backends (None for eager, whose calls are the
    module's)."""

    variant: Variant
    steps: list[Step]
    static: Step
    new_steps: Callable[[], list[Step]]
    backend: CountingInductor | None = None
    static_backend: CountingInductor | None = None

    def run_pass(self) -> None:
        """One pass of the stream, as a loop runs it: each step's results dropped before the next."""
        for step in self.steps:
            step()

    def set_phase(self, phase: str) -> None:
        if self.backend is not None:
            self.backend.phase = phase


def compiled_calls(variant: Variant, module: nn.Module, stream: list[Batch], mode: str,
                   params: list[nn.Parameter]) -> Compiled:
    """``variant``'s calls of ``module`` over ``stream`` (compiled lazily, at their first call). Each compiled
    function gets batches of its own, copies of the stream's: a compiled training graph of symbolic sizes marks the
    tensors it saves for the backward, inputs too, as dynamic (``_dynamo_weak_dynamic_indices``), and a later
    compile on a marked tensor starts dynamic. A loop's batches are new tensors every step: only the benchmark's
    passes over the same tensors, and its variants sharing them, would see the marks."""
    if not variant.compile:
        steps = [make_call(module, batch, mode, params) for batch in stream]
        return Compiled(variant, steps, steps[FROZEN], lambda: steps)
    counting = CountingFloor if variant is FLOOR else CountingInductor
    backend, static_backend = counting(), counting()
    loop = torch.compile(own_copy(real_models._forward(module), variant.name), backend=backend)
    static = torch.compile(own_copy(real_models._forward(module), f"{variant.name}_static"), backend=static_backend)

    def new_steps() -> list[Step]:
        return [make_call(loop, _copy(batch), mode, params) for batch in stream]

    return Compiled(variant, new_steps(), make_call(static, _copy(stream[FROZEN]), mode, params), new_steps,
                    backend, static_backend)


def _copy(batch: Batch) -> Batch:
    return tree_map(lambda x: x.clone() if isinstance(x, torch.Tensor) else x, batch)


def measure_variant(compiled: Compiled, expected: list[list[torch.Tensor]], params: list[nn.Parameter],
                    device: str) -> dict[str, Any]:
    """One variant's measures but its times: the warm-up pass (the compiles; its seconds), the recompiles, the
    errors of every step over the warm-up pass and a steady one, kernels and GPU ms per step and the peak of a pass
    (CUDA only), then the same of the frozen batch through its static function. Dynamo's automatic-dynamic record
    (its code state) is cleared before each compile: the frames the variants share would otherwise start dynamic
    for every variant but the first, and for the static function."""
    on_gpu = device == "cuda"
    # (the floor's outputs are its first calls': no error to measure)
    error_of = (lambda got, want: None) if compiled.variant is FLOOR else max_rel_error
    with variant_context(compiled.variant), recording() as records:
        reset_code_state()
        start = time.perf_counter()
        errors = [error_of(step(), want) for step, want in zip(compiled.steps, expected)]
        if on_gpu:
            torch.cuda.synchronize()
        metrics: dict[str, Any] = {"warm-up pass s": time.perf_counter() - start}
        compiled.set_phase("steady")
        for _ in range(WARMUP_PASSES):
            compiled.run_pass()
        errors += [error_of(step(), want) for step, want in zip(compiled.steps, expected)]
        steps = len(compiled.steps)
        if on_gpu:
            events = cuda_events(compiled.run_pass)
            metrics |= {"kernels/step": len(events) / steps,
                        "GPU ms/step": sum(e.time_range.elapsed_us() for e in events) / 1000 / steps}
            drop_grads(params)
            metrics["peak MiB"] = peak_memory_bytes(compiled.run_pass) / 2**20
        metrics["max rel err"] = None if None in errors else max(errors)
        reset_code_state()
        metrics["static max rel err"] = error_of(compiled.static(), expected[FROZEN])
        if on_gpu:
            metrics["static kernels/call"] = kernels_per_call(compiled.static)
            drop_grads(params)
            metrics["static peak MiB"] = peak_memory_bytes(compiled.static) / 2**20
            if metrics["static kernels/call"]:  # (the floor launches none)
                metrics["loop / static kernels"] = metrics["kernels/step"] / metrics["static kernels/call"]
    return metrics | {"rules fired": sum(r.fired for r in records)}


def step_ms(call: Callable[[], Any], device: str) -> float:
    """Milliseconds of one call: CUDA events around it (a synchronized call), or the host's clock on the CPU."""
    if device == "cuda":
        return cuda_time_ms(call, repeat=1, warmup=0)
    start = time.perf_counter()
    call()
    return (time.perf_counter() - start) * 1000


def time_in_turns(compiled: dict[str, Compiled], passes: int, device: str) -> dict[str, dict[str, Any]]:
    """Each variant's ms per step, its calls interleaved with every other variant's call by call: ``passes`` passes
    of the stream, each step a turn of one call of every variant on that step's batch and one of every variant's
    static function on the frozen batch, the order rotating each turn (the host's speed drifts within a run more
    than a variant differs from another: ``real_models.time_in_turns``). After :data:`WARMUP_PASSES` untimed
    passes of each. Per variant: the median over passes of the pass's mean ms per step, and each pass's; the median
    over turns of stock's time over its own and of the fastest other variant's over its own; its static function's
    median ms per call and the loop's over it on the frozen batch (the medians of the frozen step's times and of
    the static calls); the member tables written per timed step.

    Every timed pass runs on new copies of the stream's batches, made before the timing: a loop's batches are new
    tensors every step, so a merged kernel's member table, cached by its tensors' addresses, is made again each step
    as in a real loop (the warm-up passes run the same tensors again: their tables are found)."""
    names = list(compiled)
    if not names:
        return {}
    for calls in compiled.values():
        with variant_context(calls.variant):
            for _ in range(WARMUP_PASSES):
                calls.run_pass()
                calls.static()
        calls.set_phase("timed")
    steps = len(compiled[names[0]].steps)
    timed = {name: [calls.new_steps() for _ in range(passes)] for name, calls in compiled.items()}
    loop_ms = {name: [[0.0] * steps for _ in range(passes)] for name in names}
    static_ms: dict[str, list[float]] = {name: [] for name in names}
    writes = dict.fromkeys(names, 0)
    turns = [(name, static) for name in names for static in (False, True)]
    with counting_table_writes() as written:
        for turn in range(passes * steps):
            run, step = divmod(turn, steps)
            for name, static in turns[turn % len(turns):] + turns[: turn % len(turns)]:
                calls = compiled[name]
                with variant_context(calls.variant):
                    if static:
                        static_ms[name].append(step_ms(calls.static, device))
                        continue
                    before = written.call_count
                    loop_ms[name][run][step] = step_ms(timed[name][run][step], device)
                    writes[name] += written.call_count - before

    def over(others: list[str], name: str) -> float | None:
        if not others:
            return None
        return statistics.median(min(loop_ms[o][r][s] for o in others) / loop_ms[name][r][s]
                                 for r in range(passes) for s in range(steps))

    rows = {}
    for name in names:
        by_pass = [statistics.mean(times) for times in loop_ms[name]]
        static = statistics.median(static_ms[name])
        rows[name] = {
            "ms/step": statistics.median(by_pass),
            "static ms/call": static,
            "loop / static ms": statistics.median(times[FROZEN] for times in loop_ms[name]) / static,
            "stock / this": over(["stock"] if "stock" in names else [], name),
            "fastest other / this": over([o for o in names if o not in (name, FLOOR.name)], name),
            "ms/step by pass": " ".join(f"{ms:.3f}" for ms in by_pass),
            "table writes/step timed": writes[name] / (passes * steps),
        }
    if FLOOR.name in rows:
        floor = rows[FLOOR.name]
        for row in rows.values():
            row["over the floor: step, static"] = (
                f"{row['ms/step'] / floor['ms/step']:.2f}, {row['static ms/call'] / floor['static ms/call']:.2f}")
    return rows


@contextlib.contextmanager
def graph_caches() -> Iterator[None]:
    """Inductor's FX-graph cache and AOTAutograd's cache on, as torch has them by default, inside a variant's cold
    compile (its cache directory fresh, empty): the loop's compiles still start from scratch, and the static
    function's graph, the loop's first again (the same batch, static shapes), is loaded from there instead of
    compiled once more (the compiles take most of the run's minutes)."""
    with torch._inductor.config.patch(fx_graph_cache=True), torch._functorch.config.patch(enable_autograd_cache=True):
        yield


def measure_case(model: LoopModel, mode: str, scale: Scale, steps: int, passes: int, variants: list[Variant],
                 device: str, start: float) -> list[dict[str, Any]]:
    """The rows of one model in one mode: eager over the stream first (the reference), then each variant, compiled
    cold on the same module, each with a cache directory of its own (:func:`graph_caches`) that stays until its
    calls are timed (its kernels were loaded from there); then the variants' times (:func:`time_in_turns`) and compile counts. Dynamo's
    recompile limit is raised for the case, to the default for each function compiled (the variants' functions
    share the frames a graph break enters, each compiling them up to the default). A failure goes in its row
    (eager's: the case's only row)."""
    case = {"model": model.name, "mode": mode}
    try:
        module, stream = prepared(model, mode, scale, steps, device)
        params = list(module.parameters())
        expected = [make_call(module, batch, mode, params)() for batch in stream]
    except Exception as error:  # the case's row says why; the other cases go on
        traceback.print_exc()
        return [case | {"variant": "eager", "error": real_models._error(error)}]
    rows: dict[str, dict[str, Any]] = {}
    compiled: dict[str, Compiled] = {}
    torch._dynamo.reset()
    limit = torch._dynamo.config.recompile_limit * 2 * len(variants)
    with contextlib.ExitStack() as caches, torch._dynamo.config.patch(recompile_limit=limit):
        for variant in variants:
            row = rows[variant.name] = case | {"variant": variant.name, "steps": len(stream)}
            try:
                caches.enter_context(cold_compile(reset=False))
                caches.enter_context(graph_caches())
                calls = compiled_calls(variant, module, stream, mode, params)
                row |= measure_variant(calls, expected, params, device)
                compiled[variant.name] = calls
            except Exception as error:  # the row says why; the other variants go on
                traceback.print_exc()
                row["error"] = real_models._error(error)
            finally:
                drop_grads(params)
                gc.collect()
                if device == "cuda":
                    torch.cuda.empty_cache()
            print(f"[{time.perf_counter() - start:5.0f} s] {_progress(row)}", flush=True)
        try:
            for name, times in time_in_turns(compiled, passes, device).items():
                rows[name] |= times
        except Exception as error:  # the rows say why; the other cases go on
            traceback.print_exc()
            for name in compiled:
                rows[name]["error"] = real_models._error(error)
        finally:
            drop_grads(params)
        for name, calls in compiled.items():
            if calls.backend is not None:
                static = calls.static_backend.counts()
                rows[name] |= calls.backend.counts() | {"static recompiles": static["recompiles"],
                                                        "static dynamic compiles": static["dynamic compiles"]}
            print(f"[{time.perf_counter() - start:5.0f} s] {_progress(rows[name])}", flush=True)
    torch._dynamo.reset()
    return list(rows.values())


def _progress(row: dict[str, Any]) -> str:
    label = f"{row['model']}/{row['mode']} {row['variant']}"
    if "error" in row:
        return f"{label}: ERROR {row['error'][:200]}"
    shown = [k for k in PROGRESS if row.get(k) is not None]
    return f"{label}: " + ", ".join(f"{k} {real_models._number(row[k])}" for k in shown)


def summary_rows(rows: list[dict[str, Any]], variants: list[Variant]) -> tuple[list[dict[str, Any]], list[str]]:
    """One row per model and mode: each of :data:`SUMMARY`'s columns as the variants' values in one cell ("error"
    for a failed variant, "-" for one not measured), and optimus_ir's :data:`FASTEST_OTHER`; and the columns."""
    names = " / ".join(v.name for v in variants)
    columns = ["model/mode", *(f"{column}: {names}" for column in SUMMARY), FASTEST_OTHER]
    cases: dict[tuple[str, str], dict[str, dict[str, Any]]] = {}
    for row in rows:
        cases.setdefault((row["model"], row["mode"]), {})[row["variant"]] = row
    summary = [
        dict(zip(columns, [f"{model}/{mode}",
                           *(" / ".join(_cell(by_variant.get(v.name), column) for v in variants)
                             for column in SUMMARY),
                           _cell(by_variant.get("optimus_ir"), "fastest other / this")]))
        for (model, mode), by_variant in cases.items()
    ]
    return summary, columns


def _cell(row: dict[str, Any] | None, column: str) -> str:
    if row is None or row.get(column) is None and "error" not in row:
        return "-"
    return "error" if "error" in row else real_models._number(row[column])


def run(models: list[LoopModel], modes: list[str], variants: list[Variant], out: Path, scale: str = "full",
        steps: int = STEPS, passes: int = PASSES, device: str = "cuda", budget_s: float | None = None) -> bool:
    """Measure every model in every mode under every variant on ``device`` ("cuda" or "cpu"); write the rows after
    each case, then the summary. Past ``budget_s`` seconds the cases not started yet are skipped (the results'
    ``skipped``). False if any row failed."""
    start, meta, rows = time.perf_counter(), header(" ".join(sys.argv)) | {"scale": scale}, []
    skipped: list[str] = []
    for model in models:
        for mode in modes:
            if budget_s is not None and time.perf_counter() - start > budget_s:
                skipped.append(f"{model.name}/{mode}")
                continue
            rows += measure_case(model, mode, SCALES[scale], steps, passes, variants, device, start)
            write_results(out, "loops", meta, rows, COLUMNS, echo=False)
    meta["skipped"] = skipped
    write_results(out, "loops", meta, rows, COLUMNS)
    write_results(out, "loops_summary", meta, *summary_rows(rows, variants))
    failed = [row for row in rows if "error" in row]
    for row in failed:
        print(f"FAILED {row['model']}/{row['mode']} {row['variant']}: {row['error'][:150]}")
    if skipped:
        print(f"SKIPPED past the budget of {budget_s:.0f} s: {', '.join(skipped)}")
    print(f"{len(rows) - len(failed)} of {len(rows)} rows measured in {time.perf_counter() - start:.0f} s")
    return not failed


def _at_least(low: int) -> Callable[[str], int]:
    def parse(text: str) -> int:
        value = int(text)
        if value < low:
            raise argparse.ArgumentTypeError(f"{value} is less than {low}")
        return value

    return parse


def main(argv: Sequence[str] | None = None) -> None:
    names = [model.name for model in LOOPS]
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, required=True, help="results directory")
    parser.add_argument("--only", nargs="+", choices=names, metavar="NAME", help=f"these models: {', '.join(names)}")
    parser.add_argument("--modes", nargs="+", choices=MODES, default=list(MODES))
    parser.add_argument("--variants", nargs="+", choices=[v.name for v in [*VARIANTS, FLOOR]],
                        default=[v.name for v in [*SUITE_VARIANTS, FLOOR]],
                        help="default: stock combo_kernels optimus_ir floor")
    parser.add_argument("--scale", choices=list(SCALES), default="full",
                        help="full (default; needs a CUDA GPU) or tiny (small streams, runs on the CPU too)")
    parser.add_argument("--steps", type=_at_least(3), default=STEPS, help=f"batches per stream (default {STEPS})")
    parser.add_argument("--passes", type=_at_least(1), default=PASSES,
                        help=f"timed passes of the stream (default {PASSES})")
    parser.add_argument("--budget-s", type=float,
                        help="start no case (model and mode) after this many seconds; the rest are listed as skipped")
    args = parser.parse_args(argv)
    if args.scale == "full" and not torch.cuda.is_available():
        parser.error("--scale full needs a CUDA GPU; --scale tiny runs on the CPU")
    models = [model for model in LOOPS if model.name in (args.only or names)]
    variants = [v for v in [*VARIANTS, FLOOR] if v.name in args.variants]
    device = "cuda" if torch.cuda.is_available() else "cpu"
    ok = run(models, args.modes, variants, args.out, args.scale, args.steps, args.passes, device, args.budget_s)
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
