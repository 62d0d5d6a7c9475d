"""``torch.compile(model, backend="optimus_ir")``: found by Dynamo through the package's entry point; its passes
apply to that compile alone, forward and backward (compiled at the first backward), whatever ``OPTIMUS_IR`` says;
``options`` choose the passes and reach Inductor. On the CPU: the rules' decisions are recorded there too."""

import pytest
import torch
import torch.nn.functional as F

import optimus_ir
from optimus_ir import backend
from optimus_ir.records import recording

SPLITCAT_RULE = "PieceLayerNormsToOneLayerNorm"  # splitcat, on Dynamo's graph
HORIZONTAL_RULE = "IdenticalKernelsToMemberTableKernel"  # horizontal, before the scheduler


def _pieces():
    torch.manual_seed(0)
    weights = [torch.randn(8, requires_grad=True) for _ in range(4)]
    biases = [torch.randn(8, requires_grad=True) for _ in range(4)]

    def fn(x):
        pieces = x.split(8, 1)
        return torch.cat([torch.tanh(F.layer_norm(p, (8,), w, b)) for p, w, b in zip(pieces, weights, biases)], 1)

    return fn, [*weights, *biases]


def _step(compiled, params, x):
    for p in params:
        p.grad = None
    out = compiled(x)
    out.square().sum().backward()
    return [out.detach(), *(p.grad for p in params)]


def test_dynamo_finds_the_backend_by_name():
    assert torch._dynamo.lookup_backend("optimus_ir") is backend.optimus_ir
    assert "optimus_ir" in torch._dynamo.list_backends()


def test_the_passes_apply_to_this_compile_alone_forward_and_backward():
    torch._dynamo.reset()
    fn, params = _pieces()
    x = torch.randn(16, 32, requires_grad=True)
    expected = _step(fn, params, x)
    assert not optimus_ir.enabled_passes()
    with recording() as records:
        # an Inductor option: no graph served from Inductor's caches (a served graph is not compiled: no rule runs)
        got = _step(torch.compile(fn, backend="optimus_ir", options={"force_disable_caches": True}), params, x)
    assert not optimus_ir.enabled_passes()
    fired = [r.rule for r in records if r.fired]
    assert SPLITCAT_RULE in fired
    assert fired.count("InputAssertsToOneCheck") == 2  # the forward's graph and the backward's
    for a, e in zip(got, expected, strict=True):
        torch.testing.assert_close(a, e, rtol=1e-5, atol=1e-5)
    torch._dynamo.reset()
    with recording() as records:
        _step(torch.compile(fn), params, x)
    assert records == []  # a stock compile after it: no rule ran


def test_options_choose_the_passes_and_reach_inductor():
    torch._dynamo.reset()
    fn, params = _pieces()
    x = torch.randn(16, 32, requires_grad=True)
    with recording() as records:
        options = {"optimus_ir": "horizontal", "force_disable_caches": True}
        _step(torch.compile(fn, backend="optimus_ir", options=options), params, x)
    rules = {r.rule for r in records}
    assert HORIZONTAL_RULE in rules and SPLITCAT_RULE not in rules
    torch._dynamo.reset()
    with pytest.raises(torch._dynamo.exc.BackendCompilerFailed, match="unknown optimus_ir pass"):
        torch.compile(fn, backend="optimus_ir", options={"optimus_ir": "vertical"})(x)
    torch._dynamo.reset()
    with pytest.raises(torch._dynamo.exc.BackendCompilerFailed, match="no_such_option"):
        torch.compile(fn, backend="optimus_ir", options={"no_such_option": 1})(x)


def test_on_a_torch_optimus_ir_is_not_checked_with_the_backend_compiles_as_inductor(monkeypatch):
    from optimus_ir import records

    monkeypatch.setattr(torch, "__version__", "2.15.0")
    monkeypatch.setattr(records, "_warned", set())
    torch._dynamo.reset()
    fn, params = _pieces()
    x = torch.randn(16, 32, requires_grad=True)
    with recording() as decisions:
        got = _step(torch.compile(fn, backend="optimus_ir", options={"force_disable_caches": True}), params, x)
    assert decisions == []
    for a, e in zip(got, _step(fn, params, x), strict=True):
        torch.testing.assert_close(a, e, rtol=1e-5, atol=1e-5)
