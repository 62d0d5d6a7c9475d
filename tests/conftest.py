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
