"""Tests for optimus_ir.virtual_cuda: CUDA (sm_90) Triton code without a GPU."""

import re
import warnings
from unittest import mock

import pytest
import torch
from triton.runtime import driver as triton_driver

from optimus_ir import virtual_cuda
from optimus_ir.codegen_text import normalize


def _pointwise(x):
    return torch.tanh(torch.relu(x))


def _only(graphs, name="inference"):
    assert [g.name for g in graphs] == [name]
    return graphs[0]


@pytest.fixture(scope="module")
def pointwise():
    return _only(virtual_cuda.generate(_pointwise, (torch.randn(256, 512),)))


def test_pointwise_kernel(pointwise):
    assert len(pointwise.kernels) == 1
    kernel = pointwise.kernels[0]
    assert pointwise.launches == [kernel.name]
    assert kernel.name.startswith("triton_poi_fused_")
    assert "@triton.jit" in kernel.source
    assert "tl.load" in kernel.source
    assert "@triton_heuristics.pointwise(" in kernel.source
    assert "cc=90" in kernel.source
    assert "multi_processor_count=132" in kernel.source
    assert f"{kernel.name}.run(" in pointwise.wrapper


def test_normalized_output_is_deterministic(pointwise):
    again = _only(virtual_cuda.generate(_pointwise, (torch.randn(256, 512),)))
    assert again == pointwise
    assert "'backend_hash': '<hash>'" in pointwise.wrapper
    assert not re.search(r"^# kernel path: /", pointwise.wrapper, re.MULTILINE)


def test_normalize():
    text = (
        "# kernel path: /tmp/torchinductor_me/ab/cabcdef.py\n"
        "inductor_meta={'backend_hash': 'A1B2C3', 'x': 1}\n"
        "tmp0 = tl.load(in_ptr0 + (x0), None)\n"
    )
    assert normalize(text) == (
        "# kernel path: <path>\n"
        "inductor_meta={'backend_hash': '<hash>', 'x': 1}\n"
        "tmp0 = tl.load(in_ptr0 + (x0), None)\n"
    )


def test_cat_of_ten_chunks_launches_ten_kernels():
    def fn(x):
        return torch.cat([torch.relu(c) for c in x.chunk(10, dim=1)], dim=1)

    graph = _only(virtual_cuda.generate(fn, (torch.randn(64, 640),)))
    # More than max_pointwise_cat_inputs (8) inputs: a ConcatKernel whose
    # inputs each write their slice.
    assert len(graph.launches) == 10
    assert all(name.startswith("triton_") for name in graph.launches)


def test_layer_norm_reduction():
    def fn(x):
        return torch.nn.functional.layer_norm(x, (512,))

    graph = _only(virtual_cuda.generate(fn, (torch.randn(256, 512),)))
    assert len(graph.launches) == 1
    (kernel,) = graph.kernels
    assert "@triton_heuristics.persistent_reduction(" in kernel.source
    assert "rsqrt(" in kernel.source


def test_matmul_is_an_extern_launch():
    def fn(a, b):
        return torch.relu(a @ b)

    graph = _only(virtual_cuda.generate(fn, (torch.randn(64, 32), torch.randn(32, 16))))
    assert graph.launches[0] == "extern_kernels.mm"
    assert len(graph.launches) == 2


def test_training_forward_and_backward():
    model = torch.nn.Sequential(
        torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Dropout(0.1)
    )
    forward, backward = virtual_cuda.generate(model, (torch.randn(8, 16),))
    assert (forward.name, backward.name) == ("forward", "backward")
    assert "extern_kernels.mm" in forward.launches
    # Dropout's seeds: an extern ATen call (and CUDA RNG-state queries while
    # compiling).
    assert "aten.randint.low_out" in forward.launches
    assert "extern_kernels.mm" in backward.launches
    assert forward.kernels and backward.kernels
    assert "tangents_1" in backward.wrapper


def test_training_flag_overrides_requires_grad():
    model = torch.nn.Linear(16, 32)
    graph = _only(virtual_cuda.generate(model, (torch.randn(8, 16),), training=False))
    assert graph.launches == ["extern_kernels.addmm"]
    graphs = virtual_cuda.generate(_pointwise, (torch.randn(8, 16),), training=True)
    assert [g.name for g in graphs] == ["forward", "backward"]


def test_input_strides_are_kept():
    x = torch.randn(32, 48).t()
    graph = _only(virtual_cuda.generate(lambda x: x * 2, (x,)))
    assert "assert_size_stride(arg0_1, (48, 32), (1, 48))" in graph.wrapper


def test_no_patch_left_behind():
    cuda_available = torch.cuda.is_available()
    active_driver = triton_driver._active
    get_device_properties = torch.cuda.get_device_properties
    interface = torch._dynamo.device_interface.CudaInterface
    interface_get_device_properties = interface.get_device_properties

    virtual_cuda.generate(_pointwise, (torch.randn(4, 4),), virtual=True)

    assert torch.cuda.is_available() == cuda_available
    assert triton_driver._active is active_driver
    assert torch.cuda.get_device_properties is get_device_properties
    assert interface.get_device_properties is interface_get_device_properties
    assert virtual_cuda.virtual_cuda_available() == (not cuda_available)
    if not cuda_available:
        with pytest.raises(RuntimeError):
            torch.cuda.get_device_properties(0)
        from torch.utils._triton import has_triton

        assert not has_triton()


def test_global_inductor_config_and_custom_passes_are_used():
    calls = []

    def post_grad_pass(graph):
        calls.append("post_grad")

    def post_fusion_pass(nodes):
        calls.append("post_fusion")
        return nodes

    with torch._inductor.config.patch(
        post_grad_custom_post_pass=post_grad_pass,
        _post_fusion_custom_pass=post_fusion_pass,
    ):
        virtual_cuda.generate(_pointwise, (torch.randn(4, 4),))
    assert calls == ["post_grad", "post_fusion"]


def test_training_graphs_save_what_torch_compile_saves():
    # Under torch.compile a module's parameters are static inputs (Dynamo says so), which the partitioner saves for
    # the backward for free; the virtual flow has no Dynamo and says so itself. Without that, this model's backward
    # read tensors of the same shapes, but 2 of the 7 forward inputs torch.compile's reads (parameters, x) were other
    # saved tensors instead (the multi-task towers' backward then launched 296 kernels, against 158 on an H200).
    from torch._dynamo.backends.common import aot_autograd
    from torch._inductor import compile_fx
    from torch._inductor.decomposition import select_decomp_table

    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Linear(16, 32), torch.nn.LayerNorm(32), torch.nn.SiLU(),
        torch.nn.Linear(32, 32), torch.nn.LayerNorm(32), torch.nn.SiLU(), torch.nn.Linear(32, 1),
    )
    x = torch.randn(8, 16)

    def saved(gm):
        inputs = [n for n in gm.graph.nodes if n.op == "placeholder" and not n.name.startswith("tangents")]
        forward_inputs = [n for n in inputs if n.name.startswith("primals")]
        return len(forward_inputs), sorted(tuple(n.meta["val"].shape) for n in inputs)

    backwards = []

    def backward(gm, inputs):
        backwards.append(saved(gm))
        return gm

    torch._dynamo.reset()
    backend = aot_autograd(fw_compiler=lambda gm, inputs: gm, bw_compiler=backward,
                           partition_fn=compile_fx.partition_fn, decompositions=select_decomp_table())
    torch.compile(model, backend=backend)(x).sum().backward()
    torch._dynamo.reset()
    _, virtual_backward = virtual_cuda._dynamo_graphs(
        model, (x,), lambda gm, inputs: virtual_cuda._aot_graphs(gm, inputs, training=True)
    )
    assert backwards == [saved(virtual_backward.gm)]


@pytest.mark.parametrize("how", ["mark_dynamic", "dynamic=True"])
def test_symbolic_sizes_are_compiled_with_dynamos_symbols_and_hints(how):
    # the graphs keep the symbols Dynamo chose (a loop's batch), Inductor reads their hints: a wrapper that takes
    # the size from its input, kernels that take it as an argument
    x = torch.randn(96, 64)
    if how == "mark_dynamic":
        torch._dynamo.mark_dynamic(x, 0)
    (graph,) = virtual_cuda.generate(_pointwise, (x,), dynamic=how == "dynamic=True")
    (kernel,) = graph.kernels
    assert re.search(r"s\d+ = arg\d+_1", graph.wrapper), graph.wrapper  # the symbol, from the call's arguments
    assert re.search(r"_xnumel = \S*s\d+", graph.wrapper), graph.wrapper  # the launch's numel, of the symbol
    assert kernel.name in graph.launches


def test_ops_traced_for_the_cpu_only_are_named_in_a_warning():
    # AOTAutograd traces on the CPU: attention becomes the CPU's flash-attention op, which a GPU compile never calls
    def attention(q, k, v):
        return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)

    inputs = tuple(torch.randn(2, 4, 16, 32) for _ in range(3))
    cpu_only = r"inference graph calls ops with CPU kernels only \(aten::_scaled_dot_product_flash_attention_for_cpu\)"
    with pytest.warns(UserWarning, match=cpu_only):
        virtual_cuda.generate(attention, inputs)
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)
        virtual_cuda.generate(lambda x: torch.softmax(x, -1) @ x, (torch.randn(16, 16),))


def test_a_layer_norm_in_bf16_traced_for_training_saves_its_statistics_in_fp32_as_cuda_does():
    # the CPU's decomposition rounds the layer norm's mean and rstd to bf16, CUDA's keeps them in fp32: the joint
    # graph reads them unrounded before the partition, so the forward saves fp32 statistics, as a GPU compile's does
    norm = torch.nn.LayerNorm(32).to(torch.bfloat16)
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)  # and no warning that the graphs differ from a GPU's
        forward, _ = virtual_cuda.generate(norm, (torch.randn(8, 32, dtype=torch.bfloat16),))
    statistics = [line for line in forward.wrapper.splitlines() if "empty_strided_cuda((8, 1)" in line]
    assert len(statistics) == 2 and all("torch.float32" in line for line in statistics)


def test_rounded_statistics_the_joint_graph_cannot_read_unrounded_are_named_in_a_warning():
    norm = torch.nn.LayerNorm(32).to(torch.bfloat16)
    rounded = r"forward graph has aten::native_layer_norm in bf16 or fp16, whose mean and rstd"
    with mock.patch.object(virtual_cuda, "_ELEMENTWISE", frozenset()), pytest.warns(UserWarning, match=rounded):
        virtual_cuda.generate(norm, (torch.randn(8, 32, dtype=torch.bfloat16),))