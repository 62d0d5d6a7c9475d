"""SelectedGramEntriesToDotProducts: DLRM's interaction (the lower triangle of each sample's Gram matrix) as one
reduction kernel with indirect loads, what it leaves alone, and the numerics against eager through Triton's
interpreter."""

from unittest import mock

import torch

import optimus_ir
from optimus_ir.inspect import compile_report
from optimus_ir.interpret import cpu_triton_interpreter
from optimus_ir.lowering import gram_entries
from optimus_ir.records import recording

RULE = "SelectedGramEntriesToDotProducts"


def interaction(bottom, pooled, rows, cols):
    """DLRM's interaction: the bottom MLP's output and the pooled embeddings stacked, their pairwise dot products,
    the strictly lower triangle kept and concatenated after the bottom MLP's output."""
    stacked = torch.cat([bottom.unsqueeze(1), pooled], dim=1)
    dots = torch.bmm(stacked, stacked.transpose(1, 2))
    return torch.cat([bottom, dots[:, rows, cols]], dim=1)


def _inputs(dtype: torch.dtype = torch.float32, requires_grad: bool = False) -> tuple[torch.Tensor, ...]:
    torch.manual_seed(0)
    rows, cols = torch.tril_indices(7, 7, offset=-1)
    bottom = torch.randn(40, 16, dtype=dtype, requires_grad=requires_grad)
    pooled = torch.randn(40, 6, 16, dtype=dtype, requires_grad=requires_grad)
    return bottom, pooled, rows, cols


def test_the_kept_pairs_are_one_reduction_and_the_gram_matrix_is_never_made():
    stock = compile_report(interaction, _inputs(), passes=None)
    report = compile_report(interaction, _inputs(), passes="horizontal")
    assert "extern_kernels.bmm" in stock.launches
    assert "extern_kernels.bmm" not in report.launches
    assert len(report.launches) == 2  # the stack (and the bottom's copy into the output), the pairs' sums
    pairs = [k for k in report.graphs[0].kernels if k.name.startswith("triton_per_")]
    assert len(pairs) == 1 and "tl.sum(" in pairs[0].source and "tmp0 < 0" in pairs[0].source  # indirect loads
    (fired,) = [r for r in report.rewrites if r.rule == RULE]
    assert fired.fired and "(40x7x16, 21 pairs)" in fired.detail


def test_numerics_in_the_interpreter_inference_and_training():
    inputs = _inputs(requires_grad=True)
    expected = interaction(*inputs)
    expected.square().sum().backward()
    want = [t.grad.clone() for t in inputs[:2]]
    for t in inputs[:2]:
        t.grad = None
    with cpu_triton_interpreter(), optimus_ir.enabled("horizontal"), recording() as records:
        actual = torch.compile(interaction)(*inputs)
        actual.square().sum().backward()
    assert [r for r in records if r.rule == RULE and r.fired]
    torch.testing.assert_close(actual, expected)
    torch.testing.assert_close([t.grad for t in inputs[:2]], want)


def test_a_batch_that_changes_keeps_the_reduction_and_its_numerics():
    # the batch symbolic (automatic dynamic shapes): still no bmm; one compile serves two batch sizes as eager
    inputs = _inputs()
    for t in inputs[:2]:
        torch._dynamo.mark_dynamic(t, 0)
    report = compile_report(interaction, inputs, passes="horizontal")
    # (the stack and the output's cat one kernel of two bodies, as with static sizes)
    assert "extern_kernels.bmm" not in report.launches and len(report.launches) == 2, report.launches
    # a loop's batches: Dynamo compiles the first statically, the second with the batch a symbol (automatic
    # dynamic shapes), and the third runs that code
    torch._dynamo.utils.counters.clear()
    with cpu_triton_interpreter(), optimus_ir.enabled("horizontal"), recording() as records:
        compiled = torch.compile(interaction)
        for batch in (40, 23, 31):
            bottom, pooled, rows, cols = _inputs()
            bottom, pooled = bottom[:batch].clone(), pooled[:batch].clone()
            torch.testing.assert_close(compiled(bottom, pooled, rows, cols), interaction(bottom, pooled, rows, cols))
    assert torch._dynamo.utils.counters["stats"]["unique_graphs"] == 2
    assert [r.fired for r in records if r.rule == RULE] == [True, True]


def test_numerics_in_the_interpreter_bf16_accumulated_in_fp32():
    """The interpreter has no bf16 atomic add for the gather's backward: inference only; eager's bmm accumulates
    in fp32 and rounds once, as the reduction does."""
    inputs = _inputs(torch.bfloat16)
    expected = interaction(*(t.float() if t.is_floating_point() else t for t in inputs)).bfloat16()
    with torch.no_grad(), cpu_triton_interpreter(), optimus_ir.enabled("horizontal"), recording() as records:
        actual = torch.compile(interaction)(*inputs)
    assert [r for r in records if r.rule == RULE and r.fired]
    torch.testing.assert_close(actual, expected)


def test_a_product_of_two_tensors_or_a_gram_matrix_read_elsewhere_stays_stock():
    bottom, pooled, _, _ = _inputs()
    rows, cols = torch.tril_indices(6, 6, offset=-1)

    def two_tensors(bottom, pooled, rows, cols):
        return torch.bmm(pooled, (pooled * 2).transpose(1, 2))[:, rows, cols]

    def read_elsewhere(bottom, pooled, rows, cols):
        dots = torch.bmm(pooled, pooled.transpose(1, 2))
        return dots[:, rows, cols], dots.sum()

    for fn in (two_tensors, read_elsewhere):
        report = compile_report(fn, (bottom, pooled, rows, cols), passes="horizontal")
        assert not [r for r in report.rewrites if r.rule == RULE and r.fired], fn.__name__
        assert "extern_kernels.bmm" in report.launches, fn.__name__


def test_more_products_than_the_ceiling_stay_a_bmm():
    """Each pair reads its rows again where a bmm reuses them: above ``MAX_PRODUCTS`` the device time the kernel
    costs outweighs the launch it saves."""
    _, _, rows, cols = _inputs()
    stacked = torch.randn(4, 7, 16)
    with mock.patch.object(gram_entries, "MAX_PRODUCTS", 4 * 21 * 16 - 1):
        report = compile_report(lambda s, r, c: torch.bmm(s, s.transpose(1, 2))[:, r, c], (stacked, rows, cols),
                                passes="horizontal")
    (rejected,) = [r for r in report.rewrites if r.rule == RULE]
    assert not rejected.fired and "products" in rejected.detail
    assert "extern_kernels.bmm" in report.launches
