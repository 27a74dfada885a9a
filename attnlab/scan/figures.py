"""Every figure of the scan, PNG and interactive, drawn from what the run saved (traces/, patterns/, the CSV
tables, summary.json): matplotlib Figure objects (no pyplot) for the PNGs, plotly dicts and the head explorer's
page glue for the interactive views. `report.py` calls the entries that read a run folder (`scan_figures`,
`head_explorer`, `sink_procedure_figure`, `series_figures`, `series_views`)."""

from __future__ import annotations

import functools
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from attnlab.reports.attention import ATTENTION_JS, ATTENTION_SCALE, masked_pattern, pack_pattern
from attnlab.reports.page import js_json, rounded
from attnlab.reports.plotting import new_figure, save_figure
from attnlab.runs import RunDir
from attnlab.scan.tables import read_table
from attnlab.tracing.format import Trace

THUMB_SIDE = 256  # the layer view's small multiples (shown at 120 px) are at most this many pixels a side, max-pooled
CANVAS_FROM = 256  # patterns of longer windows are drawn on a canvas (responsive at 2,048 tokens), not a heat map
CLASS_CODES = {"active-all": 0, "mixed": 1, "active-dormant": 2, "sink-all": 3}
CLASS_SCALE = (
    (0.0, "#2c7bb6"), (0.25, "#2c7bb6"), (0.25, "#bbbbbb"), (0.5, "#bbbbbb"),
    (0.5, "#fdae61"), (0.75, "#fdae61"), (0.75, "#d7191c"), (1.0, "#d7191c"),
)  # fmt: skip
SERIES_METRICS = ("mean_sink_score", "heads_above_0.5_percent", "massive_ratio", "value_norm_ratio_median", "nll")


def sink_heatmaps(sink: dict[str, np.ndarray], path: Path) -> Path:
    """Layer × head sink score per domain, plus the difference of the second domain minus the first."""
    ds = list(sink)
    n = len(ds) + (1 if len(ds) >= 2 else 0)
    L, H = next(iter(sink.values())).shape
    fig, axes = new_figure(n, 1, width=2.2 + 0.25 * H, height=1.2 + 0.16 * L)
    for ax, d in zip(axes[0], ds):
        im = ax.imshow(sink[d], aspect="auto", cmap="viridis", vmin=0, vmax=1, origin="lower")
        ax.set_title(f"sink score: {d}")
        ax.set_xlabel("head")
        ax.set_ylabel("layer")
        fig.colorbar(im, ax=ax, fraction=0.08)
    if len(ds) >= 2:
        ax = axes[0][-1]
        diff = sink[ds[1]] - sink[ds[0]]
        im = ax.imshow(diff, aspect="auto", cmap="RdBu_r", vmin=-1, vmax=1, origin="lower")
        ax.set_title(f"{ds[1]} − {ds[0]}")
        ax.set_xlabel("head")
        ax.set_ylabel("layer")
        fig.colorbar(im, ax=ax, fraction=0.08)
    return save_figure(fig, path)


def residual_norms(traces: dict, path: Path) -> Path:
    """‖h_0‖ and the median ‖h_t‖ (t ≥ 1) per residual stream, log scale; −1 = embedding output."""
    fig, axes = new_figure(2, 1, width=5.0, height=3.4)
    for d, tr in traces.items():
        x = np.arange(tr.resid_norm.shape[0]) - 1
        (line,) = axes[0][0].plot(x, tr.resid_norm[:, 0], marker=".", label=f"{d}: token 0")
        axes[0][0].plot(
            x, np.median(tr.resid_norm[:, 1:], axis=1), ls="--", color=line.get_color(), label=f"{d}: median other"
        )
        axes[0][1].plot(x, tr.resid_norm_ratio(), marker=".", label=d)
    axes[0][0].set_yscale("log")
    axes[0][0].set_xlabel("after block (−1 = embedding)")
    axes[0][0].set_ylabel("residual norm")
    axes[0][0].legend(fontsize=7)
    axes[0][1].set_yscale("log")
    axes[0][1].set_xlabel("after block (−1 = embedding)")
    axes[0][1].set_ylabel("‖h_0‖ / median ‖h_t‖")
    axes[0][1].legend(fontsize=7)
    return save_figure(fig, path)


def value_ratios(traces: dict, path: Path) -> Path:
    """Per layer: median over heads of ‖W_O^h v_0‖ / median_t ‖W_O^h v_t‖, with the min-max band over heads."""
    fig, axes = new_figure(1, 1, width=6.0, height=3.4)
    ax = axes[0][0]
    for d, tr in traces.items():
        r = tr.value_norm_ratio()
        x = np.arange(r.shape[0])
        (line,) = ax.plot(x, np.median(r, axis=1), marker=".", label=d)
        ax.fill_between(x, r.min(1), r.max(1), color=line.get_color(), alpha=0.15)
    ax.axhline(1.0, color="gray", lw=0.7)
    ax.set_yscale("log")
    ax.set_xlabel("layer")
    ax.set_ylabel("value-norm ratio of token 0")
    ax.legend(fontsize=7)
    return save_figure(fig, path)


def attention_maps(
    patterns: dict[str, dict[str, np.ndarray]], sink: dict[str, np.ndarray], path: Path, max_tokens: int = 64
) -> Path | None:
    """Attention patterns (first `max_tokens` positions, first sample) of chosen heads, one row per head."""
    ds = list(patterns)
    if not ds or not patterns[ds[0]]:
        return None
    heads = list(patterns[ds[0]])
    fig, axes = new_figure(len(ds), len(heads), width=2.8, height=2.6)
    for r, key in enumerate(heads):
        l, h = (int(x) for x in key.split("."))
        for c, d in enumerate(ds):
            A = masked_pattern(patterns[d][key][:max_tokens, :max_tokens])
            ax = axes[r][c]
            ax.imshow(A, cmap=ATTENTION_SCALE.cmap(), vmin=ATTENTION_SCALE.zmin, vmax=ATTENTION_SCALE.zmax)
            ax.set_title(f"L{l}H{h} {d} (s={sink[d][l, h]:.2f})", fontsize=8)
            ax.set_xticks([])
            ax.set_yticks([])
    return save_figure(fig, path)


def checkpoint_series(rows: list[dict], path: Path) -> Path:
    """Against training step, one line per domain: mean sink score, largest residual |x| (massive activation,
    log scale) and the median value-norm ratio of token 0 (rows: series.csv as dicts)."""
    panels = (
        ("mean_sink_score", "mean sink score", False),
        ("max_abs", "max |x| in the residual stream", True),
        ("value_norm_ratio_median", "value-norm ratio of token 0", True),
    )
    fig, axes = new_figure(len(panels), 1, width=4.2, height=3.2)
    domains = list(dict.fromkeys(r["domain"] for r in rows))
    for ax, (key, label, log) in zip(axes[0], panels):
        for d in domains:
            pts = sorted((r["step"], r[key]) for r in rows if r["domain"] == d)
            ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=d)
        if log:
            ax.set_yscale("log")
        ax.set_xlabel("training step")
        ax.set_ylabel(label)
    axes[0][0].legend(fontsize=7)
    return save_figure(fig, path)


def sink_procedure(heads: Any, layers: Any, path: Path) -> Path:
    """The authors' sink-head procedure (R24): per layer, how often token 0 is a candidate and how many candidates
    beyond token 0 a window holds; per head (first domain), the share of windows with a sink on any candidate and
    on one beyond token 0, with × on the heads the key-0 score calls sinks (≥ 0.5)."""
    fig, axes = new_figure(3, 1, width=4.2, height=3.4)
    for d, g in layers.groupby("domain", sort=False):
        (line,) = axes[0][0].plot(g["layer"], g["token0_candidate_share"], marker=".", label=f"{d}: token 0")
        axes[0][0].plot(g["layer"], g["beyond0_candidates_per_window"], ls="--", color=line.get_color(),
                        label=f"{d}: others / window")  # fmt: skip
    axes[0][0].set_xlabel("layer (input residual stream)")
    axes[0][0].set_title("candidate sink tokens (‖x‖ > ratio × median)")
    axes[0][0].legend(fontsize=7)
    d0 = heads["domain"].iloc[0]
    h = heads[heads["domain"] == d0]
    L, H = int(h["layer"].max()) + 1, int(h["head"].max()) + 1
    key0 = h["key0_sink"].astype(str).str.lower().eq("true").to_numpy().reshape(L, H)
    for ax, col, title in (
        (axes[0][1], "sink_share", "any candidate"),
        (axes[0][2], "sink_share_beyond0", "beyond token 0"),
    ):
        im = ax.imshow(
            h[col].to_numpy(float).reshape(L, H), aspect="auto", cmap="viridis", vmin=0, vmax=1, origin="lower"
        )
        yy, xx = np.nonzero(key0)
        ax.scatter(xx, yy, marker="x", s=14, color="red", linewidths=0.8)
        ax.set_title(f"{d0}: windows with a sink, {title}", fontsize=9)
        ax.set_xlabel("head (× = key-0 sink head)")
        ax.set_ylabel("layer")
        fig.colorbar(im, ax=ax, fraction=0.08)
    return save_figure(fig, path)


DYNAMICS = (
    ("attn_sink", "Attn⟨s⟩ of the sink heads", True),
    ("value_norm_ratio", "value norm of token 0 / median", False),
    ("resid_norm_ratio", "residual norm of token 0 / median", True),
)


def sink_dynamics(rows: list[dict], path: Path) -> Path:
    """R25: the sink heads' attention to token 0, the value-norm ratio of token 0 and its residual-norm ratio
    against the training step (first domain), raw and as progress toward their extremes (0 = first checkpoint,
    1 = extreme), with each curve's onset (half of its change) dashed."""
    from attnlab.core.curves import onset

    d0 = rows[0]["domain"]
    rs = [r for r in rows if r["domain"] == d0]
    steps = [int(r["step"]) for r in rs]
    fig, axes = new_figure(4, 1, width=3.4, height=3.0)
    for k, (key, label, rising) in enumerate(DYNAMICS):
        v = np.asarray([float(r[key]) for r in rs])
        (line,) = axes[0][k].plot(steps, v, marker=".", color=f"C{k}")
        axes[0][k].set_title(label, fontsize=9)
        axes[0][k].set_xlabel("step")
        total = (v.max() if rising else v.min()) - v[0]
        axes[0][3].plot(steps, (v - v[0]) / total if total else 0 * v, color=line.get_color(), label=key)
        on = onset(steps, list(v), rising)
        if on is not None:
            for ax in (axes[0][k], axes[0][3]):
                ax.axvline(on, ls="--", lw=0.8, color=line.get_color())
    axes[0][3].set_title(f"{d0}: progress to the extreme", fontsize=9)
    axes[0][3].set_xlabel("step")
    axes[0][3].legend(fontsize=7)
    return save_figure(fig, path)


# --- entries that read a run folder (called by report.py) ---------------------------------------------------------
def read_traces(run: RunDir, domains: list[str]) -> dict[str, Trace]:
    """traces/<domain>: the saved trace of each domain."""
    return {d: Trace.load(run.file("traces") / d) for d in domains}


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


def scan_figures(run: RunDir, traces: dict[str, Trace]) -> dict[str, Path]:
    """The PNGs of a single-model scan: sink_heatmaps and attention_maps (for documents: the page has the grid and
    the pattern view), residual_norms and value_ratios; attention_maps only when patterns were saved."""
    sink = {d: tr.sink_score() for d, tr in traces.items()}
    figs = {
        "sink_heatmaps": sink_heatmaps(sink, run.figure_path("sink_heatmaps")),
        "residual_norms": residual_norms(traces, run.figure_path("residual_norms")),
        "value_ratios": value_ratios(traces, run.figure_path("value_ratios")),
    }
    maps = attention_maps(read_patterns(run, list(traces)), sink, run.figure_path("attention_maps"))
    return figs if maps is None else {**figs, "attention_maps": maps}


def sink_procedure_figure(run: RunDir) -> Path:
    """The authors' sink-head procedure's figure from sink_heads_authors.csv and sink_layers.csv."""
    heads, layers = read_table(run.file("sink_heads_authors.csv")), read_table(run.file("sink_layers.csv"))
    return sink_procedure(heads, layers, run.figure_path("sink_procedure"))


def series_figures(run: RunDir) -> dict[str, Path]:
    """The PNGs of a checkpoint series: checkpoint_series (from series.csv) and, when the summary has them,
    sink_dynamics (R25)."""
    figs = {"checkpoint_series": checkpoint_series(read_table(run.file("series.csv")).to_dict("records"),
                                                   run.figure_path("checkpoint_series"))}  # fmt: skip
    dyn = run.read_json("summary.json").get("sink_dynamics")  # the JSON keeps head names such as "0.10" as text
    if dyn:
        figs["sink_dynamics"] = sink_dynamics(dyn, run.figure_path("sink_dynamics"))
    return figs


def series_views(table: pd.DataFrame) -> dict[str, dict]:
    """{metric: plotly figure} of series.csv: each SERIES_METRICS column against the training step, one line per
    domain."""
    views = {}
    for metric in [m for m in SERIES_METRICS if m in table]:
        traces = [
            {"type": "scatter", "mode": "lines+markers", "name": str(d), "x": g["step"].tolist(),
             "y": g[metric].tolist(), "text": g["checkpoint"].tolist()}
            for d, g in table.groupby("domain")
        ]  # fmt: skip
        layout = {"title": {"text": metric}, "xaxis": {"title": {"text": "training step"}}, "height": 320}
        views[metric] = {"data": traces, "layout": layout}
    return views


# --- the layer × head grid and the pattern view it drives -----------------------------------------------------------
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


# Glue no library offers: a click on a grid cell (plotly_click) shows that head's saved patterns, one heat map per
# domain with the tokens on hover, and the window's text where hovering a query token shades its keys; "all heads
# of this layer" draws the layer view (small multiples on canvases). The script is package data beside this module
# (a file that the tests lint: tests/core/test_codebase.py); `__CFG__` in it stands for the page's settings.
LAYER_VIEW_JS = "layer_view.js"


@functools.cache
def pattern_js() -> str:
    """The head explorer's script, `__CFG__` still in it (read once from the package data, LAYER_VIEW_JS), after
    the drawing every attention view shares (`reports.attention.ATTENTION_JS`)."""
    return ATTENTION_JS + "\n" + resources.files("attnlab.scan").joinpath(LAYER_VIEW_JS).read_text(encoding="utf-8")


def packed_pattern(a: np.ndarray) -> dict:
    """A causal `[query, key]` pattern in the 16-bit form of `reports.attention.pack_pattern` (step 1/65534, under
    the 4-decimal hover's half step; the masked upper triangle as its own code) in base64, for the page's script to
    unpack: 2.7 characters a weight instead of about 7 in JSON, and one string to parse (a 2,048-token pattern is
    11 MB of page, not 31 MB of nested lists)."""
    return pack_pattern(masked_pattern(a))


def embedded_pattern(a: np.ndarray) -> Any:
    """What the page holds of a saved pattern: nested lists up to CANVAS_FROM tokens (drawn as a plotly heat map;
    masked cells null), packed past it (drawn on a canvas)."""
    return packed_pattern(a) if a.shape[0] > CANVAS_FROM else rounded(masked_pattern(a))


def head_explorer(run: RunDir, sink: dict[str, np.ndarray], grid: str, view: str) -> tuple[dict, str, str]:
    """(grid figure, HTML block, script) of the clickable layer × head grid (plotly, in `<div id=grid>`) and the
    pattern view it drives (in `<div id=view>`: the patterns of the heads the scan kept, from classes.csv,
    heads.csv, patterns/ and summary.json)."""
    domains = list(sink)
    classes = read_table(run.file("classes.csv")).to_dict("records")
    figure = grid_figure(sink, classes, read_table(run.file("heads.csv")))
    patterns = read_patterns(run, domains)
    keys = list(dict.fromkeys(k for d in domains for k in patterns[d]))
    saved = {k: {d: embedded_pattern(patterns[d][k]) for d in domains if k in patterns[d]} for k in keys}
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
    block = (
        f'<p class="note">Heads with saved patterns: {buttons or "none"}</p>{controls}'
        f'<h4 id="{view}-title">Click a head in the grid</h4><div id="{view}"></div>'
    )
    cfg = {"grid": grid, "view": view, "domains": domains, "sink": {d: rounded(sink[d]) for d in domains},
           "patterns": saved, "tokens": read_tokens(run, domains), "layers": L, "heads": H, "windows": windows,
           "canvas_from": CANVAS_FROM, "thumb": THUMB_SIDE, "scale": ATTENTION_SCALE.as_dict()}  # fmt: skip
    return figure, block, pattern_js().replace("__CFG__", js_json(cfg))
