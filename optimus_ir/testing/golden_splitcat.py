"""The golden cases of the split/cat pass: split → pointwise → cat (one map per progression of pieces), chains of
such layers, cats of views, and slices or splits of cats (part of :data:`optimus_ir.testing.golden_cases.CASES`)."""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F

from optimus_ir.testing.case import Case


def _randn(*shape: int, dtype: torch.dtype = torch.float32, grad: bool = False) -> Callable[[], tuple[torch.Tensor]]:
    return lambda: (torch.randn(*shape, dtype=dtype, requires_grad=grad),)


def split64_relu_cat_reversed(x):
    return torch.cat([torch.relu(p) for p in reversed(x.split(64, dim=1))], dim=1)


def split64_relu_cat(x):
    return torch.cat([torch.relu(p) for p in x.split(64, dim=1)], dim=1)


def chunk16_tanh_sigmoid_cat(x):
    ops = (torch.tanh, torch.sigmoid)
    return torch.cat([ops[i % 2](p) for i, p in enumerate(x.chunk(16, dim=1))], dim=1)


def split_uneven_relu_cat(x):
    # sizes 16,16,16 | 32,32 | 8: three runs of equal pieces, all reading x where they write: one map
    return torch.cat([torch.relu(p) * 2 for p in x.split([16, 16, 16, 32, 32, 8], dim=1)], dim=1)


def split_uneven_relu_cat_reversed(x):
    # more than 8 pieces of three sizes, reversed: progressions 8,8 | 32,32,32 | 16 x 5 with three different maps
    sizes = [16] * 5 + [32] * 3 + [8] * 2
    return torch.cat([torch.relu(p) * 2 for p in reversed(x.split(sizes, dim=1))], dim=1)


def chunk_dim0_gelu_cat(x):
    return torch.cat([F.gelu(p) for p in reversed(x.chunk(12, dim=0))], dim=0)


def overlapping_slices_cat(x):
    return torch.cat([torch.relu(x[:, 32 * i : 32 * i + 64]) for i in range(10)], dim=1)


def strided_slices_cat(x):
    return torch.cat([torch.exp(x[:, i::10]) for i in range(10)], dim=1)


def unbind_stack(x):
    return torch.stack([torch.sigmoid(r) * 2 for r in x.unbind(1)], dim=1)


_CHAIN_OPS = (torch.relu, torch.tanh, torch.sigmoid, F.silu, torch.abs, F.gelu, torch.sin, torch.neg, torch.exp,
              torch.cos)


def split_ops_cat_chain3(x):
    # 3 layers of: split into 10 → a different op per piece → cat → scale; the layers read through: one kernel
    for _ in range(3):
        x = torch.cat([op(p) for op, p in zip(_CHAIN_OPS, x.chunk(10, dim=1))], dim=1) * 0.5
    return x.sum(dim=1)


def split_ops_cat_scale_chain2(x, scale):
    # 2 layers of split into 10 → a different op per piece → cat → * a per-column scale, the last one
    # returned: the last scale is applied in the pieces (CatConsumerIntoPieces), so the chain is one kernel
    for _ in range(2):
        x = torch.cat([op(p) for op, p in zip(_CHAIN_OPS, x.chunk(10, dim=1))], dim=1) * scale
    return x


def split_relu_cat_training(x):
    # relu saves its output for the backward: the forward's pieces have a second consumer (no rewrite there)
    return torch.cat([torch.relu(p) for p in reversed(x.split(16, dim=1))], dim=1)


def split_scale_cat_training(x):
    return torch.cat([p * 3 for p in reversed(x.split(16, dim=1))], dim=1)


def cat_split_slices_mm(x, w):
    # columns 32..95 of x, split and glued back in order: a view of x, read by the matmul (no copy kernel)
    return torch.cat(x.split(16, dim=1)[2:6], dim=1) @ w


def stack_unbind_view_mm(x, w):
    # through a reshape: rows 1..2 of x.view(8, 4, 16), stacked back and flattened: x[:, 16:48] as a view
    return torch.stack(x.view(8, 4, 16).unbind(1)[1:3], dim=1).flatten(1) @ w


def _ops_of_six_pieces(ps):
    return torch.relu(ps[0]) + torch.sin(ps[1]) * torch.cos(ps[2]) + torch.tanh(ps[3]) - torch.sigmoid(ps[4]) * ps[5]


def cat_split_with_other_sizes(a, b, c, d, e):
    # round trip with other sizes than the cat's (Inductor's FX pass only undoes equal sizes); every piece lies
    # inside one input: the kernel reads the inputs, the cat is never written
    return _ops_of_six_pieces(torch.cat([a, b, c, d, e], dim=1).split([16] * 6, dim=1))


def cat_chunk_consumers(a, b, c, d, e):
    return _ops_of_six_pieces(torch.cat([a, b, c, d, e], dim=1).chunk(6, dim=1))


def cat_slices_consumers(a, b, c, d, e):
    t = torch.cat([a, b, c, d, e], dim=1)
    return torch.relu(t[:, 20:28]) * torch.sin(t[:, 40:48]) + torch.cos(t.narrow(1, 66, 8))


def _five_inputs_one_wide() -> tuple[torch.Tensor, ...]:
    return tuple(torch.randn(8, width) for width in (16, 32, 16, 16, 16))


def cat_with_reduction_slices(*xs):
    # a ConcatKernel (one input is a reduction): stock copies the 8 inputs into it (one foreach kernel) and the sum
    # writes its column; both slices lie inside inputs, so nothing reads the cat: it and its writers are removed
    t = torch.cat([*xs[:-1], xs[-1].sum(1, keepdim=True)], dim=1)
    return torch.relu(t[:, 4:12]) + t[:, 20:28]


SPLITCAT_CASES = [
    Case("split64_relu_cat_reversed", split64_relu_cat_reversed, _randn(64, 4096), 64, 1, ("SplitCatToPointwise",)),
    Case("split64_relu_cat", split64_relu_cat, _randn(64, 4096), 64, 1, ("SplitCatToPointwise",)),
    Case(
        "chunk16_tanh_sigmoid_cat",
        chunk16_tanh_sigmoid_cat,
        _randn(32, 1024),
        16,
        1,
        ("SplitCatToPointwise", "PieceGroupToComboKernel"),
    ),
    Case(
        "split_uneven_relu_cat",
        split_uneven_relu_cat,
        _randn(8, 120),
        1,
        1,
        ("SplitCatToPointwise",),
    ),
    Case(
        "split_uneven_relu_cat_reversed",
        split_uneven_relu_cat_reversed,
        _randn(8, 192),
        10,
        1,
        ("SplitCatToPointwise", "PieceGroupToComboKernel"),
    ),
    Case(
        "chunk_dim0_gelu_cat_bf16",
        chunk_dim0_gelu_cat,
        _randn(96, 130, dtype=torch.bfloat16),
        12,
        1,
        ("SplitCatToPointwise",),
        atol=1e-2,
        rtol=1e-2,
    ),
    Case("overlapping_slices_cat", overlapping_slices_cat, _randn(16, 352), 10, 1, ("SplitCatToPointwise",)),
    Case("strided_slices_cat", strided_slices_cat, _randn(16, 500), 10, 1, ("SplitCatToPointwise",)),
    Case("unbind_stack", unbind_stack, _randn(24, 20, 33), 20, 1, ("SplitCatToPointwise",)),
    Case(
        "split_ops_cat_chain3",
        split_ops_cat_chain3,
        _randn(16, 120),
        31,
        2,
        ("SplitCatToPointwise", "CatConsumerIntoPieces", "DeadFoldedCatElimination", "PieceGroupToComboKernel"),
        atol=1e-4,
        rtol=1e-4,
    ),
    Case(
        "split_ops_cat_scale_chain2",
        split_ops_cat_scale_chain2,
        lambda: (torch.randn(16, 120), torch.rand(120) + 0.5),
        21,
        1,
        ("SplitCatToPointwise", "CatConsumerIntoPieces", "DeadFoldedCatElimination", "PieceGroupToComboKernel"),
        atol=1e-4,
        rtol=1e-4,
    ),
    Case(
        # the same chain in bf16: the one kernel computes in fp32 and rounds each cat's values to bf16 where the
        # next layer (or the scale) reads them, as stock's kernels do when they store each cat
        "split_ops_cat_scale_chain2_bf16",
        split_ops_cat_scale_chain2,
        lambda: (torch.randn(16, 120, dtype=torch.bfloat16), (torch.rand(120) + 0.5).to(torch.bfloat16)),
        21,
        1,
        ("SplitCatToPointwise", "CatConsumerIntoPieces", "DeadFoldedCatElimination", "PieceGroupToComboKernel"),
        atol=2e-2,
        rtol=2e-2,
    ),
    Case(
        "split_relu_cat_training",
        split_relu_cat_training,
        _randn(32, 160, grad=True),
        20,
        2,
        ("SplitCatToPointwise", "IdenticalKernelsToMemberTableKernel"),
    ),
    Case(
        "split_scale_cat_training",
        split_scale_cat_training,
        _randn(32, 160, grad=True),
        20,
        2,
        ("SplitCatToPointwise",),
    ),
    Case(
        "cat_split_slices_mm",
        cat_split_slices_mm,
        lambda: (torch.randn(8, 128), torch.randn(64, 8)),
        2,
        1,
        ("CatOfTilingSlicesToView",),
        atol=1e-4,
        rtol=1e-4,
    ),
    Case(
        "stack_unbind_view_mm",
        stack_unbind_view_mm,
        lambda: (torch.randn(8, 64), torch.randn(32, 8)),
        2,
        1,
        ("CatOfTilingSlicesToView",),
        atol=1e-4,
        rtol=1e-4,
    ),
    Case(
        "cat_split_with_other_sizes",
        cat_split_with_other_sizes,
        _five_inputs_one_wide,
        2,
        1,
        ("SplitWithSizesOfCatToInputs",),
    ),
    Case(
        "cat_chunk_consumers",
        cat_chunk_consumers,
        _five_inputs_one_wide,
        2,
        1,
        ("SplitOfCatToInputs",),
    ),
    Case(
        "cat_slices_consumers",
        cat_slices_consumers,
        lambda: tuple(torch.randn(8, 16) for _ in range(5)),
        2,
        1,
        ("SliceOfCatToInput",),
    ),
    Case(
        "cat_with_reduction_slices",
        cat_with_reduction_slices,
        lambda: tuple(torch.randn(8, 16) for _ in range(9)),
        3,
        1,
        ("SliceOfCatToInput", "UnreadConcatElimination"),
    ),
]


def split_layer_norm_tanh_cat(x, *params):
    """Issue 33's seed, two layers of twelve pieces of 32: split, each piece layer-normed with its own weight and bias
    (``params``: per layer and piece, a weight then a bias), tanh, cat."""
    params = iter(params)
    for _ in range(2):
        x = torch.cat([torch.tanh(F.layer_norm(piece, (32,), next(params), next(params))) for piece in x.split(32, 1)],
                      dim=1)
    return x


SPLITCAT_CASES.append(
    Case(
        "split_layer_norm_tanh_cat",
        split_layer_norm_tanh_cat,
        lambda: (torch.randn(64, 384), *(torch.randn(32) for _ in range(2 * 12 * 2))),
        # stock: per layer and piece a kernel of its norm and tanh; optimus_ir: per layer one layer norm over
        # [64, 12, 32] (PieceLayerNormsToOneLayerNorm, in Dynamo's graph), both layers in one kernel, and the
        # weights' and biases' concatenations (48 copies of 32 values, merged into one kernel)
        24,
        2,
        ("PieceLayerNormsToOneLayerNorm",),
        atol=1e-4,
        rtol=1e-4,
    )
)
SPLITCAT_CASES.append(
    Case(
        "split_layer_norm_tanh_cat_training",
        split_layer_norm_tanh_cat,
        lambda: (torch.randn(64, 384, requires_grad=True), *(torch.randn(32, requires_grad=True) for _ in range(48))),
        # optimus_ir: the forward as in inference; the backward one row kernel through both layers whose weights'
        # and biases' gradients are atomic adds (each element gathers its weight and bias), the zeros they start
        # from, and the last layer's statistics recomputed
        72,
        5,
        ("PieceLayerNormsToOneLayerNorm",),
        atol=1e-4,
        rtol=1e-4,
    )
)
