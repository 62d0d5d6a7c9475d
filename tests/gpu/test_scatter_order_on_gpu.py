"""On a real GPU: embedding → layer norm, trained (a scatter into a zero fill that Inductor fuses with the layer
norm's input gradient): optimus_ir's gradients are eager's."""

import torch
import torch.nn.functional as F

import optimus_ir
from tests.gpu.helpers import CUDA, cold_compile

pytestmark = CUDA


def embedding_layer_norm(table, ids, weight):
    return F.layer_norm(F.embedding(ids, table), (64,), weight).sum()


def _gradients(compiled: bool, passes):
    torch.manual_seed(0)
    table = torch.randn(100, 64, device="cuda", requires_grad=True)
    weight = torch.randn(64, device="cuda", requires_grad=True)
    ids = torch.randint(0, 100, (8, 64), device="cuda")
    fn = torch.compile(embedding_layer_norm) if compiled else embedding_layer_norm
    with cold_compile(), optimus_ir.enabled(passes):
        fn(table, ids, weight).backward()
    return table.grad, weight.grad


def test_gradients_are_eagers():
    expected = _gradients(False, None)
    for actual, wanted in zip(_gradients(True, "all"), expected):
        torch.testing.assert_close(actual, wanted, atol=1e-4, rtol=1e-4)
