"""On a real GPU: ``optimus_ir::grouped_mm`` and ``grouped_mlp`` against fp64 (fp32, TF32, bf16, fp16; ragged
sizes, a shared input, transposed operands); per-feature towers trained through IndependentMatmulsToGroupedMatmul
and served through MatmulChainsToGroupedMlp: launches per step, outputs and gradients against eager, the peak
against stock's, under the default mode, ``reduce-overhead`` (cudagraph trees: the member tables outside the
graphs' pools) and batches whose size changes (a symbolic batch)."""

import pytest
import torch

import optimus_ir
from optimus_ir import grouped_mm
from optimus_ir.records import recording
from optimus_ir.settings import DEFAULT_PEAK_TOLERANCE
from tests.gpu.helpers import CUDA, cold_compile, kernels_per_call, max_rel_error, peak_memory_bytes
from tests.test_grouped_matmuls import CHAIN_RULE, RULE, Towers

pytestmark = CUDA

#: relative error bounds against fp64: fp32 (IEEE), TF32, bf16, fp16
BOUNDS = {"fp32": 1e-5, "tf32": 3e-3, "bf16": 1e-2, "fp16": 2e-3}
DTYPES = {"fp32": torch.float32, "tf32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}
WARM_CALLS = 3


@pytest.fixture(params=list(BOUNDS))
def precision(request, monkeypatch):
    """Each precision the kernels take, TF32 allowed for "tf32" alone."""
    monkeypatch.setattr(torch.backends.cuda.matmul, "allow_tf32", request.param == "tf32")
    return request.param


def _randn(dtype):
    generator = torch.Generator(device="cuda").manual_seed(0)
    return lambda *shape: torch.randn(*shape, device="cuda", dtype=dtype, generator=generator)


def test_kernel_against_fp64(precision):
    dtype = DTYPES[precision]
    randn = _randn(dtype)
    shared = randn(1000, 96)
    a = [shared, shared, randn(300, 70).t(), randn(1, 33), randn(2048, 256)]
    b = [randn(128, 96).t(), randn(96, 40), randn(300, 17), randn(33, 8), randn(256, 128)]
    bias = [randn(w.shape[1]) for w in b]
    out = [torch.full((x.shape[0], w.shape[1]), float("nan"), device="cuda", dtype=dtype) for x, w in zip(a, b)]
    grouped_mm.launch(a, b, bias, "relu", out)
    for x, w, c, y in zip(a, b, bias, out, strict=True):
        expected = (x.double() @ w.double() + c.double()).relu()
        assert not y.isnan().any()
        assert max_rel_error(y, expected) < BOUNDS[precision]


def test_two_layer_kernel_against_fp64(precision):
    dtype = DTYPES[precision]
    randn = _randn(dtype)
    # (m, k, hidden, n): a hidden width of several chunks and not a multiple of one, ragged rows, the widest output
    sizes = [(1024, 32, 64, 16), (1000, 96, 200, 128), (1, 33, 8, 3), (2048, 128, 256, 100)]
    a = [randn(m, k) for m, k, _, _ in sizes]
    b = [randn(h, k).t() for _, k, h, _ in sizes]
    b2 = [randn(n, h).t() for _, _, h, n in sizes]
    bias, bias2 = [randn(w.shape[1]) for w in b], [randn(w.shape[1]) for w in b2]
    out = [torch.full((x.shape[0], w.shape[1]), float("nan"), device="cuda", dtype=dtype) for x, w in zip(a, b2)]
    grouped_mm.launch_mlp(a, b, bias, "relu", b2, bias2, "none", out)
    for x, w, c, w2, c2, y in zip(a, b, bias, b2, bias2, out, strict=True):
        hidden = (x.double() @ w.double() + c.double()).relu().to(dtype).double()
        assert not y.isnan().any()
        assert max_rel_error(y, hidden @ w2.double() + c2.double()) < BOUNDS[precision]


@pytest.mark.parametrize("mode", [None, "reduce-overhead"])
def test_served_towers_are_one_launch_of_eagers_outputs_within_stocks_peak(mode):
    batches = _batches([1024, 1024, 700, 1024, 333])
    torch.manual_seed(0)
    model = Towers().cuda().requires_grad_(False)
    measured = {}
    for passes in (None, "all"):
        torch.cuda.empty_cache()
        with cold_compile(), optimus_ir.enabled(passes), recording() as records:
            compiled = torch.compile(model, mode=mode)
            outputs = [compiled(*inputs).clone() for inputs in batches]
            for _ in range(WARM_CALLS):
                compiled(*batches[-1])
            measured[passes] = (kernels_per_call(lambda: compiled(*batches[-1])),
                                peak_memory_bytes(lambda: compiled(*batches[-1])))
    fired = [r for r in records if r.rule == CHAIN_RULE and r.fired]
    assert len(fired) == 2 and "(s" in fired[1].detail  # the static graph and the symbolic one
    assert measured["all"][0] < measured[None][0] and measured["all"][0] <= 3
    assert measured["all"][1] <= measured[None][1]
    for got, inputs in zip(outputs, batches, strict=True):
        assert max_rel_error(got, model(*inputs)) < 1e-4


def _towers_step(passes, batches, mode=None):
    """Kernels per step (at the last batch), each batch's output and parameter gradients, the peak bytes of a
    step, and the rule's records; compiled cold."""
    torch.manual_seed(0)
    model = Towers().cuda()
    torch.cuda.empty_cache()
    with cold_compile(), optimus_ir.enabled(passes), recording() as records:
        compiled = torch.compile(model, mode=mode)

        def step(inputs):
            for p in model.parameters():
                p.grad = None
            out = compiled(*inputs)
            out.square().mean().backward()
            return [out.detach().clone(), *(p.grad.clone() for p in model.parameters())]

        results = [step(inputs) for inputs in batches]
        for _ in range(WARM_CALLS):
            step(batches[-1])
        kernels = kernels_per_call(lambda: step(batches[-1]))
        peak = peak_memory_bytes(lambda: step(batches[-1]))
    return kernels, results, peak, records


def _batches(rows):
    generator = torch.Generator(device="cuda").manual_seed(1)
    return [tuple(torch.randn(r, 32, device="cuda", generator=generator) for _ in range(16)) for r in rows]


def _eager(batches):
    torch.manual_seed(0)
    model = Towers().cuda()
    results = []
    for inputs in batches:
        model.zero_grad(set_to_none=True)
        out = model(*inputs)
        out.square().mean().backward()
        results.append([out.detach(), *(p.grad for p in model.parameters())])
    return results


@pytest.mark.parametrize("mode", [None, "reduce-overhead"])
def test_towers_train_with_fewer_launches_eagers_gradients_within_stocks_peak(mode):
    batches = _batches([1024])
    stock_kernels, _, stock_peak, _ = _towers_step(None, batches, mode)
    kernels, results, peak, records = _towers_step("all", batches, mode)
    assert any(r.rule == RULE and r.fired for r in records)
    assert kernels < stock_kernels
    assert max_rel_error(results[0], _eager(batches)[0]) < 1e-4
    assert peak <= stock_peak * (1 + DEFAULT_PEAK_TOLERANCE)


def test_towers_over_batches_of_changing_size_keep_grouping_and_eagers_gradients():
    batches = _batches([1024, 700, 333, 1024])
    _, results, _, records = _towers_step("all", batches)
    symbolic = [r for r in records if r.rule == RULE and r.fired and "(s" in r.detail]
    assert symbolic  # the recompile of symbolic sizes grouped too
    for got, want in zip(results, _eager(batches), strict=True):
        assert max_rel_error(got, want) < 1e-4
