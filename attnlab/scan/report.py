"""The scan's report.html, from the run folder only (never loads a model, never recomputes)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from attnlab.report import Report, element_id, js_json, rounded
from attnlab.runs import RunDir
from attnlab.scan import figures
from attnlab.scan.analysis import ACTIVE, DORMANT, SINK_EPS
from attnlab.tracing.format import Trace

CANVAS_FROM = 256  # patterns of longer windows are drawn on a canvas (responsive at 2,048 tokens), not a heat map
TABLES = ("heads", "layers", "massive", "classes", "sink_candidates", "sink_layers", "sink_heads_authors")
CLASS_CODES = {"active-all": 0, "mixed": 1, "active-dormant": 2, "sink-all": 3}
CLASS_SCALE = (
    (0.0, "#2c7bb6"), (0.25, "#2c7bb6"), (0.25, "#bbbbbb"), (0.5, "#bbbbbb"),
    (0.5, "#fdae61"), (0.75, "#fdae61"), (0.75, "#d7191c"), (1.0, "#d7191c"),
)  # fmt: skip

# Glue no library offers: a click on a grid cell (plotly_click) shows that head's saved patterns, one heat map per
# domain with the tokens on hover, and the window's text where hovering a query token shades its keys.
PATTERN_JS = """
(function (cfg) {
  var grid = document.getElementById(cfg.grid), view = document.getElementById(cfg.view);
  var title = document.getElementById(cfg.view + '-title');
  var served = location.protocol.indexOf('http') === 0, win = 0, cache = {}, wtokens = {};
  function esc(t) { return t.replace(/[&<>]/g, function (c) { return {'&': '&amp;', '<': '&lt;', '>': '&gt;'}[c]; }); }
  function patternsOf(key) { return win === 0 ? cfg.patterns[key] : cache[key + '@' + win]; }
  function tokensOf(d) { return win === 0 ? cfg.tokens[d] : (wtokens[win] || {})[d]; }
  function fetchHead(key, w) {  // served by `attnlab view`: the model of the run computes the head on window w
    var p = key.split('.');
    return fetch('api/pattern?layer=' + p[0] + '&head=' + p[1] + '&window=' + w).then(function (r) {
      return r.json(); }).then(function (res) {
      if (res.error) return res;
      if (w === 0) {
        cfg.patterns[key] = res.patterns;
        Object.keys(res.tokens).forEach(function (d) { cfg.tokens[d] = cfg.tokens[d] || res.tokens[d]; });
      } else { cache[key + '@' + w] = res.patterns; wtokens[w] = res.tokens; }
      return res;
    });
  }
  function show(key) {
    var parts = key.split('.'), l = +parts[0], h = +parts[1], saved = patternsOf(key);
    view.dataset.head = key; view.dataset.window = win; view.innerHTML = '';
    title.textContent = 'Layer ' + l + ', head ' + h + ': ' + cfg.domains.map(function (d) {
      return d + ' sink ' + cfg.sink[d][l][h].toFixed(3); }).join(', ') + ' (window ' + win + ')';
    if (!saved && served) {
      view.innerHTML = '<p class="note">Computing the pattern of this head with the model of the run...</p>';
      var w = win;
      fetchHead(key, w).then(function (res) {
        if (res.error) { view.innerHTML = '<p class="note">' + esc(res.error) + '</p>'; return; }
        if (view.dataset.head === key && win === w) show(key);
      });
      return;
    }
    if (!saved && win > 0) {
      view.innerHTML = '<p class="note">The scan saved patterns of its first window only (window 0); open the ' +
        'run with `attnlab view RUN_DIR` to compute any head on any window.</p>';
      return;
    }
    if (!saved) {
      view.innerHTML = '<p class="note">No pattern was saved for this head. Rerun the scan with --pattern-head ' +
        key + ' to keep it, or open the run with `attnlab view RUN_DIR` to compute any head (saved: ' +
        (Object.keys(cfg.patterns).join(', ') || 'none') + ').</p>';
      return;
    }
    cfg.domains.forEach(function (d, k) {
      var A = saved[d], tok = tokensOf(d) || [];
      if (!A) return;
      var lab = function (i) { return i + ' ' + JSON.stringify(tok[i] === undefined ? '?' : tok[i]); };
      if (A.length > cfg.canvas_from) bigPattern(A, lab, 'L' + l + 'H' + h + ' on ' + d + ' (window ' + win + ')', k);
      else {
      var text = A.map(function (row, i) { return row.map(function (_, j) {
        return 'query ' + esc(lab(i)) + '<br>key ' + esc(lab(j)); }); });
      var div = document.createElement('div'); div.className = 'plot'; div.id = cfg.view + '-' + k;
      view.appendChild(div);
      var labels = A.map(function (_, i) { return lab(i); });  // the tokens on both axes (unique: with the index)
      var tick = {family: 'monospace', size: 9};
      Plotly.newPlot(div, [{type: 'heatmap', z: A, x: labels, y: labels, text: text, colorscale: 'Magma',
        zmin: 0, zmax: 1, hovertemplate: '%{text}<br>weight %{z:.4f}<extra></extra>'}],
        {title: {text: 'L' + l + 'H' + h + ' on ' + d + ' (window ' + win + ')'}, yaxis: {autorange: 'reversed',
         type: 'category', tickfont: tick, automargin: true, title: {text: 'query token'}},
         xaxis: {type: 'category', tickfont: tick, automargin: true, title: {text: 'key token'}},
         margin: {t: 50}, height: Math.min(900, 360 + 12 * A.length)},
        {responsive: true});
      }
      var box = document.createElement('div'); box.className = 'tokens';
      box.innerHTML = tok.map(function (t, i) { return '<span data-i="' + i + '">' + esc(t) + '</span>'; }).join('');
      box.addEventListener('mouseover', function (e) {
        var i = e.target.dataset ? e.target.dataset.i : undefined; if (i === undefined) return;
        box.querySelectorAll('span').forEach(function (s, j) { var w = j <= i ? A[i][j] : 0;
          s.style.background = 'rgba(215,25,28,' + Math.sqrt(w || 0) + ')';
          s.style.outline = j == i ? '1px solid #000' : ''; s.title = 'weight ' + (w || 0).toFixed(4); });
      });
      var cap = document.createElement('p'); cap.className = 'note';
      cap.textContent = d + ': hover a token (the query) to shade the tokens it attends to.';
      view.appendChild(cap); view.appendChild(box);
    });
  }
  // a long window (more than cfg.canvas_from tokens) on a canvas, one pixel per (query, key): a heat map with a
  // hover text per cell would hold T^2 strings; here a hover line names the query and key tokens and the weight
  function bigPattern(A, lab, name, k) {
    var n = A.length, wrap = document.createElement('div'); wrap.id = cfg.view + '-' + k; wrap.className = 'big';
    var head = document.createElement('p'); head.className = 'note';
    head.textContent = name + ': ' + n + ' tokens, one pixel per query (row) and key (column); hover a pixel.';
    var c = document.createElement('canvas'), tip = document.createElement('p'); tip.className = 'note tip';
    wrap.appendChild(head); wrap.appendChild(c); wrap.appendChild(tip); view.appendChild(wrap); draw(c, A);
    c.addEventListener('mousemove', function (e) {
      var r = c.getBoundingClientRect(), j = Math.floor((e.clientX - r.left) / r.width * n);
      var i = Math.floor((e.clientY - r.top) / r.height * n);
      if (i < 0 || j < 0 || i >= n || j >= n) return;
      tip.textContent = 'query ' + lab(i) + ', key ' + lab(j) + ': weight ' + (A[i][j] || 0).toFixed(4);
    });
  }
  // all heads of a layer as small multiples on canvases (fast at any length), click one to enlarge it
  function draw(canvas, A) {
    var n = A.length, ctx = canvas.getContext('2d'); canvas.width = n; canvas.height = n;
    var img = ctx.createImageData(n, n);
    for (var i = 0; i < n; i++) for (var j = 0; j < n; j++) {
      var v = Math.sqrt(Math.max(0, Math.min(1, A[i][j] || 0))), o = 4 * (i * n + j);
      img.data[o] = 255 * v; img.data[o + 1] = 255 * v * v * 0.8; img.data[o + 2] = 80 * (1 - v) + 60 * v;
      img.data[o + 3] = 255;
    }
    ctx.putImageData(img, 0, 0); canvas.dataset.drawn = '1';
  }
  function layerView(l) {
    var box = document.getElementById(cfg.view + '-layer-view'), d = cfg.domains[0], chain = Promise.resolve();
    box.innerHTML = '<p class="note">Layer ' + l + ', every head on ' + esc(d) + ' (window ' + win +
      '); click one to enlarge it.</p>';
    for (var h = 0; h < cfg.heads; h++) (function (key) {
      var fig = document.createElement('figure'); fig.className = 'multiple';
      var c = document.createElement('canvas'); c.dataset.head = key; c.title = 'L' + key.replace('.', 'H');
      var cap = document.createElement('figcaption'); cap.textContent = 'head ' + key.split('.')[1];
      fig.appendChild(c); fig.appendChild(cap); box.appendChild(fig);
      c.addEventListener('click', function () { show(key); view.scrollIntoView(); });
      var have = patternsOf(key);
      if (have && have[d]) { draw(c, have[d]); return; }
      if (!served) { cap.textContent += ' (not saved)'; return; }
      var w = win;
      chain = chain.then(function () { return fetchHead(key, w).then(function (res) {
        if (!res.error && res.patterns[d]) draw(c, res.patterns[d]); }); });
    })(l + '.' + h);
  }
  document.getElementById(cfg.view + '-layer').addEventListener('click', function () {
    layerView(+(view.dataset.head || '0.0').split('.')[0]); });
  document.getElementById(cfg.view + '-window').addEventListener('change', function (e) {
    win = Math.max(0, Math.min(cfg.windows - 1, parseInt(e.target.value, 10) || 0)); e.target.value = win;
    if (view.dataset.head) show(view.dataset.head);
  });
  grid.on('plotly_click', function (ev) { var p = ev.points[0]; show(p.y + '.' + p.x); });
  document.querySelectorAll('button[data-grid="' + cfg.grid + '"]').forEach(function (b) {
    b.addEventListener('click', function () { show(b.dataset.head); }); });
  var first = Object.keys(cfg.patterns)[0]; if (first) show(first);
})(__CFG__);
"""


def read_table(path: Path) -> pd.DataFrame:
    """One CSV of a run folder as a DataFrame (empty strings kept as ""; an empty file gives an empty frame)."""
    if not path.is_file() or path.stat().st_size == 0:
        return pd.DataFrame()
    return pd.read_csv(path, keep_default_na=False, na_values=["nan", "NaN"])


def read_tables(path: str | Path) -> dict[str, pd.DataFrame]:
    """The scan's tables: heads, layers, massive, classes."""
    return {name: read_table(Path(path) / f"{name}.csv") for name in TABLES}


def read_patterns(run: RunDir, domains: list[str]) -> dict[str, dict[str, np.ndarray]]:
    """patterns/<domain>/<l>.<h>.npy -> {domain: {"l.h": [T,T]}} in the summary's pattern-head order."""
    heads = run.read_json("summary.json")["pattern_heads"]
    out: dict[str, dict[str, np.ndarray]] = {}
    for d in domains:
        files = {k: run.file("patterns") / d / f"{k}.npy" for k in heads}
        out[d] = {k: np.load(f, allow_pickle=False) for k, f in files.items() if f.is_file()}
    return out


def read_tokens(run: RunDir, domains: list[str]) -> dict[str, list[str]]:
    """patterns/<domain>/tokens.json: the first window's tokens as text (absent in older runs: empty)."""
    files = {d: run.file("patterns") / d / "tokens.json" for d in domains}
    return {d: run.read_json(f"patterns/{d}/tokens.json") for d, f in files.items() if f.is_file()}


# Per-head statistics of heads.csv the grid can be coloured by (besides the sink score), with their names.
GRID_STATISTICS = {
    "row_entropy": "row entropy",
    "value_norm_ratio": "value-norm ratio",
    "mean_attn_score_key0": "mean attention on key 0",
    "dlogit_mean": "key-0 logit gap",
    "learned_sink_mass": "learned sink mass",
}


def statistic_grids(heads: pd.DataFrame, L: int, H: int) -> list[tuple[str, np.ndarray]]:
    """(name, [L, H] values) for each statistic of GRID_STATISTICS in heads.csv, per domain."""
    out: list[tuple[str, np.ndarray]] = []
    if heads.empty:
        return out
    for col, name in GRID_STATISTICS.items():
        if col not in heads:
            continue
        for d, g in heads.groupby("domain", sort=False):
            z = np.full((L, H), np.nan)
            z[g["layer"].astype(int), g["head"].astype(int)] = pd.to_numeric(g[col], errors="coerce")
            if np.isfinite(z).any():
                out.append((f"{name}: {d}", z))
    return out


def grid_figure(sink: dict[str, np.ndarray], classes: list[dict], heads: pd.DataFrame | None = None) -> dict:
    """The layer × head grid: a menu switches between sink score per domain, the difference of the second domain
    minus the first, head class and every per-head statistic of heads.csv per domain (row entropy, value-norm
    ratio ...); hover gives every value of the head."""
    ds = list(sink)
    L, H = sink[ds[0]].shape
    cls = np.zeros((L, H))
    text = [["" for _ in range(H)] for _ in range(L)]
    for r in classes:
        l, h = int(r["layer"]), int(r["head"])
        cls[l, h] = CLASS_CODES[r["class"]]
        text[l][h] = f"class {r['class']}<br>" + "<br>".join(f"sink {d}: {sink[d][l, h]:.3f}" for d in ds)
    views: list[tuple[str, np.ndarray, Any, float, float]] = [
        (f"sink score: {d}", sink[d], "Viridis", 0.0, 1.0) for d in ds
    ]
    if len(ds) >= 2:
        views.append((f"difference {ds[1]} − {ds[0]}", sink[ds[1]] - sink[ds[0]], "RdBu", -1.0, 1.0))
    views.append(("class (blue active-all, grey mixed, orange active-dormant, red sink-all)", cls, CLASS_SCALE, 0, 3))
    for name, z in statistic_grids(heads if heads is not None else pd.DataFrame(), L, H):
        finite = z[np.isfinite(z)]
        views.append((name, z, "Cividis", float(finite.min()), float(finite.max()) or 1.0))
    base = {"type": "heatmap", "x": list(range(H)), "y": list(range(L)), "text": text, "xgap": 1, "ygap": 1}
    hover = "layer %{y}, head %{x}<br>value %{z:.3f}<br>%{text}<extra></extra>"
    name, z, scale, lo, hi = views[0]
    buttons = [
        {
            "label": v[0].split(" (")[0],
            "method": "update",
            "args": [
                {"z": [rounded(v[1])], "colorscale": [v[2]], "zmin": [v[3]], "zmax": [v[4]]},
                {"title.text": v[0]},
            ],
        }
        for v in views
    ]
    return {
        "data": [{**base, "z": rounded(z), "colorscale": scale, "zmin": lo, "zmax": hi, "hovertemplate": hover}],
        "layout": {
            "title": {"text": name},
            "xaxis": {"title": {"text": "head"}, "dtick": 1 if H <= 16 else None},
            "yaxis": {"title": {"text": "layer"}, "dtick": 1 if L <= 16 else None},
            "updatemenus": [{"buttons": buttons, "x": 0, "y": 1.15, "xanchor": "left", "direction": "down"}],
            "margin": {"t": 80},
        },
    }


def add_head_explorer(rep: Report, run: RunDir, sink: dict[str, np.ndarray], classes: list[dict]) -> None:
    """The clickable grid and the pattern view it drives (patterns of the heads kept by the scan)."""
    domains = list(sink)
    grid, view = element_id(run.path, "grid"), element_id(run.path, "pattern")
    rep.plotly(
        grid_figure(sink, classes, read_table(run.file("heads.csv"))),
        grid,
        "Layer × head grid (menu: the statistic that colours it): click a head to see its attention pattern",
    )
    patterns = read_patterns(run, domains)
    keys = list(dict.fromkeys(k for d in domains for k in patterns[d]))
    saved = {k: {d: rounded(patterns[d][k]) for d in domains if k in patterns[d]} for k in keys}
    buttons = "".join(
        f'<button class="head" data-grid="{grid}" data-head="{k}">L{k.replace(".", "H")}</button>' for k in keys
    )
    L, H = next(iter(sink.values())).shape
    windows = min(int(d.get("samples", 1)) for d in run.read_json("summary.json")["domains"])
    controls = (
        f'<p class="note"><label>window <input type="number" id="{view}-window" min="0" max="{windows - 1}" '
        f'value="0" style="width:5em"></label> (0 to {windows - 1}; beyond 0 computed when served by '
        f'`attnlab view`) <button id="{view}-layer">all heads of this layer</button></p>'
        f'<div id="{view}-layer-view" class="multiples"></div>'
    )
    rep.raw(
        f'<p class="note">Heads with saved patterns: {buttons or "none"}</p>{controls}'
        f'<h4 id="{view}-title">Click a head in the grid</h4><div id="{view}"></div>',
        PATTERN_JS.replace(
            "__CFG__",
            js_json(
                {
                    "grid": grid,
                    "view": view,
                    "domains": domains,
                    "sink": {d: rounded(sink[d]) for d in domains},
                    "patterns": saved,
                    "tokens": read_tokens(run, domains),
                    "layers": L,
                    "heads": H,
                    "windows": windows,
                    "canvas_from": CANVAS_FROM,
                }
            ),
        ),
        plotly=True,
    )


SERIES_METRICS = ("mean_sink_score", "heads_above_0.5_percent", "massive_ratio", "value_norm_ratio_median", "nll")


def write_series_report(path: str | Path, title: str = "Checkpoint series scan") -> Report:
    """A checkpoint series (scan --model D1 --model D2 …): the series table, each metric against the training
    step (one line per domain), and a link to every checkpoint's own scan report. Reads the run folder only."""
    run = RunDir(path)
    table = read_table(run.file("series.csv"))
    rep = Report(title)
    rep.paragraph("One scan per checkpoint, in the order given; each checkpoint's folder under checkpoints/ is a "
                  "complete scan with its own report.")  # fmt: skip
    for metric in [m for m in SERIES_METRICS if m in table]:
        traces = [
            {"type": "scatter", "mode": "lines+markers", "name": str(d), "x": g["step"].tolist(),
             "y": g[metric].tolist(), "text": g["checkpoint"].tolist()}
            for d, g in table.groupby("domain")
        ]  # fmt: skip
        layout = {"title": {"text": metric}, "xaxis": {"title": {"text": "training step"}}, "height": 320}
        rep.plotly({"data": traces, "layout": layout}, f"series-{metric}", f"{metric} against the training step")
    rep.figure(run.figure_path("checkpoint_series"), "Sink score, massive activation and value-norm ratio")
    dyn = run.read_json("summary.json").get("sink_dynamics")  # the JSON keeps head names such as "0.10" as text
    if dyn:
        rep.figure(
            figures.sink_dynamics(dyn, run.figure_path("sink_dynamics")),
            f"Sink heads of the last checkpoint ({dyn[0]['sink_heads']}): Attn⟨s⟩, value-norm and residual-norm "
            "ratios of token 0 against the step; dashed: onsets (half of each change)",
        )
    rep.table(table.to_dict("records"), caption="Every checkpoint and domain, one row each (series.csv)")
    links = sorted(p.name for p in run.file("checkpoints").iterdir() if (p / "report.html").is_file())
    rep.raw("<p>Checkpoints: " + " · ".join(f'<a href="checkpoints/{n}/report.html">{n}</a>' for n in links) + "</p>")
    rep.write(run.file("report.html"))
    return rep


def add_sink_procedure(rep: Report, run: RunDir, s: dict) -> None:
    """The authors' sink-head procedure (R24): per-domain agreement with the key-0 classification, the layers'
    candidate tokens beyond token 0, and the figure (scans written before R24 have none of it)."""
    if "sink_procedure" not in s or not run.file("sink_heads_authors.csv").is_file():
        return
    proc = s["sink_procedure"]
    rep.heading("The authors' sink-head procedure")
    rep.paragraph(
        f"The authors' sink-head procedure: candidate sink tokens have a residual norm (at the layer's input) above "
        f"{proc[0]['ratio']:g} × the window's median; head h has a sink on candidate i when its mean attention score "
        f"(1/(T−i)) Σ_(j≥i) A_ji ≥ {proc[0]['threshold']:g}; a sink head has one in at least half of the windows. "
        "Compared with the key-0 classification (sink score ≥ 0.5)."
    )
    keys = ["domain", "authors_sink_heads", "authors_sink_heads_beyond0", "key0_sink_heads", "both", "authors_only",
            "key0_only", "neither", "jaccard", "windows_with_beyond0_sink", "beyond0_sink_layers",
            "beyond0_sunk_tokens"]  # fmt: skip
    rep.table([{k: p.get(k, "") for k in keys} for p in proc], caption="Authors' sink heads vs key-0 sink heads")
    layers = read_table(run.file("sink_layers.csv"))
    rep.figure(
        figures.sink_procedure(
            read_table(run.file("sink_heads_authors.csv")), layers, run.figure_path("sink_procedure")
        ),
        "Candidate sink tokens per layer, and the heads with a sink by the authors' procedure",
    )
    busy = layers[(layers["beyond0_candidates_per_window"] > 0) | (layers["sink_heads_beyond0"] > 0)]
    rep.table(busy.to_dict("records"), caption="Layers with candidate sink tokens beyond token 0")


def write_report(path: str | Path, title: str = "Real model scan") -> Report:
    """Draw the scan figures into path/figures, write path/report.html and return the report section."""
    run = RunDir(path)
    s = run.read_json("summary.json")
    if "series" in s:
        return write_series_report(path)
    domains = [d["domain"] for d in s["domains"]]
    traces = {d: Trace.load(run.file("traces") / d) for d in domains}
    sink = {d: tr.sink_score() for d, tr in traces.items()}
    rep = Report(title)
    rep.heading("Summary")
    rep.paragraph(
        f"Model {s['model']}, T = {s['tokens']} tokens, prefix {s['prefix']}. A head is dormant on a domain if "
        f"its sink score (mean attention of queries 1..T−1 on key 0) is ≥ {DORMANT}, active if < {ACTIVE}; "
        f"Sink_1^ε uses ε = {SINK_EPS}."
    )
    rep.table(s["domains"], caption="Per domain")
    rep.table([s["class_counts"]], caption="Head classes across the scanned domains")
    if s["active_dormant"]:
        rep.paragraph("Active-dormant heads (layer.head): " + ", ".join(s["active_dormant"]))
    for key, val in s.items():
        if key.startswith("dormant_on_") and val:
            rep.table(val[:12], caption=f"Heads {key.replace('_', ' ')} (largest shift first, up to 12)")
    rep.heading("Layer × head explorer")
    add_head_explorer(rep, run, sink, read_table(run.file("classes.csv")).to_dict("records"))
    figures.sink_heatmaps(sink, run.figure_path("sink_heatmaps"))  # the PNG for documents; the page has the grid
    rep.heading("Residual and value norms")
    rep.figure(
        figures.residual_norms(traces, run.figure_path("residual_norms")),
        "Residual norm of token 0 vs the median other token (log scale)",
    )
    rep.figure(
        figures.value_ratios(traces, run.figure_path("value_ratios")),
        "Value-norm ratio ‖W_O^h v_0‖ / median_t ‖W_O^h v_t‖ per layer (median and range over heads)",
    )
    figures.attention_maps(read_patterns(run, domains), sink, run.figure_path("attention_maps"))  # PNG for docs
    add_sink_procedure(rep, run, s)
    layers = read_table(run.file("layers.csv"))
    if len(layers):
        rep.heading("Massive activations")
        big = layers[layers["n_massive"] > 0]
        cols = ["domain", "layer", "max_abs", "max_pos", "max_dim", "median_abs", "resid_norm_ratio", "massive_top"]
        rep.table(
            big[cols].to_dict("records"),
            caption="Layers with massive activations (|h| > 100 and > 1000 × median); layer −1 = embedding",
        )
    rep.write(run.file("report.html"))
    return rep
