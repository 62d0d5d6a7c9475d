"""``optimus_ir::grouped_mm``: independent matrix products in one launch.

    grouped_mm(a, b, bias, activation, outside_graph_pools)[i] = activation(a[i] @ b[i] + bias[i])
    grouped_mm_cat(a, b, bias, activation, outside_graph_pools) = torch.cat(grouped_mm(...), 1)
    grouped_mlp(a, b, bias, activation, b2, bias2, activation2, outside_graph_pools)[i]
        = activation2(activation(a[i] @ b[i] + bias[i]) @ b2[i] + bias2[i])
    grouped_mlp_cat(...) = torch.cat(grouped_mlp(...), 1)

``a[i]`` is ``[M_i, K_i]``, ``b[i]`` ``[K_i, N_i]`` (any strides: a transposed weight or gradient is read in
place), ``bias[i]`` None or a row of ``N_i`` values; every member of one dtype (fp32, fp16 or bf16) and device;
``activation`` ``"none"`` or ``"relu"``; ``outside_graph_pools``: the call runs under cudagraph trees
(``mode="reduce-overhead"``), whose memory pools the member tables must stay out of. Each output is a new
contiguous ``[M_i, N_i]`` tensor of that dtype; ``grouped_mm_cat``'s (members of one ``M``) one ``[M, sum(N_i)]``
tensor whose columns each member writes.

On a CUDA device one Triton kernel computes every member: each program computes one ``BLOCK_M x BLOCK_N`` tile of
one member's output, the members' tiles end to end along the grid. Where a member's tiles start, its sizes and
strides and the addresses of its tensors are read from a member table (:class:`~optimus_ir.runtime.MemberTable`:
cached by the addresses, so a call whose tensors are where the last call's were copies nothing to the device, and
safe to capture in a CUDA graph). Products accumulate in fp32, in TF32 where
``torch.backends.cuda.matmul.allow_tf32`` allows it for fp32 inputs, as cuBLAS does; the bias is added and the
activation applied to the fp32 accumulator before the one rounding to the output's dtype. On the CPU, the same
kernel under Triton's interpreter (``TRITON_INTERPRET=1``: what the tests check), else ATen's ``addmm`` / ``mm``
per member.

``grouped_mlp`` computes two products of each member in one program: a block of rows of its hidden activation, a
chunk of hidden columns at a time, is kept in registers (rounded to the dtype as a stored one would be) and
multiplied into the output at once: the hidden activation is never written. Each member's output is one tile wide
(``N2`` at most ``MAX_MLP_WIDTH``), so no hidden value is computed twice.

The ops are registered when this module is imported; Inductor lowers a call of it as any custom op (a fallback: one
call in the graph's wrapper), and ``IndependentMatmulsToGroupedMatmul`` writes the calls.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any

import torch

from optimus_ir.member_table import padded_members

__all__ = ["ACTIVATIONS", "CAT_OP", "DTYPES", "MAX_MLP_WIDTH", "MLP_CAT_OP", "MLP_OP", "OP", "blocks", "launch",
           "launch_mlp"]

#: activations the op applies to its fp32 accumulator
ACTIVATIONS = ("none", "relu")
#: dtypes of members
DTYPES = frozenset({torch.float32, torch.float16, torch.bfloat16})
# A member's row of the table (``MemberTableLayout``): its values m, n, k, a's strides, b's strides, the output's
# row stride; then its addresses: a, b, the output, the bias (if any).
#: the largest tile; smaller sizes take the next power of two, at least ``_MIN_BLOCK``
_MAX_BLOCK_M, _MAX_BLOCK_N, _MIN_BLOCK = 64, 64, 16
#: the K step: bytes of a row of operands per step, as Inductor's mm configs do (32 fp32 or 64 half values)
_BLOCK_K_BYTES = 128
_NUM_WARPS, _NUM_STAGES = 4, 3
#: the widest output of a ``grouped_mlp`` member: one tile holds a block of its rows (an fp32 accumulator of
#: ``64 x 128`` values, 64 registers a thread of 4 warps)
MAX_MLP_WIDTH = 128
#: the hidden columns computed at a time
_MAX_BLOCK_H = 64

_LIBRARY = torch.library.Library("optimus_ir", "DEF")  # noqa: TOR901 (the op's schema, defined once)
_ARGS = "Tensor[] a, Tensor[] b, Tensor?[] bias, str activation, bool outside_graph_pools=False"
_LIBRARY.define(f"grouped_mm({_ARGS}) -> Tensor[]")
_LIBRARY.define(f"grouped_mm_cat({_ARGS}) -> Tensor")
OP = torch.ops.optimus_ir.grouped_mm.default
#: the members' outputs side by side, ``torch.cat(grouped_mm(...), 1)`` (members of one row count): each member's
#: tiles written into its columns, no copy
CAT_OP = torch.ops.optimus_ir.grouped_mm_cat.default
_MLP_ARGS = ("Tensor[] a, Tensor[] b, Tensor?[] bias, str activation, Tensor[] b2, Tensor?[] bias2, str activation2, "
             "bool outside_graph_pools=False")
_LIBRARY.define(f"grouped_mlp({_MLP_ARGS}) -> Tensor[]")
_LIBRARY.define(f"grouped_mlp_cat({_MLP_ARGS}) -> Tensor")
#: two layers of each member, the hidden activation kept in registers
MLP_OP = torch.ops.optimus_ir.grouped_mlp.default
#: ``torch.cat(grouped_mlp(...), 1)``, each member's rows written into its columns
MLP_CAT_OP = torch.ops.optimus_ir.grouped_mlp_cat.default


def _next_power_of_two(n: int) -> int:
    return 1 << max(0, n - 1).bit_length()


def blocks(m: int, n: int, k: int, dtype: torch.dtype) -> tuple[int, int, int]:
    """``(BLOCK_M, BLOCK_N, BLOCK_K)`` for members whose largest sizes are ``m``, ``n``, ``k``."""
    block_k = _BLOCK_K_BYTES // dtype.itemsize
    return (
        min(_MAX_BLOCK_M, max(_MIN_BLOCK, _next_power_of_two(m))),
        min(_MAX_BLOCK_N, max(_MIN_BLOCK, _next_power_of_two(n))),
        min(block_k, max(_MIN_BLOCK, _next_power_of_two(k))),
    )


@functools.cache
def _kernel(interpreted: bool):
    """The Triton kernel, made on first use (importing the op needs no Triton), for Triton's interpreter or not."""
    import triton
    import triton.language as tl

    @triton.jit
    def grouped_mm_kernel(
        table, MEMBERS: tl.constexpr, PAD: tl.constexpr, DTYPE: tl.constexpr, HAS_BIAS: tl.constexpr,
        RELU: tl.constexpr, TF32: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
        BLOCK_K: tl.constexpr,
    ):
        pid = tl.program_id(0).to(tl.int64)
        starts = tl.load(table + tl.arange(0, PAD))
        member = tl.sum((starts <= pid).to(tl.int64), 0) - 1  # the last member starting at or before the tile
        tile = pid - tl.load(table + member)
        values = table + PAD + MEMBERS + member  # value j: values + j * MEMBERS
        m, n, k = tl.load(values), tl.load(values + MEMBERS), tl.load(values + 2 * MEMBERS)
        a_row, a_col = tl.load(values + 3 * MEMBERS), tl.load(values + 4 * MEMBERS)
        b_row, b_col = tl.load(values + 5 * MEMBERS), tl.load(values + 6 * MEMBERS)
        c_row = tl.load(values + 7 * MEMBERS)
        addresses = values + 8 * MEMBERS  # slot s: addresses + s * MEMBERS
        a = tl.load(addresses).to(tl.pointer_type(DTYPE))
        b = tl.load(addresses + MEMBERS).to(tl.pointer_type(DTYPE))
        c = tl.load(addresses + 2 * MEMBERS).to(tl.pointer_type(DTYPE))

        tiles_n = tl.cdiv(n, BLOCK_N)
        rows = (tile // tiles_n) * BLOCK_M + tl.arange(0, BLOCK_M)
        cols = (tile % tiles_n) * BLOCK_N + tl.arange(0, BLOCK_N)
        steps = tl.arange(0, BLOCK_K)
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        for start in range(0, k, BLOCK_K):
            inner = start + steps
            a_block = tl.load(a + rows[:, None] * a_row + inner[None, :] * a_col,
                              mask=(rows[:, None] < m) & (inner[None, :] < k), other=0.0)
            b_block = tl.load(b + inner[:, None] * b_row + cols[None, :] * b_col,
                              mask=(inner[:, None] < k) & (cols[None, :] < n), other=0.0)
            if TF32:
                acc = tl.dot(a_block, b_block, acc, input_precision="tf32")
            else:
                acc = tl.dot(a_block, b_block, acc, input_precision="ieee")
        if HAS_BIAS:
            bias = tl.load(addresses + 3 * MEMBERS).to(tl.pointer_type(DTYPE))
            acc += tl.load(bias + cols, mask=cols < n, other=0.0).to(tl.float32)[None, :]
        if RELU:
            acc = tl.maximum(acc, 0.0)
        tl.store(c + rows[:, None] * c_row + cols[None, :], acc.to(DTYPE),
                 mask=(rows[:, None] < m) & (cols[None, :] < n))

    return grouped_mm_kernel


@functools.cache
def _mlp_kernel(interpreted: bool):
    """The two-layer kernel, made on first use, for Triton's interpreter or not."""
    import triton
    import triton.language as tl

    @triton.jit
    def grouped_mlp_kernel(
        table, MEMBERS: tl.constexpr, PAD: tl.constexpr, DTYPE: tl.constexpr, HAS_BIAS: tl.constexpr,
        RELU: tl.constexpr, HAS_BIAS2: tl.constexpr, RELU2: tl.constexpr, TF32: tl.constexpr, BLOCK_M: tl.constexpr,
        BLOCK_H: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
    ):
        pid = tl.program_id(0).to(tl.int64)
        starts = tl.load(table + tl.arange(0, PAD))
        member = tl.sum((starts <= pid).to(tl.int64), 0) - 1
        tile = pid - tl.load(table + member)
        values = table + PAD + MEMBERS + member
        m, h, k, n = tl.load(values), tl.load(values + MEMBERS), tl.load(values + 2 * MEMBERS), tl.load(
            values + 3 * MEMBERS)
        a_row, a_col = tl.load(values + 4 * MEMBERS), tl.load(values + 5 * MEMBERS)
        b_row, b_col = tl.load(values + 6 * MEMBERS), tl.load(values + 7 * MEMBERS)
        b2_row, b2_col = tl.load(values + 8 * MEMBERS), tl.load(values + 9 * MEMBERS)
        c_row = tl.load(values + 10 * MEMBERS)
        addresses = values + 11 * MEMBERS
        a = tl.load(addresses).to(tl.pointer_type(DTYPE))
        b = tl.load(addresses + MEMBERS).to(tl.pointer_type(DTYPE))
        b2 = tl.load(addresses + 2 * MEMBERS).to(tl.pointer_type(DTYPE))
        c = tl.load(addresses + 3 * MEMBERS).to(tl.pointer_type(DTYPE))

        rows = tile * BLOCK_M + tl.arange(0, BLOCK_M)
        cols = tl.arange(0, BLOCK_N)
        steps = tl.arange(0, BLOCK_K)
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        for hidden_start in range(0, h, BLOCK_H):
            hidden_cols = hidden_start + tl.arange(0, BLOCK_H)
            hidden = tl.zeros((BLOCK_M, BLOCK_H), dtype=tl.float32)
            for start in range(0, k, BLOCK_K):
                inner = start + steps
                a_block = tl.load(a + rows[:, None] * a_row + inner[None, :] * a_col,
                                  mask=(rows[:, None] < m) & (inner[None, :] < k), other=0.0)
                b_block = tl.load(b + inner[:, None] * b_row + hidden_cols[None, :] * b_col,
                                  mask=(inner[:, None] < k) & (hidden_cols[None, :] < h), other=0.0)
                if TF32:
                    hidden = tl.dot(a_block, b_block, hidden, input_precision="tf32")
                else:
                    hidden = tl.dot(a_block, b_block, hidden, input_precision="ieee")
            if HAS_BIAS:
                bias = tl.load(addresses + 4 * MEMBERS).to(tl.pointer_type(DTYPE))
                hidden += tl.load(bias + hidden_cols, mask=hidden_cols < h, other=0.0).to(tl.float32)[None, :]
            if RELU:
                hidden = tl.maximum(hidden, 0.0)
            b2_block = tl.load(b2 + hidden_cols[:, None] * b2_row + cols[None, :] * b2_col,
                               mask=(hidden_cols[:, None] < h) & (cols[None, :] < n), other=0.0)
            if TF32:
                acc = tl.dot(hidden.to(DTYPE), b2_block, acc, input_precision="tf32")
            else:
                acc = tl.dot(hidden.to(DTYPE), b2_block, acc, input_precision="ieee")
        if HAS_BIAS2:
            bias2 = tl.load(addresses + (4 + HAS_BIAS) * MEMBERS).to(tl.pointer_type(DTYPE))
            acc += tl.load(bias2 + cols, mask=cols < n, other=0.0).to(tl.float32)[None, :]
        if RELU2:
            acc = tl.maximum(acc, 0.0)
        tl.store(c + rows[:, None] * c_row + cols[None, :], acc.to(DTYPE),
                 mask=(rows[:, None] < m) & (cols[None, :] < n))

    return grouped_mlp_kernel


@functools.cache
def _table(op: str, members: int, has_bias: tuple[bool, ...], outside_graph_pools: bool):
    """The member table of ``op``'s calls of ``members`` members (shared by such calls: its tables are cached by
    addresses). The kernel reads it as ``MemberTableLayout`` lays it out (8 values a member, 11 for an mlp)."""
    from optimus_ir.runtime import MemberTable

    return MemberTable(None, None, padded_members(members), align=1, outside_graph_pools=outside_graph_pools)


def launch(a: Sequence[torch.Tensor], b: Sequence[torch.Tensor], bias: Sequence[torch.Tensor | None],
           activation: str, out: Sequence[torch.Tensor], outside_graph_pools: bool = False) -> None:
    """Write every member's product into ``out`` with one launch of the Triton kernel (a GPU, or the CPU under
    Triton's interpreter)."""
    import triton
    import triton.language as tl

    _check(activation)
    members, dtype = len(a), a[0].dtype
    # the host's share of a call: few calls per member (``triton.cdiv``, a JIT function, took 2 us a call)
    (ms, ks), ns = zip(*(x.shape for x in a)), [w.shape[1] for w in b]
    block_m, block_n, block_k = blocks(max(ms), max(ns), max(ks), dtype)
    tiles = tuple(-(-m // block_m) * -(-n // block_n) for m, n in zip(ms, ns))
    (a_row, a_col), (b_row, b_col) = zip(*(x.stride() for x in a)), zip(*(w.stride() for w in b))
    values = (*ms, *ns, *ks, *a_row, *a_col, *b_row, *b_col, *(y.stride(0) for y in out))
    has_bias = bias[0] is not None
    tensors = (*a, *b, *out, *(bias if has_bias else ()))
    table = _table("mm", members, (has_bias,), outside_graph_pools)(*tensors, numels=tiles, values=values)
    if sum(tiles) == 0:
        return
    _kernel(bool(triton.knobs.runtime.interpret))[(sum(tiles),)](
        table, MEMBERS=members, PAD=padded_members(members), DTYPE=getattr(tl, str(dtype).removeprefix("torch.")),
        HAS_BIAS=has_bias, RELU=activation == "relu",
        TF32=dtype == torch.float32 and torch.backends.cuda.matmul.allow_tf32,
        BLOCK_M=block_m, BLOCK_N=block_n, BLOCK_K=block_k, num_warps=_NUM_WARPS, num_stages=_NUM_STAGES,
    )


def launch_mlp(a: Sequence[torch.Tensor], b: Sequence[torch.Tensor], bias: Sequence[torch.Tensor | None],
               activation: str, b2: Sequence[torch.Tensor], bias2: Sequence[torch.Tensor | None], activation2: str,
               out: Sequence[torch.Tensor], outside_graph_pools: bool = False) -> None:
    """Write every member's two layers into ``out`` with one launch of the two-layer kernel."""
    import triton
    import triton.language as tl

    _check(activation)
    _check(activation2)
    members, dtype = len(a), a[0].dtype
    (ms, ks), hs, ns = zip(*(x.shape for x in a)), [w.shape[1] for w in b], [w.shape[1] for w in b2]
    if max(ns) > MAX_MLP_WIDTH:
        raise ValueError(f"grouped_mlp: an output of {max(ns)} columns, over {MAX_MLP_WIDTH}")
    block_m, block_h, block_k = blocks(max(ms), max(hs), max(ks), dtype)
    block_h, block_n = min(block_h, _MAX_BLOCK_H), max(_MIN_BLOCK, _next_power_of_two(max(ns)))
    tiles = tuple(-(-m // block_m) for m in ms)
    strides = [x.stride() for x in (*a, *b, *b2)]
    (a_row, a_col), (b_row, b_col) = zip(*strides[:members]), zip(*strides[members:2 * members])
    b2_row, b2_col = zip(*strides[2 * members:])
    values = (*ms, *hs, *ks, *ns, *a_row, *a_col, *b_row, *b_col, *b2_row, *b2_col, *(y.stride(0) for y in out))
    has_bias = bias[0] is not None, bias2[0] is not None
    tensors = (*a, *b, *b2, *out, *(bias if has_bias[0] else ()), *(bias2 if has_bias[1] else ()))
    table = _table("mlp", members, has_bias, outside_graph_pools)(*tensors, numels=tiles, values=values)
    if sum(tiles) == 0:
        return
    _mlp_kernel(bool(triton.knobs.runtime.interpret))[(sum(tiles),)](
        table, MEMBERS=members, PAD=padded_members(members), DTYPE=getattr(tl, str(dtype).removeprefix("torch.")),
        HAS_BIAS=has_bias[0], RELU=activation == "relu", HAS_BIAS2=has_bias[1], RELU2=activation2 == "relu",
        TF32=dtype == torch.float32 and torch.backends.cuda.matmul.allow_tf32,
        BLOCK_M=block_m, BLOCK_H=block_h, BLOCK_N=block_n, BLOCK_K=block_k, num_warps=_NUM_WARPS,
        num_stages=_NUM_STAGES,
    )


def _check(activation: str) -> None:
    if activation not in ACTIVATIONS:
        raise ValueError(f"grouped_mm: activation {activation!r}, not one of {ACTIVATIONS}")


def _aten(a: Sequence[torch.Tensor], b: Sequence[torch.Tensor], bias: Sequence[torch.Tensor | None],
          activation: str) -> list[torch.Tensor]:
    out = [torch.mm(x, w) if c is None else torch.addmm(c, x, w) for x, w, c in zip(a, b, bias)]
    return [torch.relu(y) for y in out] if activation == "relu" else out


def _register(name: str, layers: int, launcher: Callable[..., None]) -> None:
    """The CUDA, CPU and fake implementations of ``name`` and ``name_cat``, whose arguments are ``a``, then per
    layer its weights, biases and activation, then ``outside_graph_pools``; ``launcher(*arguments, out,
    outside_graph_pools)`` writes the members' outputs. On the CPU: the kernel under Triton's interpreter where that
    is on, else ATen's products layer after layer."""
    arity = 1 + 3 * layers

    def parsed(args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[tuple[Any, ...], bool]:
        for activation in args[3:arity:3]:
            _check(activation)
        outside = args[arity] if len(args) > arity else kwargs.get("outside_graph_pools", False)
        return args[:arity], outside

    def outputs(args: tuple[Any, ...], cat: bool) -> tuple[Any, list[torch.Tensor]]:
        """What the op returns, and the tensors its members write: their own, or their columns of one cat."""
        a, widths = args[0], [w.shape[1] for w in args[arity - 3]]
        if not cat:
            out = [x.new_empty((x.shape[0], n)) for x, n in zip(a, widths)]
            return out, out
        whole = a[0].new_empty((a[0].shape[0], sum(widths)))
        return whole, list(whole.split(widths, 1))

    def launched(args: tuple[Any, ...], outside: bool, cat: bool) -> Any:
        result, out = outputs(args, cat)
        launcher(*args, out, outside)
        return result

    def on_cuda(cat: bool) -> Callable[..., Any]:
        return lambda *args, **kwargs: launched(*parsed(args, kwargs), cat)

    def on_cpu(cat: bool) -> Callable[..., Any]:
        def computed(*args: Any, **kwargs: Any) -> Any:
            import triton

            args, outside = parsed(args, kwargs)
            if triton.knobs.runtime.interpret:
                return launched(args, outside, cat)
            x = args[0]
            for w, c, activation in zip(args[1::3], args[2::3], args[3::3]):
                x = _aten(x, w, c, activation)
            return torch.cat(x, 1) if cat else x

        return computed

    def fake(cat: bool) -> Callable[..., Any]:
        return lambda *args, **kwargs: outputs(parsed(args, kwargs)[0], cat)[0]

    for op, cat in ((name, False), (f"{name}_cat", True)):
        _LIBRARY.impl(op, on_cuda(cat), "CUDA")
        _LIBRARY.impl(op, on_cpu(cat), "CPU")
        torch.library.register_fake(f"optimus_ir::{op}", fake(cat), lib=_LIBRARY)


# the launchers looked up per call, as any module function is (replaceable)
_register("grouped_mm", 1, lambda *args: launch(*args))
_register("grouped_mlp", 2, lambda *args: launch_mlp(*args))
