"""Kernels of different bodies as one kernel of several classes (``ClassesGroup``): what merges, the kernel's text,
numerics against eager through Triton's interpreter, and the fallbacks."""

import dataclasses
import itertools
import re
from types import SimpleNamespace
from unittest import mock

import pytest
import torch
import torch.nn.functional as F

import optimus_ir
from optimus_ir.inspect import compile_report
from optimus_ir.interpret import cpu_triton_interpreter
from optimus_ir.records import recording
from optimus_ir.scheduler_hooks.horizontal import dispatch, planning
from optimus_ir.scheduler_hooks.horizontal.structure import PERSISTENT, POINTWISE, Structure

RULE = "IdenticalKernelsToMemberTableKernel"
OPS = (torch.tanh, torch.sigmoid, F.gelu, F.silu, lambda x: x.clamp(-0.5, 0.5), torch.relu, lambda x: x * 2 + 1,
       torch.exp)
SHAPES = ((64, 96), (33, 256), (128, 40))


def eight_bodies(*xs):
    return [OPS[i % len(OPS)](x) for i, x in enumerate(xs)]


def _inputs(count, dtype=torch.float32, grad=False):
    return [torch.randn(*SHAPES[i % len(SHAPES)], dtype=dtype, requires_grad=grad) for i in range(count)]


def _interpreted(fn, inputs):
    """Compiled with the horizontal pass, its kernels run in Triton's interpreter: (outputs, eager's, records)."""
    expected = fn(*[x.detach().clone() for x in inputs])
    torch._dynamo.reset()
    with optimus_ir.enabled("horizontal"), cpu_triton_interpreter(), recording() as records:
        actual = torch.compile(fn)(*inputs)
    return actual, expected, [r for r in records if r.rule == RULE]


def _class_merges(records):
    return [r for r in records if r.rule == RULE and r.fired and "bodies → one kernel" in r.detail]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_kernels_of_eight_bodies_become_one_kernel_of_eight_classes(dtype):
    inputs = _inputs(24, dtype)
    report = compile_report(eight_bodies, inputs, passes="horizontal")
    assert len(report.launches) == 1
    (merge,) = _class_merges(report.rewrites)
    assert "24 kernels of 8 bodies → one kernel" in merge.detail and len(merge.nodes) == 24
    (kernel,) = report.kernels
    assert [f"def class_{k}(" in kernel.source for k in range(8)] == [True] * 8
    assert "def class_8(" not in kernel.source  # code grows with the classes, not with the members
    actual, expected, _ = _interpreted(eight_bodies, inputs)
    tolerance = {} if dtype == torch.float32 else {"atol": 1e-2, "rtol": 1e-2}
    torch.testing.assert_close(actual, expected, **tolerance)


def test_a_kernel_no_other_one_shares_a_body_with_is_a_class_of_one():
    def fn(x, y, z):
        return torch.tanh(x), torch.sigmoid(y) * 3, F.gelu(z) + 1

    inputs = [torch.randn(100, 64), torch.randn(7, 300), torch.randn(256)]
    report = compile_report(fn, inputs, passes="horizontal")
    assert len(report.launches) == 1
    assert "3 kernels of 3 bodies" in _class_merges(report.rewrites)[0].detail
    # a class of one member is given its tensors, as Inductor's kernel is: no table to look up on each call, and
    # its inputs' alignment is Inductor's to check
    (kernel,) = report.kernels
    assert "in_ptr0_class0, out_ptr0_class0, in_ptr0_class1" in kernel.source and "xtable" not in kernel.source
    assert "MemberTable" not in report.wrapper and "tensors_of" not in report.wrapper
    assert not [r for r in report.rewrites if r.rule == "InputAlignmentCheckedByMemberTables" and r.fired]
    actual, expected, _ = _interpreted(fn, inputs)
    torch.testing.assert_close(actual, expected)


def test_kernels_that_depend_on_each_other_stay_apart():
    def fn(x, w):
        return torch.sigmoid(torch.tanh(x) @ w)

    report = compile_report(fn, [torch.randn(64, 64), torch.randn(64, 64)], passes="horizontal")
    assert not _class_merges(report.rewrites)
    assert len(report.launches) == 3  # tanh, the matmul, sigmoid


def test_training_step_with_gradients_from_outside_merges_forward_and_backward():
    inputs = _inputs(16, grad=True)
    report = compile_report(eight_bodies, inputs, passes="horizontal")
    forward, backward = report.graphs
    stock = compile_report(eight_bodies, inputs, passes=None)
    assert len(forward.launches) == 1
    assert len(backward.launches) < len(stock.graphs[1].launches)
    actual, expected, _ = _interpreted(eight_bodies, inputs)
    grads = [torch.randn_like(out) for out in expected]
    torch.autograd.backward(actual, grads)
    reference = [x.detach().clone().requires_grad_() for x in inputs]
    torch.autograd.backward(eight_bodies(*reference), grads)
    torch.testing.assert_close([x.grad for x in inputs], [x.grad for x in reference])


def inverse_permutation_and_tanh(perm, x):
    inverse = torch.empty_like(perm)
    inverse[perm] = torch.arange(perm.numel())  # a scatter into a new buffer (a MoE's unpermute)
    return inverse, torch.tanh(x)


def test_a_scatter_is_a_class_and_its_kernel_is_tuned_no_further():
    inputs = [torch.randperm(1024), torch.randn(64, 96)]
    report = compile_report(inverse_permutation_and_tanh, inputs, passes="horizontal")
    assert len(report.launches) == 1
    assert "2 kernels of 2 bodies" in _class_merges(report.rewrites)[0].detail
    (kernel,) = report.kernels
    # the autotuner clones a kernel's mutated arguments to try configs; it cannot clone what a table points to
    assert "'autotune_pointwise': False" in kernel.source
    actual, expected, _ = _interpreted(inverse_permutation_and_tanh, inputs)
    torch.testing.assert_close(actual, expected)


def transposes_of_three_bodies(a1, a2, b, c):
    return (a1.t() * 2).contiguous(), (a2.t() * 2).contiguous(), (b.permute(0, 2, 1) + 1).contiguous(), torch.tanh(c)


def test_transposes_too_large_to_run_flat_are_classes_kept_in_their_tiles():
    # sizes that are no multiple of a tile: the tiles past each member's rows and columns are masked
    inputs = [torch.randn(500, 770), torch.randn(500, 770), torch.randn(8, 384, 250), torch.randn(64, 96)]
    report = compile_report(transposes_of_three_bodies, inputs, passes="horizontal")
    assert len(report.launches) == 1
    assert "4 kernels of 3 bodies" in _class_merges(report.rewrites)[0].detail
    (kernel,) = report.kernels
    assert kernel.source.count("xtile = xpid % ") == 2  # the two transposes' classes, the tanh's runs flat
    actual, expected, _ = _interpreted(transposes_of_three_bodies, inputs)
    torch.testing.assert_close(actual, expected)


def test_transposes_of_one_body_in_different_tiles_are_classes_of_their_own():
    def transposes(*xs):
        return [(x.t() * 2).contiguous() for x in xs]

    inputs = [torch.randn(500, 770), torch.randn(520, 770), torch.randn(64, 96)]
    report = compile_report(transposes, inputs, passes="horizontal")
    assert len(report.launches) == 1
    (kernel,) = report.kernels
    assert kernel.source.count("xtile = xpid % ") == 2
    actual, expected, _ = _interpreted(transposes, inputs)
    torch.testing.assert_close(actual, expected)


def test_classes_too_different_in_size_go_to_different_kernels():
    def unit(i, numels):  # a body of its own each
        return SimpleNamespace(get_name=lambda i=i: f"op{i}"), [Structure((i,), [], n, []) for n in numels], POINTWISE

    # members start at multiples of one block for every class: 31 classes of 100 one-element members next to a
    # 4M-element one would launch ~12000 empty blocks and nearly double the work; a few such classes would not
    many = [unit(0, [2**22])] + [unit(i + 1, [1] * 100) for i in range(31)]
    few = [unit(0, [2**22])] + [unit(i + 1, [1] * 100) for i in range(3)]
    with mock.patch.object(planning, "independent", return_value=True):
        assert [len(s) for s in planning.class_sets(many)] == [31]
        assert [len(s) for s in planning.class_sets(few)] == [4]


def test_an_error_in_the_dispatch_kernel_falls_back_to_stock_kernels(rule_errors_fall_back):
    inputs = _inputs(8)
    with mock.patch.object(dispatch, "dispatch_source", side_effect=RuntimeError("boom")):
        actual, expected, records = _interpreted(eight_bodies, inputs)
        report = compile_report(eight_bodies, inputs, passes="horizontal")
    assert any("internal error in codegen" in r.detail and "boom" in r.detail for r in records)
    assert len(report.launches) == 8
    torch.testing.assert_close(actual, expected)


def test_gathers_from_tables_of_different_sizes_check_each_members_bound():
    """The size an index loaded from a tensor is checked against (and wraps negative indices by) is not in the loop
    body's graph; merged with the representative's, the kernel checked every member against its representative's
    table size (GraphSAGE's gathers from node types of 900 and 1500 rows failed the check on the H200). Each member's
    size is a value of the member table."""

    def fn(*args):
        tables, ids = args[:4], args[4:]
        return [table[i] * 2 for table, i in zip(tables, ids)]

    rows = (900, 1500, 900, 1500)
    inputs = [torch.randn(r, 64) for r in rows] + [torch.randint(-r, r, (4000,)) for r in rows]
    report = compile_report(fn, inputs, passes="horizontal")
    (kernel,) = report.kernels
    assert "irows0 = tl.load(xtable + " in kernel.source and "tmp4 < irows0)" in kernel.source
    assert [r.detail for r in report.rewrites if r.rule == RULE and r.fired] == [
        "4 kernels → one kernel (pointwise, 256000 each, member table)"
    ]
    actual, expected, _ = _interpreted(fn, inputs)
    torch.testing.assert_close(actual, expected)
    inputs[4] = inputs[4].clone()
    inputs[4][7] = 1000  # within the largest table, not within its own: the kernel's assert, as eager's check
    torch._dynamo.reset()
    from triton.runtime.interpreter import interpreter_builder

    debug = dataclasses.replace(interpreter_builder.options, debug=True)  # the interpreter runs device asserts
    with optimus_ir.enabled("horizontal"), cpu_triton_interpreter(), \
            mock.patch.object(interpreter_builder, "options", debug), pytest.raises(Exception, match="< irows0"):
        torch.compile(fn)(*inputs)


def test_a_class_whose_kernel_fails_gets_stock_kernels_and_the_others_stay_one_kernel(rule_errors_fall_back):
    from optimus_ir.scheduler_hooks.horizontal import classes

    made = classes.group_kernel
    calls = itertools.count()

    def fails_for_the_first_class(backend, group, placement=None, tiled=False):
        if next(calls) % len(OPS) == 0:  # eight classes a compile
            raise RuntimeError("boom")
        return made(backend, group, placement, tiled)

    inputs = _inputs(8)
    with mock.patch.object(classes, "group_kernel", fails_for_the_first_class):
        actual, expected, records = _interpreted(eight_bodies, inputs)
        report = compile_report(eight_bodies, inputs, passes="horizontal")
    (failed,) = [r for r in records if "internal error in codegen" in r.detail]
    assert "boom" in failed.detail and len(failed.nodes) == 1  # the first class: one member
    assert len(report.launches) == 2  # its stock kernel, and one kernel of the seven other classes
    torch.testing.assert_close(actual, expected)


def layer_norms_of_four_bodies(*args):
    """DLRM's dense features: per feature a transform (log1p of the clamped count, tanh, sigmoid, a clip), then a
    layer norm with its own weight and bias."""
    transforms = (lambda x: torch.log1p(x.clamp(min=0)), torch.tanh, torch.sigmoid, lambda x: x.clamp(-3, 3))
    xs, params = args[: len(args) // 3], args[len(args) // 3:]
    return [
        F.layer_norm(transforms[i % 4](x), x.shape[-1:], params[2 * i], params[2 * i + 1]) for i, x in enumerate(xs)
    ]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_layer_norms_of_four_bodies_become_one_kernel_of_four_classes(dtype):
    widths = (8, 8, 8, 8, 32, 32, 32, 32, 64, 64, 64, 64)  # classes of rows of other lengths share the kernel too
    xs = [torch.randn(20 + 7 * i, w, dtype=dtype) for i, w in enumerate(widths)]
    params = [p for w in widths for p in (torch.randn(w, dtype=dtype), torch.randn(w, dtype=dtype))]
    inputs = xs + params
    report = compile_report(layer_norms_of_four_bodies, inputs, passes="horizontal")
    assert len(compile_report(layer_norms_of_four_bodies, inputs, passes=None).launches) == 12
    assert len(report.launches) == 1
    (merge,) = _class_merges(report.rewrites)
    assert "12 kernels of 12 bodies → one kernel (row reduction" in merge.detail
    (kernel,) = report.kernels
    assert "@triton_heuristics.persistent_reduction(" in kernel.source and "'r0_': 64}" in kernel.source
    assert "R0_BLOCK: tl.constexpr = 8\n" in kernel.source and "R0_BLOCK: tl.constexpr = 64\n" in kernel.source
    actual, expected, _ = _interpreted(layer_norms_of_four_bodies, inputs)
    tolerance = {} if dtype == torch.float32 else {"atol": 5e-2, "rtol": 2e-2}  # (eager rounds each op to bf16)
    torch.testing.assert_close(actual, expected, **tolerance)


def looped_reductions_of_three_bodies(x, y, z, w):
    return x.sum(1), torch.tanh(y).amax(1), (z * z).sum(1), w.sum(1)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_looped_row_reductions_of_three_bodies_become_one_kernel(dtype):
    # rows too long to be held in one block: Inductor loops over them with the launch's R0_BLOCK
    inputs = [torch.randn(*shape, dtype=dtype) for shape in ((40, 2048), (24, 4096), (33, 3000), (40, 2048))]
    assert len(compile_report(looped_reductions_of_three_bodies, inputs, passes=None).launches) == 4
    report = compile_report(looped_reductions_of_three_bodies, inputs, passes="horizontal")
    assert len(report.launches) == 1
    (merge,) = _class_merges(report.rewrites)
    assert "4 kernels of 3 bodies → one kernel (row reduction" in merge.detail
    (kernel,) = report.kernels
    assert "@triton_heuristics.reduction(" in kernel.source and "'r0_': 4096}" in kernel.source
    assert "XBLOCK : tl.constexpr, R0_BLOCK : tl.constexpr):\n    xpid = tl.program_id(0)" in kernel.source
    actual, expected, _ = _interpreted(looped_reductions_of_three_bodies, inputs)
    # sums of thousands of values in another order than eager's; in bf16, eager rounds each partial sum
    tolerance = {"atol": 1e-4, "rtol": 1e-4} if dtype == torch.float32 else {"atol": 5e-1, "rtol": 2e-2}
    torch.testing.assert_close(actual, expected, **tolerance)


def test_persistent_and_looped_row_reductions_are_apart():
    def fn(x, y, z):
        return x.sum(1), y.amax(1), torch.tanh(z).sum(1)

    inputs = [torch.randn(64, 4096), torch.randn(64, 4096), torch.randn(96, 64)]  # two looped, one persistent
    report = compile_report(fn, inputs, passes="horizontal")
    assert len(report.launches) == 2
    (merge,) = _class_merges(report.rewrites)
    assert "2 kernels of 2 bodies → one kernel" in merge.detail


def test_classes_whose_kernels_are_of_two_kinds_are_one_kernel_per_kind():
    # planning asks each node what kind of kernel it is; where a class's kernel turns out another kind, the classes
    # of each kind are one kernel (one class alone: its member-table kernel), and the dump says so
    inputs = [torch.randn(*shape) for shape in ((40, 2048), (24, 4096), (33, 3000), (40, 2048))]
    kind_of = dispatch.kind_of

    def another_kind_for_rows_of_3000(kernel):
        return PERSISTENT if kernel.structures[0].rnumel == 3000 else kind_of(kernel)

    with mock.patch.object(dispatch, "kind_of", another_kind_for_rows_of_3000):
        report = compile_report(looped_reductions_of_three_bodies, inputs, passes="horizontal")
        actual, expected, records = _interpreted(looped_reductions_of_three_bodies, inputs)
    assert len(report.launches) == 2
    assert sum("@triton_heuristics.reduction(" in k.source and "xtable1" in k.source for k in report.kernels) == 1
    assert any("made as 2 kernels, one per kind" in r.detail and not r.fired for r in records)
    torch.testing.assert_close(actual, expected, atol=1e-4, rtol=1e-4)


def scans_and_a_sum(a, b, c):
    return torch.cumsum(a, 1), torch.cumsum(b * 2, 1), c.sum(1)


def test_classes_whose_kernels_have_helper_functions_keep_each_its_own():
    """A scan's kernel has a helper function (its combine function), named by Inductor per kernel: two classes'
    helpers can share a name (both scans' ``_triton_helper_fn_add0``). Each class keeps its own, renamed for it."""
    inputs = [torch.randn(64, 128) for _ in range(3)]
    report = compile_report(scans_and_a_sum, inputs, passes="horizontal")
    assert len(report.launches) == 1
    (merge,) = _class_merges(report.rewrites)
    assert "3 kernels of 3 bodies → one kernel" in merge.detail
    (kernel,) = report.kernels
    for k in (0, 1):
        assert kernel.source.count(f"def _triton_helper_fn_add0_class{k}(") == 1
        assert re.search(rf"tl\.associative_scan\(\(tmp\d+,\), 1, _triton_helper_fn_add0_class{k}\)", kernel.source)
    actual, expected, _ = _interpreted(scans_and_a_sum, inputs)
    # a scan adds in a tree where eager adds left to right: partial sums of 128 normal values differ by up to
    # ~1e-4 (a run with default tolerances failed on 15 of 8,192 elements, 2e-5 apart)
    torch.testing.assert_close(actual, expected, atol=1e-4, rtol=1e-5)


def column_reductions_of_three_bodies(a, b, c):
    return a.sum(0), torch.tanh(b).sum(0), (c * c).amax(0)


#: kernels of several bodies by the batch: each function, and its inputs for a batch (the rows of some a multiple)
BATCHED = {
    "pointwise": (eight_bodies, lambda batch: [torch.randn(batch * (1 + i % 3), 96 + 32 * i) for i in range(8)]),
    "persistent": (
        layer_norms_of_four_bodies,
        lambda batch: [torch.randn(batch + 7 * i, w) for i, w in enumerate((8, 8, 32, 32, 64, 64))]
        + [torch.randn(w) for w in (8, 8, 8, 8, 32, 32, 32, 32, 64, 64, 64, 64)],
    ),
    "looped": (
        looped_reductions_of_three_bodies,
        lambda batch: [torch.randn(batch, 2048), torch.randn(2 * batch, 4096), torch.randn(batch + 1, 3000),
                       torch.randn(batch, 2048)],
    ),
}


def _batch_dynamic(inputs):
    """``inputs`` with their batch marked dynamic, as Dynamo's automatic dynamic shapes does after a second batch."""
    for x in inputs:
        if x.dim() > 1:
            torch._dynamo.mark_dynamic(x, 0)
    return inputs


@pytest.mark.parametrize("kind", list(BATCHED))
def test_kernels_of_several_bodies_with_a_dynamic_batch_are_one_kernel_whose_classes_start_per_call(kind):
    fn, batch = BATCHED[kind]
    assert len(compile_report(fn, batch(16), passes="horizontal").launches) == 1
    report = compile_report(fn, _batch_dynamic(batch(16)), passes="horizontal")
    assert len(report.launches) == 1
    (merge,) = _class_merges(report.rewrites)
    assert "symbolic sizes, starts per call" in merge.detail
    (kernel,) = report.kernels
    # where each class starts is an argument the wrapper computes from the size symbols, not a constant of the code
    classes = len(re.findall(r"\bdef class_\d+\(", kernel.source))
    assert classes > 1 and "'xstart_class1': 'i64'" in kernel.source
    assert "    if xpid < xstart_class1 // XBLOCK:\n        class_0(" in kernel.source
    assert f"    elif xpid < xnumel // XBLOCK:\n        class_{classes - 1}(" in kernel.source
    assert not re.search(r"xpid < \d+ // XBLOCK", kernel.source)
    (launch,) = [line for line in report.wrapper.splitlines() if ".run(" in line]
    assert re.search(r"\(\(\d+ \+ \d*\*?s\d+\) // \d+\)", launch)
    # each class takes its members' tensors, and their numels and starts as size arguments, as Inductor's kernel
    # takes its ``ks0``: no table to look up (and make again each step of a real loop, where tensors are new)
    assert "tensors as arguments" in merge.detail and "MemberTable(" not in report.wrapper
    assert len(re.findall(r"\n    xnumel = [^\n]*\bks\d+", kernel.source)) == classes


@pytest.mark.parametrize("kind", [*BATCHED, "looped, rows of the batch's length"])
def test_a_loop_over_batches_of_three_sizes_runs_one_kernel_of_several_bodies_for_the_symbolic_batch(kind):
    """Automatic dynamic shapes: the first batch compiles static, the second recompiles with the batch a size
    symbol, and that code serves the third. Every class's table, and where each class starts, are computed per
    call; classes whose rows are the batch (column sums) take their row length per call."""
    fn, batch = BATCHED.get(kind) or (
        column_reductions_of_three_bodies, lambda b: [torch.randn(b, 64), torch.randn(b, 32), torch.randn(b, 48)]
    )
    compiled = torch.compile(fn)
    torch._dynamo.reset()
    torch._dynamo.utils.counters.clear()
    merges = []
    with optimus_ir.enabled(), cpu_triton_interpreter():
        for size in (8, 13, 21):
            inputs = batch(size)
            with recording() as records:
                actual = compiled(*inputs)
            merges.append(_class_merges(records))
            torch.testing.assert_close(actual, fn(*inputs), atol=1e-4, rtol=1e-4)
    assert torch._dynamo.utils.counters["stats"]["unique_graphs"] == 2  # none for the third batch
    static, symbolic, third = merges
    assert len(static) == 1 and len(symbolic) == 1 and not third
    assert "classes of" in symbolic[0].detail
    if fn is not column_reductions_of_three_bodies:  # (theirs start at their static row counts)
        assert "symbolic sizes, starts per call" in symbolic[0].detail


def bias_of_two_bodies(*args):
    xs, biases = args[::2], args[1::2]
    return [torch.tanh(x) + b if i % 2 == 0 else torch.sigmoid(x) * b for i, (x, b) in enumerate(zip(xs, biases))]


def test_the_size_symbols_a_classs_kernel_takes_are_passed_through_the_dispatch_kernel():
    """Every size symbolic (``dynamic=True``): a class reading a bias at ``x % width`` takes the width as Inductor's
    ``ks0``, which the dispatch kernel takes for it and passes on."""

    def inputs(rows, width):
        return [t for r in rows for t in (torch.randn(r, width), torch.randn(width))]

    report = compile_report(bias_of_two_bodies, inputs((8, 9, 10, 11), 16), passes="horizontal", dynamic=True)
    assert len(report.launches) == 1
    (kernel,) = report.kernels
    # (each class's ks0: the width; its ks1 ...: its members' starts and numels)
    assert re.search(r"ks0_class0, [^)]*ks0_class1, [^)]*xstart_class1, xnumel, XBLOCK", kernel.source)
    assert re.search(r"class_1\([^)]*, ks0_class1, [^)]*xnumel, ", kernel.source)
    compiled = torch.compile(bias_of_two_bodies, dynamic=True)
    torch._dynamo.reset()
    with optimus_ir.enabled("horizontal"), cpu_triton_interpreter(), recording() as records:
        for rows, width in (((8, 9, 10, 11), 16), ((3, 700, 5, 2), 40)):
            args = inputs(rows, width)
            torch.testing.assert_close(compiled(*args), bias_of_two_bodies(*args))
    assert len(_class_merges(records)) == 1  # one compile serves other widths and row counts


def test_the_dispatch_kernels_divisibility_hints_name_its_parameters_in_their_order():
    """Triton reads ``triton_meta["configs"]``'s divisibility hints by a parameter's position: the meta's signature
    must list the parameters in the kernel's order (tables, then sizes, then starts). Listed per class instead, a
    hint meant for a table fell on a class's size symbol, which the GPU then took as a multiple of 16: Mixtral's
    loop of odd sequence lengths computed wrong values there (the interpreter ignores the hints)."""
    import ast

    def fn(*xs):
        return [x.sum(-1) for x in xs]

    inputs = (torch.randn(8, 16), torch.randn(9, 24), torch.randn(10, 32))
    (kernel,) = compile_report(fn, inputs, passes="horizontal", dynamic=True).kernels
    definitions = [node for node in ast.parse(kernel.source).body if isinstance(node, ast.FunctionDef)]
    dispatch = definitions[-1]  # (the classes' functions come first)
    parameters = [arg.arg for arg in dispatch.args.args]
    meta = kernel.source.split("triton_meta=", 1)[1]
    signature = ast.literal_eval(re.search(r"'signature': (\{[^}]*\})", meta).group(1))
    configs = ast.literal_eval(re.search(r"'configs': (\[\{.*?\}\])", meta).group(1))
    assert list(signature) == parameters
    hinted = [parameters[i] for (i,) in configs[0]]
    assert any(name.startswith("ks") for name in parameters)
    assert not any(name.startswith(("ks", "r0_numel")) for name in hinted), hinted
