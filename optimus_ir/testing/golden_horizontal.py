"""The golden cases of the horizontal pass: N independent kernels of one body (pointwise, row and full reductions,
layer norms, optimizer steps, backwards), kernels of several bodies, and embedding bags (part of
:data:`optimus_ir.testing.golden_cases.CASES`)."""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F

from optimus_ir.testing.case import Case


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


def batch_sum_of_squares_each(*xs):
    return [(x * x).sum(dim=0) for x in xs]


def row_sum_of_tanh_each(*xs):
    return [torch.tanh(x).sum(dim=-1) for x in xs]


def layer_norm_each(*args):
    n = len(args) // 3
    xs, weights, biases = args[:n], args[n : 2 * n], args[2 * n :]
    return [F.layer_norm(x, x.shape[-1:], w, b) for x, w, b in zip(xs, weights, biases)]


def channels_last_relu_each(*ws):
    return [torch.relu(w).contiguous(memory_format=torch.channels_last) for w in ws]


def transposes_scaled_each(*xs):
    return [(x.t() * 2).contiguous() for x in xs]


def sigmoid_chunks_channels_last(x):
    # a channel split whose pieces are laid out for channels-last convolutions (MixNet's mixed depthwise convs)
    return [piece.contiguous(memory_format=torch.channels_last) for piece in torch.chunk(torch.sigmoid(x), 4, 1)]


def sgd_momentum_each(*args):
    # SGD with momentum, one parameter at a time (foreach=False): in-place updates of weights of different shapes
    n = len(args) // 3
    params, grads, buffers = args[:n], args[n : 2 * n], args[2 * n :]
    for p, g, b in zip(params, grads, buffers):
        p.add_(b.mul_(0.9).add_(g), alpha=-0.01)
    return [*params, *buffers]


#: four bodies, one per member in turn: kernels no other one shares a body with, and classes of several members
_FOUR_OPS = (torch.tanh, torch.sigmoid, F.gelu, lambda x: x * 2 + 1)


def four_bodies_each(*xs):
    return [_FOUR_OPS[i % len(_FOUR_OPS)](x) for i, x in enumerate(xs)]


_THREE_SHAPES = ((64, 96), (33, 256), (128, 40))

_SGD_SHAPES = ((64, 32), (32,), (128, 64), (64,), (100, 16), (16,))

_SEVEN_ROW_COUNTS = (64, 128, 33, 256, 7, 200, 100)
_SEVEN_WIDTHS = (64, 96, 128, 192, 256, 384, 512)

HORIZONTAL_CASES = [
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
        # five input gradients, above the peak of stock's kernels, which free each after its own: members merge
        # as far as they stay under that peak (5 → 3 launches)
        "horizontal_row_sum_tanh_training", row_sum_of_tanh_each,
        _tensors(*[(rows, 64) for rows in (32, 32, 16, 48, 32)], grad=True), 10, 4,
        ("IdenticalKernelsToMemberTableKernel",), atol=1e-4, rtol=1e-4,
    ),
    Case(
        # four bodies over twelve tensors of three shapes: one kernel of four classes, each picking its members
        "horizontal_4_bodies", four_bodies_each, _tensors(*[_THREE_SHAPES[i % 3] for i in range(12)]), 12, 1,
        ("IdenticalKernelsToMemberTableKernel",),
    ),
    Case(
        # a training step, the incoming gradients from outside: the forward one kernel of four classes; the
        # backward's four bodies (x * 2 + 1 has no kernel there) merge as far as the incoming gradients, freed
        # after their last reader by stock's kernels, allow
        "horizontal_4_bodies_training", four_bodies_each,
        _tensors(*[_THREE_SHAPES[i % 3] for i in range(12)], grad=True), 24, 3,
        ("IdenticalKernelsToMemberTableKernel",), atol=1e-4, rtol=1e-4,
    ),
    Case(
        # conv weights of six shapes laid out for channels-last: Inductor tiles each in 2-d; small, they run over
        # their flat index in one kernel of five classes (64 and 96 x 32 x 3 x 3 are one body, ragged)
        "horizontal_channels_last_weights", channels_last_relu_each,
        _tensors((64, 32, 3, 3), (96, 32, 3, 3), (48, 16, 5, 5), (64, 48, 1, 7), (32, 64, 3, 3), (24, 8, 7, 1)),
        6, 1, ("IdenticalKernelsToMemberTableKernel",),
    ),
    Case(
        # transposes of one size: Inductor tiles each in 2-d; one kernel keeps those tiles, the members one after
        # another along y (80 rows each, padded to 128)
        "horizontal_transposes_tiles", transposes_scaled_each, _tensors(*[(48, 80)] * 6), 6, 1,
        ("IdenticalKernelsToMemberTableKernel",),
    ),
    Case(
        # the four pieces of a channel split laid out for channels-last: one kernel in 2-d tiles, each member at
        # its offset in the input
        "horizontal_split_channels_last_tiles", sigmoid_chunks_channels_last, _tensors((2, 64, 12, 12)), 4, 1,
        ("IdenticalKernelsToMemberTableKernel",),
    ),
    Case(
        # backward: each member reads its saved tanh output, which the forward returns (not donated), and
        # writes its gradient over it where the call alone holds it (here the caller holds them: allocated)
        "horizontal_tanh_training_saved_outputs", tanh_each, _tensors(*[(32, 64)] * 6, grad=True), 12, 2,
        ("IdenticalKernelsToMemberTableKernel",),
    ),
    # symbolic sizes: compiled with dynamic=True, run at two sizes through one compile
    Case(
        # each member's size a symbol of its own: where each starts in the kernel's blocks is computed per call
        "horizontal_gelu_7_sizes_symbolic", gelu_each, _tensors(*[(rows, 96) for rows in _SEVEN_ROW_COUNTS]), 7, 1,
        ("IdenticalKernelsToMemberTableKernel",),
        other_sizes=_tensors(*[(rows + 37, 96) for rows in reversed(_SEVEN_ROW_COUNTS)]),
    ),
    Case(
        # a weight's gradient is a sum over its batch, each batch a symbol of its own: one looped body, each
        # member's row length read from the member table
        "horizontal_batch_sums_symbolic", batch_sum_of_squares_each, _tensors(*[(rows, 48) for rows in (64, 40, 9)]),
        3, 1, ("IdenticalKernelsToMemberTableKernel",), atol=1e-4, rtol=1e-4,
        other_sizes=_tensors(*[(rows, 48) for rows in (5, 300, 33)]),
    ),
]


def embedding_bags_with_norms(ids, *params):
    # a DLRM sparse arch: a sum bag of 3 ids per row from each table, then the table's own layer norm
    n = len(params) // 3
    tables, weights, biases = params[:n], params[n : 2 * n], params[2 * n :]
    return [
        F.layer_norm(F.embedding_bag(i, table, mode="sum"), (table.shape[1],), w, b)
        for i, table, w, b in zip(ids.unbind(0), tables, weights, biases)
    ]


HORIZONTAL_CASES.append(
    Case(
        "embedding_bags_with_norms",
        embedding_bags_with_norms,
        lambda: (torch.randint(0, 50, (4, 8, 3)), *[torch.randn(50, 16) for _ in range(4)],
                 *[torch.randn(16) for _ in range(8)]),
        12,
        # each table's segment sum inside its layer norm; the four tables read one ids tensor, so Inductor's own
        # fusion puts them in one kernel
        1,
        ("EmbeddingBagToSegmentSum",),
        atol=1e-4,
    )
)


def embedding_bags_training(ids, *tables):
    # the sparse arch in a training step: each table's bags (sum, then mean) scaled; the tables require grad
    return [F.embedding_bag(i, table, mode="sum" if k % 2 == 0 else "mean") * (k + 1)
            for k, (i, table) in enumerate(zip(ids.unbind(0), tables))]


HORIZONTAL_CASES.append(
    Case(
        "embedding_bags_training",
        embedding_bags_training,
        lambda: (torch.randint(0, 50, (4, 8, 3)), *[torch.randn(50, 16, requires_grad=True) for _ in range(4)]),
        17,
        # forward: the backward no longer reads the offsets, offset2bag and the rest, so the 4 ATen kernels become
        # 4 segment sums fused with their scale, which Inductor fuses into one kernel (they read one ids tensor);
        # backward: 4 ATen kernels (each ~20 launches on the GPU) → per table the bag gradient, a zero fill ordered
        # after it, a scatter-add; the bag gradients, the fills and the scatters of different bodies each one kernel
        # of classes where the peak allows
        7,
        ("EmbeddingBagToSegmentSum", "EmbeddingBagBackwardOfRegularBagsToScatterAdd"),
        atol=1e-4,
    )
)


#: bags of 0 to 5 ids (two empty), per table of the runtime-offsets cases
_BAG_LENGTHS = (3, 0, 2, 5, 1, 0, 4, 2)


def _jagged(rows: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Ids and offsets of :data:`_BAG_LENGTHS` bags from a table of ``rows`` rows; the first id its last row."""
    lengths = torch.tensor(_BAG_LENGTHS)
    ids = torch.randint(0, rows, (int(lengths.sum()),))
    ids[0] = rows - 1
    return ids, torch.cat([torch.zeros(1, dtype=torch.long), lengths.cumsum(0)[:-1]])


def embedding_bags_runtime_offsets_training(*args):
    # jagged features in a training step: 4 tables of 50 to 90 rows, bags of runtime offsets (empty ones too), ids
    # with per-sample weights, a padding id
    ids, offsets, weights, tables = args[0:4], args[4:8], args[8:12], args[12:16]
    return [
        F.embedding_bag(i, table, o, mode="sum", per_sample_weights=w, padding_idx=0)
        for i, o, w, table in zip(ids, offsets, weights, tables)
    ]


def _runtime_offsets_inputs() -> tuple[torch.Tensor, ...]:
    rows = (50, 70, 90, 60)
    jagged = [_jagged(n) for n in rows]
    ids, offsets = [i for i, _ in jagged], [o for _, o in jagged]
    ids[2][1] = 0  # a padding id
    weights = [torch.rand(len(i)) for i in ids]
    return (*ids, *offsets, *weights, *[torch.randn(n, 16, requires_grad=True) for n in rows])


HORIZONTAL_CASES.append(
    Case(
        "embedding_bags_runtime_offsets_training",
        embedding_bags_runtime_offsets_training,
        _runtime_offsets_inputs,
        8,
        # forward: per table a segment sum of each bag's rows, the tables' kernels merged (4 ATen calls → 1
        # kernel: one body for tables of different rows and id counts, each member's bounds read from the member
        # table); backward: per table zeros and a scatter-add into its rows (4 ATen calls, ~20 launches each on a
        # GPU → 5 kernels: at this size, merging all would raise the estimated peak where the incoming gradients
        # are freed after their last reader)
        6,
        ("EmbeddingBagToSegmentSum", "EmbeddingBagBackwardOfRuntimeOffsetsToScatterAdd"),
        atol=1e-4,
    )
)


def embedding_bags_jagged(*args):
    # jagged features, as a loop serves them: per table 1-D ids and the offsets of its bags, a count of ids and a
    # batch that change every call; the tables are parameters (static sizes)
    n = len(args) // 3
    ids, offsets, tables = args[:n], args[n : 2 * n], args[2 * n :]
    for table in tables:  # (traced: their sizes static, as a module's parameters are)
        torch._dynamo.mark_static(table)
    return [F.embedding_bag(i, table, o, mode="sum") for i, o, table in zip(ids, offsets, tables)]


def _jagged_inputs(batch: int, seed: int) -> Callable[[], tuple[torch.Tensor, ...]]:
    """Ids and offsets of ``batch`` bags of 0 to 8 ids for each of four tables, and the tables (sizes static)."""

    def make() -> tuple[torch.Tensor, ...]:
        generator = torch.Generator().manual_seed(seed)
        rows = (50, 70, 90, 60)
        lengths = [torch.randint(0, 9, (batch,), generator=generator) for _ in rows]
        ids = [torch.randint(0, n, (int(length.sum()),), generator=generator) for n, length in zip(rows, lengths)]
        offsets = [torch.cat([torch.zeros(1, dtype=torch.long), length.cumsum(0)[:-1]]) for length in lengths]
        return (*ids, *offsets, *[torch.randn(n, 16, generator=generator) for n in rows])

    return make


HORIZONTAL_CASES.append(
    Case(
        # symbolic sizes: per table a segment sum over a symbolic count of ids and bags, the tables' kernels one
        "embedding_bags_jagged_symbolic", embedding_bags_jagged, _jagged_inputs(8, 0), 4, 1,
        ("EmbeddingBagToSegmentSum",), atol=1e-4, rtol=1e-4, other_sizes=_jagged_inputs(13, 1),
    )
)


def mean_then_linear(summed, count, w):
    """A mean aggregation (messages summed per node, divided by the node's clamped edge count), then a Linear
    without bias and a relu."""
    return torch.relu((summed / count.clamp(min=1)) @ w.t())


HORIZONTAL_CASES.append(
    Case(
        "mean_then_linear",
        mean_then_linear,
        lambda: (torch.randn(300, 64), (torch.rand(300, 1) * 4).floor(), torch.randn(32, 64)),
        # stock: the mean (a kernel and a buffer), the matmul, the relu; optimus_ir: the matmul of the sums, the
        # division by the counts in the relu's kernel
        3,
        2,
        ("RowScaledMatmulInputToScaledProduct",),
        atol=1e-4,
        rtol=1e-4,
    )
)


def summed_mean_convs(x, s1, c1, s2, c2, w1, v1, w2, v2, b):
    """Two SAGE convolutions into one node type, summed (torch_geometric's ``to_hetero``, ``aggr="sum"``): a Linear
    of each mean message and of the node's own features ``x``, one bias, and the next layer's relu."""
    first = (s1 / c1.clamp(min=1)) @ w1.t() + x @ v1.t()
    second = (s2 / c2.clamp(min=1)) @ w2.t() + x @ v2.t()
    return torch.relu(first + second + b)


def _summed_mean_convs_inputs() -> tuple[torch.Tensor, ...]:
    x, s1, s2 = (torch.randn(48, 16) for _ in range(3))
    c1, c2 = ((torch.rand(48, 1) * 4).floor() for _ in range(2))
    return (x, s1, c1, s2, c2, *(torch.randn(8, 16) for _ in range(4)), torch.randn(8))


HORIZONTAL_CASES.append(
    Case(
        "summed_mean_convs",
        summed_mean_convs,
        _summed_mean_convs_inputs,
        # stock: the means, four matmuls and a kernel for their sum, the bias and the relu; optimus_ir: one
        # reduction over the inner dimension, the means divided where read, the bias and relu fused in (its training
        # step's numerics: tests/test_matmul_sum.py, where the CPU's backward differs from the GPU's)
        7,
        1,
        ("SummedSmallMatmulsToOneReduction",),
        atol=1e-4,
        rtol=1e-4,
        cpu_config={"pattern_matcher": False},
    )
)


def dlrm_interaction_and_logit(stacked, rows, cols, w, b):
    """DLRM's top: the lower triangle of the pairwise dot products of the stacked features (the bottom MLP's output
    and the pooled embeddings), a Linear to one logit and its sigmoid."""
    dots = torch.bmm(stacked, stacked.transpose(1, 2))
    return torch.sigmoid(F.linear(dots[:, rows, cols], w, b))


def _interaction_inputs() -> tuple[torch.Tensor, ...]:
    rows, cols = torch.tril_indices(7, 7, offset=-1)
    return torch.randn(40, 7, 16), rows, cols, torch.randn(1, 21), torch.randn(1)


HORIZONTAL_CASES.append(
    Case(
        "dlrm_interaction_and_logit",
        dlrm_interaction_and_logit,
        _interaction_inputs,
        # stock: the bmm, the gather of the pairs, the matvec, the bias and sigmoid; optimus_ir: the pairs' dot
        # products (indirect loads, no [40, 7, 7] buffer), the logit's row reduction with its bias and sigmoid
        4,
        2,
        ("SelectedGramEntriesToDotProducts", "MatvecToRowReduction"),
        atol=1e-4,
        rtol=1e-4,
    )
)
