import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))


@pytest.fixture(autouse=True)
def _optimus_ir_off_between_tests(monkeypatch):
    """Each test starts and ends with optimus_ir disabled and a fresh Dynamo; a rule that raises fails it (users get
    stock's code and a warning instead: :data:`optimus_ir.drivers.RAISE_RULE_ERRORS`)."""
    import torch

    import optimus_ir
    from optimus_ir import drivers

    monkeypatch.setattr(drivers, "RAISE_RULE_ERRORS", True)
    optimus_ir.disable()
    torch._dynamo.reset()
    yield
    optimus_ir.disable()
    torch._dynamo.reset()


@pytest.fixture
def rule_errors_fall_back(monkeypatch):
    """As users have it: a rule that raises falls back to stock's code, with a warning and a decision in the dump
    (for tests of that fallback)."""
    from optimus_ir import drivers

    monkeypatch.setattr(drivers, "RAISE_RULE_ERRORS", False)


@pytest.fixture
def matmuls_stay_cublas():
    """Products are not grouped (``IndependentMatmulsToGroupedMatmul`` and ``MatmulChainsToGroupedMlp`` off): for
    tests of what follows cuBLAS's products, as Inductor lowers them."""
    from unittest import mock

    from optimus_ir.lowering.grouped_matmuls import IndependentMatmulsToGroupedMatmul, MatmulChainsToGroupedMlp

    with (mock.patch.object(IndependentMatmulsToGroupedMatmul, "rewrite", lambda self, graph: None),
          mock.patch.object(MatmulChainsToGroupedMlp, "rewrite", lambda self, graph: None)):
        yield
