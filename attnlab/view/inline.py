"""The attention view of a trace in a notebook: `pattern_view(trace, tokens)` -> an object Jupyter shows inline (the
same canvas drawing and token hover as a scan report's view, one call), or `.save(path)` as an offline page.

    tr = attnlab.trace(model, ids, keep_patterns=[(1, 0), (1, 3)])
    from attnlab.view.inline import pattern_view
    pattern_view(tr, tokens=[tokenizer.decode([i]) for i in ids[0]])   # last line of a cell: drawn there

Nothing is fetched: the page is one HTML snippet with its data and a few lines of script (no plotly).
"""

from __future__ import annotations

import hashlib
import html
from pathlib import Path
from typing import Any

import numpy as np

from attnlab.errors import InputError, check
from attnlab.reports.page import js_json, rounded
from attnlab.runs import write_text

VIEW_JS = """
(function (cfg) {
  var root = document.getElementById(cfg.id), c = root.querySelector('canvas'), tip = root.querySelector('.tip');
  var name = root.querySelector('.name'), cur = null;
  function lab(i) { return i + ' ' + JSON.stringify(cfg.tokens[i] === undefined ? '?' : cfg.tokens[i]); }
  function show(key) {
    var A = cfg.patterns[key], n = A.length, ctx = c.getContext('2d'); cur = key;
    c.width = n; c.height = n; c.dataset.head = key; name.textContent = 'layer.head ' + key + ' (' + n + ' tokens)';
    var img = ctx.createImageData(n, n);
    for (var i = 0; i < n; i++) for (var j = 0; j < n; j++) {
      var v = Math.sqrt(Math.max(0, Math.min(1, A[i][j] || 0))), o = 4 * (i * n + j);
      img.data[o] = 255 * v; img.data[o + 1] = 204 * v * v; img.data[o + 2] = 80 * (1 - v) + 60 * v;
      img.data[o + 3] = 255;
    }
    ctx.putImageData(img, 0, 0);
  }
  c.addEventListener('mousemove', function (e) {
    var A = cfg.patterns[cur], n = A.length, r = c.getBoundingClientRect();
    var j = Math.floor((e.clientX - r.left) / r.width * n), i = Math.floor((e.clientY - r.top) / r.height * n);
    if (i < 0 || j < 0 || i >= n || j >= n) return;
    tip.textContent = 'query ' + lab(i) + ', key ' + lab(j) + ': weight ' + (A[i][j] || 0).toFixed(4);
  });
  root.querySelectorAll('button').forEach(function (b) {
    b.addEventListener('click', function () { show(b.dataset.head); }); });
  show(Object.keys(cfg.patterns)[0]);
})(__CFG__);
"""
STYLE = (
    ".attnlab-view canvas{width:min(100%,600px);aspect-ratio:1;image-rendering:pixelated;border:1px solid #ccc}"
    ".attnlab-view button{margin:2px;font-family:monospace}.attnlab-view .tip,.attnlab-view .name"
    "{font-family:monospace;font-size:0.9em;color:#333}"
)


class PatternView:
    """The view's HTML: `_repr_html_` for Jupyter, `save(path)` for a page that opens offline."""

    def __init__(self, snippet: str) -> None:
        self.html = snippet

    def _repr_html_(self) -> str:
        return self.html

    def save(self, path: str | Path) -> Path:
        page = "<!DOCTYPE html><html><head><meta charset='utf-8'><title>attention patterns</title></head><body>"
        return write_text(Path(path), page + self.html + "</body></html>\n")


def pattern_view(trace: Any, tokens: list[str] | None = None, sample: int = 0) -> PatternView:
    """The kept patterns of `trace` (`attnlab.trace(..., keep_patterns=[...])`) for sequence `sample`, one head at
    a time (buttons), the tokens on hover; `tokens`: the sequence's token strings (default: their positions)."""
    patterns = dict(trace.patterns.items())
    check(bool(patterns), "pattern_view: the trace kept no pattern; trace with keep_patterns=[(layer, head), ...]")
    first = np.asarray(next(iter(patterns.values())))
    if not 0 <= sample < first.shape[0]:
        raise InputError(f"sample must be in [0, {first.shape[0] - 1}] (the traced sequences), got {sample}")
    n = first.shape[-1]
    tokens = [str(i) for i in range(n)] if tokens is None else [str(t) for t in tokens]
    check(len(tokens) == n, f"tokens: {len(tokens)} given for a sequence of {n}")
    data = {k: rounded(np.asarray(v)[sample]) for k, v in patterns.items()}
    ident = "attnlab-view-" + hashlib.sha1(js_json([data, tokens]).encode()).hexdigest()[:10]
    buttons = "".join(
        f'<button data-head="{html.escape(k)}">L{html.escape(k.replace(".", "H"))}</button>' for k in data
    )
    script = VIEW_JS.replace("__CFG__", js_json({"id": ident, "patterns": data, "tokens": tokens}))
    snippet = (
        f'<div class="attnlab-view" id="{ident}"><style>{STYLE}</style><div>{buttons}</div>'
        f'<p class="name"></p><canvas></canvas><p class="tip">hover the pattern: query (row), key (column)</p>'
        f"</div><script>{script}</script>"
    )
    return PatternView(snippet)
