"""The code's structure: imports flow one way, and no product file grows past what one reader can hold.

The package-dir mapping (``lowering/`` is ``optimus_ir.lowering``) hides these edges from tools that follow
folders, so the imports are read here from the sources: every ``import`` statement, at module level or inside a
function.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
#: folder → package, as pyproject's package-dir says
PACKAGES = {
    "optimus_ir": "optimus_ir", "lowering": "optimus_ir.lowering", "scheduler_hooks": "optimus_ir.scheduler_hooks",
}
#: the modules above the rules: they list, install and present them
TOP = {"optimus_ir.registry", "optimus_ir.patches", "optimus_ir.backend", "optimus_ir.switch", "optimus_ir.inspect",
       "optimus_ir.cli", "optimus_ir.__main__", "optimus_ir"}
MAX_LINES = 600


def _modules() -> dict[str, Path]:
    modules = {}
    for folder, package in PACKAGES.items():
        for path in sorted((ROOT / folder).rglob("*.py")):
            parts = path.relative_to(ROOT / folder).with_suffix("").parts
            if parts[-1] == "__init__":
                parts = parts[:-1]
            modules[".".join((package, *parts))] = path
    return modules


MODULES = _modules()


def _imports(name: str, path: Path) -> set[str]:
    """The project modules ``name`` imports (a ``from package import module`` names the module)."""
    found = set()
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(parts + ([base] if base else []))
            for alias in node.names:
                found.add(f"{base}.{alias.name}" if f"{base}.{alias.name}" in MODULES else base)
    return {module for module in found if module in MODULES and module != name}


GRAPH = {name: _imports(name, path) for name, path in MODULES.items()}


def _layer(module: str) -> str:
    if module.startswith("optimus_ir.lowering"):
        return "lowering"
    if module.startswith("optimus_ir.scheduler_hooks"):
        return "scheduler_hooks"
    return "top" if module in TOP else "core"


def test_lowering_and_scheduler_hooks_never_import_each_other():
    crossing = [
        (module, imported) for module, imports in GRAPH.items() for imported in imports
        if {_layer(module), _layer(imported)} == {"lowering", "scheduler_hooks"}
    ]
    assert crossing == []


def test_the_core_imports_no_rule_and_nothing_above_it():
    upward = [
        (module, imported) for module, imports in GRAPH.items() if _layer(module) == "core"
        for imported in imports if _layer(imported) != "core"
    ]
    assert upward == []


def test_no_import_circle():
    done: set[str] = set()

    def visit(module: str, path: list[str]) -> None:
        if module in path:
            raise AssertionError(f"import circle: {' -> '.join(path[path.index(module):] + [module])}")
        if module in done:
            return
        for imported in sorted(GRAPH[module]):
            visit(imported, path + [module])
        done.add(module)

    for module in sorted(GRAPH):
        visit(module, [])


def test_the_graph_is_read_from_the_sources():
    """The checks above see real edges: the registry imports a lowering rule, a lowering rule the core."""
    assert "optimus_ir.lowering.split_cat" in GRAPH["optimus_ir.registry"]
    assert "optimus_ir.rule" in GRAPH["optimus_ir.lowering.split_cat"]
    assert "optimus_ir.scheduler_hooks.horizontal.group" in GRAPH["optimus_ir.scheduler_hooks.input_checks"]


@pytest.mark.parametrize("module", sorted(MODULES))
def test_no_product_file_is_over_600_lines(module):
    assert len(MODULES[module].read_text().splitlines()) <= MAX_LINES


def test_no_rule_stores_its_state_on_inductors_objects():
    """Per-graph facts live in ``graph_state.GraphState``; nothing sets an ``optimus_ir_*`` attribute on a graph,
    a wrapper or a node (the one such attribute is the run time's, on a member table's tensor)."""
    import re

    stored = [
        (module, line) for module, path in MODULES.items() if module != "optimus_ir.runtime"
        for line in path.read_text().splitlines()
        if re.search(r"\.optimus_ir_\w+\s*=|setattr\([^)]*\"optimus_ir_", line)
    ]
    assert stored == []
