"""Running a callback right after a module is imported, without importing it: how optimus_ir waits for the
parts of Inductor it hooks into, so that ``import torch`` stays as fast as without it."""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys
from collections.abc import Callable
from typing import Any

__all__ = ["after_import"]


class _RunAfterImport(importlib.abc.MetaPathFinder):
    """Meta-path finder that runs a callback right after one module has been executed."""

    def __init__(self, fullname: str, callback: Callable[[], None]) -> None:
        self.fullname = fullname
        self.callback = callback

    def find_spec(self, fullname: str, path: Any, target: Any = None) -> Any:
        if fullname != self.fullname:
            return None
        sys.meta_path.remove(self)
        spec = importlib.machinery.PathFinder.find_spec(fullname, path)
        if spec is None or spec.loader is None:
            return spec
        exec_module = spec.loader.exec_module
        callback = self.callback

        def exec_then_callback(module: Any) -> None:
            exec_module(module)
            callback()

        spec.loader.exec_module = exec_then_callback  # type: ignore[method-assign]
        return spec


def after_import(fullname: str, callback: Callable[[], None]) -> None:
    """Call ``callback`` now if ``fullname`` is imported, else right after it gets imported."""
    if fullname in sys.modules:
        callback()
        return
    if not any(isinstance(f, _RunAfterImport) and f.fullname == fullname for f in sys.meta_path):
        sys.meta_path.insert(0, _RunAfterImport(fullname, callback))
