"""On a real GPU: the horizontal pass under each ``torch.compile`` mode a user may pick, against stock and eager.

    python benchmarks/modes_check.py --out DIR

Modes: the default, ``dynamic=True``, ``reduce-overhead`` (cudagraph trees), ``max-autotune-no-cudagraphs`` (every
kernel autotuned over more configs by running it: a merged kernel reaches its tensors through its table, which the
autotuner cannot clone) and ``max-autotune`` (both). Cases: copies of one op on separate tensors (tanh, layer norm
with weights, ragged row sums) called three times, a forward and backward of the tanh and layer-norm copies, and
in-place updates of inputs (``x.mul_(0.9).add_(g)``, an optimizer's step: the autotuner may not run it twice). Per
case: the merges fired, CUDA kernels per call of the compiled code (profiler; a training call's backward includes
autograd's one kernel for the loss's gradient) with optimus_ir and with stock, and the largest relative error
against eager over the three calls (for in-place updates, of the updated inputs).
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from horizontal_bench import layer_norm_each, row_sum_each, tanh_each  # noqa: E402
from measure import gpu_check_out_dir, header, kernels_per_call, max_rel_error, write_results  # noqa: E402

import optimus_ir  # noqa: E402
from optimus_ir.registry import recording  # noqa: E402

RULE = "IdenticalKernelsToMemberTableKernel"
MODES = {
    "default": {},
    "dynamic=True": {"dynamic": True},
    "reduce-overhead": {"mode": "reduce-overhead"},
    "max-autotune-no-cudagraphs": {"mode": "max-autotune-no-cudagraphs"},
    "max-autotune": {"mode": "max-autotune"},
}


@contextlib.contextmanager
def fresh_compile() -> Iterator[None]:
    """Compiled from scratch inside (Dynamo reset, fresh caches), in the settings the mode gives."""
    from torch._inductor.utils import fresh_cache

    torch._dynamo.reset()
    with fresh_cache(), torch._inductor.config.patch(fx_graph_cache=False):
        yield
    torch._dynamo.reset()


def update_each(*args):
    n = len(args) // 2
    for x, g in zip(args[:n], args[n:]):
        x.mul_(0.9).add_(g)


def randn(*shape: int, requires_grad: bool = False) -> torch.Tensor:
    return torch.randn(*shape, device="cuda", requires_grad=requires_grad)


def case_inputs(name: str, training: bool) -> list[torch.Tensor]:
    if name == "tanh":
        return [randn(256, 512, requires_grad=training) for _ in range(16)]
    if name == "layer_norm":
        return [randn(*shape, requires_grad=training) for shape in [(256, 512)] * 8 + [(512,)] * 16]
    if name == "row_sum":
        return [randn(64 * (1 + i % 4), 512) for i in range(8)]
    return [randn(1024, 256) for _ in range(16)]


CASES: list[tuple[str, Callable, bool]] = [
    ("tanh", tanh_each, False),
    ("layer_norm", layer_norm_each, False),
    ("row_sum", row_sum_each, False),
    ("in-place updates", update_each, False),
    ("tanh", tanh_each, True),
    ("layer_norm", layer_norm_each, True),
]


def run(fn: Callable, inputs: list[torch.Tensor], training: bool, compile_kwargs: dict | None):
    """``fn`` (compiled with ``compile_kwargs``, or eager where None; in training with its loss, the mean square of
    each output, summed) called three times on copies of ``inputs``: the results of each call (outputs; gradients
    in training; updated inputs for in-place updates), and a function that makes one more call and keeps nothing
    (for counting the kernels of the compiled code alone)."""

    def loss(*xs: torch.Tensor) -> torch.Tensor:
        return sum((o * o).mean() for o in fn(*xs))

    call_fn = loss if training else fn
    call_fn = call_fn if compile_kwargs is None else torch.compile(call_fn, **compile_kwargs)
    copies = [x.detach().clone().requires_grad_(x.requires_grad) for x in inputs]

    def call():
        if training:
            for x in copies:
                x.grad = None
            call_fn(*copies).backward()
            return None
        with torch.no_grad():
            return call_fn(*copies)

    def results() -> list[torch.Tensor]:
        outputs = call()
        if training:
            return [x.grad.clone() for x in copies]
        return [x.clone() for x in copies] if outputs is None else [o.clone() for o in outputs]

    return [results() for _ in range(3)], call


def check(name: str, fn: Callable, training: bool, mode: str) -> dict:
    torch.manual_seed(0)
    inputs = case_inputs(name, training)
    expected, _ = run(fn, inputs, training, None)
    row = {"mode": mode, "case": f"{name}{', forward and backward' if training else ''}"}
    for variant, passes in (("optimus_ir", "all"), ("stock", None)):
        with fresh_compile(), optimus_ir.enabled(passes), recording() as records:
            actual, call = run(fn, inputs, training, MODES[mode])
            kernels = kernels_per_call(call)
        if passes:
            row["merges fired"] = sum(r.fired and "→ one kernel" in r.detail for r in records if r.rule == RULE)
        row[f"{variant} kernels per call"] = kernels
        row[f"{variant} max rel err"] = max(max_rel_error(a, e) for a, e in zip(actual, expected))
    print(row, flush=True)
    return row


def main() -> None:
    out = gpu_check_out_dir()
    columns = ["mode", "case", "merges fired", "optimus_ir kernels per call", "stock kernels per call",
               "optimus_ir max rel err", "stock max rel err"]
    rows = []
    for mode in MODES:
        for name, fn, training in CASES:
            rows.append(check(name, fn, training, mode))
            write_results(out, "modes_check", header(" ".join(sys.argv)), rows, columns, echo=False)  # as it goes
    write_results(out, "modes_check", header(" ".join(sys.argv)), rows, columns)
    # every case merges, and errs no more than stock (or than float rounding where stock is exact)
    ok = all(r["merges fired"] > 0 and r["optimus_ir max rel err"] <= max(2 * r["stock max rel err"], 1e-6)
             for r in rows)
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
