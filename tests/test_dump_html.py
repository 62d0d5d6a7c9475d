"""The dump's page, index.html: decisions, both sides' kernels side by side, each kernel linked to the decisions
that made it; rendered in headless Chromium (Debian's package) without a console error."""

import html
import os
import re

import pytest
import torch

from optimus_ir.dump_html import highlight
from optimus_ir.inspect import compile_report
from optimus_ir.testing import browser

#: .ci/run installs Chromium and sets this: there, a missing browser fails the test instead of skipping it
_REQUIRED = os.environ.get("OPTIMUS_IR_REQUIRE_CHROMIUM") == "1"


def _features(x, *tables):
    """A split → relu → cat chain, eight feature tensors with one small op, and a ninth with another."""
    chain = torch.cat([torch.relu(p) for p in reversed(x.split(64, dim=1))], dim=1)
    return (chain, *(torch.tanh(t) * 2 for t in tables[:-1]), torch.sigmoid(tables[-1]))


def _inputs(requires_grad=False):
    tensors = (torch.randn(64, 512), *(torch.randn(128, 256) for _ in range(9)))
    return tuple(t.requires_grad_(requires_grad) for t in tensors)


def _dump(tmp_path, monkeypatch, requires_grad=False):
    monkeypatch.setenv("OPTIMUS_IR_DUMP", str(tmp_path))
    compile_report(_features, _inputs(requires_grad))
    return (tmp_path / "index.html").read_text()


def _text(fragment):
    return html.unescape(re.sub(r"<[^>]+>", "", fragment))


def test_highlighting_keeps_the_source_as_written():
    source = (
        "@triton.jit\ndef k(in_ptr0, XBLOCK : tl.constexpr):\n    x = tl.load(in_ptr0 + 1)  # a < b & c\n    s = 'x'\n"
    )
    page = highlight(source)
    assert _text(page) == source
    assert '<span class="k">def</span>' in page and '<span class="c"># a &lt; b &amp; c</span>' in page
    assert '<span class="b">tl</span>' in page and '<span class="s">&#x27;x&#x27;</span>' in page
    assert _text(highlight("def broken(:\n    '''never closed\n")) == "def broken(:\n    '''never closed\n"


def test_each_merged_kernel_links_to_the_decisions_that_made_it(tmp_path, monkeypatch):
    page = _dump(tmp_path, monkeypatch)
    (graph,) = re.findall(r'<section class="graph" id="(graph_\d+)">', page)
    decisions = dict(re.findall(rf'<li id="{graph}-(d\d+)" class="\w+">(.*?)</li>', page))
    merge = next(d for d, text in decisions.items() if "8 kernels → one kernel" in text)
    split_cat = next(d for d, text in decisions.items() if "SplitCatToPointwise" in text)
    # each kernel optimus_ir made is open, names the decision, and the decision links back to it
    tanh = re.search(rf'<details id="{graph}-ours-(\w+tanh\w*)" open>(.*?)</details>', page, re.DOTALL)
    assert f'href="#{graph}-{merge}"' in tanh.group(2) and f'href="#{graph}-ours-{tanh.group(1)}"' in decisions[merge]
    cat = re.search(rf'<details id="{graph}-ours-(\w+cat\w*)" open>(.*?)</details>', page, re.DOTALL)
    assert f'href="#{graph}-{split_cat}"' in cat.group(2)
    # the rejection and its reason, the launch counts of both sides
    assert any("rejected" in t and "each with a loop body no other one here has" in t for t in decisions.values())
    assert "stock Inductor: 10 launches" in page and "optimus_ir: 1 launches" in page  # one kernel of 3 bodies
    assert re.search(r"tanh\w*</a></td><td>8×</td>", page)


@pytest.mark.skipif(browser.chromium() is None and not _REQUIRED, reason="Debian's chromium is not installed")
def test_the_page_shows_every_graph_in_headless_chromium(tmp_path, monkeypatch):
    _dump(tmp_path, monkeypatch, requires_grad=True)  # a forward and a backward graph
    folders = sorted(p.name for p in tmp_path.glob("graph_*"))
    assert len(folders) == 2
    dom, console = browser.render(tmp_path / "index.html")
    assert console == []
    for folder in folders:
        heading = re.search(rf'<section class="graph" id="{folder}">\s*<h2>(.*?)</h2>', dom).group(1)
        assert re.fullmatch(rf"{folder} \((forward|backward)\): \d+ → \d+ kernel launches per call", heading)
        assert f'<a href="#{folder}">{folder}</a>' in dom
    # the check can fail: a page with a script error is reported
    bad = tmp_path / "bad.html"
    bad.write_text("<!doctype html><html><body><script>notDefined()</script></body></html>")
    assert any("notDefined" in message for message in browser.render(bad)[1])
