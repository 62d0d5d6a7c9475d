"""The golden cases: each a function, its example inputs, and what optimus_ir must do to it.

Used by tests/test_golden.py (golden kernel text for the virtual sm_90 target, and numerics through Triton's
interpreter on CPU) and by benchmarks/gpu_check.py (the same cases on the real GPU).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F


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


CASES = [
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


# ---------------------------------------------------------------------------------- horizontal (N identical kernels)


def _tensors(*shapes: tuple[int, ...], grad: bool = False) -> Callable[[], tuple[torch.Tensor, ...]]:
    return lambda: tuple(torch.randn(*shape, requires_grad=grad) for shape in shapes)


def tanh_scale_each(*xs):
    return [torch.tanh(x) * 2 for x in xs]


def tanh_each(*xs):
    return [torch.tanh(x) for x in xs]


def gelu_each(*xs):
    return [F.gelu(x) for x in xs]


def bias_gelu_each(*xs_and_biases):
    xs, biases = xs_and_biases[::2], xs_and_biases[1::2]
    return [F.gelu(x + bias) for x, bias in zip(xs, biases)]


def row_sum_each(*xs):
    return [x.sum(dim=-1) for x in xs]


def full_sum_each(*xs):
    return [x.sum() for x in xs]


def row_sum_of_tanh_each(*xs):
    return [torch.tanh(x).sum(dim=-1) for x in xs]


def layer_norm_each(*args):
    n = len(args) // 3
    xs, weights, biases = args[:n], args[n : 2 * n], args[2 * n :]
    return [F.layer_norm(x, x.shape[-1:], w, b) for x, w, b in zip(xs, weights, biases)]


def sgd_momentum_each(*args):
    # SGD with momentum, one parameter at a time (foreach=False): in-place updates of weights of different shapes
    n = len(args) // 3
    params, grads, buffers = args[:n], args[n : 2 * n], args[2 * n :]
    for p, g, b in zip(params, grads, buffers):
        p.add_(b.mul_(0.9).add_(g), alpha=-0.01)
    return [*params, *buffers]


_SGD_SHAPES = ((64, 32), (32,), (128, 64), (64,), (100, 16), (16,))

_SEVEN_ROW_COUNTS = (64, 128, 33, 256, 7, 200, 100)
_SEVEN_WIDTHS = (64, 96, 128, 192, 256, 384, 512)

CASES.extend(
    [
        Case(
            "horizontal_tanh_12", tanh_scale_each, _tensors(*[(64, 256)] * 12), 12, 1,
            ("IdenticalKernelsToMemberTableKernel",),
        ),
        Case(
            "horizontal_gelu_7_sizes", gelu_each, _tensors(*[(rows, 96) for rows in _SEVEN_ROW_COUNTS * 2]), 14, 1,
            ("IdenticalKernelsToMemberTableKernel",),
        ),
        Case(
            # the bias is read at x % width: the width is a value of the member (a divisor in its table row)
            "horizontal_bias_gelu_7_widths", bias_gelu_each,
            _tensors(*[shape for width in _SEVEN_WIDTHS * 2 for shape in ((32, width), (width,))]), 14, 1,
            ("IdenticalKernelsToMemberTableKernel",),
        ),
        Case(
            "horizontal_row_sum_ragged", row_sum_each, _tensors(*[(rows, 200) for rows in (64, 64, 100, 7, 64, 30)]),
            6, 1, ("IdenticalKernelsToMemberTableKernel",), atol=1e-4,
        ),
        Case(
            # Inductor splits each sum in two: partial sums (as many as the tensor's size gives), then their sum, one
            # row of 2..16 partial sums per tensor: the second stages read each member's row length from the table
            "horizontal_full_sum_ragged", full_sum_each,
            _tensors(*[(rows, 512) for rows in (32, 48, 64, 96, 128, 160, 192, 224, 256, 32, 64, 128)]), 24, 2,
            ("IdenticalKernelsToMemberTableKernel",), atol=1e-3,
        ),
        Case(
            "horizontal_layer_norm_4", layer_norm_each, _tensors(*[(48, 256)] * 4, *[(256,)] * 8), 4, 1,
            ("IdenticalKernelsToMemberTableKernel",), atol=1e-4,
        ),
        Case(
            # weights and biases of six shapes: their indices flatten to the same one, one kernel
            "horizontal_sgd_momentum", sgd_momentum_each, _tensors(*_SGD_SHAPES * 3), 6, 1,
            ("IdenticalKernelsToMemberTableKernel",),
        ),
        Case(
            # backward: five incoming gradients; merged, they all stay alive until the one kernel has allocated all
            # five input gradients, above the peak of stock's kernels, which free each after its own: two members
            # merge, under that peak (5 → 4 launches)
            "horizontal_row_sum_tanh_training", row_sum_of_tanh_each,
            _tensors(*[(rows, 64) for rows in (32, 32, 16, 48, 32)], grad=True), 10, 5,
            ("IdenticalKernelsToMemberTableKernel",), atol=1e-4, rtol=1e-4,
        ),
        Case(
            # backward: each member reads its saved tanh output, which the forward returns (not donated), and
            # writes its gradient over it where the call alone holds it (here the caller holds them: allocated)
            "horizontal_tanh_training_saved_outputs", tanh_each, _tensors(*[(32, 64)] * 6, grad=True), 12, 2,
            ("IdenticalKernelsToMemberTableKernel",),
        ),
    ]
)


def embedding_bags_with_norms(ids, *params):
    # a DLRM sparse arch: a sum bag of 3 ids per row from each table, then the table's own layer norm
    n = len(params) // 3
    tables, weights, biases = params[:n], params[n : 2 * n], params[2 * n :]
    return [
        F.layer_norm(F.embedding_bag(i, table, mode="sum"), (table.shape[1],), w, b)
        for i, table, w, b in zip(ids.unbind(0), tables, weights, biases)
    ]


CASES.append(
    Case(
        "embedding_bags_with_norms",
        embedding_bags_with_norms,
        lambda: (torch.randint(0, 50, (4, 8, 3)), *[torch.randn(50, 16) for _ in range(4)],
                 *[torch.randn(16) for _ in range(8)]),
        12,
        1,
        ("EmbeddingBagOfRegularBagsToReduction", "IdenticalKernelsToMemberTableKernel"),
        atol=1e-4,
    )
)


def embedding_bags_training(ids, *tables):
    # the sparse arch in a training step: each table's bags (sum, then mean) scaled; the tables require grad
    return [F.embedding_bag(i, table, mode="sum" if k % 2 == 0 else "mean") * (k + 1)
            for k, (i, table) in enumerate(zip(ids.unbind(0), tables))]


CASES.append(
    Case(
        "embedding_bags_training",
        embedding_bags_training,
        lambda: (torch.randint(0, 50, (4, 8, 3)), *[torch.randn(50, 16, requires_grad=True) for _ in range(4)]),
        17,
        # forward: the backward no longer reads the offsets, offset2bag and the rest, so the offsets and the 4 ATen
        # kernels become 4 reductions fused with their scale (tables of both modes and scales: different bodies);
        # backward: 4 ATen kernels (each ~20 launches on the GPU) → per table the bag gradient, a zero fill ordered
        # after it, a scatter-add: 10 launches
        14,
        ("EmbeddingBagOfRegularBagsToReduction", "EmbeddingBagBackwardOfRegularBagsToScatterAdd"),
        atol=1e-4,
    )
)
