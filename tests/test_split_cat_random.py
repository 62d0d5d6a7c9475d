"""Seeded random split → op → cat chains through all passes, run on CPU by Triton's interpreter.

Each case is a seed: a tensor cut into pieces (split, split_with_sizes, chunk, unbind, every other row), an
elementwise op on each piece from one to three per layer (so runs of one op, and ops at strides; a row sum
broadcast back among them), the pieces glued back (cat in
order, reversed or shuffled, or stack), for one to three layers, fp32 or bf16. The result must equal stock
Inductor's and eager's: to float rounding in fp32; in bf16, to bf16's precision (where a split of a cat reads a
piece that has a kernel of its own, Inductor may fuse that kernel into the next layer's and keep fp32 between them,
as it does for any producer and consumer; a folded cat rounds as stock's store would: ``lowering/precision.py``).
"""

import functools
import random

import pytest
import torch

import optimus_ir
from optimus_ir.interpret import cpu_triton_interpreter
from optimus_ir.records import recording

CHAINS = range(48)

OPS = [
    torch.relu,
    torch.tanh,
    torch.sigmoid,
    torch.neg,
    torch.abs,
    lambda p: p * 2 + 1,
    lambda p: torch.clamp(p, -0.5, 0.5),
    lambda p: p.exp() * 0.1,
    lambda p: p,
    lambda p: p.sum(-1, keepdim=True).expand_as(p) * 0.01,
]


def chain(seed: int, device: str = "cpu"):
    """``(fn, x, description)``: one to three layers of cut → an op per piece → glue, along one dimension, on
    ``device``."""
    rng = random.Random(seed)
    dtype = rng.choice([torch.float32, torch.float32, torch.bfloat16])
    shape = [rng.choice([4, 8, 16, 24]), rng.choice([8, 16, 32, 48])] + ([rng.choice([2, 4])] if rng.random() < 0.3 else [])
    dim = rng.randrange(len(shape))
    size = shape[dim]
    cut = rng.choice(["split", "split_with_sizes", "chunk", "unbind", "every_other"])
    glue = rng.choice(["in_order", "in_order", "reversed", "shuffled"])
    layers = rng.choice([1, 1, 2, 3])
    count = rng.choice([4, 8, 16])
    bounds = sorted(rng.sample(range(1, size), min(rng.choice([3, 12]), size - 1)))
    sizes = [b - a for a, b in zip([0, *bounds], [*bounds, size])]
    palettes = [rng.sample(range(len(OPS)), rng.choice([1, 2, 3])) for _ in range(layers)]  # runs and strides
    ops = [[rng.choice(palette) for _ in range(size)] for palette in palettes]
    order = list(range(size))
    rng.shuffle(order)
    x = torch.randn(*shape, generator=torch.Generator().manual_seed(seed)).to(device, dtype)

    def pieces_of(t):
        if cut == "split":
            return t.split(max(1, size // count), dim)
        if cut == "split_with_sizes":
            return t.split(sizes, dim)
        if cut == "chunk":
            return t.chunk(count, dim)
        if cut == "unbind":
            return t.unbind(dim)
        return [t.narrow(dim, i, 1) for i in range(0, size, 2)]

    def fn(t):
        for layer_ops in ops:
            outs = [OPS[layer_ops[i]](p) for i, p in enumerate(pieces_of(t))]
            if glue == "reversed":
                outs = outs[::-1]
            elif glue == "shuffled":
                outs = [outs[i] for i in order if i < len(outs)]
            t = torch.stack(outs, dim) if cut == "unbind" else torch.cat(outs, dim)
            if t.shape != x.shape:  # every other row: half the rows, the chain ends
                break
        return t

    return fn, x, dict(dtype=dtype, shape=shape, dim=dim, cut=cut, glue=glue, layers=layers)


@functools.cache
def _checked(seed: int) -> bool:
    """Check one chain; whether a splitcat rule fired."""
    fn, x, description = chain(seed)
    expected = fn(x.clone())
    tolerance = dict(atol=1e-5, rtol=1e-5) if description["dtype"] == torch.float32 else dict(atol=2e-2, rtol=2e-2)
    results = {}
    for passes in (None, "all"):
        torch._dynamo.reset()
        with optimus_ir.enabled(passes), cpu_triton_interpreter(), recording() as records:
            results[passes] = torch.compile(fn)(x.clone())
    torch.testing.assert_close(results["all"], results[None], **tolerance)
    torch.testing.assert_close(results["all"], expected, **tolerance)
    assert not [r for r in records if "internal error" in r.detail], records
    return any(r.fired and r.rule != "IdenticalKernelsToMemberTableKernel" for r in records)


@pytest.mark.parametrize("seed", CHAINS)
def test_random_chain_computes_what_stock_and_eager_compute(seed):
    _checked(seed)


def test_random_chains_do_fire():
    # the checks above would pass if nothing fired
    fired = [seed for seed in CHAINS if _checked(seed)]
    assert len(fired) >= len(CHAINS) // 2, fired
