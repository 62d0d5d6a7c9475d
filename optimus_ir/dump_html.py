"""The dump as one page, ``<dir>/index.html``: per graph, the launch counts, every rule decision (fired: what was
done; rejected: why), and the kernels stock Inductor and optimus_ir launch, side by side, highlighted, each of
optimus_ir's kernels linked to the decisions on the IR nodes it computes. Static HTML and CSS, no script and
nothing fetched, so it opens from a file anywhere. Pure text; no torch import.

A decision is linked to a kernel when they share an FX node: the nodes a kernel computes are the call_function
lines of the "Graph fragment" comment above it; a decision's are its own nodes, or, for scheduler nodes, their origins
(the dump works them out while the graph is alive: ``summary.json``'s ``fx_nodes``).
"""

from __future__ import annotations

import difflib
import html
import io
import json
import keyword
import re
import tokenize
from collections import Counter
from pathlib import Path
from typing import Any

from optimus_ir.codegen_text import Kernel, parse_wrapper

__all__ = ["FRAGMENT", "highlight", "kernel_fx_nodes", "render_graph", "write_index"]

#: Each graph's part of the page, kept in its folder so that the page is rebuilt without parsing code again.
FRAGMENT = "page.html"

#: ``#   %tanh : Tensor "f32[..]" ... = call_function[target=...]``
_FRAGMENT_NODE = re.compile(r"^#\s+%(\w+) : .*= call_function\[", re.MULTILINE)
_BUILTINS = frozenset({"tl", "triton", "libdevice", "math"})

_STYLE = """
body { font: 14px/1.4 system-ui, sans-serif; margin: 1.5em; color: #1d1d1f; }
h1 { font-size: 1.5em; } h2 { font-size: 1.2em; margin-top: 2em; border-top: 2px solid #ccc; padding-top: .6em; }
table { border-collapse: collapse; } td, th { padding: .2em .8em; border-bottom: 1px solid #e4e4e4; text-align: left; }
.side { display: grid; grid-template-columns: 1fr 1fr; gap: 1.5em; }
.side > div { min-width: 0; }
pre { background: #f7f7f8; padding: .6em; overflow-x: auto; font: 12px/1.35 ui-monospace, monospace; }
details > summary { cursor: pointer; font-family: ui-monospace, monospace; }
li.fired { color: #0a6b2c; } li.rejected { color: #8a4b00; } li:target, details:target { background: #fff4c2; }
.k { color: #a626a4; font-weight: 600; } .s { color: #50a14f; } .c { color: #8e8e93; font-style: italic; }
.n { color: #b76b01; } .b { color: #4078f2; } .cached { color: #8a4b00; }
"""


def highlight(source: str) -> str:
    """``source`` (Python: wrapper code or a Triton kernel) as HTML with keywords, strings, comments, numbers and
    the Triton namespaces in spans; the text is kept as written (a part that does not tokenize stays plain)."""
    starts = [0]
    for line in source.splitlines(keepends=True):
        starts.append(starts[-1] + len(line))
    out: list[str] = []
    written = 0
    try:
        for token in tokenize.generate_tokens(io.StringIO(source).readline):
            css = _css_class(token)
            if css is None:
                continue
            begin = starts[token.start[0] - 1] + token.start[1]
            end = starts[token.end[0] - 1] + token.end[1]
            out.append(html.escape(source[written:begin]))
            out.append(f'<span class="{css}">{html.escape(source[begin:end])}</span>')
            written = end
    except (tokenize.TokenError, SyntaxError):
        pass
    out.append(html.escape(source[written:]))
    return "".join(out)


def _css_class(token: tokenize.TokenInfo) -> str | None:
    if token.type == tokenize.NAME:
        return "k" if keyword.iskeyword(token.string) else "b" if token.string in _BUILTINS else None
    return {tokenize.STRING: "s", tokenize.COMMENT: "c", tokenize.NUMBER: "n"}.get(token.type)


def kernel_fx_nodes(wrapper: str, kernel: Kernel) -> set[str]:
    """The FX nodes a kernel computes, by name, from the comment Inductor writes above its definition."""
    end = wrapper.find(f"\n{kernel.name} = async_compile.")
    if end < 0:
        return set()
    start = max(wrapper.rfind("# kernel path:", 0, end), wrapper.rfind("''', device_str=", 0, end), 0)
    return set(_FRAGMENT_NODE.findall(wrapper, start, end))


def render_graph(summary: dict[str, Any], ours_code: str, stock_code: str | None) -> str:
    """One graph's section of the page."""
    name = summary["graph"]
    ours = parse_wrapper(ours_code)
    stock = parse_wrapper(stock_code) if stock_code is not None else None
    decisions = summary["rewrites"]
    made_by = {
        kernel.name: [i for i, d in enumerate(decisions) if d["fired"] and nodes & set(d["fx_nodes"])]
        for kernel in ours.kernels
        for nodes in [kernel_fx_nodes(ours_code, kernel)]
    }
    launches = summary["launches"]
    parts = [
        f'<section class="graph" id="{name}">',
        (f"<h2>{name} ({html.escape(summary['kind'])}): {launches['stock']} → {launches['optimus_ir']} kernel "
         "launches per call</h2>"),
    ]
    if summary.get("from_cache"):
        parts.append(f'<p class="cached">{html.escape(summary["from_cache"])}</p>')
    parts.append(f"<h3>Decisions ({len(decisions)})</h3>")
    parts.append(_decisions(name, decisions, made_by) if decisions else "<p>no rule considered this graph</p>")
    parts.append('<div class="side">')
    if stock is not None:
        parts.append(_side(name, "stock", "stock Inductor", stock, {}))
    else:
        parts.append("<div><h3>stock Inductor</h3><p>not lowered (see the note above)</p></div>")
    parts.append(_side(name, "ours", "optimus_ir", ours, made_by))
    parts.append("</div>")
    if stock_code is not None:
        diff = "".join(difflib.unified_diff(
            stock_code.splitlines(keepends=True), ours_code.splitlines(keepends=True), "stock.py", "optimus_ir.py"
        ))
        parts.append(
            f"<details><summary>wrapper diff, stock → optimus_ir</summary><pre>{html.escape(diff)}</pre></details>"
        )
    parts.append("</section>")
    return "\n".join(parts)


def _decisions(graph: str, decisions: list[dict[str, Any]], made_by: dict[str, list[int]]) -> str:
    kernels_of: dict[int, list[str]] = {}
    for kernel, indices in made_by.items():
        for i in indices:
            kernels_of.setdefault(i, []).append(kernel)
    items = []
    for i, d in enumerate(decisions):
        verdict = "fired" if d["fired"] else "rejected"
        links = "".join(f' <a href="#{graph}-ours-{k}">{k}</a>' for k in kernels_of.get(i, []))
        items.append(
            f'<li id="{graph}-d{i}" class="{verdict}"><b>{verdict}</b> {html.escape(d["rule"])} on '
            f"{html.escape(', '.join(d['nodes']))}: {html.escape(d['detail'])}{links}</li>"
        )
    return "<ol>" + "\n".join(items) + "</ol>"


def _side(graph: str, side: str, title: str, code: Any, made_by: dict[str, list[int]]) -> str:
    """One column: the launches of one call (kernel, times), then each Triton kernel's source."""
    counts = Counter(code.launches)
    defined = {kernel.name for kernel in code.kernels}
    rows = "".join(
        f"<tr><td>{_kernel_ref(graph, side, launched, defined)}</td><td>{times}×</td></tr>"
        for launched, times in counts.items()
    )
    kernels = []
    for kernel in code.kernels:
        rules = "".join(f' <a href="#{graph}-d{i}">decision {i}</a>' for i in made_by.get(kernel.name, []))
        kernels.append(  # open where a decision made it: what optimus_ir changed is what the reader looks for
            f'<details id="{graph}-{side}-{kernel.name}"{" open" if rules else ""}>'
            f"<summary>{kernel.name} ({counts[kernel.name]}×)</summary>"
            f"{'<p>made by' + rules + '</p>' if rules else ''}<pre>{highlight(_body(kernel.source))}</pre></details>"
        )
    return (
        f"<div><h3>{title}: {len(code.launches)} launches, {len(code.kernels)} Triton kernels</h3>"
        f"<table><tr><th>launched</th><th>per call</th></tr>{rows}</table>" + "\n".join(kernels) + "</div>"
    )


def _body(source: str) -> str:
    """A kernel's source from its decorators on (the imports above are the same in every kernel)."""
    start = source.find("\n@")
    return source[start + 1:] if start >= 0 else source


def _kernel_ref(graph: str, side: str, name: str, defined: set[str]) -> str:
    return f'<a href="#{graph}-{side}-{name}">{name}</a>' if name in defined else html.escape(name)


def write_index(root: Path) -> None:
    """(Re)write ``root/index.html`` from every graph folder's summary and section."""
    folders = sorted((p for p in root.glob("graph_*") if (p / FRAGMENT).exists()), key=lambda p: int(p.name[6:]))
    rows, sections = [], []
    for folder in folders:
        summary = json.loads((folder / "summary.json").read_text())
        fired = ", ".join(sorted({d["rule"] for d in summary["rewrites"] if d["fired"]}))
        fired = fired or ("from the cache" if summary.get("from_cache") else "none")
        launches = summary["launches"]
        rows.append(
            f'<tr><td><a href="#{folder.name}">{folder.name}</a></td><td>{html.escape(summary["kind"])}</td>'
            f"<td>{launches['stock']} → {launches['optimus_ir']}</td>"
            f"<td>{html.escape(fired)}</td></tr>"
        )
        sections.append((folder / FRAGMENT).read_text())
    page = (
        '<!doctype html>\n<html lang="en"><head><meta charset="utf-8"><title>optimus_ir dump</title>'
        f"<style>{_STYLE}</style></head><body>\n<h1>optimus_ir dump: {len(folders)} graphs</h1>\n"
        "<table><tr><th>graph</th><th>kind</th><th>launches stock → optimus_ir</th><th>rules fired</th></tr>"
        + "\n".join(rows) + "</table>\n" + "\n".join(sections) + "\n</body></html>\n"
    )
    (root / "index.html").write_text(page)
