import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))


@pytest.fixture(autouse=True)
def _optimus_ir_off_between_tests():
    """Each test starts and ends with optimus_ir disabled and a fresh Dynamo."""
    import torch

    import optimus_ir

    optimus_ir.disable()
    torch._dynamo.reset()
    yield
    optimus_ir.disable()
    torch._dynamo.reset()


@pytest.fixture
def matmuls_stay_cublas():
    """Products are not grouped (``IndependentMatmulsToGroupedMatmul`` and ``MatmulChainsToGroupedMlp`` off): for
    tests of what follows cuBLAS's products, as Inductor lowers them."""
    from unittest import mock

    from optimus_ir.lowering.grouped_matmuls import IndependentMatmulsToGroupedMatmul, MatmulChainsToGroupedMlp

    with (mock.patch.object(IndependentMatmulsToGroupedMatmul, "rewrite", lambda self, graph: None),
          mock.patch.object(MatmulChainsToGroupedMlp, "rewrite", lambda self, graph: None)):
        yield
