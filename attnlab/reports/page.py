"""Self-contained, offline HTML reports: a contents list, tables that sort and scroll (first column sticky), PNG
figures, interactive plotly views.

Nothing is fetched at view time. PNG figures are embedded as base64. Interactive views use plotly.js from the
`plotly` package, stored once per tree of runs as `plotly.min.js` (in the outermost enclosing run folder: a sweep
with its trials, the demo with its studies; a run of its own keeps its own copy) and referenced by a relative
path; `attnlab view` serves it from the installed package. A page whose folder was copied out of its tree opens
all the same: tables, text and PNG figures work, and a note says how to see the interactive views. A little
hand-written glue (sortable tables, click handlers) is inlined: no library offers those few lines offline."""

from __future__ import annotations

import base64
import html
import json
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from attnlab.runs import to_jsonable, write_bytes, write_text

PLOTLY_ASSET = "plotly.min.js"
PLOTLY_MISSING = "/* plotly was not installed where this report was written: no interactive views */\n"
ASSET_SEARCH_LEVELS = 3  # a report may use the plotly.min.js of an enclosing folder this many levels up

STYLE = (
    "body{font-family:system-ui,sans-serif;max-width:1200px;margin:2em auto;padding:0 1em;color:#222}"
    ".scroll{overflow-x:auto;max-width:100%;margin:1em 0}"
    ".scroll td:first-child,.scroll th:first-child{position:sticky;left:0;z-index:1;background:#fff;"
    "box-shadow:1px 0 0 #bbb}.scroll th:first-child{background:#eee}"
    "nav.toc{border:1px solid #ddd;padding:4px 12px;margin:1em 0;display:inline-block}nav.toc ol{margin:4px 0}"
    "nav.toc li.l3{margin-left:1.5em;list-style:circle}"
    "#plotly-missing{border:1px solid #c90;background:#fff7e0;padding:6px 10px}"
    "table{border-collapse:collapse;font-size:0.9em}"
    "td,th{border:1px solid #bbb;padding:3px 8px;text-align:right;white-space:nowrap}th{background:#eee}"
    "td.t{text-align:left;max-width:40em;overflow:hidden;text-overflow:ellipsis}"
    "table.sortable th{cursor:pointer}table.sortable th:after{content:' \\2195';color:#999}"
    "caption{font-weight:bold;text-align:left;padding:4px 0}"
    "img{max-width:100%}figure{margin:1em 0}figcaption{color:#555;font-size:0.9em}"
    ".plot{width:100%;min-height:420px}.note{color:#555;font-size:0.9em}"
    ".tokens{font-family:monospace;white-space:pre-wrap;line-height:1.7;border:1px solid #ddd;padding:6px;"
    "max-height:240px;overflow-y:auto}.tokens span{border-radius:2px;cursor:default}"
    "button.head{margin:2px;font-family:monospace}"
    ".multiples figure.multiple{display:inline-block;margin:4px;text-align:center}"
    ".big canvas{width:min(100%,900px);aspect-ratio:1;image-rendering:pixelated;border:1px solid #ccc}"
    ".multiples canvas{width:120px;height:120px;image-rendering:pixelated;border:1px solid #ccc;cursor:pointer}"
)

# Click a header to sort by that column (numbers numerically, then text); click again to reverse.
SORT_JS = """
document.querySelectorAll('table.sortable').forEach(function (table) {
  table.querySelectorAll('th').forEach(function (th, col) {
    th.addEventListener('click', function () {
      var body = table.tBodies[0], rows = Array.from(body.rows);
      var dir = th.dataset.dir === 'asc' ? -1 : 1; th.dataset.dir = dir === 1 ? 'asc' : 'desc';
      var key = function (r) { var c = r.cells[col], t = c ? (c.dataset.v || c.textContent) : '';
        var x = parseFloat(t); return isNaN(x) ? [1, t] : [0, x]; };
      rows.sort(function (a, b) { var ka = key(a), kb = key(b);
        if (ka[0] !== kb[0]) return ka[0] - kb[0]; return (ka[1] > kb[1] ? 1 : ka[1] < kb[1] ? -1 : 0) * dir; });
      rows.forEach(function (r) { body.appendChild(r); });
    });
  });
});
"""


# Defined before plotly.min.js is requested: when it cannot be loaded, a stand-in `Plotly` whose every function
# does nothing keeps the page's scripts free of errors, and a note says how to see the interactive views.
MISSING_PLOTLY_JS = """
function attnlabNoPlotly() {
  if (window.attnlabPlotlyMissing) return;
  window.attnlabPlotlyMissing = true;
  var noop = function () { return Promise.resolve(); };
  window.Plotly = new Proxy({}, { get: function () { return noop; } });
  document.addEventListener('DOMContentLoaded', function () {
    var note = document.createElement('p'); note.id = 'plotly-missing';
    note.textContent = 'The interactive figures need plotly.min.js, which is kept once at the top of the folder ' +
      'tree these runs were written in; this folder was moved or copied without it. Tables, text and PNG figures ' +
      'work as they are. To see the interactive figures, run `attnlab view` on this folder (it serves plotly from ' +
      'the installed package), or copy plotly.min.js from the top folder of the runs next to this page.';
    document.body.insertBefore(note, document.body.children[1] || null);
  });
}
"""

_HEADING = re.compile(r"<h([23])>(.*)</h\1>", re.S)


def contents_list(blocks: list[str]) -> tuple[list[str], str]:
    """The blocks with an id on each section heading (h2, h3 made by `Report.heading`), and a contents list of
    links to them (empty for a page with fewer than two sections)."""
    out, items, used = [], [], set()
    for block in blocks:
        m = _HEADING.fullmatch(block)
        if m:
            level, text = m.group(1), m.group(2)
            base = "sec-" + (re.sub(r"[^a-z0-9]+", "-", html.unescape(text).lower()).strip("-") or "part")
            ident, n = base, 1
            while ident in used:
                n += 1
                ident = f"{base}-{n}"
            used.add(ident)
            block = f'<h{level} id="{ident}">{text}</h{level}>'
            items.append(f'<li class="l{level}"><a href="#{ident}">{text}</a></li>')
        out.append(block)
    nav = f'<nav class="toc"><b>Contents</b><ol>{"".join(items)}</ol></nav>' if len(items) >= 2 else ""
    return out, nav


def _demoted(block: str) -> str:
    m = _HEADING.fullmatch(block)
    return f"<h{int(m.group(1)) + 1}>{m.group(2)}</h{int(m.group(1)) + 1}>" if m else block


def element_id(run_path: str | Path, name: str) -> str:
    """An HTML id unique within a combined page (the demo's): the run folder's last two names, then `name`."""
    parts = Path(run_path).resolve().parts[-2:]
    return re.sub(r"[^A-Za-z0-9_-]+", "-", "-".join([*parts, name])).strip("-")


def rounded(values: Any, digits: int = 4) -> Any:
    """An array as nested lists of floats with `digits` significant digits (short JSON: small pages); NaN and
    infinities -> None (plotly leaves a gap)."""
    a = np.asarray(values, dtype=np.float64)
    flat = [float(f"{v:.{digits}g}") if math.isfinite(v) else None for v in a.ravel().tolist()]
    return np.array(flat, dtype=object).reshape(a.shape).tolist() if a.ndim else flat[0]


def heatmap(z: Any, title: str, x: Any = None, y: Any = None, **trace: Any) -> dict:
    """A plotly heat map figure (dict) of `z` [rows, cols]; row 0 at the top, as a matrix is read."""
    data: dict[str, Any] = {"type": "heatmap", "z": rounded(z), "colorscale": "Viridis", **trace}
    if x is not None:
        data["x"] = list(x)
    if y is not None:
        data["y"] = list(y)
    return {
        "data": [data],
        "layout": {
            "title": {"text": title},
            "yaxis": {"autorange": "reversed", "automargin": True},  # long row labels are never clipped
            "xaxis": {"automargin": True},
            "margin": {"t": 50},
        },
    }


def lines(series: dict[str, tuple[Any, Any]], title: str, xlabel: str, ylabel: str, **layout: Any) -> dict:
    """A plotly figure (dict) with one line per `name: (x, y)`; zoom by dragging, double-click to reset."""
    data = [
        {"type": "scatter", "mode": "lines+markers", "name": name, "x": rounded(x), "y": rounded(y)}
        for name, (x, y) in series.items()
    ]
    return {
        "data": data,
        "layout": {
            "title": {"text": title},
            "xaxis": {"title": {"text": xlabel}},
            "yaxis": {"title": {"text": ylabel}},
            "hovermode": "closest",
            **layout,
        },
    }


def js_json(obj: Any) -> str:
    """`obj` as a JavaScript literal safe inside a <script> element (texts may hold "</script>")."""
    return json.dumps(to_jsonable(obj)).replace("</", "<\\/").replace("<!--", "<\\!--")


def with_slider(
    figure: dict,
    frames: list[list[dict]],
    labels: list[str],
    prefix: str,
    play: bool = False,
    traces: list[int] | None = None,
) -> dict:
    """`figure` plus plotly frames (each a list of trace updates: the figure's traces in order, or those listed in
    `traces`) and a slider showing one frame at a time; `play` adds play/pause (plotly's own animation)."""
    names = [f"{prefix}{label}" for label in labels]
    show = {"mode": "immediate", "frame": {"duration": 0, "redraw": True}, "transition": {"duration": 0}}
    steps = [{"label": label, "method": "animate", "args": [[n], show]} for n, label in zip(names, labels)]
    layout = dict(figure.get("layout", {}))
    layout["sliders"] = [
        {"active": len(steps) - 1, "currentvalue": {"prefix": prefix}, "steps": steps, "pad": {"t": 40}}
    ]
    if play:
        run = {"mode": "immediate", "fromcurrent": True, "frame": {"duration": 150, "redraw": True}}
        layout["updatemenus"] = [
            *layout.get("updatemenus", []),
            {
                "type": "buttons",
                "showactive": False,
                "x": 0,
                "y": 0,
                "xanchor": "right",
                "yanchor": "top",
                "pad": {"t": 40, "r": 10},
                "buttons": [
                    {"label": "play", "method": "animate", "args": [None, run]},
                    {"label": "pause", "method": "animate", "args": [[None], show]},
                ],
            },
        ]
    which = {} if traces is None else {"traces": traces}
    return {**figure, "layout": layout, "frames": [{"name": n, "data": d, **which} for n, d in zip(names, frames)]}


def cell(value: Any) -> str:
    """A <td>: numbers right-aligned (the default) with their full value in `data-v` (what sorting reads), text
    left-aligned."""
    if isinstance(value, np.generic):
        value = value.item()
    number = isinstance(value, (int, float)) and not isinstance(value, bool)
    return f'<td data-v="{value!r}">{fmt(value)}</td>' if number else f'<td class="t">{fmt(value)}</td>'


def fmt(value: Any) -> str:
    """A table cell: floats to 4 significant digits (scientific outside [1e-3, 1e5)), dicts as `key: value` pairs
    and lists as `[a, b]` with their numbers formatted alike (never a raw Python dict), everything escaped."""
    return html.escape(_text(value))


def _text(value: Any) -> str:
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, float):
        if value != value:
            return "nan"
        if value == 0 or 1e-3 <= abs(value) < 1e5:
            return f"{value:.4g}"
        return f"{value:.3e}"
    if isinstance(value, dict):
        return ", ".join(f"{k}: {_text(v)}" for k, v in value.items())
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_text(v) for v in value) + "]"
    return str(value)


def words(name: str) -> str:
    """A file or field name as words for a caption: `solver_trace` -> "solver trace"."""
    return re.sub(r"[_\s]+", " ", name).strip()


def flat_rows(record: dict, key: str = "measure", value: str = "value", prefix: str = "") -> list[dict]:
    """A nested dict as table rows {key: "a.b", value: v}: one row per leaf, never a dict in a cell."""
    rows: list[dict] = []
    for k, v in record.items():
        name = f"{prefix}.{k}" if prefix else str(k)
        if isinstance(v, dict) and v:
            rows += flat_rows(v, key, value, name)
        else:
            rows.append({key: name, value: v})
    return rows


@dataclass
class Report:
    """An ordered list of HTML blocks; `write(path)` produces the page (plus plotly.min.js when needed)."""

    title: str
    blocks: list[str] = field(default_factory=list)
    scripts: list[str] = field(default_factory=list)
    uses_plotly: bool = False

    def heading(self, text: str, level: int = 2) -> Report:
        self.blocks.append(f"<h{level}>{html.escape(text)}</h{level}>")
        return self

    def paragraph(self, text: str) -> Report:
        self.blocks.append(f"<p>{html.escape(text)}</p>")
        return self

    def table(self, rows: Sequence[dict], caption: str | None = None, table_id: str | None = None) -> Report:
        """A sortable table from a list of dicts (columns: the union of keys in first-seen order), in a box that
        scrolls sideways when it is wider than the page."""
        if not rows:
            return self
        cols: list[str] = []
        for r in rows:
            cols += [k for k in r if k not in cols]
        head = "".join(f"<th>{html.escape(str(c))}</th>" for c in cols)
        body = "".join("<tr>" + "".join(cell(r.get(c, "")) for c in cols) + "</tr>" for r in rows)
        cap = f"<caption>{html.escape(caption)}</caption>" if caption else ""
        ident = f' id="{html.escape(table_id)}"' if table_id else ""
        self.blocks.append(
            f'<div class="scroll"><table class="sortable"{ident}>{cap}<thead><tr>{head}</tr></thead>'
            f"<tbody>{body}</tbody></table></div>"
        )
        return self

    def figure(self, png: str | Path, caption: str = "") -> Report:
        png = Path(png)
        if not png.exists():
            return self
        data = base64.b64encode(png.read_bytes()).decode()
        self.blocks.append(
            f'<figure><img src="data:image/png;base64,{data}" alt="{html.escape(png.stem)}">'
            f"<figcaption>{html.escape(caption or words(png.stem))}</figcaption></figure>"
        )
        return self

    def plotly(self, figure: Any, div_id: str, caption: str = "") -> Report:
        """An interactive plotly figure (a `plotly.graph_objects.Figure` or its dict, frames included for
        animations and sliders) in `<div id=div_id>`."""
        spec = figure.to_plotly_json() if hasattr(figure, "to_plotly_json") else figure
        keys = ("data", "layout", "frames")
        payload = js_json({k: spec[k] for k in keys if k in spec} | {"config": {"responsive": True}})
        self.uses_plotly = True
        self.blocks.append(
            f'<figure><div class="plot" id="{html.escape(div_id)}"></div>'
            f"<figcaption>{html.escape(caption)}</figcaption></figure>"
        )
        self.scripts.append(f"Plotly.newPlot({json.dumps(div_id)}, {payload});")
        return self

    def raw(self, block: str, script: str = "", plotly: bool = False) -> Report:
        """A hand-made block of HTML and the script that drives it (for views no library offers)."""
        self.blocks.append(block)
        if script:
            self.scripts.append(script)
        self.uses_plotly = self.uses_plotly or plotly
        return self

    def extend(self, other: Report, level: int = 2) -> Report:
        """Append another report's blocks and scripts under a heading with its title; its own section headings
        move one level down (h2 -> h3), below that title."""
        self.heading(other.title, level)
        self.blocks.extend(_demoted(b) for b in other.blocks)
        self.scripts.extend(other.scripts)
        self.uses_plotly = self.uses_plotly or other.uses_plotly
        return self

    def html(self, plotly_src: str | None = None) -> str:
        """The page; `plotly_src` is the relative URL of plotly.min.js (None: the page has no plotly view). When
        that file cannot be loaded (the folder was copied out of its tree of runs), the page still opens: tables,
        PNG figures and text work, and a note at the top says how to see the interactive views."""
        head_js = ""
        if plotly_src:
            head_js = f'<script src="{html.escape(plotly_src)}" onerror="attnlabNoPlotly()"></script>'
            # a file that loaded but defined no Plotly (a stand-in written where plotly was not installed) too
            head_js = (
                f"<script>{MISSING_PLOTLY_JS}</script>{head_js}<script>window.Plotly || attnlabNoPlotly()</script>"
            )
        blocks, contents = contents_list(self.blocks)
        body_js = "".join(f"<script>{s}</script>" for s in [SORT_JS, *self.scripts])
        return (
            f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>{html.escape(self.title)}</title>"
            f"<style>{STYLE}</style>{head_js}</head><body><h1>{html.escape(self.title)}</h1>"
            + contents
            + "\n".join(blocks)
            + body_js
            + "</body></html>\n"
        )

    def write(self, path: str | Path) -> Path:
        """Write the page atomically; with interactive views, make sure plotly.min.js is reachable offline."""
        path = Path(path)
        src = plotly_asset(path.parent) if self.uses_plotly else None
        return write_text(path, self.html(src))


def plotly_asset(folder: Path) -> str:
    """A relative URL of plotly.min.js for a page in `folder`: the copy in `folder` or an enclosing folder (up to
    ASSET_SEARCH_LEVELS up), else a new copy at the top of the tree of runs, the outermost enclosing run folder
    (a sweep holding its trials, the demo holding its studies), so that one tree stores it once. A page outside
    any run gets its own copy."""
    folder = folder.resolve()
    chain = [folder, *folder.parents][: ASSET_SEARCH_LEVELS + 1]
    for level, parent in enumerate(chain):
        if (parent / PLOTLY_ASSET).is_file():
            return "../" * level + PLOTLY_ASSET
    try:
        from plotly.offline import get_plotlyjs
    except ImportError:  # a machine without plotly (the GPU machine): the page opens without its interactive views
        write_bytes(folder / PLOTLY_ASSET, PLOTLY_MISSING.encode("utf-8"))
        return PLOTLY_ASSET

    top = max((i for i, p in enumerate(chain) if (p / "manifest.json").is_file()), default=0)
    write_bytes(chain[top] / PLOTLY_ASSET, get_plotlyjs().encode("utf-8"))
    return "../" * top + PLOTLY_ASSET
