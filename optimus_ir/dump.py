"""Kernel dump: ``OPTIMUS_IR_DUMP=<dir>`` writes, for every graph Inductor compiles while optimus_ir is enabled,
the generated code with and without the passes, the kernel launch counts, and every rewrite decision.

Layout::

    <dir>/index.md                       one line per graph: launches stock → optimus_ir, rules fired
    <dir>/index.html                     every graph on one page: decisions, both sides' kernels (dump_html)
    <dir>/graph_<n>/optimus_ir.py        the wrapper code Inductor generated with the passes (kernels inside)
    <dir>/graph_<n>/stock.py             the same graph lowered again with every rule suspended
    <dir>/graph_<n>/rewrites.txt         each rule decision: what fired on which IR nodes; why the others did not
    <dir>/graph_<n>/summary.json         the same, machine-readable
    <dir>/graph_<n>/page.html            the graph's section of index.html

A graph that Inductor serves from its FX-graph cache (or AOTAutograd from its cache) is not compiled again, so no
rule decides anything about it: its folder holds the cached wrapper code, its line in index.md says it came from
the cache, and a warning says how to see its decisions (``TORCHINDUCTOR_FORCE_DISABLE_CACHES=1``).

The "with" side is taken from ``GraphLowering.save_output_code`` (a hook Inductor calls with the final wrapper
code); the "without" side is the same post-grad FX graph lowered once more with every rule suspended (by the
guard, :mod:`optimus_ir.stock_guard`, where it did; else here). A dump
failure is written to the dump and never fails the compile.
"""

from __future__ import annotations

import itertools
import json
import logging
import os
import traceback
import warnings
from collections.abc import Callable, Iterable
from typing import Any
from pathlib import Path

from optimus_ir import dump_html, graph_state, stock_guard
from optimus_ir.codegen_text import parse_wrapper
from optimus_ir.passes import enabled_passes
from optimus_ir.records import RewriteRecord, add_listener, remove_listener

DUMP_ENV = "OPTIMUS_IR_DUMP"

log = logging.getLogger("optimus_ir")

_counter = itertools.count()
_pending: list[RewriteRecord] = []  # decisions since the last graph was dumped
_listening = False
_unwritable: set[Path] = set()  # the folders the dump could not be written to, warned of once


def dump_dir() -> Path | None:
    value = os.environ.get(DUMP_ENV)
    return Path(value) if value else None


def start() -> None:
    """Collect the decisions of each graph until it is dumped (idempotent)."""
    global _listening
    if not _listening:
        add_listener(_pending)
        _listening = True


def stop() -> None:
    global _listening
    if _listening:
        remove_listener(_pending)
        _pending.clear()
        _listening = False


def output_code_hook(previous: Callable[[str], None] | None) -> Callable[[str], None]:
    """What ``GraphLowering.save_output_code`` becomes (:mod:`optimus_ir.patches` puts it there): ``previous``,
    then the graph's dump."""

    def save_output_code(code: str) -> None:
        if previous is not None:
            previous(code)
        root = dump_dir()
        if root is None or root in _unwritable:
            return
        records, _pending[:] = list(_pending), []
        try:
            stock, error = _stock_wrapper(), None
        except Exception:  # the dump must never fail a compile
            stock, error = None, traceback.format_exc()
        fx_nodes = [_fx_nodes(r.nodes) for r in records]
        try:
            write_graph(root, _graph_kind(), code, stock, records, enabled_passes(), stock_error=error,
                        fx_nodes=fx_nodes)
        except OSError as failure:  # the dump must never fail a compile
            _warn_unwritable(root, failure)

    return save_output_code


def cache_hook(load: Callable[..., Any]) -> Callable[..., Any]:
    """What ``FxGraphCache.load_with_key`` becomes (:mod:`optimus_ir.patches` puts it there): ``load``, then, for a
    graph served from the cache while passes are enabled and ``OPTIMUS_IR_DUMP`` is set, its dump folder."""

    def load_with_key(*args: Any, **kwargs: Any) -> Any:
        graph, info = load(*args, **kwargs)
        root = dump_dir()
        if graph is not None and root is not None and enabled_passes():
            try:
                _write_cached(root, graph, kwargs.get("is_backward", False), str(info.get("key", "")))
            except OSError as failure:  # the dump must never fail a compile
                _warn_unwritable(root, failure)
            except Exception:
                log.warning("optimus_ir: the dump of a cached graph failed", exc_info=True)
        return graph, info

    return load_with_key


def _warn_unwritable(root: Path, failure: OSError) -> None:
    """One warning per folder the dump cannot be written to (the compile goes on without it)."""
    if root not in _unwritable:
        _unwritable.add(root)
        log.warning("optimus_ir: no dump: %s=%s cannot be written (%s)", DUMP_ENV, root, failure)


def _write_cached(root: Path, graph: Any, is_backward: bool, key: str) -> None:
    note = (
        f"served from Inductor's cache (key {key}): not compiled now, so no rule decided anything about it; "
        "TORCHINDUCTOR_FORCE_DISABLE_CACHES=1 compiles it again and dumps its decisions"
    )
    kind = "backward" if is_backward else "forward or inference"
    warnings.warn(f"optimus_ir: a graph was {note}", stacklevel=2)
    write_graph(root, kind, graph.source_code, None, [], enabled_passes(), cached=note)


def _stock_wrapper() -> str:
    """The graph being compiled lowered with every rule suspended: its wrapper code (the guard's, if it lowered it)."""
    from torch._inductor.virtualized import V

    state = graph_state.existing()
    if state is not None and state.stock_wrapper is not None:
        return state.stock_wrapper
    return stock_guard.lower_again(V.graph)[1][0].value


def _fx_nodes(names: Iterable[str]) -> list[str]:
    """The FX nodes behind a decision's nodes: a scheduler node's or a buffer's origins, an FX node itself (what
    links a decision to the kernels in the HTML page)."""
    from torch._inductor.virtualized import V

    graph = V.graph
    scheduler = getattr(graph, "scheduler", None)
    found: set[str] = set()
    for name in names:
        if scheduler is not None and name in scheduler.name_to_node:
            found.update(o.name for n in scheduler.name_to_node[name].get_nodes() if n.node for o in n.node.origins)
        elif name in graph.name_to_buffer:
            found.update(o.name for o in graph.name_to_buffer[name].origins)
        else:
            found.add(name)
    return sorted(found)


def _graph_kind() -> str:
    from torch._inductor.virtualized import V

    graph = V.graph
    return "backward" if graph.is_backward else "inference" if graph.is_inference else "forward"


def write_graph(
    root: Path,
    kind: str,
    code: str,
    stock: str | None,
    records: list[RewriteRecord],
    passes: Iterable[str],
    *,
    stock_error: str | None = None,
    cached: str | None = None,
    fx_nodes: list[list[str]] | None = None,
) -> Path:
    """Write one graph's dump folder under ``root`` (layout in the module docstring), its line in index.md, and
    index.html again; ``cached``: why there are no decisions (a graph served from Inductor's cache); ``fx_nodes``:
    per record, the FX nodes it concerns (default: its own nodes)."""
    folder = root / f"graph_{next(_counter)}"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "optimus_ir.py").write_text(code)
    if stock is not None:
        (folder / "stock.py").write_text(stock)
    if stock_error is not None:
        (folder / "stock_error.txt").write_text(stock_error)
    ours = parse_wrapper(code)
    theirs = parse_wrapper(stock) if stock is not None else None
    summary = {
        "graph": folder.name,
        "kind": kind,
        "enabled_passes": sorted(passes),
        "launches": {"stock": len(theirs.launches) if theirs else None, "optimus_ir": len(ours.launches)},
        "kernels_defined": {"stock": len(theirs.kernels) if theirs else None, "optimus_ir": len(ours.kernels)},
        "rewrites": [
            {"rule": r.rule, "fired": r.fired, "nodes": list(r.nodes), "detail": r.detail, "fx_nodes": fx}
            for r, fx in zip(records, fx_nodes or [list(r.nodes) for r in records], strict=True)
        ],
        "from_cache": cached,
    }
    (folder / "summary.json").write_text(json.dumps(summary, indent=2))
    nothing = f"{cached}\n" if cached else "no rule considered this graph\n"
    (folder / "rewrites.txt").write_text("".join(f"{r}\n" for r in records) or nothing)
    fired = sorted({r.rule for r in records if r.fired})
    line = (
        f"- {folder.name} ({kind}): launches {summary['launches']['stock']} stock → "
        f"{summary['launches']['optimus_ir']} optimus_ir; fired: {', '.join(fired) or 'none'}"
        + (f"; {cached}" if cached else "") + "\n"
    )
    with open(root / "index.md", "a") as index:
        index.write(line)
    (folder / dump_html.FRAGMENT).write_text(dump_html.render_graph(summary, code, stock))
    dump_html.write_index(root)
    return folder
