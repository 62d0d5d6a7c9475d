"""The checks of a graph's inputs before each call: their sizes and strides in one call, not one per input, and
their alignment by the member tables, which read their addresses anyway.

A merged kernel serves N members, and its graph takes their N inputs. Stock Inductor checks each input on every
call, one by one: for 128 inputs its checks take more host time than the merged kernel's launch.
"""

from __future__ import annotations

import ast
import collections
from typing import Any

from torch._inductor.virtualized import V
from torch.utils._ordered_set import OrderedSet

from optimus_ir.records import record
from optimus_ir.rule import NotApplicable, SchedulerRule, Stage, WrapperRule
from optimus_ir.scheduler_hooks.alignment_in_tables import RULE as ALIGNMENT_RULE
from optimus_ir.scheduler_hooks.alignment_in_tables import moved_to_tables
from optimus_ir.scheduler_hooks.horizontal.group import TableGroup

_CHECKS = "input_checks"


class InputAssertsToOneCheck(WrapperRule):
    """N ``assert_size_stride`` lines at the start of a graph's ``call`` → one check of all N inputs.

    Before (stock's wrapper)::

        def call(args):
            arg0_1, arg1_1, arg2_1, arg3_1 = args
            args.clear()
            s0 = arg2_1
            assert_size_stride(arg0_1, (64, 256), (256, 1))
            assert_size_stride(arg1_1, (32, 96), (96, 1))
            assert_size_stride(arg3_1, (s0, 256), (256, 1))

    After::

        input_checks = InputChecks([((64, 256), (256, 1)), ((32, 96), (96, 1)), ((None, 256), (256, 1))])

        def call(args):
            arg0_1, arg1_1, arg2_1, arg3_1 = args
            args.clear()
            s0 = arg2_1
            if not (input_checks.check(arg0_1, arg1_1, arg3_1) and (arg3_1.size(0),) == (s0,)):
                input_checks.assert_size_stride(arg0_1, arg1_1, arg3_1, symbols=(s0,))

    ``check`` is one C++ call that is True only for inputs with the layouts of inputs that passed stock's asserts
    before, their sizes and strides that are symbols (dynamic shapes) compared with the call's symbols in one tuple;
    otherwise stock's asserts run, and raise its errors (``optimus_ir.runtime.InputChecks``). Only for the Python
    wrapper of a whole graph (not a subgraph's, nor the C++ wrapper), with at least two inputs.
    """

    pass_name = "horizontal"

    def rewrite(self, wrapper: Any, lines: list[str]) -> tuple[list[str], list[str], str]:
        from torch._inductor.codegen.wrapper import PythonWrapperCodegen

        if type(wrapper) is not PythonWrapperCodegen:
            raise NotApplicable(type(wrapper).__name__)
        asserts = {}  # line index -> (input name, size, stride): each entry an int or a symbolic expression's text
        for index, line in enumerate(lines):
            checked = _assert(line)
            if checked is not None:
                asserts[index] = checked
        if len(asserts) < 2:
            raise NotApplicable(f"{len(asserts)} input(s) asserted")
        inputs = [name for name, _, _ in asserts.values()]
        names = ", ".join(inputs)
        actual, symbols = [], []
        for name, size, stride in asserts.values():
            for method, entries in (("size", size), ("stride", stride)):
                for dim, entry in enumerate(entries):
                    if isinstance(entry, str):
                        actual.append(f"{name}.{method}({dim})")
                        symbols.append(entry)
        expected = [
            tuple(tuple(None if isinstance(e, str) else e for e in entries) for entries in (size, stride))
            for _, size, stride in asserts.values()
        ]
        wrapper.header.writeline("from optimus_ir.runtime import InputChecks")
        wrapper.header.writeline(f"{_CHECKS} = InputChecks({expected!r})")
        check, asserted = f"{_CHECKS}.check({names})", names
        if symbols:
            check = f"({check} and ({', '.join(actual)},) == ({', '.join(symbols)},))"
            asserted += f", symbols=({', '.join(symbols)},)"
        kept = [line for index, line in enumerate(lines) if index not in asserts]
        detail = f"{len(asserts)} inputs' assert_size_stride → one check"
        if symbols:
            detail += f" ({len(symbols)} symbolic sizes or strides compared in one tuple)"
        return [f"if not {check}:", f"    {_CHECKS}.assert_size_stride({asserted})", *kept], inputs, detail


def _assert(line: str) -> tuple[str, tuple[int | str, ...], tuple[int | str, ...]] | None:
    """``(input, size, stride)`` of a line ``assert_size_stride(input, size, stride)``, each entry of the size and
    stride an integer or the text of a symbolic expression; None for any other line."""
    try:
        call = ast.parse(line.strip(), mode="eval").body
    except SyntaxError:
        return None
    if not (isinstance(call, ast.Call) and isinstance(call.func, ast.Name) and call.func.id == "assert_size_stride"
            and len(call.args) == 3 and not call.keywords and isinstance(call.args[0], ast.Name)
            and all(isinstance(arg, ast.Tuple) for arg in call.args[1:])):
        return None
    size, stride = (tuple(_entry(e) for e in arg.elts) for arg in call.args[1:])
    return call.args[0].id, size, stride


def _entry(node: ast.expr) -> int | str:
    """A size or stride entry: its integer, or the text of its expression (a symbol's)."""
    try:
        value = ast.literal_eval(node)
    except ValueError:
        return ast.unparse(node)
    return value if isinstance(value, int) else ast.unparse(node)


class InputAlignmentCheckedByMemberTables(SchedulerRule):
    """Inductor's alignment check of the inputs that only merged kernels read → their member tables' check.

    Inductor's kernels take a graph's inputs as 16-byte aligned, and its compiled graph checks them before each
    call, one by one (``copy_misaligned_inputs``, a Python loop over the inputs), copying any that is not. A
    member table reads the addresses of its inputs on every call
    anyway, and checks those its kernel takes as aligned when it makes a table for them (a table found again is
    one for the same addresses); it copies one that is not aligned, as Inductor would
    (``optimus_ir.runtime.MemberTable``).

    Before (the compiled graph, and the wrapper)::

        inputs_to_check = [0, 1, 2, 3]                  # checked before each call
        table = MemberTable(starts, numels, 4, aligned=[0, 1, 2, 3])

    After::

        inputs_to_check = []
        table = MemberTable(starts, numels, 4, aligned=[0, 1, 2, 3])

    Only inputs that no other kernel reads (stock's kernels take them as aligned, and so does a merged kernel that
    takes a group's few members' tensors: ``MemberTableGroup.direct``) and that the graph does not
    update in place (Inductor copies a misaligned one back after the call). Where a merged kernel falls back to
    stock kernels at code generation, its inputs are checked by Inductor again
    (:func:`~optimus_ir.scheduler_hooks.alignment_in_tables.check_alignment_again`).
    The compiled graph (``CompiledFxGraph``) keeps the very list ``compile_fx`` gave ``GraphLowering`` as
    ``inputs_to_check``; it is edited in place here (an Inductor that copied it would keep its own check).
    """

    name = ALIGNMENT_RULE
    pass_name = "horizontal"
    stage = Stage.POST_FUSION

    def rewrite(self, nodes: list[Any]) -> list[Any]:
        checked = V.graph.inputs_to_check
        if not isinstance(checked, list) or not checked:
            return nodes
        index = {name: i for i, name in enumerate(V.graph.graph_input_names)}
        readers: dict[str, list[Any]] = collections.defaultdict(list)
        for node in nodes:
            for name in OrderedSet(dep.name for dep in node.read_writes.reads):
                if name in index and index[name] in checked:
                    readers[name].append(node)
        def through_table(node: Any, name: str) -> bool:
            return isinstance(node, TableGroup) and name in node.read_through_tables()

        in_tables = [name for name, of in readers.items() if any(through_table(node, name) for node in of)]
        moved = [
            name for name in in_tables
            if name not in V.graph.mutated_inputs and all(through_table(node, name) for node in readers[name])
        ]
        if len(moved) < len(in_tables):
            kept = [name for name in in_tables if name not in moved]
            record(self.name, False, kept, "also read by stock kernels, or updated in place: Inductor checks them")
        if moved:
            for name in moved:
                checked.remove(index[name])
            moved_to_tables().update({name: index[name] for name in moved})
            record(self.name, True, moved, f"alignment of {len(moved)} input(s) checked by their member tables on "
                   "a new address, not by Inductor before each call")
        return nodes
