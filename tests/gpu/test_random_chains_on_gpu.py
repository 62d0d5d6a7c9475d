"""On a real GPU: the random split → op → cat chains of tests/test_split_cat_random.py on CUDA, through all passes,
against stock Inductor and eager: within 1e-5 in fp32, 2e-2 in bf16 (a fused chain keeps fp32 between layers), and
no decision reporting an internal error. Seeds: the test's, or ``OPTIMUS_IR_GPU_CHAIN_SEEDS=FIRST-LAST``."""

import pytest
import torch

import optimus_ir
from optimus_ir.records import recording
from tests.gpu.helpers import CUDA, seeds, worst
from tests.test_split_cat_random import CHAINS, chain

pytestmark = CUDA


@pytest.mark.parametrize("seed", seeds("OPTIMUS_IR_GPU_CHAIN_SEEDS", CHAINS))
def test_random_chain_on_the_gpu(seed):
    fn, x, description = chain(seed, "cuda")
    expected = fn(x.clone())
    results = {}
    for passes in (None, "all"):
        torch._dynamo.reset()
        with optimus_ir.enabled(passes), recording() as records:
            results[passes] = torch.compile(fn)(x.clone())
    tolerance = (1e-5, 1e-5) if description["dtype"] == torch.float32 else (2e-2, 2e-2)
    fired = sorted({r.rule for r in records if r.fired})
    summary = f"{description}; fired: {fired}"
    assert not [r.detail for r in records if "internal error" in r.detail], summary
    assert worst((results["all"],), (results[None],), *tolerance) < 1, f"differs from stock: {summary}"
    assert worst((results["all"],), (expected,), *tolerance) < 1, f"differs from eager: {summary}"
