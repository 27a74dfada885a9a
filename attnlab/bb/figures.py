"""Every figure of the BB study, PNG and interactive, drawn from what a run saved in its folder: dynamics of the
three phenomena, attention map, value-norm bars, the zoomable metric curves and the snapshot slider (`bb train`),
run comparisons (`bb compare`), the subspace spectra (`bb subspace`) and the theory run's plots (spec §9.4 and
§9.5). `report.py` calls the `*_figures` / `*_views` entries, which read the run folder; the drawing functions
below them take the saved arrays."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np

from attnlab.bb._theory.flow import Trajectory
from attnlab.bb.metrics import metric
from attnlab.bb.tables import metrics_table
from attnlab.reports.attention import ATTENTION_SCALE, masked_pattern, token_label
from attnlab.reports.page import rounded, with_slider
from attnlab.reports.plotting import new_figure, save_figure
from attnlab.runs import STEPPED, RunDir


def _series(metrics: list[dict], key: str, layer: int = 0, head: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """(steps, values) of one metric for (layer, head) over training; records without a value are skipped."""
    steps, vals = [], []
    for r in metrics:
        v = metric(r, key, layer, head)
        if v is None:
            continue
        steps.append(r["step"])
        vals.append(v)
    return np.asarray(steps), np.asarray(vals)


def _step_axis(ax, lin_until: int) -> None:
    """Linear up to `lin_until`, log beyond (spec §4), with ticks placed in both parts."""
    lin_until = max(int(lin_until), 1)
    last = max((max(line.get_xdata(), default=0) for line in ax.get_lines()), default=lin_until)
    if last <= 4 * lin_until:  # a short run: the log part would be a sliver, stay linear
        ax.set_xlim(0, max(last, 1) * 1.02)
        ax.set_xlabel("step")
        ax.grid(alpha=0.3)
        return
    ax.set_xscale("symlog", linthresh=lin_until, linscale=2.0)
    ticks = [0, lin_until // 2, lin_until]
    ticks += [v * 10**k for k in range(2, 7) for v in (1, 2, 5) if lin_until < v * 10**k <= max(last, 1)]
    ax.set_xticks(ticks, [f"{t:g}" for t in ticks])
    ax.set_xlim(0, max(last, lin_until) * 1.02)
    ax.set_xlabel(f"step (linear ≤ {lin_until}, log beyond)")
    ax.grid(alpha=0.3)


def dynamics(metrics: list[dict], path: Path, lin_until: int = 500, layer: int = 0, title: str = "") -> Path:
    """2×3 panels over training: Attn⟨s⟩, Δlogit, ‖W_O v‖, ‖Res‖, excess risks, losses."""
    fig, ax = new_figure(3, 2, width=4.3, height=3.2)
    s, v = _series(metrics, "attn_sink", layer)
    ax[0, 0].plot(s, v, color="C0", label="Attn⟨s⟩ (non-trigger queries i ≥ 1)")
    s2, v2 = _series(metrics, "attn_sink_with0", layer)
    ax[0, 0].plot(s2, v2, color="C0", ls="--", alpha=0.6, label="including query 0")
    ax[0, 0].set_ylabel("attention to <s>")
    ax[0, 0].set_ylim(-0.02, 1.02)
    ax[0, 0].legend(fontsize=7)
    s, v = _series(metrics, "delta_logit", layer)
    _, lo = _series(metrics, "delta_logit_q10", layer)
    _, hi = _series(metrics, "delta_logit_q90", layer)
    _, vt = _series(metrics, "delta_logit_trigger", layer)
    ax[0, 1].plot(s, v, color="C1", label="non-trigger tokens (mean)")
    if len(lo) == len(s):
        ax[0, 1].fill_between(s, lo, hi, color="C1", alpha=0.2, label="10–90% of token types")
    if len(vt) == len(s):
        ax[0, 1].plot(s, vt, color="C3", label="trigger tokens")
    ax[0, 1].axhline(0, color="k", lw=0.5)
    ax[0, 1].set_ylabel("Δlogit = s_i0 − mean_j s_ij")
    ax[0, 1].legend(fontsize=7)
    s, v = _series(metrics, "value_norm_bos", layer)
    _, vo = _series(metrics, "value_norm_others", layer)
    ax[0, 2].plot(s, v, color="C2", label="‖W_O v⟨s⟩‖")
    ax[0, 2].plot(s, vo, color="C2", ls="--", label="mean of other positions")
    ax[0, 2].set_ylabel("value-state norm")
    ax[0, 2].legend(fontsize=7)
    s, v = _series(metrics, "resid_norm_bos", layer)
    _, vo = _series(metrics, "resid_norm_others", layer)
    ax[1, 0].plot(s, v, color="C4", label=f"‖Res⟨s⟩‖ after block {layer}")
    ax[1, 0].plot(s, vo, color="C4", ls="--", label="mean of other positions")
    ax[1, 0].set_ylabel("residual norm")
    ax[1, 0].legend(fontsize=7)
    for key, c in (("excess_risk_backcopy", "C5"), ("excess_risk_bigram", "C6")):
        s, v = _series(metrics, key)
        ax[1, 1].plot(s, np.maximum(v, 1e-6), color=c, label=key.replace("_", " "))
    ax[1, 1].set_yscale("log")
    ax[1, 1].set_ylabel("excess risk (nats)")
    ax[1, 1].legend(fontsize=7)
    for key, c in (("loss_backcopy", "C5"), ("loss_bigram", "C6"), ("loss", "k")):
        s, v = _series(metrics, key)
        ax[1, 2].plot(s, v, color=c, label=key.replace("_", " "))
    ax[1, 2].set_ylabel("cross-entropy (nats)")
    ax[1, 2].legend(fontsize=7)
    for a in ax.flat:
        _step_axis(a, lin_until)
    if title:
        fig.suptitle(title)
    return save_figure(fig, path)


def attention_map(
    pattern: np.ndarray,
    tokens: Sequence[int],
    names: Sequence[str],
    triggers: Sequence[int],
    path: Path,
    title: str = "",
) -> Path:
    """Heatmap [query, key] of one sequence on the attention scale (`reports.attention`); trigger tokens are
    marked in red on both axes."""
    T = pattern.shape[0]
    fig, ax = new_figure(1, 1, width=6.0, height=5.4)
    a = ax[0, 0]
    scale = ATTENTION_SCALE  # the one scale of every attention drawing; the causal triangle masked (grey)
    im = a.imshow(masked_pattern(pattern), cmap=scale.cmap(), vmin=scale.zmin, vmax=scale.zmax)
    labels = [token_label(names[t]) for t in tokens[:T]]
    a.set_xticks(range(T), labels, fontsize=7, family="monospace")
    a.set_yticks(range(T), labels, fontsize=7, family="monospace")
    for ticks in (a.get_xticklabels(), a.get_yticklabels()):
        for tick, tok in zip(ticks, tokens[:T]):
            if tok in triggers:
                tick.set_color("red")
                tick.set_fontweight("bold")
    a.set_xlabel("key")
    a.set_ylabel("query (triggers in red)")
    fig.colorbar(im, ax=a, fraction=0.046)
    a.set_title(title or "attention pattern")
    return save_figure(fig, path)


def value_norm_bars(norms: Sequence[float], labels: Sequence[str], path: Path, title: str = "") -> Path:
    """Bars of ‖W_O v_i‖ for the first positions (the value-state drain at <s>)."""
    fig, ax = new_figure(1, 1, width=5.0, height=3.2)
    a = ax[0, 0]
    a.bar(range(len(norms)), norms, color=["C3"] + ["C0"] * (len(norms) - 1))
    a.set_xticks(range(len(norms)), labels, family="monospace")
    a.set_ylabel("‖W_O v_i‖")
    a.set_title(title or "value-state norms of the first positions")
    return save_figure(fig, path)


def compare_runs(
    runs: dict[str, list[dict]], path: Path, keys: Sequence[str], lin_until: int = 500, layer: int = 0, title: str = ""
) -> Path:
    """One panel per metric key, one line per run (e.g. softmax vs ReLU, Adam vs SGD)."""
    fig, ax = new_figure(len(keys), 1, width=4.2, height=3.2)
    for i, key in enumerate(keys):
        a = ax[0, i]
        for j, (label, metrics) in enumerate(runs.items()):
            s, v = _series(metrics, key, layer)
            a.plot(s, v, color=f"C{j}", label=label)
        a.set_ylabel(key.replace("_", " "))
        if key.startswith("excess_risk"):
            a.set_yscale("log")
        _step_axis(a, lin_until)
        a.legend(fontsize=7)
    if title:
        fig.suptitle(title)
    return save_figure(fig, path)


# --- the theory run (spec §9.4 plots and §9.5 m(t) under Adam vs SGD) ------------------------------------
def _log_indices(n: int, count: int = 400) -> np.ndarray:
    """About `count` distinct log-spaced indices in [1, n − 1] (for drawing long step series on a log axis)."""
    return np.unique(np.geomspace(1, n - 1, count).astype(int))


def plot_alpha(traj: Trajectory, single: Trajectory | None, path: Path) -> Path:
    """α_v against log t (log-x axis) with a ½ log t guide through the last point of the mean α; optional
    single-n control (dashed) that stalls at a finite value."""
    fig, axes = new_figure(1, 1, width=6.0, height=4.2)
    ax = axes[0, 0]
    sel = traj.t > 0
    t = traj.t[sel]
    for v in range(traj.alpha.shape[1]):
        ax.plot(t, traj.alpha[sel, v], label=f"α_{v + 1} (n ∈ 1..10)")
    anchor = float(traj.alpha[-1].mean())
    guide = anchor + 0.5 * (np.log(t) - np.log(t[-1]))
    late = t >= 1e2
    ax.plot(t[late], guide[late], "k:", lw=1.5, label="½ log t guide")
    if single is not None:
        s_sel = single.t > 0
        ax.plot(single.t[s_sel], single.alpha[s_sel, 0], "--", color="grey", label="single n = 5 (converges)")
    ax.set_xscale("log")
    ax.set_xlabel("t (gradient-flow time)")
    ax.set_ylabel("sink logit α_v")
    ax.set_title("Sink logits grow like ½ log t (§9.3)")
    ax.legend(fontsize=8)
    return save_figure(fig, path)


def plot_beta_loss(traj: Trajectory, path: Path) -> Path:
    """‖β − mean β‖ and ℓ on log-log axes, with t^{−1/2} and t^{−1} guides anchored at the last point."""
    fig, axes = new_figure(2, 1, width=4.8, height=3.8)
    sel = traj.t > 0
    t = traj.t[sel]
    late = t >= 1e3
    for ax, y, slope, name in [
        (axes[0, 0], traj.beta_spread[sel], -0.5, "‖β − mean β‖"),
        (axes[0, 1], traj.loss[sel], -1.0, "ℓ(α, β)"),
    ]:
        ax.loglog(t, y, label=name)
        ax.loglog(t[late], y[-1] * (t[late] / t[-1]) ** slope, "k:", label=f"t^{slope:g} guide")
        ax.set_xlabel("t")
        ax.set_ylabel(name)
        ax.legend(fontsize=8)
    axes[0, 0].set_title("Value drain: β flattens")
    axes[0, 1].set_title("Loss decays like 1/t")
    return save_figure(fig, path)


def plot_residual(
    reduced: dict[str, np.ndarray],
    closed_form: np.ndarray,
    two_param: dict[str, dict],
    lrs: np.ndarray,
    path: Path,
    lr_reduced: float,
) -> Path:
    """m(t) under Adam vs SGD: left the reduced recursion at `lr_reduced` (with the SGD closed form), right the
    two-parameter model at each learning rate (m/m₀)."""
    fig, axes = new_figure(2, 1, width=5.0, height=3.9)
    ax = axes[0, 0]
    idx = _log_indices(reduced["adam"].size)
    ax.plot(idx, reduced["adam"][idx], label="Adam")
    ax.plot(idx, reduced["sgd"][idx], label="SGD")
    ax.plot(idx, closed_form[idx], "k:", label="SGD closed form")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("step t")
    ax.set_ylabel("residual norm m")
    ax.set_title(f"Reduced recursion g = −log t/(m³t), lr {lr_reduced:g}")
    ax.legend(fontsize=8)
    ax = axes[0, 1]
    colors = ["C0", "C1", "C2", "C3", "C4", "C5"]
    for j, lr in enumerate(lrs):
        col = colors[j % len(colors)]
        for opt, style in (("adam", "-"), ("sgd", "--")):
            m = two_param[opt]["m"][:, j]
            idx = _log_indices(m.size)
            ax.plot(idx, m[idx] / m[0], style, color=col, label=f"{opt} lr {lr:g}")
    ax.set_xscale("log")
    ax.set_xlabel("step")
    ax.set_ylabel("m / m₀")
    ax.set_title("Two-parameter model L = exp(−y·a(m))")
    ax.legend(fontsize=7, ncol=2)
    return save_figure(fig, path)


def trajectories(arrays: dict[str, np.ndarray]) -> tuple[Trajectory, Trajectory]:
    """The mixed-n flow and the single-n control, rebuilt from the theory run's arrays.npz."""
    return (
        Trajectory(t=arrays["flow_t"], alpha=arrays["flow_alpha"], beta=arrays["flow_beta"], loss=arrays["flow_loss"]),
        Trajectory(
            t=arrays["single_t"], alpha=arrays["single_alpha"], beta=arrays["single_beta"], loss=arrays["single_loss"]
        ),
    )


def draw_theory(
    arrays: dict[str, np.ndarray], figure_path: Callable[[str], Path], lr_reduced: float
) -> dict[str, Path]:
    """The three theory figures from the saved arrays; `figure_path(name)` gives each PNG's path; `lr_reduced`: the
    reduced recursion's learning rate (setup.json)."""
    traj, single = trajectories(arrays)
    reduced = {o: arrays[f"reduced_m_{o}"] for o in ("adam", "sgd")}
    two = {o: {k: arrays[f"two_param_{k}_{o}"] for k in ("y", "m", "loss")} for o in ("adam", "sgd")}
    return {
        "theory_alpha": plot_alpha(traj, single, figure_path("theory_alpha")),
        "theory_beta_loss": plot_beta_loss(traj, figure_path("theory_beta_loss")),
        "theory_residual_adam_sgd": plot_residual(
            reduced,
            arrays["reduced_m_closed_form"],
            two,
            arrays["two_param_lrs"],
            figure_path("theory_residual_adam_sgd"),
            lr_reduced,
        ),
    }


def subspace_figure(measure: dict, path: Path) -> Path:
    """R19: cumulative energy of the attention and MLP outputs' singular values (k at `energy` marked) and the
    principal angles between the two subspaces (90° = orthogonal)."""
    fig, axes = new_figure(2)
    ax = axes[0, 0]
    for name, color in (("attn", "C0"), ("mlp", "C1")):
        s2 = np.asarray(measure[f"singular_values_{name}"], dtype=float) ** 2
        cum = np.cumsum(s2) / max(s2.sum(), 1e-300)
        ax.plot(np.arange(1, len(cum) + 1), cum, color=color, label=f"{name} (k = {measure[f'k_{name}']})")
        ax.axvline(measure[f"k_{name}"], color=color, ls=":", lw=0.8)
    ax.axhline(measure["energy"], color="grey", ls="--", lw=0.8)
    ax.set(xlabel="singular direction", ylabel="cumulative energy", xscale="log", title="output spectra")
    ax.legend(fontsize=8)
    ax = axes[0, 1]
    angles = measure["angles_deg"]
    ax.plot(np.arange(1, len(angles) + 1), angles, "o-", ms=3)
    ax.axhline(90, color="grey", ls="--", lw=0.8)
    ax.set(
        xlabel="principal angle index",
        ylabel="angle (degrees)",
        ylim=(0, 95),
        title=f"attention energy in MLP subspace {measure['energy_attn_in_mlp']:.3f}",
    )
    return save_figure(fig, path)


def variant_figure(rows: list[dict], path: Path, threshold: float = 1.5) -> Path:
    """R20: the residual peak ratio ρ_l = ‖Res⟨s⟩‖_l / others after each block l, one group of bars per layout."""
    fig, axes = new_figure(width=7.0, height=3.4)
    ax = axes[0, 0]
    width = 0.8 / max(len(r["peak_ratio_by_layer"]) for r in rows)
    labelled: set[int] = set()
    for i, row in enumerate(rows):
        for l, ratio in enumerate(row["peak_ratio_by_layer"]):
            label = None if l in labelled else f"after block {l}"
            labelled.add(l)
            ax.bar(i + (l - 1) * width, ratio, width, color=f"C{l}", label=label)
    ax.axhline(threshold, color="grey", ls="--", lw=0.8)
    ax.axhline(1.0, color="black", lw=0.5)
    ax.set_xticks(range(len(rows)), [r["variant"] for r in rows], rotation=20, ha="right", fontsize=8)
    ax.set(ylabel="‖Res⟨s⟩‖ / others", title=f"residual peak by layout (step {rows[0]['step']})")
    ax.legend(fontsize=8)
    return save_figure(fig, path)


# --- entries that read a run folder (called by report.py) ---------------------------------------------------------
def attention_layer(cfg: dict) -> int | None:
    """The first layer of a `bb train` config (config.json as a dict) that has attention (None: none has)."""
    return next((l for l in range(cfg["n_layers"]) if l not in cfg["no_attn"]), None)


def train_figures(run: RunDir, cfg: dict) -> dict[str, Path]:
    """Dynamics per layer, the attention map of evaluation sequence 0 and the value-norm bars (final model), from
    metrics.jsonl and final/{attention_map,value_norms}.npy, final/final.json."""
    metrics = run.metrics(STEPPED)
    label = f"{cfg['n_layers']}-layer {cfg['attention']}, {cfg['optimizer']} lr {cfg['lr']:g}"
    figs = {}
    for l in range(cfg["n_layers"]):
        name = "dynamics" if l == 0 else f"dynamics_layer{l}"
        figs[name] = dynamics(metrics, run.figure_path(name), cfg["lin_until"], l, title=f"{label}: layer {l}")
    layer = attention_layer(cfg)
    if not (run.path / "final" / "attention_map.npy").exists() or layer is None:
        return figs
    final = run.read_json("final/final.json")
    pattern = np.load(run.path / "final" / "attention_map.npy")
    figs["attention_map"] = attention_map(
        pattern,
        final["tokens"][: pattern.shape[0]],
        final["token_names"],
        final["triggers"],
        run.figure_path("attention_map"),
        title=f"layer {layer} head 0, step {final['step']}",
    )
    norms = np.load(run.path / "final" / "value_norms.npy")[layer, 0, :10]
    figs["value_norms"] = value_norm_bars(
        norms.tolist(),
        ["<s>"] + [f"x{i}" for i in range(1, 10)],
        run.figure_path("value_norms"),
        title=f"‖W_O v_i‖, first positions (step {final['step']})",
    )
    return figs


def train_views(run: RunDir, cfg: dict) -> dict[str, dict]:
    """The interactive figures of a `bb train` run: "curves" (every metric of metrics.jsonl) and "snapshots" (the
    slider over snapshots/, for the first attention layer), each present when the run saved what it needs."""
    views = {}
    rows = metrics_table(run.metrics(STEPPED))
    if rows:
        views["curves"] = curves_figure(rows, cfg["lin_until"])
    layer = attention_layer(cfg)
    if layer is None or not (run.path / "final" / "final.json").exists():
        return views
    final = run.read_json("final/final.json")
    fig = snapshots_figure(read_snapshots(run), [final["token_names"][t] for t in final["tokens"]], layer)
    if fig is not None:
        views["snapshots"] = fig
    return views


def theory_figures(run: RunDir) -> dict[str, Path]:
    """The three figures of a `bb theory` run from its arrays.npz (and the learning rate in setup.json)."""
    lr = run.read_json("setup.json")["residual"]["lr"]
    with np.load(run.path / "arrays.npz", allow_pickle=False) as saved:
        return draw_theory(dict(saved), run.figure_path, lr)


def subspace_figures(run: RunDir) -> dict[str, Path]:
    """The spectra and principal angles of a `bb subspace` run from its subspace.json."""
    return {"subspace": subspace_figure(run.read_json("subspace.json"), run.figure_path("subspace"))}


def compare_figures(run: RunDir) -> dict[str, Path]:
    """One figure per group of figures.json of a `bb compare` run, from the series it saved in compared.json
    ({"lin_until", "groups": {name: metric keys}, "runs": {label: [{step, key: value of the compared layer}]}})."""
    saved = run.read_json("compared.json")
    return {
        f"compare_{name}": compare_runs(saved["runs"], run.figure_path(f"compare_{name}"), keys, saved["lin_until"])
        for name, keys in saved["groups"].items()
    }


# --- interactive figures (plotly dicts) -----------------------------------------------------------------------------
def curves_figure(rows: list[dict], lin_until: int) -> dict:
    """Every metric of metrics.jsonl against the step (one column of the metrics table per trace); a menu picks
    the metric, another switches the step axis between linear and log. Drag to zoom, double-click to reset."""
    names = [k for k in rows[0] if k != "step"] if rows else []
    steps = [r["step"] for r in rows]
    data = [
        {
            "type": "scatter",
            "mode": "lines+markers",
            "name": n,
            "x": steps,
            "y": rounded([np.nan if r.get(n) is None else r[n] for r in rows]),
            "visible": i == 0,
        }
        for i, n in enumerate(names)
    ]
    pick = [
        {
            "label": n,
            "method": "update",
            "args": [{"visible": [j == i for j in range(len(names))]}, {"title.text": n, "yaxis.title.text": n}],
        }
        for i, n in enumerate(names)
    ]
    axis = [{"label": t, "method": "relayout", "args": [{"xaxis.type": t}]} for t in ("linear", "log")]
    return {
        "data": data,
        "layout": {
            "title": {"text": names[0] if names else ""},
            "xaxis": {"title": {"text": f"step (snapshots every few steps up to {lin_until}, then log-spaced)"}},
            "yaxis": {"title": {"text": names[0] if names else ""}, "automargin": True},
            "updatemenus": [
                {"buttons": pick, "x": 0, "y": 1.18, "xanchor": "left", "direction": "down"},
                {"buttons": axis, "x": 0.45, "y": 1.18, "xanchor": "left", "type": "buttons", "direction": "right"},
            ],
            "margin": {"t": 90},
            "hovermode": "x unified",
        },
    }


def read_snapshots(run: RunDir) -> list[tuple[int, dict[str, np.ndarray]]]:
    """snapshots/step_<s>.safetensors in step order: (step, {name: array}) (see bb.experiment.Evaluator)."""
    from safetensors.numpy import load_file

    files = sorted(run.path.glob("snapshots/step_*.safetensors"), key=lambda f: int(f.stem.split("_")[1]))
    return [(int(f.stem.split("_")[1]), load_file(str(f))) for f in files]


def _snapshot_layout() -> dict:
    """The snapshot figure's layout: the heat map left, the two bar charts stacked right."""
    return {
        "height": 560,
        # the colour bar sits in the gap after the heat map; the bars' y titles start past it (no overlap)
        "xaxis": {
            "domain": [0, 0.42],
            "type": "category",
            "tickfont": {"family": "monospace", "size": 9},
            "title": {"text": "key (position, token)"},
        },
        "yaxis": {
            "autorange": "reversed",
            "type": "category",
            "tickfont": {"family": "monospace", "size": 9},
            "title": {"text": "query"},
        },
        "xaxis2": {"domain": [0.62, 1], "anchor": "y2", "type": "category", "showticklabels": False},
        "yaxis2": {"domain": [0.56, 1], "anchor": "x2", "title": {"text": "‖W_O v_i‖"}},
        "xaxis3": {
            "domain": [0.62, 1],
            "anchor": "y3",
            "type": "category",
            "tickfont": {"size": 9},
            "title": {"text": "position, token"},
        },
        "yaxis3": {"domain": [0, 0.44], "anchor": "x3", "title": {"text": "‖x_i‖"}},
        "showlegend": False,
        "margin": {"t": 30},
    }


def _snapshot_traces(a: dict[str, np.ndarray], pos: list[str], layer: int) -> list[dict]:
    """The masked cells (grey, under the pattern), the heat map and the two bar charts of one snapshot (see
    `snapshots_figure`)."""
    n = len(pos)
    hover = "query %{y}<br>key %{x}<br>weight %{z:.4f}<extra></extra>"
    z = masked_pattern(a["attn_block16"][0])
    grey = [[0, ATTENTION_SCALE.masked], [1, ATTENTION_SCALE.masked]]  # under the pattern: its masked cells
    return [
        {"type": "heatmap", "z": rounded(np.where(np.isnan(z), 1.0, np.nan)), "x": pos, "y": pos,
         "colorscale": grey, "showscale": False, "hoverinfo": "skip"},
        {"type": "heatmap", "z": rounded(z), "x": pos, "y": pos, **ATTENTION_SCALE.plotly(), "hovertemplate": hover,
         "hoverongaps": False,
         "colorbar": {"x": 0.43, "xanchor": "left", "len": 1, "thickness": 12, "title": {"text": "weight"}}},
        {"type": "bar", "x": pos, "y": rounded(a["value_norm"][layer, 0, :n]), "xaxis": "x2", "yaxis": "y2",
         "name": "‖W_O v_i‖", "marker": {"color": ["#d62728"] + ["#1f77b4"] * (n - 1)}},
        {"type": "bar", "x": pos, "y": rounded(a["resid_norm"][layer + 1, :n]), "xaxis": "x3", "yaxis": "y3",
         "name": f"‖x_i‖ after block {layer}", "marker": {"color": "#9467bd"}},
    ]  # fmt: skip


def snapshots_figure(snaps: list[tuple[int, dict[str, np.ndarray]]], labels: list[str], layer: int) -> dict | None:
    """A slider over the saved snapshots: head 0's attention on the first 16 tokens of evaluation sequence 0
    (attn_block16 [H,16,16]), ‖W_O v_i‖ per position (value_norm [L,H,T]) and ‖x_i‖ after block `layer`
    (resid_norm [L+1,T]) for the same positions."""
    snaps = [(s, a) for s, a in snaps if "attn_block16" in a]
    if not snaps:
        return None
    n = snaps[0][1]["attn_block16"].shape[-1]
    pos = [f"{i} {token_label(t)}" for i, t in enumerate(labels[:n])]
    fig = {"data": _snapshot_traces(snaps[-1][1], pos, layer), "layout": _snapshot_layout()}
    frames = [_snapshot_traces(a, pos, layer) for _, a in snaps]
    return with_slider(fig, frames, [str(s) for s, _ in snaps], "step ", play=True)
