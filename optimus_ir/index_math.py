"""Index reasoning for the rewrites, in sympy, in one place.

Inductor writes memory accesses as sympy expressions over loop variables (``4096*p0 + p1 + 64``), with its own
integer functions ``FloorDiv`` and ``ModularIndexing`` (``torch.utils._sympy.functions``). The rules ask a few
questions of such expressions; each is answered here, by proof, or the answer is ``None`` ("can't prove it"), on
which a rule falls back to stock Inductor:

- :func:`piece_starts`: where each piece of a cat starts along the cat dimension (the pieces tile ``[0, total)``).
- :func:`constant_step`: do the expressions of pieces ``0..M-1`` differ by ``j * c`` for one constant ``c``?
- :func:`fold_pieces`: one expression over the whole run of pieces, from the first piece's and the step.
- :func:`join_div_mod`: ``c*FloorDiv(x, c) + ModularIndexing(x, 1, c)`` is ``x``.
- :func:`bounded_div_mod`: ``FloorDiv``/``ModularIndexing`` whose argument's proven range fits one quotient.
- :func:`loop_value_ranges`: the value ranges of loop variables, their sizes numbers or size symbols.
- :func:`tile_strided`: do strided views of one storage lie side by side along a dimension, and as which view?
- :func:`piece_containing`: which piece of a cat contains a slice ``[lo, hi)`` of it?
- :func:`split_constant`: an index as ``rest + c`` (``c`` an integer): members that differ only in ``c`` share code.
- :func:`flatten_loops`: an index over a loop nest as a function of one flat index (shapes that differ only in how
  the same elements are nested compare equal).
- :func:`abstract_divisors`: an index with the divisors of its ``FloorDiv``/``ModularIndexing`` as symbols (the
  bias of width 64 and the bias of width 96 are read by one expression, with the width a value of the member).
- :func:`sectors_per_warp`: how many 32-byte memory sectors a warp touches when its threads take consecutive flat
  indices (a transpose run over its flat index touches more than a contiguous copy).

Everything is sympy plus Inductor's integer functions (``sectors_per_warp`` evaluates an index on a tensor of flat
indices); nothing here needs a graph, so it is unit tested alone.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import functools

import sympy
import torch
from torch.utils._sympy.functions import FloorDiv, Identity, ModularIndexing

__all__ = [
    "abstract_divisors",
    "divisor_symbol",
    "bounded_div_mod",
    "constant_step",
    "flatten_loops",
    "fold_pieces",
    "is_static",
    "loop_value_ranges",
    "join_div_mod",
    "piece_containing",
    "piece_starts",
    "sectors_per_warp",
    "split_constant",
    "tile_strided",
]


def is_static(exprs: Iterable[sympy.Expr | int]) -> bool:
    """True when every expression is a plain integer (no size symbols)."""
    return all(not getattr(sympy.sympify(e), "free_symbols", set()) for e in exprs)


def piece_starts(sizes: Sequence[sympy.Expr | int]) -> list[sympy.Expr]:
    """Start offset of each piece when pieces of these sizes are laid end to end from 0.

    >>> piece_starts([3, 5, 2])
    [0, 3, 8]
    """
    starts: list[sympy.Expr] = []
    offset: sympy.Expr = sympy.Integer(0)
    for size in sizes:
        starts.append(offset)
        offset = offset + sympy.sympify(size)
    return starts


def constant_step(
    exprs: Sequence[sympy.Expr], loop_vars: Iterable[sympy.Symbol]
) -> sympy.Expr | None:
    """The ``c`` with ``exprs[j] == exprs[0] + j*c`` for every ``j``, if it exists and is free of ``loop_vars``.

    ``c`` may hold size symbols (dynamic shapes): equality is decided by sympy's expansion, so only what sympy
    proves counts. Returns None when there is no such ``c`` (e.g. a permutation that is not an arithmetic
    progression) or it depends on the loop variables (the pieces index differently, not just at an offset).
    """
    if len(exprs) < 2:
        return sympy.Integer(0)
    loop_vars = set(loop_vars)
    step = sympy.expand(exprs[1] - exprs[0])
    if step.free_symbols & loop_vars:
        return None
    for j, expr in enumerate(exprs[2:], start=2):
        if sympy.expand(expr - exprs[0] - j * step) != 0:
            return None
    return step


def fold_pieces(
    first: sympy.Expr,
    piece_var: sympy.Symbol,
    piece_size: sympy.Expr | int,
    step: sympy.Expr,
    out_var: sympy.Expr,
    replacements: Mapping[sympy.Symbol, sympy.Expr] | None = None,
) -> sympy.Expr:
    """One expression for a run of equal pieces laid end to end along ``out_var``.

    ``first`` is the first piece's expression in its own loop variables, ``piece_var`` the one along the cat
    dimension (size ``piece_size``), ``step`` the constant by which each next piece's expression grows. Element
    ``out_var`` of the run is element ``out_var % piece_size`` of piece ``out_var // piece_size``::

        first.subs(piece_var, ModularIndexing(out_var, 1, piece_size)) + step * FloorDiv(out_var, piece_size)

    ``replacements`` maps the other loop variables of the piece to those of the run.
    """
    piece_size = sympy.sympify(piece_size)
    if piece_size == 1:
        local, piece = sympy.Integer(0), out_var
    else:
        local, piece = ModularIndexing(out_var, 1, piece_size), FloorDiv(out_var, piece_size)
    mapping = {**(replacements or {}), piece_var: local}
    folded = first.xreplace(mapping) + step * piece
    return join_div_mod(sympy.expand(folded))


def join_div_mod(expr: sympy.Expr) -> sympy.Expr:
    """Rewrite ``k*c*FloorDiv(x, c) + k*ModularIndexing(x, 1, c)`` as ``k*x`` (x = c*(x//c) + x%c for x >= 0).

    Inductor index variables are non-negative, which is what the identity needs.

    >>> from sympy import Symbol
    >>> x = Symbol("x", integer=True, nonnegative=True)
    >>> join_div_mod(4096 + 64*FloorDiv(x, 64) + ModularIndexing(x, 1, 64))
    x + 4096
    """
    if not isinstance(expr, sympy.Add):
        return expr
    terms = {term: coeff for term, coeff in (arg.as_coeff_Mul()[::-1] for arg in expr.args)}
    for mod in [t for t in terms if isinstance(t, ModularIndexing)]:
        base, divisor, modulus = mod.args
        if divisor != 1 or mod not in terms:
            continue
        div = FloorDiv(base, modulus)
        coeff = terms[mod]
        if div in terms and sympy.expand(terms[div] - coeff * modulus) == 0:
            del terms[mod], terms[div]
            terms[base] = terms.get(base, 0) + coeff
    return sympy.Add(*(coeff * term for term, coeff in terms.items()))


def loop_value_ranges(
    ranges: Mapping[sympy.Symbol, sympy.Expr | int], size_ranges: Mapping[sympy.Symbol, Any] | None = None
) -> dict[sympy.Symbol, Any]:
    """The ``ValueRanges`` of each loop variable of ``ranges`` (``[0, size - 1]``), with those of the size symbols
    (``size_ranges``: a shape environment's ``var_to_range``). A symbolic size bounds its variable by the largest
    value that ``size_ranges`` allow the size (a symbol they do not name: any positive integer).

    >>> from sympy import Symbol
    >>> from torch.utils._sympy.value_ranges import ValueRanges
    >>> q, r, s = Symbol("q"), Symbol("r"), Symbol("s", integer=True, positive=True)
    >>> loop_value_ranges({q: 4, r: 2 * s}, {s: ValueRanges(2, 8)})[r]
    VR[0, 15]
    """
    from torch.utils._sympy.value_ranges import ValueRanges, bound_sympy

    value_ranges = dict(size_ranges or {})
    for var, size in ranges.items():
        last = sympy.sympify(size) - 1
        if not last.is_number:
            last = bound_sympy(last, value_ranges).upper
        value_ranges[var] = ValueRanges(0, last)
    return value_ranges


def bounded_div_mod(
    expr: sympy.Expr,
    ranges: Mapping[sympy.Symbol, sympy.Expr | int],
    size_ranges: Mapping[sympy.Symbol, Any] | None = None,
) -> sympy.Expr:
    """Remove ``FloorDiv(a, d)`` (→ its one possible value) and ``ModularIndexing(a, d, m)`` (→ ``a // d`` minus a
    constant) where the range of ``a`` over the loop ``ranges`` (each variable in ``[0, size)``) proves the
    quotient constant, resp. inside one period.

    Sizes, divisors and moduli may be size symbols (dynamic shapes), bounded by ``size_ranges``
    (:func:`loop_value_ranges`). Where the range of ``a`` is then not a range of numbers, ``a`` is split into the
    multiples of ``d`` (terms whose quotient sympy proves an integer) and a rest that sympy proves in ``[0, d)``
    from the variables' symbolic sizes (``q1 < s1``): ``FloorDiv(s1*q0 + q1, s1)`` is ``q0`` and
    ``ModularIndexing(s1*q0 + q1, 1, s1)`` is ``q1``. Otherwise the expression stays.

    >>> from sympy import Symbol
    >>> q = Symbol("q", integer=True, nonnegative=True)
    >>> bounded_div_mod(FloorDiv(q + 4, 40) + ModularIndexing(q + 4, 1, 40), {q: 4})
    q + 4
    >>> b, s = Symbol("b", integer=True, nonnegative=True), Symbol("s", integer=True, positive=True)
    >>> bounded_div_mod(FloorDiv(s*b + q + 4, s) + ModularIndexing(s*b + q + 4, 1, s), {b: 8, q: s - 4})
    b + q + 4
    """
    from torch.utils._sympy.value_ranges import bound_sympy

    value_ranges = loop_value_ranges(ranges, size_ranges)
    symbolic = bool(expr.free_symbols - set(ranges)) or not is_static(ranges.values())

    def bounds(e: sympy.Expr) -> tuple[int, int] | None:
        r = bound_sympy(e, value_ranges)
        return (int(r.lower), int(r.upper)) if r.lower.is_Integer and r.upper.is_Integer else None

    def floor_div(base: sympy.Expr, divisor: sympy.Expr) -> sympy.Expr | None:
        b = bounds(base)
        if b is None or not divisor.is_Integer or not divisor.is_positive:
            return None
        low, high = b[0] // int(divisor), b[1] // int(divisor)
        return sympy.Integer(low) if low == high else None

    def proven_nonnegative(e: sympy.Expr) -> bool:
        return bool(bound_sympy(sympy.expand(e), value_ranges).lower >= 0)

    def affine_upper(e: sympy.Expr) -> sympy.Expr | None:
        """The largest value of ``e``, affine in the loop variables with coefficients proven non-negative."""
        upper = []
        for term in sympy.Add.make_args(e):
            loop_vars = term.free_symbols & set(ranges)
            if not loop_vars:
                upper.append(term)
                continue
            if len(loop_vars) > 1:
                return None
            (var,) = loop_vars
            coeff = sympy.cancel(term / var)
            if var in coeff.free_symbols or not proven_nonnegative(coeff):
                return None
            upper.append(coeff * (sympy.sympify(ranges[var]) - 1))
        return sympy.Add(*upper)

    def split(base: sympy.Expr, divisor: sympy.Expr) -> tuple[sympy.Expr, sympy.Expr] | None:
        """``(q, r)`` with ``base == q*divisor + r`` and ``0 <= r < divisor`` proven, or None."""
        quotient, rest = [], []
        for term in sympy.Add.make_args(sympy.expand(base)):
            numerator, denominator = sympy.fraction(sympy.cancel(term / divisor))
            if denominator == 1 and numerator.is_integer:
                quotient.append(numerator)
            else:
                rest.append(term)
        r = sympy.Add(*rest)
        upper = affine_upper(r)
        if upper is None or not proven_nonnegative(r) or not proven_nonnegative(divisor - 1 - upper):
            return None
        return sympy.Add(*quotient), r

    def rewrite(e: sympy.Expr) -> sympy.Expr:
        if isinstance(e, FloorDiv):
            value = floor_div(*e.args)
            if value is None and symbolic:
                value = next(iter(split(*e.args) or ()), None)
            return e if value is None else value
        base, divisor, modulus = e.args
        quotient = base if divisor == 1 else FloorDiv(base, divisor)
        periods = floor_div(quotient, modulus)
        if periods is not None:
            return quotient - periods * modulus
        if symbolic:
            parts = split(quotient.replace(lambda x: isinstance(x, FloorDiv), rewrite), modulus)
            if parts is not None:
                return parts[1]
        return e

    return expr.replace(lambda e: isinstance(e, (FloorDiv, ModularIndexing)), rewrite)


def _proven_equal(a: sympy.Expr | int, b: sympy.Expr | int) -> bool:
    return sympy.expand(sympy.sympify(a) - sympy.sympify(b)) == 0


def _sympy_leq(a: sympy.Expr | int, b: sympy.Expr | int) -> bool:
    return sympy.expand(sympy.sympify(b) - sympy.sympify(a)).is_nonnegative is True


def tile_strided(
    pieces: Sequence[tuple[Sequence[sympy.Expr | int], Sequence[sympy.Expr | int], sympy.Expr | int]], dim: int
) -> tuple[list[sympy.Expr], list[sympy.Expr], sympy.Expr] | None:
    """The one strided view that strided views ``(size, stride, offset)`` of one storage form when laid side by side
    along ``dim`` in this order, or None unless that is proven.

    Proven means: equal sizes off ``dim``, equal strides off ``dim`` (where the size is not 1: a stride over one
    element is never used), one stride ``S > 0`` along ``dim`` (pieces of one element along ``dim`` take it from
    the distance between offsets), and each piece starting where the previous one ends:
    ``offset[i+1] == offset[i] + size[i][dim] * S``. Equalities are decided by sympy expansion, so symbolic sizes
    count only where sympy proves them. Pieces must be non-empty along ``dim``.

    >>> tile_strided([([8, 3], [16, 1], 2), ([8, 4], [16, 1], 5)], 1)   # x[:, 2:5], x[:, 5:9] of an [8, 16] x
    ([8, 7], [16, 1], 2)
    """
    if not pieces:
        return None
    sizes = [[sympy.sympify(s) for s in size] for size, _, _ in pieces]
    strides = [[sympy.sympify(s) for s in stride] for _, stride, _ in pieces]
    offsets = [sympy.sympify(offset) for _, _, offset in pieces]
    rank = len(sizes[0])
    if not 0 <= dim < rank or any(len(s) != rank or len(t) != rank for s, t in zip(sizes, strides)):
        return None
    out_stride = list(strides[0])
    for k in range(rank):
        if k == dim:
            continue
        if not all(_proven_equal(size[k], sizes[0][k]) for size in sizes):
            return None
        if sizes[0][k] == 1:
            continue
        if not all(_proven_equal(stride[k], strides[0][k]) for stride in strides):
            return None
    along = [stride[dim] for size, stride in zip(sizes, strides) if size[dim] != 1]
    if along:
        step = along[0]
        if not all(_proven_equal(s, step) for s in along):
            return None
    elif len(pieces) > 1:
        step = sympy.expand(offsets[1] - offsets[0])
    else:
        step = strides[0][dim]
    if sympy.sympify(step).is_positive is not True:
        return None
    for i in range(len(pieces) - 1):
        if not _proven_equal(offsets[i + 1], offsets[i] + sizes[i][dim] * step):
            return None
    out_size = list(sizes[0])
    out_size[dim] = sympy.Add(*(size[dim] for size in sizes))
    out_stride[dim] = step
    return out_size, out_stride, offsets[0]


def piece_containing(
    starts: Sequence[sympy.Expr | int],
    sizes: Sequence[sympy.Expr | int],
    lo: sympy.Expr | int,
    hi: sympy.Expr | int,
    known_leq: Callable[[sympy.Expr, sympy.Expr], bool] | None = None,
) -> int | None:
    """The index of the piece ``[starts[i], starts[i] + sizes[i])`` that contains ``[lo, hi)``, or None unless one
    provably does. ``known_leq(a, b)`` must return True only when ``a <= b`` is proven (default: sympy's sign
    of the expanded difference; pass ``V.graph.sizevars.statically_known_leq`` to use the shape environment).

    >>> piece_containing([0, 16, 32], [16, 16, 8], 18, 30)
    1
    >>> piece_containing([0, 16, 32], [16, 16, 8], 8, 24) is None       # straddles pieces 0 and 1
    True
    """
    leq = known_leq or _sympy_leq
    lo, hi = sympy.sympify(lo), sympy.sympify(hi)
    for i, (start, size) in enumerate(zip(starts, sizes)):
        start, size = sympy.sympify(start), sympy.sympify(size)
        if leq(start, lo) and leq(hi, start + size) and leq(lo, hi):
            return i
    return None


def split_constant(expr: sympy.Expr) -> tuple[sympy.Expr, int]:
    """``expr`` as ``(rest, c)`` with ``expr == rest + c``, ``c`` the integer additive term (0 if none).

    Only a top-level additive integer is taken: a constant inside ``FloorDiv``/``ModularIndexing`` changes which
    elements are addressed, not just where they start.

    >>> split_constant(sympy.sympify("32*p0 + p1 + 16"))
    (32*p0 + p1, 16)
    """
    expr = sympy.sympify(expr)
    constant = sum((int(term) for term in sympy.Add.make_args(expr) if term.is_Integer), 0)
    return sympy.expand(expr - constant) if constant else expr, constant



@functools.cache
def _static_simplifier() -> Callable[[sympy.Expr, dict[sympy.Symbol, int]], sympy.Expr]:
    from torch._inductor.sizevars import SizeVarAllocator

    return SizeVarAllocator().simplify_with_ranges


def flatten_loops(expr: sympy.Expr, ranges: Mapping[sympy.Symbol, sympy.Expr], flat: sympy.Symbol) -> sympy.Expr:
    """``expr`` over the loop variables ``ranges`` (outermost first, row-major; sizes are numbers or size symbols)
    as a function of one flat index ``flat`` in ``[0, prod(sizes))``: variable ``j`` is ``(flat // stride_j) %
    size_j``, simplified with Inductor's own range-aware simplifier.

    A pointwise kernel runs over the flat index, so two of them whose indices flatten to the same expressions
    compute the same function of it, whatever the shapes they were written for.

    >>> from sympy import Symbol
    >>> p0, p1, x = (Symbol(n, integer=True, nonnegative=True) for n in ("p0", "p1", "x"))
    >>> flatten_loops(32*p0 + p1 + 7, {p0: 64, p1: 32}, x)
    x + 7
    >>> flatten_loops(p0 + 64*p1, {p0: 64, p1: 32}, x)   # a transpose stays shape-specific
    ((x//32)) + 64*(ModularIndexing(x, 1, 32))
    >>> rows, width = Symbol("s0", integer=True, positive=True), Symbol("s1", integer=True, positive=True)
    >>> flatten_loops(width*p0 + p1, {p0: rows, p1: width}, x), flatten_loops(p1, {p0: rows, p1: width}, x)
    (x, ModularIndexing(x, 1, s1))
    """
    mapping: dict[sympy.Symbol, sympy.Expr] = {}
    stride = 1
    items = list(ranges.items())
    for position, (var, size) in reversed(list(enumerate(items))):
        mapping[var] = FloorDiv(flat, stride) if position == 0 else ModularIndexing(flat, stride, size)
        stride = stride * sympy.sympify(size)
    return _static_simplifier()(sympy.expand(sympy.sympify(expr).xreplace(mapping)), {flat: stride})


def abstract_divisors(expr: sympy.Expr, names: dict[int, sympy.Symbol]) -> sympy.Expr:
    """``expr`` with each integer divisor or modulus above 1 of its ``FloorDiv``/``ModularIndexing`` replaced by a
    symbol: one symbol per value, taken from ``names`` (value → symbol), which gets ``idivisor<i>`` for each new
    value, in order of first use. Substituting the values back gives ``expr``. (The ``i`` makes it an index symbol,
    ``SymT.INDEX``, to Inductor: its Triton code generator prints such a symbol as its name.)

    Two members whose abstracted indices print the same compute the same function of the flat index once each
    member's values are put in; the values become data of the member instead of part of the code.

    >>> from sympy import Symbol
    >>> x = Symbol("x", integer=True, nonnegative=True)
    >>> names = {}
    >>> abstract_divisors(ModularIndexing(x, 1, 64) + 64*FloorDiv(x, 4096), names), names
    (64*((x//idivisor0)) + (ModularIndexing(x, 1, idivisor1)), {4096: idivisor0, 64: idivisor1})
    """

    def rewrite(e: sympy.Expr) -> sympy.Expr:
        if isinstance(e, (FloorDiv, ModularIndexing)):
            base, *divisors = e.args
            return e.func(rewrite(base), *(name(d) if d.is_Integer and d > 1 else rewrite(d) for d in divisors))
        if not e.args:
            return e
        return e.func(*(rewrite(arg) for arg in e.args))

    def name(value: sympy.Integer) -> sympy.Symbol:
        key = int(value)
        if key not in names:
            names[key] = divisor_symbol(len(names))
        return names[key]

    return rewrite(sympy.sympify(expr))


def divisor_symbol(i: int) -> sympy.Symbol:
    """The symbol :func:`abstract_divisors` gives its ``i``-th value."""
    return sympy.Symbol(f"idivisor{i}", integer=True, positive=True)


def indirect_size_symbol(i: int) -> sympy.Symbol:
    """The symbol of the ``i``-th bound of a loaded index that members of a horizontal kernel read from its table."""
    return sympy.Symbol(f"irows{i}", integer=True, positive=True)


#: What the memory system moves per access: a sector of 32 bytes; and the threads of a warp, which access together.
SECTOR_BYTES = 32
WARP_THREADS = 32
_INTEGER_FUNCTIONS = {"FloorDiv": lambda a, b: a // b, "ModularIndexing": lambda a, b, c: (a // b) % c}


def sectors_per_warp(expr: sympy.Expr, flat: sympy.Symbol, numel: int, itemsize: int, warps: int = 64) -> float | None:
    """The mean number of ``SECTOR_BYTES`` sectors that a warp whose threads take consecutive values of ``flat``
    touches through the address ``expr`` (in elements of ``itemsize`` bytes), over ``warps`` warps spread evenly
    over ``[0, numel)``; None where ``expr`` has other symbols or functions than ``flat``, ``FloorDiv`` and
    ``ModularIndexing``. A contiguous access touches ``itemsize`` sectors per warp of 32 threads.

    >>> from sympy import Symbol
    >>> x = Symbol("x", integer=True, nonnegative=True)
    >>> sectors_per_warp(x + 3, x, 4096, 4), sectors_per_warp(64*ModularIndexing(x, 1, 64) + FloorDiv(x, 64), x, 4096, 4)
    (5.0, 32.0)
    """
    if expr.free_symbols - {flat}:
        return None
    expr = expr.replace(Identity, lambda arg: arg)  # (Inductor's guard against simplification prints as "I")
    try:
        address = sympy.lambdify(flat, expr, modules=[_INTEGER_FUNCTIONS])
        step = max(WARP_THREADS, numel // warps // WARP_THREADS * WARP_THREADS)
        starts = torch.arange(0, max(numel - WARP_THREADS + 1, 1), step, dtype=torch.int64)
        lanes = starts[:, None] + torch.arange(WARP_THREADS, dtype=torch.int64)[None, :]
        values = torch.as_tensor(address(lanes), dtype=torch.int64).expand(lanes.shape)
    except (NameError, TypeError, ValueError, RuntimeError):  # a function it cannot evaluate on integers
        return None
    sectors = values * itemsize // SECTOR_BYTES
    return sum(len(row.unique()) for row in sectors) / len(sectors)
