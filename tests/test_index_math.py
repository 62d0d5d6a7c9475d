"""Unit tests of the sympy index reasoning (no graph, no compile)."""

import sympy
import pytest
from torch.utils._sympy.functions import FloorDiv, ModularIndexing

from optimus_ir import index_math

p0, p1, o0, o1 = (sympy.Symbol(n, integer=True, nonnegative=True) for n in ("p0", "p1", "o0", "o1"))
s0 = sympy.Symbol("s0", integer=True, positive=True)


def test_piece_starts_tile_the_range():
    assert index_math.piece_starts([3, 5, 2]) == [0, 3, 8]
    starts = index_math.piece_starts([s0, s0, 4])
    assert starts == [0, s0, 2 * s0]


def test_constant_step_of_in_order_split():
    exprs = [4096 * p0 + p1 + 64 * j for j in range(64)]
    assert index_math.constant_step(exprs, [p0, p1]) == 64


def test_constant_step_of_reversed_split_is_negative():
    exprs = [4096 * p0 + p1 + 64 * (63 - j) for j in range(64)]
    assert index_math.constant_step(exprs, [p0, p1]) == -64


def test_constant_step_rejects_a_permutation_that_is_no_progression():
    exprs = [4096 * p0 + p1 + 64 * j for j in (0, 2, 1, 3)]
    assert index_math.constant_step(exprs, [p0, p1]) is None


def test_constant_step_rejects_steps_that_depend_on_loop_variables():
    # piece j strided by j: not an offset
    exprs = [4096 * p0 + (j + 1) * p1 for j in range(3)]
    assert index_math.constant_step(exprs, [p0, p1]) is None


def test_constant_step_with_symbolic_sizes_is_proved_or_refused():
    assert index_math.constant_step([p1 + s0 * j for j in range(4)], [p1]) == s0
    assert index_math.constant_step([p1 + s0 * j * j for j in range(4)], [p1]) is None


def test_constant_step_of_one_piece_is_zero():
    assert index_math.constant_step([p0 + 7], [p0]) == 0


def test_fold_reversed_64_piece_cat_is_one_expression():
    # piece 0 of the output is piece 63 of the input: 4096*p0 + p1 + 4032, step -64 per piece
    folded = index_math.fold_pieces(4096 * p0 + p1 + 4032, p1, 64, sympy.Integer(-64), o1, {p0: o0})
    assert folded == 4096 * o0 - 64 * FloorDiv(o1, 64) + ModularIndexing(o1, 1, 64) + 4032


def test_fold_in_order_cat_is_the_identity_map():
    folded = index_math.fold_pieces(4096 * p0 + p1, p1, 64, sympy.Integer(64), o1, {p0: o0})
    assert folded == 4096 * o0 + o1


def test_fold_pieces_of_size_one_uses_the_output_variable_as_piece_index():
    # unbind + stack: piece j reads x[j, p0] at 8*j + p0 ... size 1 along the stacked dim
    folded = index_math.fold_pieces(p0, p1, 1, sympy.Integer(8), o1, {p0: o0})
    assert folded == o0 + 8 * o1


@pytest.mark.parametrize("coeff", [1, 3, -2])
def test_join_div_mod(coeff):
    x = o1
    expr = coeff * (64 * FloorDiv(x, 64) + ModularIndexing(x, 1, 64)) + 5
    assert index_math.join_div_mod(sympy.expand(expr)) == coeff * x + 5


def test_join_div_mod_leaves_unmatched_terms():
    expr = 32 * FloorDiv(o1, 64) + ModularIndexing(o1, 1, 64)
    assert index_math.join_div_mod(expr) == expr
    expr = 64 * FloorDiv(o1, 64) + ModularIndexing(o1, 2, 64)
    assert index_math.join_div_mod(expr) == expr


def test_is_static():
    assert index_math.is_static([3, sympy.Integer(4)])
    assert not index_math.is_static([3, s0])


def test_bounded_div_mod_removes_what_the_ranges_prove():
    q0, q1 = p0, p1
    assert index_math.bounded_div_mod(FloorDiv(40 * q0 + q1 + 4, 40), {q0: 4, q1: 4}) == q0
    assert index_math.bounded_div_mod(ModularIndexing(40 * q0 + q1 + 4, 1, 40), {q0: 4, q1: 4}) == q1 + 4
    assert index_math.bounded_div_mod(ModularIndexing(q1 + 36, 1, 40), {q1: 8}) == ModularIndexing(q1 + 36, 1, 40)
    assert index_math.bounded_div_mod(ModularIndexing(q1 + 40, 4, 8), {q1: 4}) == FloorDiv(q1 + 40, 4) - 8


def test_bounded_div_mod_with_a_symbolic_batch_bounds_the_other_variables():
    """The batch variable's range is unbounded (its size a symbol); the columns' proof needs only the others'."""
    q0, q1 = p0, p1
    ranges = {q0: s0, q1: 64}
    assert index_math.bounded_div_mod(FloorDiv(1024 * q0 + q1 + 64, 1024), ranges) == q0
    assert index_math.bounded_div_mod(ModularIndexing(1024 * q0 + q1 + 64, 1, 1024), ranges) == q1 + 64
    straddles = ModularIndexing(1024 * q0 + q1 + 992, 1, 1024)  # columns 992..1055: two periods
    assert index_math.bounded_div_mod(straddles, ranges) == straddles


def test_bounded_div_mod_with_symbolic_divisors_proves_from_the_symbolic_sizes():
    s1 = sympy.Symbol("s1", integer=True, positive=True)
    q0, q1, q2 = p0, p1, o0
    # [s0, 64, s1] pieces of a [s0, 1024, s1] cat at column 64: dims 0 and 2 come back whatever the symbols
    index = 1024 * s1 * q0 + s1 * q1 + q2 + 64 * s1
    ranges = {q0: s0, q1: 64, q2: s1}
    assert index_math.bounded_div_mod(FloorDiv(index, 1024 * s1), ranges) == q0
    assert index_math.bounded_div_mod(ModularIndexing(index, s1, 1024), ranges) == q1 + 64
    assert index_math.bounded_div_mod(ModularIndexing(index, 1, s1), ranges) == q2
    # q2 + 1 reaches s1: not proven inside one period, so it stays
    assert index_math.bounded_div_mod(FloorDiv(s1 * q0 + q2 + 1, s1), ranges) == FloorDiv(s1 * q0 + q2 + 1, s1)
    assert index_math.bounded_div_mod(ModularIndexing(q2 + 1, 1, s1), ranges) == ModularIndexing(q2 + 1, 1, s1)


def test_loop_value_ranges_bound_symbolic_sizes_by_the_shape_environments_ranges():
    from torch.utils._sympy.numbers import int_oo
    from torch.utils._sympy.value_ranges import ValueRanges

    ranges = index_math.loop_value_ranges({p0: 8, p1: s0}, {s0: ValueRanges(2, 100)})
    assert (ranges[p0], ranges[p1], ranges[s0]) == (ValueRanges(0, 7), ValueRanges(0, 99), ValueRanges(2, 100))
    assert index_math.loop_value_ranges({p1: 2 * s0})[p1] == ValueRanges(0, int_oo)


# ----------------------------------------------------------------------------------------------- tile_strided


def test_tile_strided_partial_tiling_is_one_slice():
    # x[:, 2:5], x[:, 5:9] of a contiguous [8, 16] x → x[:, 2:9]
    assert index_math.tile_strided([([8, 3], [16, 1], 2), ([8, 4], [16, 1], 5)], 1) == ([8, 7], [16, 1], 2)


def test_tile_strided_full_tiling_along_dim0():
    pieces = [([2, 16], [16, 1], 0), ([3, 16], [16, 1], 32), ([3, 16], [16, 1], 80)]
    assert index_math.tile_strided(pieces, 0) == ([8, 16], [16, 1], 0)


def test_tile_strided_pieces_of_one_element_take_the_step_from_the_offsets():
    # unbind(1) of x.view(8, 4, 16), rows 1 and 2, unsqueezed: the stride over the size-1 dim is arbitrary
    pieces = [([8, 1, 16], [64, 999, 1], 16), ([8, 1, 16], [64, 7, 1], 32)]
    assert index_math.tile_strided(pieces, 1) == ([8, 2, 16], [64, 16, 1], 16)


def test_tile_strided_stride_off_the_cat_dim_ignored_where_the_size_is_one():
    pieces = [([1, 4], [5, 1], 0), ([1, 4], [100, 1], 4)]
    assert index_math.tile_strided(pieces, 1) == ([1, 8], [5, 1], 0)


def test_tile_strided_strided_pieces_that_continue_each_other():
    # x[:, 0:8:2], x[:, 8:16:2] is x[:, 0:16:2]
    assert index_math.tile_strided([([8, 4], [16, 2], 0), ([8, 4], [16, 2], 8)], 1) == ([8, 8], [16, 2], 0)


@pytest.mark.parametrize(
    "pieces",
    [
        [([8, 4], [16, 1], 0), ([8, 4], [16, 1], 2)],  # overlapping
        [([8, 4], [16, 1], 4), ([8, 4], [16, 1], 0)],  # out of order
        [([8, 8], [16, 2], 0), ([8, 8], [16, 2], 1)],  # interleaved x[:, 0::2], x[:, 1::2]
        [([8, 4], [16, 1], 0), ([8, 4], [16, 2], 4)],  # strides differ along the cat dim
        [([8, 4], [16, 1], 0), ([8, 4], [32, 1], 4)],  # strides differ off the cat dim
        [([8, 4], [16, 1], 0), ([7, 4], [16, 1], 4)],  # sizes differ off the cat dim
        [([8, 1], [16, 1], 3), ([8, 1], [16, 1], 3)],  # the same column twice: step 0
        [([8, 4], [16, 1], 0), ([8, 4, 1], [16, 1, 1], 4)],  # ranks differ
    ],
)
def test_tile_strided_refuses(pieces):
    assert index_math.tile_strided(pieces, 1) is None


def test_tile_strided_symbolic_sizes_proved_or_refused():
    s1 = sympy.Symbol("s1", integer=True, positive=True)
    s2 = sympy.Symbol("s2", integer=True, positive=True)
    # x[:, :s0], x[:, s0:s0+4] of [8, s1]: proven whatever s0
    pieces = [([8, s0], [s1, 1], 0), ([8, 4], [s1, 1], s0)]
    assert index_math.tile_strided(pieces, 1) == ([8, s0 + 4], [s1, 1], 0)
    # x[:, :s0], x[:, s2:]: a tiling only when s2 == s0, which sympy cannot know
    assert index_math.tile_strided([([8, s0], [s1, 1], 0), ([8, s1 - s2], [s1, 1], s2)], 1) is None


# ----------------------------------------------------------------------------------------------- piece_containing


def test_piece_containing_finds_the_one_input():
    starts, sizes = [0, 16, 48], [16, 32, 16]
    assert index_math.piece_containing(starts, sizes, 0, 16) == 0
    assert index_math.piece_containing(starts, sizes, 20, 28) == 1
    assert index_math.piece_containing(starts, sizes, 16, 48) == 1
    assert index_math.piece_containing(starts, sizes, 60, 64) == 2


def test_piece_containing_refuses_straddles_and_out_of_range():
    starts, sizes = [0, 16, 48], [16, 32, 16]
    assert index_math.piece_containing(starts, sizes, 12, 20) is None
    assert index_math.piece_containing(starts, sizes, 60, 70) is None
    assert index_math.piece_containing(starts, sizes, 20, 10) is None  # hi < lo


def test_piece_containing_symbolic_needs_a_proof():
    starts = index_math.piece_starts([s0, s0])
    assert index_math.piece_containing(starts, [s0, s0], s0 + 1, 2 * s0) == 1
    assert index_math.piece_containing(starts, [s0, s0], 2, 5) is None  # needs s0 >= 5
    # with a stronger oracle (e.g. the shape environment's) the same question is answered
    assert index_math.piece_containing(starts, [s0, s0], 2, 5, lambda a, b: bool((b - a).subs(s0, 8) >= 0)) == 0


def test_split_constant_takes_the_top_level_integer_only():
    p0, p1 = sympy.symbols("p0 p1", integer=True, nonnegative=True)
    assert index_math.split_constant(32 * p0 + p1 + 16) == (32 * p0 + p1, 16)
    assert index_math.split_constant(32 * p0 + p1) == (32 * p0 + p1, 0)
    assert index_math.split_constant(sympy.Integer(7)) == (0, 7)
    inner = ModularIndexing(p1 + 8, 1, 16)
    assert index_math.split_constant(inner + 4) == (inner, 4)  # the 8 inside stays: it changes which elements


x = sympy.Symbol("x", integer=True, nonnegative=True)
p2 = sympy.Symbol("p2", integer=True, nonnegative=True)


@pytest.mark.parametrize("shape", [(64, 32), (128, 64), (100, 16), (3, 5, 7)])
def test_flatten_loops_of_contiguous_access_is_the_flat_index(shape):
    variables = (p0, p1, p2)[: len(shape)]
    strides = [1] * len(shape)
    for d in range(len(shape) - 2, -1, -1):
        strides[d] = strides[d + 1] * shape[d + 1]
    expr = sum(s * v for s, v in zip(strides, variables)) + 5
    assert index_math.flatten_loops(expr, dict(zip(variables, shape)), x) == x + 5


def test_flatten_loops_keeps_shapes_apart_where_access_is_not_contiguous():
    transposed_a = index_math.flatten_loops(p0 + 64 * p1, {p0: 64, p1: 32}, x)
    transposed_b = index_math.flatten_loops(p0 + 128 * p1, {p0: 128, p1: 64}, x)
    assert transposed_a != transposed_b
    # broadcast of a row: a bias [32] added to every row of [64, 32] reads (x % 32), not x
    assert index_math.flatten_loops(p1, {p0: 64, p1: 32}, x) == ModularIndexing(x, 1, 32)


def test_module_doctests():
    import doctest

    assert doctest.testmod(index_math).failed == 0


def test_abstract_divisors_makes_widths_values_of_the_member():
    x = sympy.Symbol("x", integer=True, nonnegative=True)
    bias = {}
    narrow = index_math.abstract_divisors(index_math.flatten_loops(p1, {p0: 16, p1: 64}, x), bias)
    wide_names = {}
    wide = index_math.abstract_divisors(index_math.flatten_loops(p1, {p0: 8, p1: 96}, x), wide_names)
    assert str(narrow) == str(wide)  # one expression reads both biases
    assert list(bias) == [64] and list(wide_names) == [96]
    # the values put back give the original
    assert narrow.xreplace({s: v for v, s in bias.items()}) == ModularIndexing(x, 1, 64)


def test_abstract_divisors_names_a_value_once_and_leaves_coefficients():
    x = sympy.Symbol("x", integer=True, nonnegative=True)
    names = {}
    expr = FloorDiv(x, 64) + 3 * ModularIndexing(x, 1, 64) + ModularIndexing(x, 1, 1)
    expr = index_math.abstract_divisors(expr, names)
    assert list(names) == [64]
    (symbol,) = names.values()
    assert expr.has(3 * ModularIndexing(x, 1, symbol)) and expr.has(FloorDiv(x, symbol))
    # a transpose keeps its width as a coefficient: two widths stay two expressions
    a = index_math.abstract_divisors(index_math.flatten_loops(p0 + 64 * p1, {p0: 64, p1: 32}, x), {})
    b = index_math.abstract_divisors(index_math.flatten_loops(p0 + 128 * p1, {p0: 128, p1: 32}, x), {})
    assert str(a) != str(b)


def test_sectors_per_warp_of_contiguous_strided_and_broadcast_accesses():
    x = sympy.Symbol("x", integer=True, nonnegative=True)
    assert index_math.sectors_per_warp(x, x, 4096, 4) == 4  # 32 threads × 4 bytes
    assert index_math.sectors_per_warp(x, x, 4096, 2) == 2
    assert index_math.sectors_per_warp(64 * ModularIndexing(x, 1, 64) + FloorDiv(x, 64), x, 4096, 4) == 32
    assert index_math.sectors_per_warp(FloorDiv(x, 64), x, 4096, 4) == 1  # one row's bias
    # a conv weight laid out for channels-last over its flat index: 9 taps of 4 channels in a warp
    weight = ModularIndexing(x, 9, 32) + 32 * ModularIndexing(x, 1, 9) + 288 * FloorDiv(x, 288)
    assert 9 <= index_math.sectors_per_warp(weight, x, 64 * 288, 4) <= 12


def test_sectors_per_warp_sees_through_inductors_identity():
    from torch.utils._sympy.functions import Identity

    x = sympy.Symbol("x", integer=True, nonnegative=True)
    expr = Identity(ModularIndexing(x, 1, 240)) + 120 * FloorDiv(x, 240)  # a cat input's index in MixNet-S
    assert 4 <= index_math.sectors_per_warp(expr, x, 4096, 4) <= 5


def test_sectors_per_warp_is_none_for_other_symbols():
    x = sympy.Symbol("x", integer=True, nonnegative=True)
    assert index_math.sectors_per_warp(x + s0, x, 4096, 4) is None
