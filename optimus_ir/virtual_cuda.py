"""GPU-less Triton code generation for a CUDA sm_90 (H100/H200-like) target.

:func:`generate` runs a callable through Dynamo, AOTAutograd and Inductor's
``compile_fx_inner`` and returns the Python wrapper code and the Triton kernels
Inductor wrote for a CUDA device, without running (or compiling) any of them.
On a machine without a CUDA device, the device is *virtual*
(:mod:`optimus_ir.virtual_device`): every device query Inductor, Triton and the
fake-tensor machinery make is answered as an NVIDIA H200 would answer it. All
patches are scoped to the call and undone afterwards.

How the pipeline differs from ``torch.compile``:

* Dynamo captures ``fn`` as ``torch.compile`` would (module attributes,
  closures and constants become graph inputs; a graph break gives several
  graphs), running it once eagerly on its inputs, with Dynamo's caches reset
  before and after (as ``torch._dynamo.explain`` does). Shapes are static and
  Inductor's pre-grad passes do not run. AOTAutograd reads from Dynamo's graph
  which inputs are static (parameters, buffers, module attributes): the
  partitioner then saves the same tensors for the backward as under
  ``torch.compile``.
* A failure to trace is one :class:`TraceError` naming the op where it failed,
  and, for CPU tensors, saying that on a GPU machine CUDA tensors trace as
  ``torch.compile`` would there.
* AOTAutograd traces (with Inductor's decompositions) and, for training,
  partitions the graph on *CPU* fake tensors: ``aot_autograd`` with
  ``requires_grad`` fake CUDA tensors aborts the process without a CUDA
  runtime, and Python indexing on fake CUDA tensors reaches the C++ device
  guard. The joint-graph passes therefore run on the CPU graphs (inside
  Inductor's own ``partition_fn`` for training): device-dependent choices made
  while tracing or there are the CPU's (e.g. ``scaled_dot_product_attention``
  traces to its CPU kernel, ``pad_mm`` does not pad, tensor constants created
  inside ``fn`` stay on the CPU). A graph that calls ops with CPU kernels only
  (that attention kernel) is compiled with a warning.
* The graphs are then retargeted to ``cuda:0`` (device arguments, and example
  inputs with their sizes, strides, storage offsets and dtypes) and compiled
  with ``compile_fx_forward`` / ``compile_fx_backward`` around
  ``compile_fx_inner``, so the post-grad passes (custom ones included), the
  lowerings table and the scheduler's custom passes all apply, as configured in
  the global ``torch._inductor.config`` at call time.
* ``GraphLowering.compile_to_module`` is replaced by a capture of the Python
  wrapper code; no kernel is compiled or run, so configurations that benchmark
  on the device (``max_autotune``, ``benchmark_fusion``, ...) fail on the
  virtual device. The FX graph cache and the AOTAutograd cache are off.

On an H200, the normalized wrappers from the virtual and the real device were
identical, and kernel bodies and launches matched ``torch.compile``'s for
pointwise, cat, reduction, matmul and training (Linear/ReLU/LayerNorm) cases;
the training graphs of five workloads' losses, stock and with optimus_ir, had
the launches, kernels and memory estimates of ``torch.compile``'s
(``benchmarks/virtual_vs_compile.py``).
"""

from __future__ import annotations

import contextlib
import logging
import operator
import re
import traceback
import types
import warnings
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any
from unittest import mock

import torch
import torch._dynamo
import torch._functorch.aot_autograd as aot_autograd
import torch._functorch.config as functorch_config
import torch._inductor.compile_fx as compile_fx
import torch._inductor.config as inductor_config
import torch.utils._pytree as pytree
from torch._functorch._aot_autograd.schemas import ViewAndMutationMeta
from torch._inductor.decomposition import select_decomp_table
from torch._inductor.graph import GraphLowering
from torch._inductor.virtualized import V
from torch._subclasses import fake_tensor
from torch.fx.experimental.symbolic_shapes import ShapeEnv

from optimus_ir.codegen_text import GraphCode, normalize, parse_wrapper
from optimus_ir.virtual_device import virtual_cuda_available, virtual_cuda_device

__all__ = ["TraceError", "generate", "virtual_cuda_available"]

_CPU = torch.device("cpu")
_CUDA = torch.device("cuda", 0)
#: ops whose decomposition rounds its statistics to a bf16 or fp16 input's dtype on the CPU alone
_CPU_STATISTICS_IN_INPUT_DTYPE = frozenset({"aten::native_layer_norm"})
#: ops whose fp32 result reads a statistic the same whether it is rounded first or not, but for the rounding
_ELEMENTWISE = frozenset({
    torch.ops.aten.sub.Tensor, torch.ops.aten.mul.Tensor, torch.ops.aten.add.Tensor, torch.ops.aten.div.Tensor,
    torch.ops.prims.convert_element_type.default,
})


# ---------------------------------------------------------------------------
# Tracing, partitioning and retargeting
# ---------------------------------------------------------------------------


@dataclass
class _Graph:
    """A graph AOTAutograd produced, with its CPU fake example inputs and the
    AOTAutograd metadata of the function it belongs to."""

    name: str
    gm: torch.fx.GraphModule
    example_inputs: list[Any]
    fw_metadata: ViewAndMutationMeta
    num_user_inputs: int  # the inputs of Dynamo's graph (``compile_fx``'s example inputs)
    shape_env: ShapeEnv | None  # Dynamo's, where sizes are symbolic: their symbols, hints and guards


class TraceError(RuntimeError):
    """``fn`` could not be traced: the op where it failed and why, in one message."""


def _dynamo_graphs(
    fn: Callable[..., Any],
    example_inputs: Sequence[Any],
    trace: Callable[[torch.fx.GraphModule, list[Any]], list[_Graph]],
    dynamic: bool = False,
) -> list[_Graph]:
    """The graphs of ``fn`` called on ``example_inputs``: each graph Dynamo captures (parameters, buffers and other
    tensors ``fn`` reads are inputs of it) traced by ``trace`` from within Dynamo's backend, so that what cannot be
    traced there (a data-dependent output) is left to eager with a graph break, as under ``torch.compile``; each
    such graph is named in a warning."""
    graphs: list[_Graph] = []

    def capture(gm: torch.fx.GraphModule, inputs: list[Any]) -> Callable[..., Any]:
        try:
            graphs.extend(trace(gm, list(inputs)))
        except Exception as error:
            if isinstance(_innermost(error), fake_tensor.DataDependentOutputException):
                warnings.warn(
                    f"optimus_ir.virtual_cuda: a graph of {len(gm.graph.nodes)} nodes is left to eager, as "
                    f"torch.compile leaves it: {_trace_error(error, on_cpu=False)}; it is not in the report",
                    stacklevel=2,
                )
            raise
        return gm.forward

    # the fake-tensor error log would print a traceback for what the caller gets as one TraceError
    fake_tensor_log = logging.getLogger(fake_tensor.__name__)
    level = fake_tensor_log.level
    fake_tensor_log.setLevel(logging.CRITICAL)
    torch._dynamo.reset()
    try:
        torch.compile(fn, backend=capture, dynamic=dynamic)(*example_inputs)
    finally:
        torch._dynamo.reset()
        fake_tensor_log.setLevel(level)
    return graphs


def _parameters(fn: Callable[..., Any]) -> list[torch.Tensor]:
    return list(fn.parameters()) if isinstance(fn, torch.nn.Module) else []


def _chain(error: BaseException) -> Iterator[BaseException]:
    """``error`` and the errors it was raised from, outermost first."""
    while error is not None:
        yield error
        error = error.__cause__ or error.__context__


def _innermost(error: BaseException) -> BaseException:
    return list(_chain(error))[-1]


#: words of a tracing error that tracing on the CPU may cause where a GPU's would not (a kernel of some dtypes or
#: devices only): only then does the error say so; a shape mistake does not
_DEVICE_WORDS = re.compile(r"cuda|cpu|device|dtype|type|not implemented|supported", re.IGNORECASE)


def _trace_error(error: Exception, on_cpu: bool) -> TraceError:
    """``error`` raised while tracing, as one message that names the op (the innermost one being dispatched)."""
    op = None
    for cause in _chain(error):  # Dynamo's error wraps the one raised where the op was dispatched
        for frame, _ in traceback.walk_tb(cause.__traceback__):
            func = frame.f_locals.get("func")
            if isinstance(func, torch._ops.OpOverload | torch._ops.OpOverloadPacket):
                op = str(func)
    cause = _innermost(error)
    first_line = (str(cause).strip().splitlines() or [""])[0]
    where = f" in {op}" if op else ""
    advice = (
        ": CPU tensors stand for CUDA ones only where both trace alike; on a machine with a GPU, pass CUDA tensors "
        "(and the module on the GPU) to trace as torch.compile does there"
        if on_cpu and _DEVICE_WORDS.search(str(cause)) else ""
    )
    return TraceError(f"tracing failed{where} ({type(cause).__name__}: {first_line}){advice}")


def _aot_graphs(
    module: torch.fx.GraphModule, example_inputs: Sequence[Any], training: bool
) -> list[_Graph]:
    """Trace ``module`` (a graph Dynamo captured) with AOTAutograd on fake
    tensors of its inputs' devices and return its inference graph, or its
    partitioned forward and backward graphs.

    Inductor's decompositions and ``partition_fn`` (joint-graph passes, then
    min-cut rematerialization) are used; the backward is compiled eagerly, so
    that it is traced (for ``ones_like`` tangents) without running anything.
    """
    graphs: list[_Graph] = []

    def capture(name: str) -> Callable[..., Any]:
        def compiler(gm: torch.fx.GraphModule, inputs: Sequence[Any]) -> Any:
            if name == "inference":
                # Training graphs went through them in ``partition_fn``.
                gm = compile_fx._recursive_joint_graph_passes(gm, input_device=_CPU)
            context = torch._guards.TracingContext.get()
            graphs.append(_Graph(name, gm, list(inputs), context.fw_metadata, len(example_inputs), mode.shape_env))
            return gm

        return compiler

    # Dynamo's fake mode, where it has one: its tensors carry the symbolic sizes Dynamo chose and their hints
    mode = torch._guards.detect_fake_mode(example_inputs) or fake_tensor.FakeTensorMode()
    fake_inputs = tuple(
        mode.from_tensor(x) if isinstance(x, torch.Tensor) else x
        for x in example_inputs
    )
    with (
        torch.no_grad() if not training else contextlib.nullcontext(),
        torch._guards.tracing(torch._guards.TracingContext(mode)),
        V.set_fake_mode(mode),
        # Records each node's "original_aten", which names the kernels.
        torch.fx.traceback.preserve_node_meta(),
        functorch_config.patch(force_non_lazy_backward_lowering=True),
    ):
        aot_autograd.aot_module_simplified(
            module,
            fake_inputs,
            fw_compiler=capture("forward"),
            bw_compiler=capture("backward"),
            inference_compiler=capture("inference"),
            partition_fn=_partition_as_cuda,
            decompositions=select_decomp_table(),
            # as compile_fx: an inference graph mutates its inputs in place (an optimizer step's kernels do)
            keep_inference_input_mutations=True,
        )
    return graphs


def _ops_without_cuda_kernels(gm: torch.fx.GraphModule) -> list[str]:
    """The ATen ops ``gm`` calls that have a CPU kernel and no CUDA one, by name: what tracing on the CPU chose
    where CUDA would choose another op (``scaled_dot_product_attention`` → the CPU's flash attention)."""
    has_kernel = torch._C._dispatch_has_kernel_for_dispatch_key
    names = {
        node.target.name()
        for node in gm.graph.nodes
        if node.op == "call_function" and isinstance(node.target, torch._ops.OpOverload)
    }
    return sorted(name for name in names if has_kernel(name, "CPU") and not has_kernel(name, "CUDA"))


def _statistics_in_input_dtype(gm: torch.fx.GraphModule) -> list[str]:
    """The ATen ops ``gm`` came from whose decomposition keeps statistics in a bf16 or fp16 input's dtype on the
    CPU alone (``torch._refs.native_layer_norm``'s mean and rstd; CUDA keeps them in fp32): traced on the CPU,
    the graph computes and saves other tensors than a GPU's."""
    return sorted({node.meta["original_aten"].name() for node in gm.graph.nodes if _rounded_statistic(node)})


def _rounded_statistic(node: torch.fx.Node) -> bool:
    """Whether ``node`` is the CPU decomposition's rounding of a statistic to a bf16 or fp16 input's dtype."""
    op = node.meta.get("original_aten")
    return (
        isinstance(op, torch._ops.OpOverload)
        and op.name() in _CPU_STATISTICS_IN_INPUT_DTYPE
        and node.target is torch.ops.prims.convert_element_type.default
        and node.args[1] in (torch.bfloat16, torch.float16)
        # the statistics (var_mean's mean, rstd), not the normalized output, which CUDA rounds too
        and getattr(node.args[0], "target", None) in (operator.getitem, torch.ops.aten.rsqrt.default)
    )


def _partition_as_cuda(joint: torch.fx.GraphModule, joint_inputs: Sequence[Any], **kwargs: Any) -> Any:
    """Inductor's ``partition_fn`` of the joint graph as CUDA would trace it: each statistic the CPU's decomposition
    rounded to a bf16 or fp16 input's dtype (:func:`_rounded_statistic`) is read unrounded by the elementwise ops
    that compute in fp32 from it (the backward's ``(x - mean) * rstd``), as CUDA's decomposition keeps it in fp32.
    The partitioner then saves, and the backward reads, what a GPU compile's do."""
    graph = joint.graph
    for rounded in [node for node in graph.nodes if _rounded_statistic(node)]:
        statistic = rounded.args[0]
        for user in list(rounded.users):
            if user.target in _ELEMENTWISE and user.meta["val"].dtype == statistic.meta["val"].dtype:
                user.replace_input_with(rounded, statistic)
        if not rounded.users:
            graph.erase_node(rounded)
    joint.recompile()
    return compile_fx.partition_fn(joint, joint_inputs, **kwargs)


def _retarget(value: Any) -> Any:
    """``value`` with CPU devices replaced by ``cuda:0`` (for node arguments)."""
    if isinstance(value, torch.device) and value.type == "cpu":
        return _CUDA
    return value


def _to_cuda_graph(gm: torch.fx.GraphModule) -> None:
    """Rewrite the device arguments of ``gm``'s nodes from CPU to ``cuda:0``."""
    for node in gm.graph.nodes:
        node.args = pytree.tree_map(_retarget, node.args)
        node.kwargs = pytree.tree_map(_retarget, node.kwargs)
    gm.recompile()


def _to_cuda_input(mode: fake_tensor.FakeTensorMode, value: Any) -> Any:
    """A fake ``cuda:0`` tensor with ``value``'s size, stride, storage offset
    and dtype (other values unchanged)."""
    if not isinstance(value, torch.Tensor):
        return value
    with mode:
        if value.storage_offset() == 0:
            return torch.empty_strided(
                value.shape, value.stride(), dtype=value.dtype, device=_CUDA
            )
        storage = torch.empty(
            value.untyped_storage().nbytes() // value.element_size(),
            dtype=value.dtype,
            device=_CUDA,
        )
        return storage.as_strided(value.shape, value.stride(), value.storage_offset())


# ---------------------------------------------------------------------------
# Code capture and parsing
# ---------------------------------------------------------------------------


@contextlib.contextmanager
def _capture_wrapper_code() -> Iterator[list[str]]:
    """Replace ``GraphLowering.compile_to_module`` with a capture of the Python
    wrapper code it would load: yields the list the codes are appended to.

    As ``compile_to_module`` does, the code is handed to ``GraphLowering.save_output_code`` when that is set (the
    dump's hook). The module returned to Inductor has a ``call`` that refuses to run.
    """
    codes: list[str] = []

    def compile_to_module(graph: GraphLowering) -> types.ModuleType:
        wrapper_code, _ = graph.codegen()
        codes.append(wrapper_code.value)
        if GraphLowering.save_output_code is not None:
            GraphLowering.save_output_code(wrapper_code.value)
        module = types.ModuleType("optimus_ir_virtual_cuda_output")
        module.__file__ = "<virtual cuda>"
        module.call = _not_runnable  # type: ignore[attr-defined]
        return module

    with mock.patch.object(GraphLowering, "compile_to_module", compile_to_module):
        yield codes


def _not_runnable(*args: Any) -> None:
    raise RuntimeError("code generated by optimus_ir.virtual_cuda is not runnable")


# ---------------------------------------------------------------------------
# Entry point
# ---------------------------------------------------------------------------


def _compile(
    graph: _Graph,
    num_user_inputs: int,
    config_extra: compile_fx.CompilerConfigExtra,
) -> None:
    """Retarget ``graph`` to ``cuda:0`` and compile it the way ``compile_fx``
    compiles AOTAutograd's graphs (``compile_fx_forward`` /
    ``compile_fx_backward`` around ``compile_fx_inner``, looked up at call
    time so that a patched one is used)."""
    # the sizes' symbols are the trace's: Inductor reads their hints and adds its guards there
    mode = fake_tensor.FakeTensorMode(shape_env=graph.shape_env)
    context = torch._guards.TracingContext(mode)
    context.fw_metadata = graph.fw_metadata
    _to_cuda_graph(graph.gm)
    inputs = [_to_cuda_input(mode, x) for x in graph.example_inputs]
    with torch._guards.tracing(context):
        if graph.name == "backward":
            compile_fx.compile_fx_backward(
                graph.gm,
                inputs,
                config_extra,
                inner_compile=compile_fx.compile_fx_inner,
            )
        else:
            compile_fx.compile_fx_forward(
                graph.gm,
                inputs,
                num_orig_model_outputs=graph.fw_metadata.num_outputs,
                num_example_inputs=num_user_inputs,
                compiler_config_extra=config_extra,
                inner_compile=compile_fx.compile_fx_inner,
                is_inference=graph.name == "inference",
            )


def generate(
    fn: Callable[..., Any],
    example_inputs: tuple[Any, ...],
    *,
    training: bool | None = None,
    virtual: bool | None = None,
    dynamic: bool = False,
) -> list[GraphCode]:
    """Generate Inductor's CUDA code for ``fn`` without running it.

    Args:
        fn: a callable or ``nn.Module``; its outputs may be any pytree of
            tensors.
        example_inputs: the positional inputs. Tensors may be on the CPU: they
            stand for CUDA tensors of the same size, stride and dtype.
        training: compile the forward and backward graphs (``True``) or one
            inference graph (``False``). ``None``: training when an input, or a
            parameter of ``fn`` if it is a module, requires grad. When training
            is asked for and nothing requires grad, the floating-point inputs
            are made to.
        virtual: use the virtual H200-like device (``True``) or the real CUDA
            device (``False``). ``None``: virtual when no CUDA device exists.
        dynamic: as ``torch.compile``'s: ``True`` makes every size of the
            inputs symbolic (parameters' stay static); ``False`` keeps them
            static but for the dimensions ``torch._dynamo.mark_dynamic``
            marked, which are symbolic either way.

    Returns:
        ``[inference]`` or ``[forward, backward]``.
    """
    def requires_grad(inputs: Sequence[Any]) -> bool:
        return any(isinstance(x, torch.Tensor) and x.requires_grad for x in inputs)

    if training and not requires_grad(list(example_inputs) + list(_parameters(fn))):
        example_inputs = tuple(
            x.detach().requires_grad_(x.is_floating_point())
            if isinstance(x, torch.Tensor)
            else x
            for x in example_inputs
        )
    if virtual is None:
        virtual = virtual_cuda_available()
    on_cpu = not any(isinstance(x, torch.Tensor) and x.is_cuda for x in example_inputs)

    def trace(gm: torch.fx.GraphModule, inputs: list[Any]) -> list[_Graph]:
        if inductor_config.pre_grad_custom_pass is not None:  # as compile_fx's pre-grad passes end
            inductor_config.pre_grad_custom_pass(gm.graph)
            gm.recompile()
        return _aot_graphs(gm, inputs, training is not False and requires_grad(inputs))

    with (
        inductor_config.patch(fx_graph_cache=False, fx_graph_remote_cache=False),
        functorch_config.patch(
            enable_autograd_cache=False, enable_remote_autograd_cache=False
        ),
    ):
        try:
            with torch.no_grad() if training is False else contextlib.nullcontext():
                graphs = _dynamo_graphs(fn, example_inputs, trace, dynamic)
        except Exception as error:
            raise _trace_error(error, on_cpu) from error
        for graph in graphs:
            if cpu_only := _ops_without_cuda_kernels(graph.gm):
                warnings.warn(
                    f"optimus_ir.virtual_cuda: the {graph.name} graph calls ops with CPU kernels only "
                    f"({', '.join(cpu_only)}), as AOTAutograd traced it on the CPU. A GPU compile calls CUDA ops "
                    "there, so its launches differ from these.",
                    stacklevel=2,
                )
            if reduced := _statistics_in_input_dtype(graph.gm):
                warnings.warn(
                    f"optimus_ir.virtual_cuda: the {graph.name} graph has {', '.join(reduced)} in bf16 or fp16, "
                    "whose mean and rstd the CPU's decomposition rounds to that dtype and CUDA's keeps in fp32. "
                    "Traced on the CPU, the graph saves and computes other tensors than a GPU compile's, so its "
                    "launches and memory differ from these.",
                    stacklevel=2,
                )
        with (
            inductor_config.patch(
                # No subprocess compiles kernels during code generation.
                compile_threads=1,
                # They ran on the CPU graphs (see _aot_graphs).
                use_joint_graph_passes=False,
            ),
            virtual_cuda_device() if virtual else contextlib.nullcontext(),
            _capture_wrapper_code() as wrappers,
        ):
            config_extra = compile_fx.create_compiler_config_extra(inductor_config)
            codes = []
            for graph in graphs:
                before = len(wrappers)
                _compile(graph, graph.num_user_inputs, config_extra)
                # a graph that computes nothing (views, inputs returned) is not lowered: no wrapper, no launch
                codes.append(wrappers[before] if len(wrappers) > before else "")
    return [parse_wrapper(normalize(code), graph.name) for graph, code in zip(graphs, codes, strict=True)]
