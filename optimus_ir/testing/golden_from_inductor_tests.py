"""Golden cases from graphs of PyTorch's own Inductor tests on which optimus_ir once launched more kernels than
stock (issue 32): at or below stock now. Sizes are smaller than the tests' (the numerics run in Triton's
interpreter); the launch counts are the same shapes'."""

from __future__ import annotations

import torch

from optimus_ir.testing.case import Case

aten = torch.ops.aten


def split_clones_regrouped(x):
    """test_split_cat_fx_passes.py, test_split_cat_new_patterns: ``split_cat_to_slices``. The cat's progressions
    have two bodies (a clone, and views of the input): a member table took one body's and left the other alone."""
    x_c, x_c_2 = x.clone(), x.clone()
    l1 = torch.split(x, [5] * 10, dim=0)
    l2 = torch.split(x_c, [5] * 10, dim=0)
    l3 = torch.split(x_c_2, [10] * 5, dim=0)
    other = l1[0].clone()
    return torch.cat([other, *l1, *l2[4:], *l2[:4], *l3], dim=0)


def unbind_of_two_views(x):
    """The same test: ``unbind_cat_to_view``."""
    l1 = torch.unbind(x.view(10, 5, 16), dim=0)
    l2 = torch.unbind(x.view(10, 5, 16), dim=0)
    return torch.cat([*l1[:7], l1[7].clone(), *l2, l1[8].clone(), l1[9].clone()], dim=1)


def split_with_sizes_partly_cat(x1, x2, y, z):
    """test_split_cat_fx_aten_passes.py, ``TestSplitCatPartial``: pieces of two ``split_with_sizes`` cat with other
    tensors, in aten form."""
    s1 = aten.split_with_sizes.default(x1, [8] * 21, 1)
    s2 = aten.split_with_sizes.default(x2, [8] * 4, 1)
    return aten.cat.default([z, *s1[0:6], *s1[15:18], y, *s1[10:15], y, *s2, z], 1)


def cat_expand_bmm(rhs, *weights):
    """test_cat_expand_bmm.py: a cat of expanded weights feeding a bmm (``rhs`` first: it is also used first, so that
    Dynamo's order of the graph's inputs, by first use, is the arguments' order)."""
    lhs = torch.cat([w.unsqueeze(0).expand(rhs.shape[0], -1, -1) for w in weights], dim=1)
    return torch.bmm(lhs.expand(rhs.shape[0], lhs.shape[1], lhs.shape[2]), rhs)


def _split_inputs(grad: bool = False):
    return lambda: (torch.randn(50, 16, requires_grad=grad),)


def _partial_inputs(grad: bool = False):
    return lambda: tuple(torch.randn(16, w, requires_grad=grad) for w in (8 * 21, 8 * 4, 8, 8))


def _bmm_inputs(grad: bool = False):
    def make():
        # fp32, not the test's fp16: on a GPU, Inductor's padding of fp16 matmuls is decided by timing them there
        weights = [torch.randn(i % 3 + 1, 8, requires_grad=grad) for i in range(15)]
        return (torch.randn(4, 8, 6), *weights)

    return make


_CAT = ("SplitCatToPointwise",)
FROM_INDUCTOR_TESTS_CASES = [
    Case("inductor_tests_split_clones_regrouped", split_clones_regrouped, _split_inputs(), 1, 1, _CAT),
    Case("inductor_tests_split_clones_regrouped_training", split_clones_regrouped, _split_inputs(True), 5, 3, _CAT),
    Case("inductor_tests_unbind_of_two_views", unbind_of_two_views, lambda: (torch.randn(50, 16),), 1, 1, _CAT),
    Case("inductor_tests_split_with_sizes_partly_cat", split_with_sizes_partly_cat, _partial_inputs(), 1, 1, _CAT),
    Case(
        "inductor_tests_split_with_sizes_partly_cat_training", split_with_sizes_partly_cat, _partial_inputs(True),
        12, 3, _CAT,
    ),
    Case("inductor_tests_cat_expand_bmm", cat_expand_bmm, _bmm_inputs(), 2, 2, _CAT, atol=1e-4, rtol=1e-4),
    Case(
        "inductor_tests_cat_expand_bmm_training", cat_expand_bmm, _bmm_inputs(True), 18, 4,
        ("IdenticalKernelsToMemberTableKernel",), atol=1e-4, rtol=1e-4,
    ),
]
