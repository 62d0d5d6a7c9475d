"""Structural keys: what a candidate kernel computes, with buffer names replaced by slots, so that kernels equal up
to names, row count and a constant offset per buffer compare equal."""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable
from typing import Any

import sympy
from torch._inductor import config, ir
from torch._inductor.codegen.cuda_combined_scheduling import CUDACombinedScheduling
from torch._inductor.codegen.simd_kernel_features import SIMDKernelFeatures
from torch._inductor.codegen.triton import TritonScheduling
from torch._inductor.scheduler import FusedSchedulerNode, SchedulerNode
from torch._inductor.virtualized import V
from torch.utils import _pytree as pytree
from torch.utils._sympy.symbol import SymT, symbol_is_type

from optimus_ir import index_math, segment_sum

@dataclasses.dataclass
class Structure:
    """What a candidate node computes, with buffer names replaced by slots numbered in order of first use."""

    key: tuple[Any, ...]
    slots: list[str]  # buffer names, by slot
    numel: int  # the x extent (rows of a reduction, elements of a pointwise kernel)
    offsets: list[int]  # by slot: the constant (in elements) this member adds to every address of that buffer
    updates_in_place: bool = False  # stores into a buffer it does not own (an input's update, a scatter)
    #: pointwise members: the divisors of their flat indices (``index_math.abstract_divisors``), by symbol number;
    #: members whose values differ read them from the member table
    divisors: tuple[int, ...] = ()
    #: pointwise members: per subnode, each index as a function of ``FLAT_INDEX`` with the divisors as symbols
    flat_indices: tuple[dict[str, sympy.Expr], ...] = ()
    #: a pointwise member of symbolic size (dynamic shapes): its numel as an expression of size symbols (``numel``
    #: is then its size hint, for the cost and memory estimates)
    numel_expr: sympy.Expr | None = None
    #: the reduction extent (elements reduced per row; 1 for pointwise; its size hint where symbolic). Part of the
    #: key, except for reductions of one row (a full sum, or a split reduction's second stage) and rows of a
    #: symbolic length over one dimension: members reducing different counts merge there
    rnumel: int = 1
    #: a row length of symbolic size over one dimension (a weight's gradient summed over a batch): its expression;
    #: members of other lengths read theirs from the member table, filled per call
    rnumel_expr: sympy.Expr | None = None
    #: the bound of each index loaded from a tensor (a table's rows), by subnode and order, where it is a number
    #: (:func:`member_bounds`): members whose bounds differ read theirs from the member table (not part of the key)
    indirect_sizes: tuple[int, ...] = ()
    #: whether the member reduces (one of its subnodes does; part of the key)
    reduction: bool = False


_ADDRESSING_OPS = ("load", "store", "store_reduction")

#: the flat index of a pointwise kernel, over which members' indices are compared
FLAT_INDEX = sympy.Symbol("x_flat", integer=True, nonnegative=True)


def addressed_buffers(blocks: list[Any]) -> dict[str, set[str] | None]:
    """For each index name of a loop body, the buffers it addresses; None if it is also used as a value."""
    addressed: dict[str, set[str] | None] = {}
    for block in blocks:
        for node in block.graph.nodes:
            if node.op != "call_module" or node.target != "get_index":
                continue
            name = node.args[0]
            for user in node.users:
                if user.op == "call_method" and user.target in _ADDRESSING_OPS and user.args[2] is node:
                    if addressed.get(name, set()) is not None:
                        addressed.setdefault(name, set()).add(user.args[1])
                else:
                    addressed[name] = None
    return addressed


def _graph_key(
    graph: Any,
    slot_of: dict[str, int],
    index_text: Callable[[str], str],
    address_offset: Callable[[str, str], int],
    run_offset: Callable[[str, int], int],
) -> tuple[Any, ...]:
    """An FX graph of ``ops.*`` calls as a tuple: buffer names replaced by their slots, index names by their
    expressions (without the constant a member adds to a buffer's addresses), each load/store with the constant its
    index adds beyond that, each ``segment_sum`` with the offsets of its runs beyond that."""
    position = {node: i for i, node in enumerate(graph.nodes)}

    def arg_key(arg: Any) -> Any:
        if isinstance(arg, str) and arg in slot_of:
            return ("slot", slot_of[arg])
        if isinstance(arg, (tuple, list)):
            return tuple(arg_key(a) for a in arg)
        if hasattr(arg, "op") and arg in position:
            return ("node", position[arg])
        return repr(arg)

    keys: list[Any] = []
    for node in graph.nodes:
        if node.op == "call_module" and node.target == "get_index":
            keys.append(("get_index", index_text(node.args[0])))
            continue
        args = segment_sum.key_args(node, run_offset) if node.target == segment_sum.NAME else node.args
        entry = (node.op, str(node.target), arg_key(args), arg_key(tuple(sorted(node.kwargs.items()))))
        if node.op == "call_method" and node.target in _ADDRESSING_OPS:
            entry += (address_offset(node.args[2].args[0], node.args[1]),)
        keys.append(entry)
    return tuple(keys)


def structure_of(node: Any) -> Structure | str:
    """The :class:`Structure` of a scheduler node, or why it cannot be a member of a group (``"category: detail"``)."""
    if type(node) not in (SchedulerNode, FusedSchedulerNode):
        return f"not a plain kernel: {type(node).__name__}"
    if triton_backend(node) is None:  # Inductor's C++ kernels on CPU: other loop groups, no member tables
        return f"no Triton backend on its device: {node.get_device()}"
    subnodes = list(node.get_nodes())
    tracer = _Tracer(node, _divisors_are_values(subnodes))
    for snode in subnodes:
        why = tracer.add(snode)
        if why is not None:
            return why
    return tracer.structure()


def _divisors_are_values(subnodes: list[Any]) -> bool:
    """Whether a pointwise node's divisors are values of the member (a bias of width 64 or 96: one body): where no
    body loads an index (an embedding row) that a re-traced body would have to load again."""
    return all(
        isinstance(snode, SchedulerNode) and isinstance(snode.node, ir.ComputedBuffer) and not snode.is_reduction()
        and not any(
            symbol_is_type(symbol, SymT.INDIRECT)
            for expr in snode._body.indexing_exprs.values() for symbol in expr.free_symbols
        )
        for snode in subnodes
    )


def _unsupported(snode: Any, node: Any, abstract: bool) -> str | None:
    """Why subnode ``snode`` of ``node`` cannot be traced into a structure, or None.

    Symbolic sizes (dynamic shapes): pointwise nodes are compared over the flat index, whose expressions then name
    the size symbols they use (members merge only where those are the same symbols); row reductions by their sizes
    but the row count, as expressions (a symbolic row length over one dimension merges with any other, each
    member's read from the table); pointwise nodes that load an index only where the row count is the one symbolic
    size."""
    if not isinstance(snode, SchedulerNode) or not isinstance(snode.node, ir.ComputedBuffer):
        return f"not a computed buffer: {snode.get_name()}"
    iter_sizes, reduce_sizes = snode._sizes
    sizes = [*iter_sizes, *reduce_sizes]
    symbolic = not all(isinstance(s, (int, sympy.Integer)) for s in sizes)
    if symbolic and not abstract and not node.is_reduction() and not all(
        isinstance(s, (int, sympy.Integer)) for s in sizes[1:]
    ):
        return f"symbolic sizes: {snode.get_name()} has {sizes}"
    body = snode._body
    allowed = (SymT.INDIRECT, SymT.SIZE, SymT.PRECOMPUTED_SIZE) if symbolic else (SymT.INDIRECT,)
    if any(
        not symbol_is_type(symbol, allowed)  # a loaded index (embedding rows): data, fine
        for expr in body.indexing_exprs.values()
        for symbol in expr.free_symbols - set(body.var_ranges)
    ):
        return f"symbolic index: {snode.get_name()} indexes with symbols other than its loop variables"
    return None


@dataclasses.dataclass
class _Tracer:
    """What :func:`structure_of` gathers over the subnodes of one node, in order."""

    node: Any
    abstract: bool  # see :func:`_divisors_are_values`
    slot_of: dict[str, int] = dataclasses.field(default_factory=dict)
    traced: list[Any] = dataclasses.field(default_factory=list)
    constants: dict[str, list[int]] = dataclasses.field(default_factory=dict)  # buffer → its indices' constants
    divisors: dict[int, sympy.Symbol] = dataclasses.field(default_factory=dict)  # (index_math.abstract_divisors)
    #: 0-d CPU tensors read as numbers: members merge only where they read the same ones
    by_value: set[str] = dataclasses.field(default_factory=set)
    flat_indices: list[dict[str, sympy.Expr]] = dataclasses.field(default_factory=list)

    def add(self, snode: Any) -> str | None:
        """Trace one subnode; why the node has no structure, or None."""
        why = _unsupported(snode, self.node, self.abstract)
        if why is not None:
            return why
        scheduler = self.node.scheduler
        body = snode._body
        names = {dep.name for dep in (*snode.read_writes.reads, *snode.read_writes.writes)}
        names |= set(snode.get_buffer_names())
        # a 0-d CPU tensor that a Triton kernel reads is passed by value (``.item()``), not as an address the table
        # could hold per member: the merged kernel gets the first member's number, so it is part of the structure
        self.by_value.update(name for name in names if V.graph.is_unspec_arg(name))
        blocks = body_blocks(body)
        # a buffer read after a scatter into it has a dependency named after the scatter, which renames it
        names |= {real for real, renamed in scheduler.mutation_renames.items() if renamed in names}
        for block in blocks:  # slots in order of first use (bucketize names its boundaries inside a tuple)
            for fx_node in block.graph.nodes:
                for arg in pytree.tree_leaves(fx_node.args):
                    if isinstance(arg, str) and arg in names:
                        self.slot_of.setdefault(arg, len(self.slot_of))
        exprs = self._indices(snode, blocks)
        # an in-place update (optimizer steps, scatters) stores into the buffer it mutates: that buffer gets a slot
        # too, and which slot each member mutates is part of the structure
        mutated = {name: scheduler.mutation_real_name.get(name, name) for name in snode.get_buffer_names()}
        if snode.is_reduction() and any(real != name for name, real in mutated.items()):
            return f"in-place update in a reduction: {snode.get_name()} updates {sorted(mutated.values())}"
        for real in mutated.values():
            self.slot_of.setdefault(real, len(self.slot_of))
        op_names = self.node.get_operation_names()
        written = tuple(
            (name, scheduler.can_buffer_be_removed_through_fusion(name, op_names), mutated[name])
            for name in snode.get_buffer_names()
        )
        iter_sizes, reduce_sizes = snode._sizes
        self.traced.append((snode, iter_sizes, reduce_sizes, blocks, exprs, written))
        return None

    def _indices(self, snode: Any, blocks: list[Any]) -> dict[str, tuple[sympy.Expr, int]]:
        """Each index of ``snode`` without the constant it adds to the buffer it addresses, and that constant; a
        pointwise kernel's as functions of the flat index it runs over, not of its shape."""
        body = snode._body
        addressed = addressed_buffers(blocks)
        flat = not snode.is_reduction()
        exprs = {}
        if self.abstract:
            self.flat_indices.append({})
        for name, expr in body.indexing_exprs.items():
            if flat:
                expr = index_math.flatten_loops(expr, body.var_ranges, FLAT_INDEX)
            if self.abstract:
                expr = self.flat_indices[-1][name] = index_math.abstract_divisors(expr, self.divisors)
            buffers = addressed.get(name)
            rest, constant = index_math.split_constant(expr) if buffers else (expr, 0)
            exprs[name] = (rest, constant)  # compared structurally (sympy); str() of every index cost more
            for buffer in buffers or ():
                self.constants.setdefault(buffer, []).append(constant)
        for buffer, offset in (run for block in blocks for run in segment_sum.offsets(block)):
            self.constants.setdefault(buffer, []).append(offset)
        return exprs

    def structure(self) -> Structure | str:
        """The structure of the traced node, or why it has none."""
        node, slot_of = self.node, self.slot_of
        # a member may add its own constant to every address of a buffer (x.split(8, 1)[i] reads x at +8*i): it
        # goes into that buffer's address in the member table; what each index adds beyond it stays in the key
        base = {buffer: min(values) for buffer, values in self.constants.items()}
        _, (numel, rnumel) = node.group
        # rows reduced over one dimension: no index can depend on their length where it is the one row's (there is
        # no row stride) or a symbol (an index naming it differs per member): members of different lengths share a
        # body, the kernel reading each member's length from the table
        one_dim = all(len(reduce_sizes) <= 1 for _, _, reduce_sizes, *_ in self.traced)
        one_row = numel == 1 and one_dim
        symbolic_rows = one_dim and not isinstance(rnumel, (int, sympy.Integer))
        parts = tuple(self._key_part(traced, base, one_row or symbolic_rows) for traced in self.traced)
        slots = sorted(slot_of, key=slot_of.__getitem__)
        dtypes = tuple(str(V.graph.get_dtype(name)) for name in slots)
        numel_expr = None
        if not isinstance(numel, (int, sympy.Integer)):
            numel_expr, numel = numel, V.graph.sizevars.optimization_hint(numel)
        numbers = tuple(sorted((slot_of[name], name) for name in self.by_value))
        extent = "one row, any length" if one_row and rnumel != 1 else "rows of any length" if symbolic_rows else (
            sympy.sympify(rnumel))
        key = (str(node.get_device()), extent, dtypes, parts, numel_expr is not None, numbers)
        in_place = any(real != name for *_, written in self.traced for name, _, real in written)
        return Structure(
            key, slots, int(numel), [base.get(name, 0) for name in slots], in_place, tuple(self.divisors),
            tuple(self.flat_indices), numel_expr, int(V.graph.sizevars.optimization_hint(rnumel)),
            sympy.sympify(rnumel) if symbolic_rows else None,
            tuple(size for snode, *_ in self.traced for size in member_bounds(snode._body)),
            any(snode.is_reduction() for snode, *_ in self.traced),
        )

    def _key_part(self, traced: Any, base: dict[str, int], any_length: bool) -> tuple[Any, ...]:
        """One subnode's part of the key: its kind, sizes (the count of reduced dimensions alone, where rows of any
        length merge), loop bodies (slots for names) and what it writes."""
        snode, iter_sizes, reduce_sizes, blocks, exprs, written = traced
        graphs = tuple(
            _graph_key(
                block.graph,
                self.slot_of,
                lambda name, exprs=exprs: exprs[name][0],
                lambda name, buffer, exprs=exprs: exprs[name][1] - base.get(buffer, 0),
                lambda buffer, offset: offset - base.get(buffer, 0),
            )
            for block in blocks
        )
        return (
            "reduction" if snode.is_reduction() else "pointwise",
            () if not snode.is_reduction() else tuple(sympy.sympify(s) for s in iter_sizes[1:]),
            len(reduce_sizes) if any_length else tuple(sympy.sympify(s) for s in reduce_sizes),
            graphs,
            tuple((self.slot_of.get(name), removable, self.slot_of[real]) for name, removable, real in written),
            tuple((None if in_table else size, *flags) for _, size, flags, in_table in indirect_indexing(snode._body)),
        )


def without_size_symbols(key: Any) -> tuple[Any, tuple[sympy.Symbol, ...]]:
    """``key`` with each size symbol it names replaced by a canonical one (``zs0``, ``zs1``, ... in the order the
    key first names them), and the symbols replaced, in that order: where two keys differ only in their size
    symbols (each feature's batch a symbol of its own), these keys are equal.

    Before: ``(..., 256*p0*((s64 + 3)//4) + p1, ...)``. After: ``(..., 256*p0*((zs0 + 3)//4) + p1, ...)``, ``(s64,)``.
    """
    order: dict[sympy.Symbol, sympy.Symbol] = {}

    def canonical(part: Any) -> Any:
        if isinstance(part, tuple):
            return tuple(canonical(p) for p in part)
        if not isinstance(part, sympy.Basic):
            return part
        for symbol in sympy.preorder_traversal(part):
            if isinstance(symbol, sympy.Symbol) and symbol_is_type(symbol, (SymT.SIZE, SymT.PRECOMPUTED_SIZE)):
                order.setdefault(symbol, sympy.Symbol(f"zs{len(order)}", integer=True, positive=True))
        return part.xreplace(order)

    return canonical(key), tuple(order)


def member_bounds(body: Any) -> list[int]:
    """The bounds of a body's loaded indices that members read from the member table, in order: those of
    :func:`indirect_indexing` that are numbers, then the bounds of each ``segment_sum`` call (its table's rows, its
    ids' count)."""
    sizes = [size for _, size, _, in_table in indirect_indexing(body) if in_table]
    return sizes + [n for block in body_blocks(body) for _, bounds in segment_sum.member_bounds(block) for n in bounds]


def body_blocks(body: Any) -> list[Any]:
    """A loop body's blocks: its root and its subblocks (``ops.masked`` bodies)."""
    return [body.root_block, *body.subblocks.values()]


def indirect_indexing(body: Any) -> list[tuple[sympy.Symbol, int | sympy.Expr, tuple[Any, ...], bool]]:
    """Each index a body loads from a tensor: its variable, the size it is checked against and wrapped by, whether
    it is checked and wrapped (not in the body's graph, which calls ``set_indirect<N>`` with the index alone), and
    whether members of other sizes share the body, reading theirs from the member table (a number, with its shim's
    flags known): the kernel must use each member's size (GraphSAGE's gathers from node types of 900 and 1500 rows
    failed its bounds check with the representative's). Other sizes are part of the key."""
    parts = []
    for var, size in body.indirect_var_ranges.items():
        shim = getattr(body.submodules.get(f"set_{var}"), "clone", None)
        flags = () if not isinstance(shim, functools.partial) else tuple(
            shim.keywords.get(flag) for flag in ("check", "wrap_neg")
        )
        size = sympy.sympify(size)
        in_table = isinstance(size, sympy.Integer) and bool(flags)
        parts.append((var, int(size) if in_table else size, flags, in_table))
    return parts


def triton_backend(node: Any) -> Any:
    """The Triton scheduling of the node's device, or None."""

    backend = node.scheduler.get_backend(node.get_device())
    if isinstance(backend, CUDACombinedScheduling):
        backend = backend._triton_scheduling
    return backend if isinstance(backend, TritonScheduling) else None


def _tiling(backend: Any, node: Any) -> dict[str, Any]:
    """Inductor's tiling for the node's kernel, its dimensions of extent 1 left out (but x)."""
    nodes = list(node.get_nodes())
    _, (numel, rnumel) = node.group
    schedule = backend.generate_node_schedule(nodes, numel, rnumel)
    tiling = backend.select_tiling(schedule, numel, rnumel)
    return {prefix: extent for prefix, extent in tiling.items() if prefix == "x" or extent != 1}


def tiling_prefixes(backend: Any, node: Any) -> tuple[str, ...]:
    """The dimensions of Inductor's tiling for the node's kernel: ``("x",)``, ``("x", "r0_")``, ``("y", "x")``..."""
    return tuple(_tiling(backend, node))


#: What kind of kernel a class of a kernel of several bodies is (:func:`row_reduction_kind` for reductions): classes
#: of one kernel are all of one kind.
POINTWISE, PERSISTENT, LOOPED = "pointwise", "persistent row reduction", "looped row reduction"
#: a pointwise class kept in Inductor's 2-d tiles inside a kernel of several bodies (a transpose whose run over its
#: flat index would cost the device more than the launch merging saves)
TILED = "pointwise in 2-d tiles"


def dispatched_as(kind: str) -> str:
    """The kind of the kernel of several bodies a class of ``kind`` runs in: pointwise ones, tiled or not, in one
    kernel; each kind of row reduction in its own."""
    return POINTWISE if kind == TILED else kind


def row_reduction_kind(node: Any) -> str | None:
    """Whether Inductor's kernel for the node is a row reduction (tiling ``(x, r0_)``) that keeps each row in one
    block (``PERSISTENT``: its block along the row a constant of its code) or loops over the row (``LOOPED``: its
    block along the row a parameter of the launch), asked as Inductor's kernel asks it; None for any other kernel,
    and for reductions Inductor may make cooperative or several kernels of (a class is one plain kernel)."""
    backend = triton_backend(node)
    if backend is None or tiling_prefixes(backend, node) != ("x", "r0_"):
        return None
    triton = config.triton
    if triton.cooperative_reductions or triton.force_cooperative_reductions or triton.multi_kernel:
        return None
    # Inductor merges the nodes' loops right after the pass, before their kernels are made, and the kernel's
    # reduction hint reads the merged loops' dependencies (a [4, 128] read of one buffer is contiguous only merged)
    if config.loop_ordering_after_fusion:
        for snode in node.get_nodes():
            if isinstance(snode, SchedulerNode) and not snode.is_template():
                snode.merge_loops()
    _, (numel, rnumel) = node.group
    features = SIMDKernelFeatures(backend.generate_node_schedule(list(node.get_nodes()), numel, rnumel), numel, rnumel)
    return PERSISTENT if V.choices.should_use_persistent_reduction(features, cooperative_reduction=False) else LOOPED


def _two_d_tiles(node: Any) -> dict[str, int] | None:
    """The extents of Inductor's tiling for a pointwise node's kernel where it tiles in 2-d over static sizes
    (``{"y": 640, "x": 784}``: a transpose, a slice laid out for a channels-last convolution), else None."""
    backend = triton_backend(node)
    if backend is None or node.is_reduction():
        return None
    tiling = _tiling(backend, node)
    if set(tiling) != {"y", "x"} or not all(isinstance(e, (int, sympy.Integer)) for e in tiling.values()):
        return None
    return {prefix: int(extent) for prefix, extent in tiling.items()}


def tiles_key(node: Any, structure: Structure) -> tuple[Any, ...] | None:
    """What pointwise candidates of one structure key must share to be served by one kernel in Inductor's 2-d tiles
    of one of them, its indices unchanged: the tiles (:func:`_two_d_tiles`) and the divisors of their flat indices;
    None where Inductor does not tile the node in 2-d."""
    tiles = _two_d_tiles(node)
    return None if tiles is None else (tuple(tiles.items()), structure.divisors)
