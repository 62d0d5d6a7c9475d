"""The golden cases: each a function, its example inputs, and what optimus_ir must do to it.

Used by tests/test_golden.py (golden kernel text for the virtual sm_90 target, in golden/<case name>.txt, and
numerics through Triton's interpreter on CPU) and by tests/gpu (the same cases on the real GPU). The split/cat
cases come first (:mod:`optimus_ir.testing.golden_splitcat`), then the horizontal ones
(:mod:`optimus_ir.testing.golden_horizontal`), then graphs of PyTorch's Inductor tests that once launched more
kernels than stock (:mod:`optimus_ir.testing.golden_from_inductor_tests`).
"""

from __future__ import annotations

from optimus_ir.testing.case import Case, run_as_eager_does
from optimus_ir.testing.golden_from_inductor_tests import FROM_INDUCTOR_TESTS_CASES
from optimus_ir.testing.golden_horizontal import HORIZONTAL_CASES
from optimus_ir.testing.golden_splitcat import SPLITCAT_CASES

__all__ = ["CASES", "Case", "run_as_eager_does"]

CASES: list[Case] = [*SPLITCAT_CASES, *HORIZONTAL_CASES, *FROM_INDUCTOR_TESTS_CASES]
