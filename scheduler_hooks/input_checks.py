"""The inputs' size and stride checks of a graph's wrapper: one call for all of them, not one per input.

A merged kernel serves N members, and its graph takes their N inputs. Stock Inductor's wrapper checks each input on
every call with a line of its own; for 128 inputs that is more host time than the merged kernel's launch.
"""

from __future__ import annotations

import ast
from typing import Any

from optimus_ir.registry import NotApplicable, WrapperRule, register

_CHECKS = "input_checks"


@register
class InputAssertsToOneCheck(WrapperRule):
    """N ``assert_size_stride`` lines at the start of a graph's ``call`` → one check of all N inputs.

    Before (stock's wrapper)::

        def call(args):
            arg0_1, arg1_1, arg2_1 = args
            args.clear()
            assert_size_stride(arg0_1, (64, 256), (256, 1))
            assert_size_stride(arg1_1, (64, 256), (256, 1))
            assert_size_stride(arg2_1, (32, 96), (96, 1))

    After::

        input_checks = InputChecks([((64, 256), (256, 1)), ((64, 256), (256, 1)), ((32, 96), (96, 1))])

        def call(args):
            arg0_1, arg1_1, arg2_1 = args
            args.clear()
            if not input_checks.check(arg0_1, arg1_1, arg2_1):
                input_checks.assert_size_stride(arg0_1, arg1_1, arg2_1)

    ``check`` is one C++ call that is True only for inputs with the sizes and strides of inputs that passed
    stock's asserts before; otherwise stock's asserts run, and raise its errors (``optimus_ir.runtime.InputChecks``).
    Inputs of symbolic sizes (dynamic shapes) keep their own assert lines. Only for the Python wrapper of a whole
    graph (not a subgraph's, nor the C++ wrapper), with at least two inputs of static sizes.
    """

    name = "InputAssertsToOneCheck"
    pass_name = "horizontal"

    def rewrite(self, wrapper: Any, lines: list[str]) -> tuple[list[str], list[str], str]:
        from torch._inductor.codegen.wrapper import PythonWrapperCodegen

        if type(wrapper) is not PythonWrapperCodegen:
            raise NotApplicable(type(wrapper).__name__)
        static = {}  # line index -> (input name, size, stride)
        for index, line in enumerate(lines):
            checked = _static_assert(line)
            if checked is not None:
                static[index] = checked
        if len(static) < 2:
            raise NotApplicable(f"{len(static)} input(s) of static sizes")
        inputs = [name for name, _, _ in static.values()]
        names = ", ".join(inputs)
        wrapper.header.writeline("from optimus_ir.runtime import InputChecks")
        expected = [(size, stride) for _, size, stride in static.values()]
        wrapper.header.writeline(f"{_CHECKS} = InputChecks({expected!r})")
        kept = [line for index, line in enumerate(lines) if index not in static]
        detail = f"{len(static)} inputs' assert_size_stride → one check"
        if kept:
            detail += f"; {len(kept)} line(s) kept (symbolic sizes)"
        lines = [f"if not {_CHECKS}.check({names}):", f"    {_CHECKS}.assert_size_stride({names})", *kept]
        return lines, inputs, detail


def _static_assert(line: str) -> tuple[str, tuple[int, ...], tuple[int, ...]] | None:
    """``(input, size, stride)`` of a line ``assert_size_stride(input, size, stride)`` whose size and stride are
    integers; None for any other line."""
    try:
        call = ast.parse(line, mode="eval").body
    except SyntaxError:
        return None
    if not (isinstance(call, ast.Call) and isinstance(call.func, ast.Name) and call.func.id == "assert_size_stride"
            and len(call.args) == 3 and not call.keywords and isinstance(call.args[0], ast.Name)):
        return None
    try:
        size, stride = ast.literal_eval(call.args[1]), ast.literal_eval(call.args[2])
    except ValueError:
        return None
    return call.args[0].id, size, stride
