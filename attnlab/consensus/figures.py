"""Figures of the consensus study (spec section 10), drawn from a run folder's arrays via attnlab.reports.plotting.

Run-folder entry points (read `config.json`, the arrays and `metrics.json`; write `figures/*.png`):
`simulate_figures`, `phase_figures`, `model_figures`, `norm_figures` (`R13.png`), and `figure_R12` for the two runs
of `repro.verdicts.run_R12`. The plot functions below them:

- `plot_E_curves`: E against time or depth on a log-y scale, median line and bootstrap band per group;
  optional log-log panel and pass boundaries;
- `plot_phase`: clustered fraction over (t, beta) with the equiangular curve t_eq(beta) and t50 overlaid;
- `plot_sphere`: tokens and trajectories on S^2 (d = 3);
- `plot_depth_view`: KL to the one-pass output, context influence and entropy against depth;
- `plot_decode_share`: R14, the share of positions decoding to the most common top-1 token against passes;
- `plot_norm`: R13, the per-layer error of the sphere idealisation and E_first with the real and idealised norms.

The interactive views of the reports (plotly JSON, built from the same saved arrays): `sphere_figure` (tokens of
one start over t) and `phase_figure` (the clustered fraction over (t, beta)).
"""

from __future__ import annotations

import textwrap
from pathlib import Path

import numpy as np

from attnlab.consensus.config import ModelConfig, PhaseConfig, SimulateConfig
from attnlab.consensus.stats import log_band
from attnlab.reports.page import rounded, with_slider
from attnlab.reports.plotting import new_figure, save_figure
from attnlab.runs import RunDir
from attnlab.runs.configs import config_from_dict

MAX_COLUMNS = 400  # time columns kept in the interactive phase diagram (every k-th), to keep pages small


def simulate_title(cfg: SimulateConfig) -> str:
    """One-line description of a simulation (figure title and report lead)."""
    return (
        f"{cfg.kind}, {cfg.mask} mask, {cfg.schedule} P ({cfg.key_query}, scale {cfg.scale:g}), V={cfg.value}, "
        f"beta={cfg.beta:g}, n={cfg.n}, d={cfg.d}, {cfg.batch} starts, {cfg.integrator} h={cfg.h:g}"
    )


def phase_title(cfg: PhaseConfig) -> str:
    """One-line description of a phase diagram."""
    return f"Q=K=V=I, {cfg.kind}, n={cfg.n}, d={cfg.d}, {cfg.starts} starts, {cfg.integrator} h={cfg.h:g}" + (
        ", float32" if cfg.float32 else ""
    )


def model_title(cfg: ModelConfig, name: str) -> str:
    """One-line description of an iterated-model run (`name`: the loaded model's name)."""
    return f"{name}: {cfg.prompts} prompts x {', '.join(cfg.domains)}, T={cfg.seq_len}, {cfg.passes} passes"


def floats(values: list) -> np.ndarray:
    """JSON numbers back to float64 (`None` was NaN, "inf" was infinity)."""
    return np.array([np.nan if v is None else float(v) for v in values], dtype=np.float64)


def simulate_figures(path: Path) -> dict[str, Path]:
    """`E_vs_time.png` from `t.npy`, `E.npy`, `E_pair.npy` (`[batch, steps+1]`), and for d = 3 `sphere_t0.png`
    from `states.npy` `[batch, records, n, 3]`."""
    run = RunDir(path)
    cfg = config_from_dict(SimulateConfig, run.read_config())
    t = np.load(run.file("t.npy"))
    curves = {"E_first": np.load(run.file("E.npy")), "E_pair": np.load(run.file("E_pair.npy"))}
    out = {"E_vs_time": plot_E_curves(run.figure_path("E_vs_time"), t, curves, ylabel="E", title=simulate_title(cfg))}
    if cfg.d == 3:
        states = np.load(run.file("states.npy"))
        out["sphere_t0"] = plot_sphere(run.figure_path("sphere_t0"), states[0], title=f"start 0, t in [0, {t[-1]:g}]")
    return out


def phase_figures(path: Path) -> dict[str, Path]:
    """`phase_diagram.png` from `frac.npy` `[beta, steps+1]`, `betas.npy`, `t.npy` and t50 / t_eq of `metrics.json`."""
    run = RunDir(path)
    cfg = config_from_dict(PhaseConfig, run.read_config())
    metrics = run.read_json("metrics.json")
    fig = plot_phase(
        run.figure_path("phase_diagram"),
        np.load(run.file("betas.npy")),
        np.load(run.file("t.npy")),
        np.load(run.file("frac.npy")),
        floats(metrics["t_eq"]),
        floats(metrics["t50"]),
        phase_title(cfg),
    )
    return {"phase_diagram": fig}


def model_figures(path: Path) -> dict[str, Path]:
    """`E_vs_depth.png` from `curves.npz` (`"<group>|E_first"`: `[prompt, passes*L+1]`) and `depth_view.png` from
    `depth.npz` (`grid` and `"<group>|<series>"`: `[prompt, grid]`)."""
    run = RunDir(path)
    cfg = config_from_dict(ModelConfig, run.read_config())
    info, metrics = run.read_json("model.json"), run.read_json("metrics.json")
    L = int(info["n_layers"])
    with np.load(run.file("curves.npz")) as z:
        curves = {key.split("|")[0]: z[key] for key in z.files if key.endswith("|E_first")}
    steps = np.arange(cfg.passes * L + 1)
    marks = np.arange(L, cfg.passes * L + 1, L) / L
    out = {
        "E_vs_depth": plot_E_curves(
            run.figure_path("E_vs_depth"),
            steps / L,
            curves,
            ylabel="E_first (final-normed)",
            xlabel=f"depth (passes of {L} layers)",
            title=model_title(cfg, info["name"]),
            loglog=True,
            marks=marks if cfg.passes <= 30 else None,
            floor=1e-9,
        )
    }
    if cfg.depth_view:
        key, grid, series = depth_series(run)
        k_star = metrics["groups"][key].get("context_influence", {}).get("k_star_passes")
        out["depth_view"] = plot_depth_view(run.figure_path("depth_view"), grid / L, series, k_star, key, L)
    if run.file("decode.json").exists():
        groups = run.read_json("decode.json")["groups"]
        out["decode_share"] = plot_decode_share(run.figure_path("decode_share"), groups, model_title(cfg, info["name"]))
    return out


def depth_series(run: RunDir) -> tuple[str, np.ndarray, dict[str, np.ndarray]]:
    """The group shown in the depth view (the first with controls, C(k), else the first), its grid and series."""
    with np.load(run.file("depth.npz")) as z:
        groups: dict[str, dict[str, np.ndarray]] = {}
        for name in z.files:
            if "|" in name:
                group, series = name.split("|", 1)
                groups.setdefault(group, {})[series] = z[name]
        grid = z["grid"]
    key = next((g for g in groups if "C(k)" in groups[g]), next(iter(groups)))
    return key, grid, groups[key]


def plot_E_curves(
    path: Path,
    t: np.ndarray,
    curves: dict[str, np.ndarray],
    ylabel: str = "E_first",
    xlabel: str = "t",
    title: str = "",
    loglog: bool = False,
    marks: np.ndarray | None = None,
    floor: float = 1e-17,
) -> Path:
    """Median of E `[batch, time]` per group with the 95% bootstrap band of the mean of log10 E."""
    fig, axes = new_figure(2 if loglog else 1, 1, width=5.2)
    for ax_i, ax in enumerate(axes[0]):
        for label, E in curves.items():
            E = np.maximum(np.asarray(E, dtype=np.float64), floor)
            band = log_band(E, resamples=500)
            x = np.asarray(t, dtype=np.float64)
            line = ax.plot(x, band["median"], label=label, lw=1.4)[0]
            ax.fill_between(x, 10 ** band["lo_log10"], 10 ** band["hi_log10"], color=line.get_color(), alpha=0.25, lw=0)
        ax.set_yscale("log")
        if ax_i == 1:
            ax.set_xscale("log")
        if marks is not None and ax_i == 0:
            for m in marks:
                ax.axvline(m, color="0.85", lw=0.6, zorder=0)
        ax.set_xlabel(xlabel + (" (log)" if ax_i == 1 else ""))
        ax.set_ylabel(ylabel)
        ax.grid(alpha=0.3, which="both", lw=0.4)
    axes[0][0].legend(fontsize=7)
    axes[0][0].set_title(textwrap.fill(title, 70), fontsize=8)
    return save_figure(fig, path)


def plot_phase(
    path: Path, betas: np.ndarray, t: np.ndarray, frac: np.ndarray, t_eq: np.ndarray, t50: np.ndarray, title: str = ""
) -> Path:
    """Heatmap of the mean clustered fraction `[beta, time]` with t_eq(beta) (rho-ODE) and t50 overlaid."""
    fig, axes = new_figure(1, 1, width=6.0, height=4.2)
    ax = axes[0][0]
    im = ax.imshow(
        frac, origin="lower", aspect="auto", cmap="viridis", vmin=0, vmax=1, extent=[t[0], t[-1], betas[0], betas[-1]]
    )
    fig.colorbar(im, ax=ax, label="clustered fraction (cos >= 0.999)")
    ax.plot(np.minimum(t_eq, t[-1] * 2), betas, "w--", lw=1.5, label="t_eq(beta): rho-ODE reaches 0.999")
    ax.plot(t50, betas, "r.", ms=3, label="t50: fraction reaches 0.5")
    ax.set_xlim(t[0], t[-1])
    ax.set_xlabel("t")
    ax.set_ylabel("beta")
    ax.legend(fontsize=7, loc="upper right")
    ax.set_title(title, fontsize=9)
    return save_figure(fig, path)


def plot_sphere(path: Path, states: np.ndarray, title: str = "") -> Path:
    """Trajectories `[records, token, 3]` of one start on S^2: start (open), end (filled), paths (lines)."""
    fig, axes = new_figure(1, 1, width=4.8, height=4.6, subplot_kw={"projection": "3d"})
    ax = axes[0][0]
    u, v = np.mgrid[0 : 2 * np.pi : 40j, 0 : np.pi : 20j]
    ax.plot_wireframe(np.cos(u) * np.sin(v), np.sin(u) * np.sin(v), np.cos(v), color="0.85", lw=0.3)
    for i in range(states.shape[1]):
        p = states[:, i]
        ax.plot(p[:, 0], p[:, 1], p[:, 2], lw=0.8)
    ax.scatter(*states[0].T, s=12, facecolors="none", edgecolors="k", label="t = 0")
    ax.scatter(*states[-1].T, s=20, c="r", label="end")
    ax.set_box_aspect((1, 1, 1))
    ax.legend(fontsize=7)
    ax.set_title(title, fontsize=9)
    return save_figure(fig, path)


def plot_depth_view(
    path: Path,
    depth: np.ndarray,
    series: dict[str, np.ndarray],
    k_star: float | None = None,
    title: str = "",
    layers: int = 30,
) -> Path:
    """Panels of depth-view series (`[prompt, depth]` each, mean and min..max shown) against passes (layer steps /
    `layers`, the model's depth)."""
    fig, axes = new_figure(len(series), 1, width=3.8)
    for ax, (name, Y) in zip(axes[0], series.items()):
        Y = np.asarray(Y, dtype=np.float64)
        ax.plot(depth, Y.mean(0), lw=1.4)
        ax.fill_between(depth, Y.min(0), Y.max(0), alpha=0.25, lw=0)
        if name.startswith("KL") or name.startswith("C("):
            ax.set_yscale("symlog", linthresh=1e-6)
        ax.set_xscale("symlog", linthresh=1.0)
        if k_star is not None:
            ax.axvline(k_star, color="r", ls="--", lw=0.8)
        ax.set_xlabel(f"depth (passes of {layers} layers)")
        ax.set_title(name, fontsize=9)
        ax.grid(alpha=0.3, lw=0.4)
    axes[0][0].set_ylabel(title, fontsize=8)
    return save_figure(fig, path)


def plot_decode_share(path: Path, groups: dict[str, dict], title: str = "") -> Path:
    """R14: per group, the mean over prompts of the share of positions whose top-1 token is the prompt's most
    common one against passes (band: down to the smallest prompt's share; dashed: positions >= 1), and the mean
    number of distinct top-1 tokens (right)."""
    fig, axes = new_figure(2, 1, width=4.2)
    left, right = axes[0]
    for label, g in groups.items():
        x = np.asarray(g["passes"], dtype=np.float64)
        line = left.plot(x, g["share_mean"], lw=1.4, marker=".", label=label)[0]
        left.fill_between(x, g["share_min"], g["share_mean"], color=line.get_color(), alpha=0.2, lw=0)
        left.plot(x, g["share_no_sink_mean"], lw=0.9, ls="--", color=line.get_color())
        right.plot(x, g["distinct_mean"], lw=1.4, marker=".", color=line.get_color(), label=label)
    left.axhline(0.9, color="0.5", lw=0.8, ls=":")
    left.set_ylim(0, 1.02)
    left.set_ylabel("share of positions with the most common top-1")
    right.set_ylabel("distinct top-1 tokens per prompt")
    for ax in (left, right):
        ax.set_xlabel("passes (0: embeddings)")
        ax.grid(alpha=0.3, lw=0.4)
    left.legend(fontsize=7)
    left.set_title(textwrap.fill("R14: " + title, 60), fontsize=8)
    return save_figure(fig, path)


def norm_figures(path: Path) -> dict[str, Path]:
    """`R13.png` (in the run folder itself, where the reproduction table finds it) from `metrics.json` (per-layer
    errors, `n_layers`) and `curves.npz` (`real`, `ideal`: E_first `[prompt, passes*L+1]`)."""
    run = RunDir(path)
    metrics = run.read_json("metrics.json")
    with np.load(run.file("curves.npz")) as z:
        curves = {name: z[name] for name in z.files}
    return {"R13": plot_norm(run.file("R13.png"), metrics, curves, int(metrics["n_layers"]))}


def plot_norm(path: Path, metrics: dict, curves: dict[str, np.ndarray], L: int) -> Path:
    """R13: per-layer relative error (fitted sphere, plain mean gain) | mean log10 E_first per layer step."""
    fig, ax = new_figure(2, width=5.0)
    a = ax[0, 0]
    layers = np.arange(len(metrics["rel_error_mean"]))
    a.plot(layers, metrics["rel_error_mean"], "o-", label="translated, scaled sphere (fitted)")
    a.plot(layers, metrics["rel_error_p90"], ":", color="C0", label="same, 90th percentile")
    a.plot(layers, metrics["rel_error_gain_mean"], "s-", color="C1", label="sphere x mean gain")
    a.set_xlabel("layer")
    a.set_ylabel("relative error |y - y_hat| / |y|")
    a.set_yscale("log")
    a.legend(fontsize=7)
    a.set_title("R13: RMSNorm vs sphere projection")
    b = ax[0, 1]
    for name, E in curves.items():
        steps = np.arange(E.shape[1]) / L
        b.plot(steps, np.log10(np.maximum(E, 1e-17)).mean(0), label=f"{name} norm")
    b.set_xlabel("passes")
    b.set_ylabel("mean log10 E_first")
    b.legend()
    b.set_title("periodic iteration, real vs idealised norm")
    return save_figure(fig, path)


def figure_R12(out: str | Path, values: tuple[str, ...] = ("identity", "rotation")) -> Path:
    """`out/R12.png`: E_first against t (median and 10-90% band over starts) of the `consensus simulate` runs
    `out/<value>` (`t.npy`, `E.npy` [batch, steps+1]), all with P = 0 (V = I and V = J)."""
    out = Path(out)
    fig, ax = new_figure(width=5.5)
    a = ax[0, 0]
    for value, colour in zip(values, ("C0", "C3")):
        t, E = np.load(out / value / "t.npy"), np.load(out / value / "E.npy")
        E = np.maximum(E, 1e-17)
        a.plot(t, np.median(E, 0), color=colour, label=f"Q = K = 0, V = {'I' if value == 'identity' else 'J'}")
        a.fill_between(t, np.quantile(E, 0.1, 0), np.quantile(E, 0.9, 0), color=colour, alpha=0.2)
    a.set_yscale("log")
    a.set_xlabel("t")
    a.set_ylabel("E_first (median, 10-90%)")
    a.set_title("R12: uniform attention, identity vs rotating V")
    a.legend()
    return save_figure(fig, out / "R12.png")


# --- interactive views (plotly JSON) of the reports ---------------------------------------------------------
def project(states: np.ndarray) -> tuple[np.ndarray, str]:
    """states [records, n, d] -> (coordinates [records, n, 3 or 2], axis note): d = 3 as is, otherwise the first
    two principal directions of all recorded points of the start (a projection of S^{d-1})."""
    if states.shape[-1] == 3:
        return states, ""
    flat = states.reshape(-1, states.shape[-1])
    _, _, vt = np.linalg.svd(flat - flat.mean(0), full_matrices=False)
    return states @ vt[:2].T, f"projection of S^{states.shape[-1] - 1} on its first two principal directions"


def sphere_figure(states: np.ndarray, t: np.ndarray) -> dict:
    """Tokens of one start over t (states [records, n, d], t [records]): their paths as thin lines and the tokens
    as points moved by a slider / play button; 3-D on the sphere for d = 3, a 2-D projection otherwise."""
    xyz, note = project(states)
    three = xyz.shape[-1] == 3
    kind = "scatter3d" if three else "scatter"
    keys = ("x", "y", "z") if three else ("x", "y")
    n = xyz.shape[1]
    gap = np.full((1, xyz.shape[-1]), np.nan)
    paths = np.concatenate([np.concatenate([xyz[:, i], gap]) for i in range(n)])
    line = {"type": kind, "mode": "lines", "line": {"width": 2, "color": "rgba(120,120,120,0.5)"}, "name": "paths"}
    line.update({k: rounded(paths[:, j]) for j, k in enumerate(keys)})

    def points(r: int) -> dict:
        pts = {k: rounded(xyz[r, :, j]) for j, k in enumerate(keys)}
        return {"type": kind, "mode": "markers", "marker": {"size": 5 if three else 9, "color": "#d62728"}, **pts,
                "text": [f"token {i}" for i in range(n)], "name": "tokens"}  # fmt: skip

    layout: dict = {"height": 600, "showlegend": False, "title": {"text": note or "tokens on S^2"}}
    if three:
        cube = {"range": [-1.05, 1.05], "autorange": False}
        layout["scene"] = {"xaxis": cube, "yaxis": cube, "zaxis": cube, "aspectmode": "cube"}
    else:
        layout["yaxis"] = {"scaleanchor": "x"}
    fig = {"data": [line, points(len(t) - 1)], "layout": layout}
    labels = [f"{x:.3g}" for x in t]
    return with_slider(fig, [[points(r)] for r in range(len(t))], labels, "t = ", play=True, traces=[1])


def phase_figure(frac: np.ndarray, betas: np.ndarray, t: np.ndarray, t_eq: np.ndarray, t50: np.ndarray) -> dict:
    """The clustered fraction over (t, beta) (frac [beta, time]) with t_eq(beta) and t50 overlaid; hover values."""
    every = max(1, int(np.ceil(len(t) / MAX_COLUMNS)))
    cols = np.arange(0, len(t), every)
    hover = "t %{x:.3g}, beta %{y:.3g}<br>clustered fraction %{z:.3f}<extra></extra>"
    return {
        "data": [
            {
                "type": "heatmap",
                "x": rounded(t[cols]),
                "y": rounded(betas),
                "z": rounded(frac[:, cols]),
                "zmin": 0,
                "zmax": 1,
                "colorscale": "Viridis",
                "hovertemplate": hover,
                "colorbar": {"title": {"text": "clustered"}},
            },
            {
                "type": "scatter",
                "mode": "lines",
                "x": rounded(t_eq),
                "y": rounded(betas),
                "name": "t_eq(beta)",
                "line": {"color": "white", "dash": "dash"},
            },
            {
                "type": "scatter",
                "mode": "markers",
                "x": rounded(t50),
                "y": rounded(betas),
                "name": "t50",
                "marker": {"color": "red", "size": 5},
            },
        ],  # fmt: skip
        "layout": {
            "xaxis": {"title": {"text": "t"}, "range": [float(t[0]), float(t[-1])]},
            "yaxis": {"title": {"text": "beta"}},
            "legend": {"x": 1.15},
        },
    }
