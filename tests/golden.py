"""Golden files under golden/: checked with expecttest; ``EXPECTTEST_ACCEPT=1`` rewrites them."""

from __future__ import annotations

from pathlib import Path

from optimus_ir.codegen_text import normalize
from optimus_ir.inspect import CompileReport

GOLDEN_DIR = Path(__file__).resolve().parent.parent / "golden"


def render(report: CompileReport, stock: CompileReport) -> str:
    """The golden text of a case: launches (stock and ours), the rewrite decisions, and our kernels, normalized."""
    lines = []
    for ours, theirs in zip(report.graphs, stock.graphs):
        lines.append(f"# graph {ours.name}: {len(theirs.launches)} launches stock -> {len(ours.launches)} optimus_ir")
        lines.extend(f"#   launch {name}" for name in ours.launches)
    lines.append("# rewrites:")
    lines.extend(f"#   {record}" for record in report.rewrites)
    text = "\n".join(lines) + "\n"
    for kernel in report.kernels:
        text += f"\n# ----- kernel {kernel.name}\n{normalize(kernel.source).strip()}\n"
    return text


def assert_golden(name: str, actual: str) -> None:
    import expecttest  # a test extra; render() needs none

    path = GOLDEN_DIR / f"{name}.txt"
    if expecttest.ACCEPT:
        GOLDEN_DIR.mkdir(exist_ok=True)
        path.write_text(actual)
        return
    if not path.exists():
        raise AssertionError(f"no golden file {path}; read the kernels, then run with EXPECTTEST_ACCEPT=1")
    expecttest.assert_eq(path.read_text(), actual, msg=f"golden file {path} differs; if the new kernel is the one "
                         "we want, rerun with EXPECTTEST_ACCEPT=1 and commit the diff")
