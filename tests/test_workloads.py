"""The shared workload registry (``optimus_ir.testing``): the suite's model families on the CPU at the tiny size,
the storms and chains, and the keys of the compile targets that the decision snapshot compiles."""

import pytest
import torch

import optimus_ir.testing as registry
from optimus_ir.testing.golden_cases import CASES
from optimus_ir.testing.models import SplitActivationChain
from optimus_ir.testing.storms import CHAINS, STORMS, TRAINING_CHAINS, TRAINING_STORMS
from optimus_ir.testing.workloads import SIZES, WORKLOADS, make_optimizer, output_loss, train_step


@pytest.mark.parametrize("name", list(WORKLOADS))
def test_workload_forward_and_training_step(name):
    model, inputs = WORKLOADS[name].make("tiny")
    with torch.no_grad():
        output = model(*inputs)
    outputs = output if isinstance(output, tuple) else (output,)
    assert all(torch.isfinite(o).all() for o in outputs)

    optimizer = make_optimizer(model)
    losses = [float(train_step(model, optimizer, inputs)) for _ in range(3)]
    grads = [p.grad for p in model.parameters()]
    assert all(g is not None and torch.isfinite(g).all() for g in grads)
    assert losses[-1] < losses[0]


def test_every_workload_has_every_size():
    assert all(tuple(workload.configs) == SIZES for workload in WORKLOADS.values())


def test_make_is_seeded():
    first_model, first_inputs = WORKLOADS["dlrm"].make("tiny")
    second_model, second_inputs = WORKLOADS["dlrm"].make("tiny")
    assert all(torch.equal(a, b) for a, b in zip(first_inputs, second_inputs))
    assert all(torch.equal(a, b) for a, b in zip(first_model.parameters(), second_model.parameters()))


def test_output_loss_sums_every_output():
    outputs = (torch.full((2, 3), 2.0), torch.full((4,), 3.0, dtype=torch.bfloat16))
    assert output_loss(outputs).item() == 4.0 + 9.0
    assert output_loss(outputs[0]).item() == 4.0


def test_registry_holds_every_workload_under_its_own_name():
    assert [e.name for e in registry.entries("case")] == [c.name for c in CASES]
    assert [e.name for e in registry.entries("model")] == list(WORKLOADS)
    assert [(e.name, e.value.dtype) for e in registry.entries("storm")] == [(s.name, s.dtype) for s in STORMS]
    assert [e.name for e in registry.entries("chain")] == [c.name for c in CHAINS + TRAINING_CHAINS]
    assert len(registry.REGISTRY) == len(CASES) + len(WORKLOADS) + len(STORMS) + len(CHAINS) + len(TRAINING_CHAINS)
    assert {e.name for e in registry.entries("storm") if e.training} == set(TRAINING_STORMS)
    assert registry.REGISTRY["storm:128x tanh [256x512]:torch.bfloat16"].value.dtype == torch.bfloat16
    assert [e.name for e in registry.entries("chain") if e.training] == [c.name for c in TRAINING_CHAINS]
    with pytest.raises(ValueError, match="unknown kind"):
        registry.entries("nope")


def test_compile_target_keys():
    keys = [key for key, _ in registry.compile_targets()]
    assert len(keys) == len(set(keys)) == len(CASES) + len(WORKLOADS) * 4 + len(STORMS) * 2 + len(CHAINS) + 1
    assert keys[0] == f"case:{CASES[0].name}"
    assert "workload:dlrm:small:training" in keys and "workload:rowsum_storm:tiny:inference" in keys
    assert "storm:128x tanh [256x512]:torch.bfloat16:training" in keys
    assert keys[-1] == "chain:split16_chain12[1024x1024,fp32] training step"


def test_compile_targets_build_seeded_inputs_on_the_cpu():
    targets = dict(registry.compile_targets(storm_device="cpu"))
    fn, first = targets[f"case:{CASES[0].name}"]()
    _, second = targets[f"case:{CASES[0].name}"]()
    assert fn is CASES[0].fn and all(torch.equal(a, b) for a, b in zip(first, second))
    model, inputs = targets["workload:tanh_storm:tiny:inference"]()
    assert not any(p.requires_grad for p in model.parameters()) and len(inputs) == 4
    model, _ = targets["workload:tanh_storm:tiny:training"]()
    assert all(p.requires_grad for p in model.parameters())
    fn, inputs = targets["storm:48x full sum [256x512]:torch.float32:training"]()
    assert len(inputs) == 48 and all(x.requires_grad and x.device.type == "cpu" for x in inputs)
    _, again = targets["storm:48x full sum [256x512]:torch.float32:training"]()
    assert torch.equal(inputs[0], again[0])
    fn, (x,) = targets["chain:split16_chain12[1024x1024,fp32] training step"]()
    assert x.shape == (1024, 1024) and x.requires_grad
    assert fn(x[:4, :64].detach()).shape == (4, 64)


@pytest.mark.parametrize("storm", STORMS[:3], ids=lambda s: f"{s.name} {s.dtype}")
def test_storms_run_on_the_cpu(storm):
    torch.manual_seed(0)
    inputs = storm.make(storm.dtype, False, device="cpu")
    outputs = storm.fn(*inputs)
    assert len(outputs) == len(inputs) // (3 if "layer_norm" in storm.name else 1)
    assert all(o.dtype == storm.dtype for o in outputs)


def test_split_chain_backward_in_bf16_folds_pieces_that_read_buffers_of_undecided_layout():
    """In the bf16 backward of two layers of the split chain ([256, 256]), some pieces read buffers whose layout
    Inductor had not fixed yet; the rule fixes them as they are and folds every cat (a rejection before), and the
    gradients are eager's."""
    from optimus_ir import enabled
    from optimus_ir.inspect import compile_report
    from optimus_ir.interpret import cpu_triton_interpreter

    torch.manual_seed(0)
    model = SplitActivationChain(256, 2).to(torch.bfloat16)
    x = torch.randn(256, 256, dtype=torch.bfloat16)

    def loss(x, *scales):
        return output_loss(torch.func.functional_call(model, dict(zip(names, scales)), (x,)))

    names = [name for name, _ in model.named_parameters()]
    scales = [p.detach().clone().requires_grad_() for p in model.parameters()]
    report = compile_report(loss, (x, *scales))
    decisions = [r for r in report.rewrites if r.rule == "SplitCatToPointwise"]
    assert len(decisions) == 3 and all(r.fired for r in decisions), [r.detail for r in decisions]
    expected = torch.autograd.grad(loss(x, *scales), scales)
    with enabled(), cpu_triton_interpreter():
        actual = torch.autograd.grad(torch.compile(loss)(x, *scales), scales)
    torch.testing.assert_close(actual, expected, rtol=2e-2, atol=2e-2)


@pytest.mark.parametrize("training", [False, True], ids=["inference", "training"])
def test_dlrm_of_a_symbolic_batch_reads_no_size_symbol_outside_the_call(training):
    # The bags of all tables are regions of one allocation [26, B, 64]: where each starts depends on the batch, so
    # the member table is given those offsets per call; made when the module loads, it would read an unbound symbol
    # (the virtual device never loads the module: this is what a GPU would fail on).
    from optimus_ir.codegen_text import module_level_size_symbols
    from optimus_ir.inspect import compile_report

    model, inputs = WORKLOADS["dlrm"].make("tiny")
    model.requires_grad_(training)
    batch = WORKLOADS["dlrm"].configs["tiny"]["batch"]
    for tensor in inputs:
        torch._dynamo.mark_dynamic(tensor, tensor.shape.index(batch))
    report = compile_report(model, inputs)
    assert any(r.rule == "EmbeddingBagToSegmentSum" and r.fired for r in report.rewrites)
    assert any("byte_offsets=(" in g.wrapper for g in report.graphs), "no table of regions: the case moved"
    assert all(not module_level_size_symbols(g.wrapper) for g in report.graphs), [
        module_level_size_symbols(g.wrapper) for g in report.graphs]
