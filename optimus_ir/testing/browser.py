"""Headless Chromium (Debian's ``chromium`` package) for the dump's page: its DOM after loading, what it wrote to
the console, and screenshots. Standard library only."""

from __future__ import annotations

import re
import shutil
import subprocess
import tempfile
from pathlib import Path

__all__ = ["chromium", "render", "screenshot"]

#: What a closed network and a root user need (no sandbox, no background connections that would be refused).
_FLAGS = (
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
)
#: ``[pid:tid:date:INFO:CONSOLE:1] "message", source: file:///... (1)``, with ``--enable-logging=stderr``
_CONSOLE = re.compile(r":CONSOLE(?:\(\d+\))?:?\d*\] (.*)")


def chromium() -> str | None:
    """The browser's path, or None when it is not installed."""
    return shutil.which("chromium") or shutil.which("chromium-browser")


def _run(page: Path, *args: str) -> subprocess.CompletedProcess[str]:
    browser = chromium()
    if browser is None:
        raise FileNotFoundError("chromium is not installed (Debian: apt-get install chromium)")
    with tempfile.TemporaryDirectory() as profile:
        return subprocess.run(
            [browser, *_FLAGS, f"--user-data-dir={profile}", "--enable-logging=stderr", "--v=0", *args,
             page.resolve().as_uri()],
            capture_output=True, text=True, timeout=120, check=True,
        )


def render(page: Path) -> tuple[str, list[str]]:
    """The page's DOM once loaded, and each message it wrote to the console (errors, uncaught exceptions)."""
    result = _run(page, "--dump-dom")
    return result.stdout, [m.group(1) for m in map(_CONSOLE.search, result.stderr.splitlines()) if m]


def screenshot(page: Path, png: Path, width: int = 1400, height: int = 1000) -> None:
    _run(page, f"--screenshot={png.resolve()}", f"--window-size={width},{height}", "--hide-scrollbars")
