"""The Triton kernel of a group of several classes (kernels of different bodies, each with its member table): each
class's member-table kernel becomes a device function, and one kernel sends each block to its class.

    @triton.jit
    def class_0(in_ptr0, out_ptr0, xnumel, xpid, XBLOCK: tl.constexpr):     # class 0's member-table kernel,
        xstart = xpid * XBLOCK                                              # its block among its own
        ...
    @triton_heuristics.pointwise(...)
    @triton.jit
    def KERNEL_NAME(xtable0, xtable1, xnumel, XBLOCK: tl.constexpr):
        xpid = tl.program_id(0)
        if xpid < 8192 // XBLOCK:
            class_0(xtable0, xtable0, xnumel, xpid, XBLOCK)
        elif xpid < 12288 // XBLOCK:
            class_1(xtable1, xtable1, xtable1, xnumel, xpid - 8192 // XBLOCK, XBLOCK)

A class of a few members (``direct``: :data:`.tuning.MAX_DIRECT_MEMBERS`) is given their tensors, as Inductor's
kernel is given one member's, not a table: a table is looked up by its tensors' addresses on every call, which costs
the host more than passing them (``class_0(in_ptr0_class0, in_ptr1_class0, out_ptr0_class0, ...)``; the class picks
its block's member's). The code grows with the classes, and with their members up to that cap.

Every class starts its members at multiples of one alignment (:class:`~.kernel.ClassPlacement`), so one block size serves them all. Classes of persistent row
reductions are dispatched the same way, by blocks of rows: each keeps its own block along the row (a constant in
its code, ``R0_BLOCK: tl.constexpr = 64``), and the kernel's size hint along the row is the longest class's, so that
the block of rows the heuristics pick suits every class. Classes of looped row reductions loop over their rows with
the launch's ``R0_BLOCK``, which the dispatch kernel (a ``reduction``) passes to each. A pointwise class kept in
its 2-d tiles takes each block as one tile, its ``YBLOCK`` and ``XBLOCK`` passed from the launch's block
(``class_1(..., xpid - 8192 // XBLOCK, 32, XBLOCK // 32)``). A class's helper functions (a scan's combine
function) come before the classes, renamed for their class (``_triton_helper_fn_add0_class1``).

With symbolic sizes (a batch that changes: Dynamo's automatic dynamic shapes), where a class starts is known per
call only: the wrapper computes each such start from the size symbols and passes it, as it fills each class's table
from its members' numels (a ``direct`` class takes its members' numels and starts as size arguments of its own);
the last class ends at ``xnumel``. The size symbols a class's kernel takes (Inductor's
``ks0``, a looped class's row length) are passed through, one parameter per class::

    def KERNEL_NAME(xtable0, xtable1, ks0_class1, xstart_class1, xnumel, XBLOCK: tl.constexpr):
        xpid = tl.program_id(0)
        if xpid < xstart_class1 // XBLOCK:
            class_0(xtable0, xtable0, xnumel, xpid, XBLOCK)
        elif xpid < xnumel // XBLOCK:
            class_1(xtable1, xtable1, xtable1, ks0_class1, xnumel, xpid - xstart_class1 // XBLOCK, XBLOCK)

    # the wrapper: KERNEL_NAME.run(table0, table1, s46, 4096*((4095 + 96*s21) // 4096), <all classes' blocks>, ...)

Its classes then start their members at multiples of the largest block the heuristics pick, as a member table of
symbolic sizes does: a size hint bounds no block of a later call's sizes.
"""

from __future__ import annotations

import copy
import functools
import itertools
import re
from typing import Any

import sympy
import torch
from torch._inductor.runtime import triton_heuristics
from torch._inductor.runtime.hints import ReductionHint
from torch._inductor.runtime.runtime_utils import next_power_of_2
from torch._inductor.utils import Placeholder
from torch.utils._ordered_set import OrderedSet

from optimus_ir.scheduler_hooks.horizontal.allocation import RegionsOfAllocations
from optimus_ir.scheduler_hooks.horizontal.kernel import CLASS_PID, MemberTableKernel
from optimus_ir.scheduler_hooks.horizontal.structure import LOOPED, PERSISTENT, POINTWISE
from optimus_ir.scheduler_hooks.horizontal.tuning import CLASS_TILE_ROWS

_JIT = "@triton.jit\ndef "
#: the name of a helper function Inductor writes before a kernel (``HelperFunctions.add``: a base name and a number)
_HELPER = re.compile(r"\b_triton_helper_fn\w*")
#: Inductor's heuristics for a dispatch kernel of row reductions of each kind
_HEURISTICS = {PERSISTENT: "persistent_reduction", LOOPED: "reduction"}
#: the inductor meta's switches of autotuning
_TUNING = ("autotune_pointwise", "max_autotune", "max_autotune_pointwise", "coordinate_descent_tuning")


def dispatch_source(
    kernels: list[MemberTableKernel], kind: str, sources: list[str], meta: tuple[dict[str, Any], dict[str, Any]]
) -> str:
    """The source of one kernel over the classes whose member-table kernels are ``kernels``, all of ``kind``
    (:func:`kind_of`), of sources ``sources`` (each written with its class's :class:`~.kernel.ClassPlacement`);
    ``meta``: its :func:`triton_meta` and :func:`inductor_meta`. Raises NotImplementedError where a class's kernel
    takes an argument other than its tensors, its size symbols, its numel and its block size."""
    parts = [_with_own_helpers(source, k) for k, source in enumerate(sources)]
    imports = {imports for imports, _, _ in parts}
    if len(imports) != 1:
        raise NotImplementedError("classes whose kernels import different modules")
    helpers = "".join(helper for _, helper, _ in parts)
    ends = _class_ends(kernels)
    functions, calls = [], []
    for k, (kernel, (_, _, source)) in enumerate(zip(kernels, parts)):
        definition = _class_function(source, f"class_{k}")
        functions.append(definition)
        pid = f"{CLASS_PID} - {ends[k - 1]} // XBLOCK" if k else CLASS_PID
        arguments = _call_arguments(kernel, definition, k, pid)
        keyword = "if" if k == 0 else "elif"
        calls.append(f"    {keyword} {CLASS_PID} < {ends[k]} // XBLOCK:\n        class_{k}({', '.join(arguments)})\n")
    parameters = list(_parameters(kernels))
    if kind == POINTWISE:
        heuristics = (
            "@triton_heuristics.pointwise(\n"
            f"    size_hints={{'x': {kernels[0].size_hint_x}}}, \n"
            "    filename=__file__,\n"
            f"    triton_meta={meta[0]!r},\n"
            f"    inductor_meta={meta[1]!r},\n"
            f"    min_elem_per_thread={max(kernel.min_elem_per_thread for kernel in kernels)}\n"
            ")\n"
        )
    else:
        hints = {kernel.features.get_reduction_hint(kernel.tiling_scores) for kernel in kernels}
        heuristics = (
            f"@triton_heuristics.{_HEURISTICS[kind]}(\n"
            f"    size_hints={{'x': {kernels[0].size_hint_x}, 'r0_': {_row_size_hint(kernels)}}},\n"
            f"    reduction_hint={hints.pop() if len(hints) == 1 else ReductionHint.DEFAULT},\n"
            "    filename=__file__,\n"
            f"    triton_meta={meta[0]!r},\n"
            f"    inductor_meta={meta[1]!r}\n"
            ")\n"
        )
    numels = "xnumel" if kind == POINTWISE else "xnumel, r0_numel"
    blocks = "XBLOCK : tl.constexpr, R0_BLOCK : tl.constexpr" if kind == LOOPED else "XBLOCK : tl.constexpr"
    header = f"{_JIT}{Placeholder.KERNEL_NAME}({', '.join(parameters)}, {numels}, {blocks}):\n"
    body = f"    {CLASS_PID} = tl.program_id(0)\n{''.join(calls)}"
    return imports.pop() + helpers + "\n\n".join(functions) + "\n\n" + heuristics + header + body


def triton_meta(kernels: list[MemberTableKernel], kind: str) -> dict[str, Any]:
    """Class 0's, for the dispatch kernel's arguments: a table (16-byte aligned, as torch allocates) per class, or a
    ``direct`` class's tensors (aligned where Inductor takes them so), each class's sizes (:func:`_size_parameters`),
    the classes' starts known per call only (:func:`_class_starts`), and the blocks of all classes end to end."""
    meta = copy.deepcopy(kernels[0].triton_meta)
    total = sum(kernel.total_expr for kernel in kernels)
    arguments = _parameters(kernels)
    static = total.is_number
    arguments["xnumel"] = ("i32" if static and total < 2**31 else "i64", not static or total % 16 == 0)
    meta["signature"] = {
        **{name: signature_type for name, (signature_type, _) in arguments.items()},
        **({} if kind == POINTWISE else {"r0_numel": "i32"}),
        "XBLOCK": "constexpr",
        **({"R0_BLOCK": "constexpr"} if kind == LOOPED else {}),
    }
    aligned = [i for i, (_, is_aligned) in enumerate(arguments.values()) if is_aligned]
    meta["configs"] = [{(i,): [["tt.divisibility", 16]] for i in aligned}]
    meta["constants"] = {}
    return meta


def _parameters(kernels: list[MemberTableKernel]) -> dict[str, tuple[str, bool]]:
    """The dispatch kernel's parameters before its numels, in the order of its signature, each → its signature type
    and whether it is a multiple of 16: every class's tensors, every class's sizes, then the classes' starts known
    per call only (multiples of the largest block, of sizes no hint bounds: int64). The meta's divisibility hints
    name parameters by their position: they must follow this order."""
    tensors = {
        name: typed for k, kernel in enumerate(kernels)
        for name, typed in zip(_tensor_parameters(kernel, k), _tensor_types(kernel), strict=True)
    }
    sizes = {
        name: typed for k, kernel in enumerate(kernels)
        for name, typed in zip(_size_parameters(kernel, k), _size_types(kernel), strict=True)
    }
    return {**tensors, **sizes, **{name: ("i64", True) for name in _class_starts(kernels)}}


def inductor_meta(kernels: list[MemberTableKernel]) -> dict[str, Any]:
    """Class 0's, with the loads, stores and atomics of all classes, tuned only as far as every class may be (a
    class that updates a buffer in place is run with one config: the autotuner cannot clone what a table points
    to)."""
    meta = dict(kernels[0].inductor_meta)
    meta["grid_type"] = triton_heuristics.Grid1D.__name__  # (class 0 may be in 2-d tiles: its own grid is not)
    meta["kernel_name"] = str(Placeholder.DESCRIPTIVE_NAME)
    meta["mutated_arg_names"] = []
    for key in ("num_load", "num_store", "num_reduction"):
        if key in meta:
            meta[key] = sum(kernel.inductor_meta.get(key, 0) for kernel in kernels)
    for key in [key for key in _TUNING if key in meta]:
        meta[key] = all(kernel.inductor_meta.get(key, False) for kernel in kernels)
    meta["atomic_add_found"] = any(kernel.inductor_meta.get("atomic_add_found") for kernel in kernels)
    return meta


def launch(
    name: str, kernels: list[MemberTableKernel], kind: str, meta: tuple[dict[str, Any], dict[str, Any]]
) -> None:
    """The wrapper's lines for one call of dispatch kernel ``name``: each class's table (a ``direct`` class's
    tensors, made tensors where they are regions of one allocation), the launch over all classes' blocks (with the
    classes' sizes and the starts known per call only, computed from the size symbols), and the tables' release.
    ``meta``: the dispatch kernel's triton and inductor meta."""
    from torch._inductor.virtualized import V

    wrapper = V.graph.wrapper_code
    wrapper.write_triton_header_once()
    arguments, types, tables, totals = [], [], [], []
    for kernel in kernels:
        if kernel.direct:
            given = kernel.direct_arguments()
            RegionsOfAllocations.of(wrapper).make_tensors(OrderedSet(argument.buffer for argument in given))
            arguments += [argument.buffer for argument in given]
            types += [argument.dtype for argument in given]
            totals.append(wrapper.codegen_python_sizevar(kernel.total_expr))
            continue
        table, total = kernel.write_table(name)
        arguments.append(table)
        types.append(torch.int64)
        tables.append(table)
        totals.append(total)
    sizes = [expr for k, kernel in enumerate(kernels) for expr in _size_parameters(kernel, k).values()]
    sizes += _class_starts(kernels).values()
    numels = [wrapper.codegen_python_sizevar(expr) for expr in sizes]
    numels.append(" + ".join(str(t) for t in totals))
    if kind != POINTWISE:  # (each class sets its own row length)
        numels.append(str(max(s.rnumel for kernel in kernels for s in kernel.structures)))
    wrapper.generate_kernel_call(
        name, [*arguments, *numels], triton=True, arg_types=[*types] + [int] * len(numels),
        triton_meta=meta[0], inductor_meta=meta[1],
    )
    if tables:
        wrapper.writeline(f"del {', '.join(tables)}")


def kind_of(kernel: MemberTableKernel) -> str:
    """What a class's kernel is: ``POINTWISE``, or a row reduction that keeps each row in one block (``PERSISTENT``:
    its block along the row a constant of its code) or loops over it (``LOOPED``: with the launch's block); raises
    NotImplementedError for a reduction without blocks of rows."""
    if not kernel.inside_reduction:
        return POINTWISE
    if kernel.no_x_dim:
        raise NotImplementedError("a class of row reductions without blocks of rows")
    return PERSISTENT if kernel.persistent_reduction else LOOPED


def _row_size_hint(kernels: list[MemberTableKernel]) -> int:
    """The longest class row's size hint (a power of two): the heuristics then pick blocks of rows that keep the
    longest class's blocks within the registers Inductor allows one block, and smaller classes' within it too."""
    return next_power_of_2(max(s.rnumel for kernel in kernels for s in kernel.structures))


def _with_own_helpers(source: str, k: int) -> tuple[str, str, str]:
    """A class's kernel source as Inductor's imports, its helper functions (a scan's combine function) and its
    kernel, each helper renamed for class ``k`` in both: Inductor numbers the helpers of each kernel from 0, so two
    classes' helpers can share a name."""
    prelude, heuristics, kernel = source.partition("@triton_heuristics.")
    imports, jit, helpers = prelude.partition(_JIT)
    own = functools.partial(_HELPER.sub, lambda name: f"{name.group(0)}_class{k}")
    return imports, own(jit + helpers), own(heuristics + kernel)


def _class_function(source: str, function: str) -> str:
    """The ``@triton.jit`` function of a member-table kernel's ``source``, renamed ``function``, its block index
    among its class's blocks (``CLASS_PID``) an argument before its block sizes."""
    _, _, definition = source.partition(_JIT)
    signature, _, body = definition.partition("):\n")
    _, _, arguments = signature.partition("(")
    names = arguments.split(", ")
    first_constexpr = next(i for i, name in enumerate(names) if "tl.constexpr" in name)
    names.insert(first_constexpr, CLASS_PID)
    return f"{_JIT}{function}({', '.join(names)}):\n{body}"


def _class_ends(kernels: list[MemberTableKernel]) -> list[str]:
    """Where each class's blocks end among the dispatch kernel's, in elements, as its code: a number where the class
    and those before have static sizes; else known per call only, the next class's start (:func:`_class_starts`)
    or, for the last class, ``xnumel`` (all classes' blocks)."""
    ends = list(itertools.accumulate(kernel.total_expr for kernel in kernels))
    return [
        str(end) if end.is_number else f"xstart_class{k + 1}" if k + 1 < len(ends) else "xnumel"
        for k, end in enumerate(ends)
    ]


def _class_starts(kernels: list[MemberTableKernel]) -> dict[str, sympy.Expr]:
    """The dispatch kernel's arguments for the classes' starts known per call only (a class before has symbolic
    sizes): ``xstart_class1`` ... → the start as an expression of size symbols, which the wrapper computes."""
    starts = itertools.accumulate(kernel.total_expr for kernel in kernels[:-1])
    return {f"xstart_class{k + 1}": start for k, start in enumerate(starts) if not start.is_number}


def _class_sizes(kernel: MemberTableKernel) -> dict[str, sympy.Expr]:
    """The sizes a class's kernel takes as arguments of its own, by its parameter's name: the size symbols of its
    indices (Inductor's ``ks0``, shared by its members: :func:`.group._check_shared_size_symbols`), its row
    length where that is symbolic (the classes' static ones are constants of their code); a ``direct`` class of
    symbolic sizes, its members' numels and starts too (``MemberTableKernel.member_sizes``)."""
    sizes = {name: expr for expr, name in kernel.args.sizevars.items()}
    rnumel = kernel.numels.get("r0_") if kernel.inside_reduction else None
    if rnumel is not None and not rnumel.is_number:
        sizes["r0_numel"] = rnumel
    return sizes


def _size_parameters(kernel: MemberTableKernel, k: int) -> dict[str, sympy.Expr]:
    """The dispatch kernel's parameters for class ``k``'s :func:`_class_sizes`, each → the expression the wrapper
    passes."""
    return {f"{name}_class{k}": expr for name, expr in _class_sizes(kernel).items()}


def _size_types(kernel: MemberTableKernel) -> list[tuple[str, bool]]:
    """The signature type of each of :func:`_size_parameters` and whether Inductor takes it as a multiple of 16."""
    signature = kernel.triton_meta["signature"]
    names = list(signature)
    divisible = {
        names[index] for indices, hints in kernel.triton_meta["configs"][0].items()
        if ["tt.divisibility", 16] in hints for index in indices
    }
    return [(signature[name], name in divisible) for name in _class_sizes(kernel)]


def _tensor_parameters(kernel: MemberTableKernel, k: int) -> list[str]:
    """The dispatch kernel's parameters for class ``k``'s tensors: its table, or a ``direct`` class's tensors."""
    if kernel.direct:
        return [f"{argument.name}_class{k}" for argument in kernel.direct_arguments()]
    return [f"xtable{k}"]


def _tensor_types(kernel: MemberTableKernel) -> list[tuple[str, bool]]:
    """The signature type of each of :func:`_tensor_parameters` and whether it is 16-byte aligned."""
    if kernel.direct:
        return [(argument.signature_type, argument.aligned) for argument in kernel.direct_arguments()]
    return [("*i64", True)]


def _call_arguments(kernel: MemberTableKernel, definition: str, k: int, pid: str) -> list[str]:
    """What the dispatch kernel passes for each argument of class ``k``'s function (``definition``): the class's
    table for each tensor (a ``direct`` class: the tensor), its size symbols (:func:`_size_parameters`), the
    dispatch kernel's numel (the class's own is read from its table or written in its code), the class's block
    index and the block size."""
    if kernel.direct:
        tensors = {argument.name: f"{argument.name}_class{k}" for argument in kernel.direct_arguments()}
    else:
        tensors = {name: f"xtable{k}" for name, _ in kernel.tensor_args_of_table()}
    sizes = {name: f"{name}_class{k}" for name in _class_sizes(kernel)}
    signature = definition[len(_JIT):].partition("):\n")[0].partition("(")[2]
    # a class in 2-d tiles takes each block as one tile (its own numels are constants of its code)
    width = kernel.narrow_width
    tile = {"ynumel": "xnumel"} | (
        {"YBLOCK": str(CLASS_TILE_ROWS), "XBLOCK": f"XBLOCK // {CLASS_TILE_ROWS}"} if width is None
        else {"YBLOCK": f"XBLOCK // {width}", "XBLOCK": str(width)}
    )
    arguments = []
    for name in (argument.split(":")[0].strip() for argument in signature.split(", ")):
        if name in tensors:
            arguments.append(tensors[name])
        elif name in sizes:
            arguments.append(sizes[name])
        elif kernel.class_tiles and name in tile:
            arguments.append(tile[name])
        elif name in ("xnumel", "r0_numel", "XBLOCK", "R0_BLOCK"):
            arguments.append(name)
        elif name == CLASS_PID:
            arguments.append(pid)
        else:
            raise NotImplementedError(f"a class's kernel takes {name}")
    return arguments
