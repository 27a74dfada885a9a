"""The attention views of a trace in a notebook, each an object Jupyter shows inline (`.save(path)`: an offline page):

    tr = attnlab.trace(model, ids, keep_patterns=[(1, 0), (1, 3)], cache="blocks.1.attn.hook_pattern")
    attnlab.pattern_view(tr, tokens=[tokenizer.decode([i]) for i in ids[0]])  # the kept heads, one at a time
    attnlab.heads_view(tr, 1, head=3, tokens=...)   # every head of layer 1 as thumbnails, head 3 enlarged

Both draw like CircuitsVis' `attention_patterns`: the query tokens down the left, the key tokens along the bottom
(single-line labels: `reports.attention.token_label`), a colour bar, masked cells (the upper triangle of a causal
pattern, padded keys) in the masked grey, and the one colour scale of every attention drawing of attnlab
(`reports.attention.ATTENTION_SCALE`, shared with the scan report's views). The hover line names the query and key
and the weight. Nothing is fetched: one HTML snippet with its data (16-bit, `pack_pattern`) and a few lines of
script (no plotly).
"""

from __future__ import annotations

import hashlib
import html
import json
import math
from pathlib import Path
from typing import Any

import numpy as np

from attnlab.errors import InputError, check
from attnlab.reports.attention import (
    ATTENTION_JS,
    ATTENTION_SCALE,
    colour_bar_html,
    masked_pattern,
    pack_pattern,
    token_label,
)
from attnlab.reports.page import js_json
from attnlab.runs import write_text

THUMB = 64  # a thumbnail canvas is at most this many pixels a side (max-pooled past it)
LABEL_GAP = 11  # px: labels closer than this on an axis are thinned to every k-th token

VIEW_JS = """
(function (cfg) {
  var draw = attnlabAttention, root = document.getElementById(cfg.id), main = root.querySelector('canvas.main');
  var tip = root.querySelector('.tip'), name = root.querySelector('.name'), cur = null, rows = {};
  function pattern(key) { return rows[key] || (rows[key] = draw.unpack(cfg.patterns[key])); }
  function lab(i) { return i + ' ' + JSON.stringify(cfg.labels[i] === undefined ? '?' : cfg.labels[i]); }
  function show(key) {
    cur = key; main.dataset.head = key; draw.draw(main, pattern(key), cfg.scale);
    name.textContent = cfg.names[key] + ' (' + cfg.labels.length + ' tokens)';
    root.querySelectorAll('.pick').forEach(function (e) { e.classList.toggle('on', e.dataset.head === key); });
  }
  main.addEventListener('mousemove', function (e) {
    var A = pattern(cur), n = A.length, r = main.getBoundingClientRect();
    var j = Math.floor((e.clientX - r.left) / r.width * n), i = Math.floor((e.clientY - r.top) / r.height * n);
    if (i < 0 || j < 0 || i >= n || j >= n) return;
    var w = A[i][j], seen = w !== null && w === w;
    tip.textContent = 'query ' + lab(i) + ', key ' + lab(j) + ': ' + (seen ? 'weight ' + w.toFixed(4) : 'masked');
  });
  root.querySelectorAll('canvas.thumb').forEach(function (c) {
    draw.draw(c, pattern(c.dataset.head), cfg.scale, cfg.thumb); });
  root.querySelectorAll('.pick').forEach(function (b) {
    b.addEventListener('click', function () { show(b.dataset.head); }); });
  show(cfg.first);
})(__CFG__);
"""
STYLE = (
    ".attnlab-view{font-family:system-ui,sans-serif;font-size:13px;color:#222}"
    ".attnlab-view .plot{display:grid;grid-template-columns:auto auto auto;gap:4px;width:max-content}"
    ".attnlab-view canvas.main{image-rendering:pixelated;border:1px solid #ccc;cursor:crosshair}"
    ".attnlab-view .ylab,.attnlab-view .xlab{position:relative;font:10px monospace;color:#333;overflow:hidden}"
    ".attnlab-view .ylab span{position:absolute;right:3px;white-space:pre;display:flex;align-items:center}"
    ".attnlab-view .xlab span{position:absolute;top:3px;white-space:pre;writing-mode:vertical-rl;display:flex;"
    "align-items:center}.attnlab-view .corner{font-size:10px;color:#555;text-align:right}"
    ".attnlab-view .colourbar{position:relative;width:70px}"
    ".attnlab-view .colourbar .bar{position:absolute;left:0;top:0;bottom:22px;width:14px;border:1px solid #ccc}"
    ".attnlab-view .colourbar .ticks{position:absolute;left:20px;top:0;bottom:22px}"
    ".attnlab-view .colourbar .ticks span{position:absolute;transform:translateY(50%);font:10px monospace}"
    ".attnlab-view .colourbar .masked{position:absolute;bottom:0;font-size:10px}"
    ".attnlab-view .colourbar .masked i{display:inline-block;width:10px;height:10px;margin-right:3px;"
    "vertical-align:middle}.attnlab-view button.pick{margin:2px;font-family:monospace}"
    ".attnlab-view .pick.on{outline:2px solid #d7191c}.attnlab-view figure{display:inline-block;margin:3px;"
    "text-align:center;font-size:11px}.attnlab-view canvas.thumb{width:72px;height:72px;image-rendering:pixelated;"
    "border:1px solid #ccc;cursor:pointer}.attnlab-view .missing{display:inline-block;width:72px;height:72px;"
    "line-height:72px;border:1px dashed #ccc;color:#999}.attnlab-view .tip,.attnlab-view .name"
    "{font-family:monospace;font-size:0.9em;color:#333}"
)


class PatternView:
    """The view's HTML: `_repr_html_` for Jupyter, `save(path)` for a page that opens offline; `data`: what the
    page draws (patterns in `pack_pattern`'s form, `labels`, `scale`, ...)."""

    def __init__(self, snippet: str, data: dict[str, Any] | None = None) -> None:
        self.html = snippet
        self.data = data or {}

    def _repr_html_(self) -> str:
        return self.html

    def save(self, path: str | Path) -> Path:
        page = "<!DOCTYPE html><html><head><meta charset='utf-8'><title>attention patterns</title></head><body>"
        return write_text(Path(path), page + self.html + "</body></html>\n")


def pattern_view(trace: Any, tokens: list[str] | None = None, sample: int = 0) -> PatternView:
    """The kept patterns of `trace` (`attnlab.trace(..., keep_patterns=[...])`; else its cached
    `blocks.{l}.attn.hook_pattern`) for sequence `sample`, one head at a time (buttons), the tokens on both axes;
    `tokens`: the sequence's token strings (default: the trace's `tokens` if it has them, else the positions)."""
    patterns = {k: np.asarray(v) for k, v in trace.patterns.items()}
    if not patterns:
        for layer, value in _cached_patterns(trace).items():
            patterns.update({f"{layer}.{h}": value[:, h] for h in range(value.shape[1])})
    check(bool(patterns), "pattern_view: the trace kept no pattern; trace with keep_patterns=[(layer, head), ...]")
    first = next(iter(patterns.values()))
    _check_sample(sample, first.shape[0])
    names = {k: "layer {}, head {}".format(*k.split(".")) for k in patterns}
    buttons = "".join(
        f'<button class="pick" data-head="{html.escape(k)}">L{html.escape(k.replace(".", "H"))}</button>'
        for k in patterns
    )
    data = {k: v[sample] for k, v in patterns.items()}
    return _render(trace, data, names, _tokens(trace, tokens, sample, first.shape[-1]), sample, f"<div>{buttons}</div>")


def heads_view(
    trace: Any, layer: int, head: int | None = None, tokens: list[str] | None = None, sample: int = 0
) -> PatternView:
    """Every head of `layer` (negative: from the end) as thumbnails and one enlarged (`head`, default the first;
    click a thumbnail to enlarge it), like CircuitsVis' `attention_patterns`, for sequence `sample`: from the trace's
    cache (`cache="blocks.{layer}.attn.hook_pattern"`, every head) or its kept patterns (`keep_patterns=`)."""
    L = trace.n_layers
    if not isinstance(layer, (int, np.integer)) or not -L <= layer < L:
        raise InputError(f"heads_view: layer must be an integer in [{-L}, {L - 1}] (the model's layers), got {layer!r}")
    layer = int(layer) % L
    heads = _layer_patterns(trace, layer)
    first = next(iter(heads.values()))
    _check_sample(sample, first.shape[0])
    if head is None:
        head = min(heads)
    if head not in heads:
        raise InputError(
            f"heads_view: head {head!r} of layer {layer} is not in the trace (it has heads {sorted(heads)}); trace "
            f'with cache="blocks.{layer}.attn.hook_pattern" or keep_patterns=[({layer}, {head})]'
        )
    thumbs = "".join(_thumbnail(layer, h, h in heads) for h in range(trace.n_heads))
    data = {f"{layer}.{h}": v[sample] for h, v in heads.items()}
    names = {k: f"layer {layer}, head {k.split('.')[1]}" for k in data}
    labels = _tokens(trace, tokens, sample, first.shape[-1])
    return _render(trace, data, names, labels, sample, f'<div class="thumbs">{thumbs}</div>', f"{layer}.{head}")


def _thumbnail(layer: int, head: int, have: bool) -> str:
    key = f"{layer}.{head}"
    inner = (
        f'<canvas class="thumb pick" data-head="{key}" title="L{layer}H{head}"></canvas>'
        if have
        else '<span class="missing">not kept</span>'
    )
    return f"<figure>{inner}<figcaption>head {head}</figcaption></figure>"


def _cached_patterns(trace: Any) -> dict[int, np.ndarray]:
    """{layer: [N, H, query, key] float64} of the trace's cached `blocks.{l}.attn.hook_pattern` (torch or numpy; a
    padded batch's list of [H, T_n, T_n], one per sequence, goes in each sequence's top-left corner, NaN around)."""
    out = {}
    for point, value in (getattr(trace, "cache", None) or {}).items():
        parts = point.split(".")
        if len(parts) == 4 and parts[0] == "blocks" and parts[2:] == ["attn", "hook_pattern"]:
            out[int(parts[1])] = _stacked(value)
    return out


def _numpy(x: Any) -> np.ndarray:
    return np.asarray(x.detach().cpu().double().numpy() if hasattr(x, "detach") else x, dtype=np.float64)


def _stacked(value: Any) -> np.ndarray:
    """[N, H, P, P] from a tensor of that shape, or from a list of N [H, T_n, T_n] (P = the longest T_n)."""
    if not isinstance(value, (list, tuple)):
        return _numpy(value)
    parts = [_numpy(v) for v in value]
    P = max(p.shape[-1] for p in parts)
    out = np.full((len(parts), parts[0].shape[0], P, P), np.nan)
    for n, p in enumerate(parts):
        out[n, :, : p.shape[-2], : p.shape[-1]] = p
    return out


def _layer_patterns(trace: Any, layer: int) -> dict[int, np.ndarray]:
    """{head: [N, query, key]} of `layer`: every head from the cache, else the kept heads; refused in one line when
    the trace has neither."""
    cached = _cached_patterns(trace).get(layer)
    if cached is not None:
        return {h: cached[:, h] for h in range(cached.shape[1])}
    kept = {int(k.split(".")[1]): np.asarray(v) for k, v in trace.patterns.items() if int(k.split(".")[0]) == layer}
    if not kept:
        raise InputError(
            f"heads_view: the trace has no attention pattern of layer {layer}; trace with "
            f'cache="blocks.{layer}.attn.hook_pattern" (every head) or keep_patterns=[({layer}, head), ...]'
        )
    return dict(sorted(kept.items()))


def _check_sample(sample: int, n: int) -> None:
    if not isinstance(sample, (int, np.integer)) or not 0 <= sample < n:
        raise InputError(f"sample must be in [0, {n - 1}] (the traced sequences), got {sample!r}")


def _tokens(trace: Any, tokens: Any, sample: int, n: int) -> list[str]:
    """The `n` single-line axis labels: `tokens`, else the trace's own tokens (if it keeps them), else positions."""
    if tokens is None and getattr(trace, "tokens", None) is not None:
        tokens = trace.tokens[sample]
    labels = [str(i) for i in range(n)] if tokens is None else [token_label(t) for t in tokens]
    check(len(labels) == n, f"tokens: {len(labels)} given for a sequence of {n}")
    return labels


def _valid(trace: Any, sample: int) -> Any:
    """[T] 1 for a real token, 0 for padding, when the trace keeps an attention mask (else None)."""
    mask = getattr(trace, "attention_mask", None)
    return None if mask is None else np.asarray(mask)[sample]


def _axes(labels: list[str], side: int) -> tuple[str, str]:
    """(the query labels down the left, the key labels along the bottom) as positioned spans, every k-th token
    where the cells are narrower than LABEL_GAP pixels."""
    n = len(labels)
    every = max(1, math.ceil(LABEL_GAP * n / side))
    width = min(170, 8 + 6 * max(len(s) for s in labels))
    ys, xs = [], []
    for i in range(0, n, every):
        text = html.escape(labels[i])
        at, size = f"{100 * i / n:.4f}%", f"{100 / n:.4f}%"
        ys.append(f'<span style="top:{at};height:{size}" title="query {i}">{text}</span>')
        xs.append(f'<span style="left:{at};width:{size}" title="key {i}">{text}</span>')
    y = f'<div class="ylab" style="width:{width}px;height:{side}px">{"".join(ys)}</div>'
    x = f'<div class="xlab" style="width:{side}px;height:{width}px">{"".join(xs)}</div>'
    return y, x


def _render(
    trace: Any, data: dict[str, np.ndarray], names: dict[str, str], labels: list[str], sample: int, picker: str,
    first: str | None = None,
) -> PatternView:  # fmt: skip
    """One view: `picker` (buttons or thumbnails) over the enlarged pattern with both axes and the colour bar."""
    valid = _valid(trace, sample)
    packed = {k: pack_pattern(masked_pattern(v, valid)) for k, v in data.items()}
    cfg = {"patterns": packed, "labels": labels, "names": names, "scale": ATTENTION_SCALE.as_dict(),
           "first": first or next(iter(data)), "thumb": THUMB}  # fmt: skip
    cfg["id"] = "attnlab-view-" + hashlib.sha1(json.dumps(cfg, sort_keys=True).encode()).hexdigest()[:10]
    side = max(200, min(640, 16 * len(labels)))
    ylab, xlab = _axes(labels, side)
    canvas = f'<canvas class="main" style="width:{side}px;height:{side}px"></canvas>'
    bar = colour_bar_html(ATTENTION_SCALE).replace('class="colourbar"', f'class="colourbar" style="height:{side}px"')
    corner = '<div class="corner">query ↓<br>key →</div>'
    script = VIEW_JS.replace("__CFG__", js_json(cfg))
    snippet = (
        f'<div class="attnlab-view" id="{cfg["id"]}"><style>{STYLE}</style>{picker}<p class="name"></p>'
        f'<div class="plot">{ylab}{canvas}{bar}{corner}{xlab}<div></div></div>'
        f'<p class="tip">hover the pattern: query (row), key (column)</p></div>'
        f"<script>{ATTENTION_JS}{script}</script>"
    )
    return PatternView(snippet, cfg)
