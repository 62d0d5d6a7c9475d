"""Draw docs/dump.png: the top of the dump's page (``index.html``) for a small example, in headless Chromium.

Runs on the CPU (virtual sm_90 code generation) and needs Debian's chromium:

    python docs/dump_page.py            # writes docs/dump.png (and the dump itself to a temporary folder)
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import torch

from optimus_ir.inspect import compile_report
from optimus_ir.testing.browser import screenshot

ROOT = Path(__file__).resolve().parent.parent


def features(x: torch.Tensor, *tables: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """A split → relu → cat chain and the same small op on eight feature tensors."""
    chain = torch.cat([torch.relu(p) for p in reversed(x.split(64, dim=1))], dim=1)
    return (chain, *(torch.tanh(t) * 2 for t in tables))


def main() -> None:
    with tempfile.TemporaryDirectory() as folder:
        os.environ["OPTIMUS_IR_DUMP"] = folder
        compile_report(features, (torch.randn(64, 512), *(torch.randn(128, 256) for _ in range(8))))
        screenshot(Path(folder) / "index.html", ROOT / "docs" / "dump.png", width=1400, height=900)
    print(f"wrote {ROOT / 'docs' / 'dump.png'}")


if __name__ == "__main__":
    main()
