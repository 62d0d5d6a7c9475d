"""See what optimus_ir does to a function: the Triton kernels, the launches, the wrapper, the rewrites.

    >>> report = compile_report(fn, (torch.randn(64, 4096),))                # optimus_ir, every pass
    >>> stock = compile_report(fn, (torch.randn(64, 4096),), passes=None)     # stock Inductor
    >>> len(stock.launches), len(report.launches)
    (64, 1)

``fn`` is captured by Dynamo, as ``torch.compile`` captures it (so it may read module attributes, closures and
constants, and break the graph), and runs once, eagerly, on the example inputs; Dynamo's caches are reset before
and after, as ``torch._dynamo.explain`` does. On a machine without a GPU the code is generated for a virtual CUDA
sm_90 device with H100/H200-like properties (:mod:`optimus_ir.virtual_cuda`); on a machine with one, for the real
device. No generated kernel is run. A function that cannot be traced raises :class:`TraceError`, naming the op.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import torch

from optimus_ir import switch
from optimus_ir.codegen_text import GraphCode, Kernel
from optimus_ir.records import RewriteRecord, recording
from optimus_ir.virtual_cuda import TraceError, generate

__all__ = ["CHECK_BOUNDS", "CompileReport", "NumericsCheck", "TraceError", "check_numerics", "compile_report"]


@dataclass
class CompileReport:
    """What one compile produced.

    Attributes:
        graphs: per compiled graph ("inference", or "forward" and "backward"), its wrapper, kernels and launches.
        rewrites: every rule decision, in order: fired (on which nodes, doing what) or rejected (why).
    """

    graphs: list[GraphCode]
    rewrites: list[RewriteRecord]

    @property
    def kernels(self) -> list[Kernel]:
        """Each distinct Triton kernel defined, graph after graph."""
        return [kernel for graph in self.graphs for kernel in graph.kernels]

    @property
    def launches(self) -> list[str]:
        """The name of every kernel one call launches (Triton and extern), in order, graph after graph."""
        return [name for graph in self.graphs for name in graph.launches]

    @property
    def wrapper(self) -> str:
        """The wrapper code, graph after graph."""
        return "\n".join(f"# ===== {graph.name} =====\n{graph.wrapper}" for graph in self.graphs)


def compile_report(
    fn: Callable[..., Any],
    example_inputs: tuple[Any, ...],
    *,
    passes: str | Iterable[str] | None = "all",
    target: str = "cuda",
    dynamic: bool = False,
    training: bool | None = None,
) -> CompileReport:
    """Compile ``fn`` for ``example_inputs`` with Inductor and ``passes`` of optimus_ir ("all", None for stock
    Inductor, or a list of pass names) and report the generated code. The global enable state is restored after.

    ``fn`` is a callable or an ``nn.Module``; ``example_inputs`` a tuple of tensors (CPU tensors stand for CUDA
    tensors of the same shape, dtype and strides; CUDA tensors, on a GPU machine, are traced on the device). Inputs
    or parameters that require grad give a training compile: forward and backward graphs, per graph Dynamo
    captured. ``dynamic`` is ``torch.compile``'s: ``True`` compiles with every input size symbolic, as Dynamo
    does after a loop's shapes change; dimensions marked by ``torch._dynamo.mark_dynamic`` are symbolic either way.
    ``training``: ``False`` compiles for inference whatever requires grad (as under ``torch.no_grad()``), ``True`` a
    training step; None decides by what requires grad, as above.
    """
    if target != "cuda":
        raise ValueError(f"target {target!r} is not supported; only 'cuda'")
    return report_for(fn, example_inputs, passes=passes, virtual=None, dynamic=dynamic, training=training)


def report_for(
    fn: Callable[..., Any],
    example_inputs: tuple[Any, ...],
    *,
    passes: str | Iterable[str] | None,
    virtual: bool | None,
    dynamic: bool = False,
    training: bool | None = None,
) -> CompileReport:
    """:func:`compile_report`, choosing the device: ``virtual=True`` forces the virtual sm_90 device even on a
    GPU machine (to compare it with the real one), None uses the real device when there is one."""
    with switch.enabled(passes), recording() as records:
        graphs = generate(fn, tuple(example_inputs), virtual=virtual, dynamic=dynamic, training=training)
    return CompileReport(graphs, list(records))


#: relative error (of norms) under which a check passes, by the outputs' dtype (fp32 without TF32 on the CPU)
CHECK_BOUNDS = {torch.float32: 1e-4, torch.float64: 1e-10, torch.bfloat16: 2e-2, torch.float16: 4e-3}


@dataclass
class NumericsCheck:
    """What :func:`check_numerics` found.

    Attributes:
        errors: per compared tensor (the outputs, then in a training step the gradients), ``|a - e| / |e|`` in fp64.
        bounds: per compared tensor, the error under which it passes (:data:`CHECK_BOUNDS` by its dtype).
        rewrites: every rule decision of the compile.
    """

    errors: list[float]
    bounds: list[float]
    rewrites: list[RewriteRecord]

    @property
    def passed(self) -> bool:
        return all(error <= bound for error, bound in zip(self.errors, self.bounds, strict=True))


def check_numerics(
    fn: Callable[..., Any], example_inputs: tuple[Any, ...], *, passes: str | Iterable[str] | None = "all",
    training: bool = False,
) -> NumericsCheck:
    """Run the Triton code optimus_ir generates for ``fn`` on the CPU, through Triton's interpreter
    (:mod:`optimus_ir.interpret`), and compare it with eager: the outputs, and in a training step the gradients of
    the floating-point inputs and parameters for a fixed random weighting of the outputs. For users without the
    GPU: the kernels are those a CUDA device gets, run slowly. ``example_inputs`` are CPU tensors."""
    from torch._inductor import config as inductor_config
    from torch.utils._pytree import tree_leaves

    from optimus_ir.interpret import cpu_triton_interpreter
    from optimus_ir.testing.measure import max_rel_error

    def leaves(value: Any) -> list[torch.Tensor]:
        return [t for t in tree_leaves(value) if isinstance(t, torch.Tensor) and t.is_floating_point()]

    params = [p for p in (fn.parameters() if isinstance(fn, torch.nn.Module) else ()) if p.requires_grad]
    inputs = tuple(x.detach().requires_grad_(training and x.is_floating_point()) if isinstance(x, torch.Tensor) else x
                   for x in example_inputs)
    wants_grad = [x for x in leaves(inputs) if x.requires_grad] + params if training else []

    def run(call: Callable[..., Any]) -> list[torch.Tensor]:
        with torch.enable_grad() if training else torch.no_grad():
            outputs = leaves(call(*inputs))
        if not wants_grad:
            return [o.detach() for o in outputs]
        weights = [torch.randn(o.shape, generator=torch.Generator().manual_seed(i), dtype=o.dtype)
                   for i, o in enumerate(outputs)]
        loss = sum((o * w).sum() for o, w in zip(outputs, weights))
        return [o.detach() for o in outputs] + list(torch.autograd.grad(loss, wants_grad, allow_unused=True))

    expected = run(fn)
    torch._dynamo.reset()
    with (cpu_triton_interpreter(), switch.enabled(passes), recording() as records,
          inductor_config.patch(force_disable_caches=True)):
        actual = run(torch.compile(fn))
    torch._dynamo.reset()
    compared = [(got, want) for got, want in zip(actual, expected, strict=True) if got is not None and want is not None]
    return NumericsCheck([max_rel_error(got, want) for got, want in compared],
                         [CHECK_BOUNDS.get(want.dtype, 1e-4) for _, want in compared], list(records))
