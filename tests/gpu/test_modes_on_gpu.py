"""On a real GPU: the horizontal pass under each ``torch.compile`` mode a user may pick, against stock and eager.

Modes: the default, ``dynamic=True``, ``reduce-overhead`` (cudagraph trees), ``max-autotune-no-cudagraphs`` (every
kernel autotuned over more configs by running it: a merged kernel reaches its tensors through its table, which the
autotuner cannot clone) and ``max-autotune`` (both). Cases: copies of one op on separate tensors (tanh, layer norm
with weights, ragged row sums) called three times, a forward and backward of the tanh and layer-norm copies, and
in-place updates of inputs (``x.mul_(0.9).add_(g)``, an optimizer's step: the autotuner may not run it twice). Each
must merge, and err no more than stock against eager (or than float rounding where stock is exact).
"""

from collections.abc import Callable

import pytest
import torch

import optimus_ir
from optimus_ir.records import recording
from optimus_ir.testing.storms import layer_norm_each, row_sum_each, tanh_each
from tests.gpu.helpers import CUDA, fresh_compile, kernels_per_call, max_rel_error, merges

pytestmark = CUDA

MODES = {
    "default": {},
    "dynamic=True": {"dynamic": True},
    "reduce-overhead": {"mode": "reduce-overhead"},
    "max-autotune-no-cudagraphs": {"mode": "max-autotune-no-cudagraphs"},
    "max-autotune": {"mode": "max-autotune"},
}


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


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("name, fn, training", CASES, ids=[f"{n}{'-training' if t else ''}" for n, _, t in CASES])
def test_merges_and_errs_no_more_than_stock(mode, name, fn, training):
    torch.manual_seed(0)
    inputs = case_inputs(name, training)
    expected, _ = run(fn, inputs, training, None)
    result = {}
    for variant, passes in (("optimus_ir", "all"), ("stock", None)):
        with fresh_compile(), optimus_ir.enabled(passes), recording() as records:
            actual, call = run(fn, inputs, training, MODES[mode])
            kernels = kernels_per_call(call)
        error = max(max_rel_error(a, e) for a, e in zip(actual, expected))
        result[variant] = (merges(records), kernels, error)
    print(result)
    (merged, _, ours), (_, _, stock) = result["optimus_ir"], result["stock"]
    assert merged > 0, result
    assert ours <= max(2 * stock, 1e-6), result
