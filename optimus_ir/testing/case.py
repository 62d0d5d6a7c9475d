"""A golden case: a function, its example inputs, and what optimus_ir must do to it (:data:`golden_cases.CASES`)."""

from __future__ import annotations

import copy
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


def backward_with_same_grads(actual: Any, expected: Any) -> None:
    """If the outputs require grad, backpropagate the same random gradients through ``actual`` and ``expected``."""
    actual = list(actual) if isinstance(actual, (list, tuple)) else [actual]
    expected = list(expected) if isinstance(expected, (list, tuple)) else [expected]
    if actual[0].requires_grad:
        grads = [torch.randn_like(out) for out in actual]
        torch.autograd.backward(actual, grads)
        torch.autograd.backward(expected, grads)



def copies(fn: Callable[..., Any], device: str | None = None) -> tuple[Callable[..., Any], Callable[..., Any]]:
    """A case's function twice, one to compile and one to run in eager: a module as two copies of its own (on
    ``device`` where given), so that each accumulates its own parameters' gradients; a function as itself."""
    if isinstance(fn, torch.nn.Module):
        first, second = copy.deepcopy(fn), copy.deepcopy(fn)
        return (first.to(device), second.to(device)) if device else (first, second)
    return fn, fn


def assert_same_parameter_grads(actual: Callable[..., Any], expected: Callable[..., Any], case: Case) -> None:
    """A module's parameters' gradients, compiled (``actual``) against eager (``expected``), within the case's
    tolerances; nothing for a function."""
    if isinstance(actual, torch.nn.Module):
        for (name, param), expected_param in zip(actual.named_parameters(), expected.parameters(), strict=True):
            torch.testing.assert_close(param.grad, expected_param.grad, atol=case.atol, rtol=case.rtol, msg=name)
