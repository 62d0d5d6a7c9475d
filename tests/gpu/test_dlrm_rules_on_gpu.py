"""On a real GPU: DLRM's interaction as dot products of the kept pairs (SelectedGramEntriesToDotProducts) and its
last Linear as a row reduction (MatvecToRowReduction). Kernels per call, numerics against eager and the peak
against stock Inductor's, in inference and in a training step whose loss is computed outside the compiled model."""

import torch

import optimus_ir
from optimus_ir.records import recording
from optimus_ir.settings import DEFAULT_PEAK_TOLERANCE
from optimus_ir.testing.models import DLRM
from tests.gpu.helpers import CUDA, cold_compile, kernels_per_call, peak_memory_bytes
from tests.test_gram_entries import RULE as GRAM
from tests.test_matvec import RULE as MATVEC

pytestmark = CUDA


def _model_and_inputs() -> tuple[DLRM, tuple[torch.Tensor, ...]]:
    torch.manual_seed(0)
    model = DLRM(num_dense=4, dense_width=8, num_tables=12, num_embeddings=1000, embedding_dim=32, bag_size=4,
                 bottom_hidden=64, top_hidden=64).cuda()
    return model, model.example_inputs(512, torch.float32, torch.device("cuda"))


def _step(passes, grad: bool, compile_it: bool = True):
    """Output, gradients, fired rules, kernels per call and peak bytes of one call (compiled cold, or eager)."""
    torch.cuda.empty_cache()
    model, inputs = _model_and_inputs()
    params = list(model.parameters())

    def call():
        for p in params:
            p.grad = None
        with torch.set_grad_enabled(grad):
            out = compiled(*inputs)
        if grad:
            out.square().mean().backward()
        return out.detach(), [p.grad for p in params]

    with cold_compile(), optimus_ir.enabled(passes), recording() as records:
        compiled = torch.compile(model) if compile_it else model
        call()
        result = call()
        kernels = kernels_per_call(call) if compile_it else None
        peak = peak_memory_bytes(call)
    return result, {r.rule for r in records if r.fired}, kernels, peak


def test_inference_and_training_fire_compute_eagers_values_with_fewer_kernels_within_stocks_peak():
    for grad in (False, True):
        (out, grads), fired, kernels, peak = _step("all", grad)
        _, _, stock_kernels, stock_peak = _step(None, grad)
        (eager_out, eager_grads), _, _, _ = _step(None, grad, compile_it=False)
        assert {GRAM, MATVEC} <= fired
        assert kernels < stock_kernels
        torch.testing.assert_close(out, eager_out, atol=1e-4, rtol=1e-4)
        for got, want in zip(grads, eager_grads, strict=True):
            torch.testing.assert_close(got, want, atol=1e-4, rtol=1e-4)
        assert peak <= stock_peak * (1 + DEFAULT_PEAK_TOLERANCE)
