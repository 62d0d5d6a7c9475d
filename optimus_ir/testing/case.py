"""A golden case: a function, its example inputs, and what optimus_ir must do to it (:data:`golden_cases.CASES`)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import torch


@dataclasses.dataclass(frozen=True)
class Case:
    name: str
    fn: Callable[..., Any]
    make_inputs: Callable[[], tuple[torch.Tensor, ...]]
    stock_launches: int  # launches one call of stock Inductor makes (virtual sm_90)
    launches: int  # launches with optimus_ir
    fired: tuple[str, ...]  # rules that must fire
    atol: float = 1e-5
    rtol: float = 1e-5
    #: Inductor settings of the interpreter's compile on the CPU, where Inductor's CPU passes would change the graph
    #: the GPU's compile has (its pattern passes fold a sum of matmuls into addmms there)
    cpu_config: dict[str, Any] = dataclasses.field(default_factory=dict)
    #: symbolic sizes (a loop whose shapes change): the case compiles with ``dynamic=True``, and its numerics are
    #: checked at its inputs and then at these of other sizes, through the same compile
    other_sizes: Callable[[], tuple[torch.Tensor, ...]] | None = None

    @property
    def dynamic(self) -> bool:
        return self.other_sizes is not None


def backward_with_same_grads(actual: Any, expected: Any) -> None:
    """If the outputs require grad, backpropagate the same random gradients through ``actual`` and ``expected``."""
    actual = list(actual) if isinstance(actual, (list, tuple)) else [actual]
    expected = list(expected) if isinstance(expected, (list, tuple)) else [expected]
    if actual[0].requires_grad:
        grads = [torch.randn_like(out) for out in actual]
        torch.autograd.backward(actual, grads)
        torch.autograd.backward(expected, grads)



def run_as_eager_does(case: Case, compiled: Callable[..., Any], device: str = "cpu") -> None:
    """Call ``compiled`` on the case's inputs (on ``device``), then, for symbolic sizes, on its other sizes: each
    time its outputs, and the gradients of the same random output gradients, as eager's."""
    for make_inputs in (case.make_inputs, case.other_sizes)[: 1 + case.dynamic]:
        inputs = tuple(x.detach().to(device).requires_grad_(x.requires_grad) for x in make_inputs())
        eager_inputs = tuple(x.detach().clone().requires_grad_(x.requires_grad) for x in inputs)
        expected = case.fn(*eager_inputs)
        actual = compiled(*inputs)
        backward_with_same_grads(actual, expected)
        torch.testing.assert_close(actual, expected, atol=case.atol, rtol=case.rtol)
        for x, x_eager in zip(inputs, eager_inputs):
            if x.requires_grad:
                torch.testing.assert_close(x.grad, x_eager.grad, atol=case.atol, rtol=case.rtol)
