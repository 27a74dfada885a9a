"""Reports of the consensus commands, built from a run folder only (`config.json`, `metrics.json`, saved arrays and
`figures/`): nothing is recomputed and no model is loaded.

`simulate_report`, `phase_report` and `model_report` return the `Report` (the demo embeds it);
`write_report(path, command)` writes `report.html` into the folder.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from attnlab.configs import config_from_dict
from attnlab.consensus.config import PhaseConfig, SimulateConfig
from attnlab.consensus.figures import depth_series, floats, phase_title, simulate_title
from attnlab.report import Report, element_id, flat_rows, rounded, with_slider
from attnlab.runs import RunDir

MAX_COLUMNS = 400  # time columns kept in the interactive phase diagram (every k-th), to keep pages small


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


def simulate_report(path: Path) -> Report:
    """The simulation's title, E curves (and the sphere for d = 3) and its metrics table."""
    run = RunDir(path)
    cfg = config_from_dict(SimulateConfig, run.read_config())
    metrics = run.read_json("metrics.json")
    rep = Report("Consensus: simulation")
    rep.paragraph(simulate_title(cfg))
    rep.figure(
        run.figure_path("E_vs_time"),
        "E_first and E_pair against time: median over starts, band = 95% bootstrap CI of mean log10 E",
    )
    states = np.load(run.file("states.npy"), mmap_mode="r")[0]
    rep.plotly(
        sphere_figure(np.asarray(states, dtype=np.float64), np.load(run.file("t_states.npy"))),
        element_id(run.path, "sphere"),
        "Tokens of start 0 over t (slider or play; drag to rotate or zoom); grey lines: their trajectories",
    )
    rep.table(flat_rows(metrics), caption="Measures of the simulation (metrics.json; nested ones as a.b)")
    rep.paragraph(f"run folder: {run.path.name}")
    return rep


def phase_report(path: Path) -> Report:
    """The phase diagram and t50 against t_eq for every 10th beta."""
    run = RunDir(path)
    cfg = config_from_dict(PhaseConfig, run.read_config())
    metrics = run.read_json("metrics.json")
    betas = np.load(run.file("betas.npy"))
    t50, t_eq = floats(metrics["t50"]), floats(metrics["t_eq"])
    every = max(1, len(betas) // 10)
    rep = Report("Consensus: phase diagram")
    rep.paragraph(phase_title(cfg) + f"; {metrics['wall_seconds']:.1f} s.")
    rep.plotly(
        phase_figure(np.load(run.file("frac.npy")), betas, np.load(run.file("t.npy")), t_eq, t50),
        element_id(run.path, "phase"),
        "Mean clustered fraction over (t, beta) (hover for values); white dashes: equiangular t_eq(beta) "
        "(rho = 0.999); red dots: t50",
    )
    rep.table(
        [
            {"beta": float(b), "t50": float(a), "t_eq": float(c)}
            for b, a, c in zip(betas[::every], t50[::every], t_eq[::every])
        ],
        caption="t50 vs t_eq (every 10th beta)",
    )
    rep.paragraph(f"run folder: {run.path.name}")
    return rep


def model_report(path: Path) -> Report:
    """The caveat, E_first against depth, the depth view and the fall of E_first per group."""
    run = RunDir(path)
    info, metrics = run.read_json("model.json"), run.read_json("metrics.json")
    rep = Report(f"Consensus: iterated {info['name']}")
    rep.paragraph(metrics["caveat"])
    rep.figure(
        run.figure_path("E_vs_depth"),
        "E_first of the final-normed state per layer step (median over "
        "prompts; band: 95% bootstrap CI of mean log10 E); right: log-log",
    )
    depth_png = run.path / "figures" / "depth_view.png"
    if depth_png.exists():
        key = depth_series(run)[0]
        rep.figure(
            depth_png, f"Depth view ({key}): KL(p_ref || p_k), top-1 agreement, entropy and context influence C(k)"
        )
    timings = metrics["seconds_per_group"]
    rep.table(
        [
            {
                "group": g,
                "fall of mean log10 E_first (pass 1 -> last)": s["fall_pass1_to_last"],
                "CI95": str([round(x, 3) for x in s["fall_ci95"]]),
                "Spearman": s["spearman_pass_vs_mean_log10_E"],
                "seconds": timings[g],
            }
            for g, s in metrics["groups"].items()
        ],
        caption="E_first falls with depth",
    )
    if run.file("decode.json").exists():
        decode_section(rep, run)
    rep.paragraph(f"run folder: {run.path.name}")
    return rep


def decode_section(rep: Report, run: RunDir) -> None:
    """R14: the decoded top-1 tokens against passes (figure and a table of the last pass per group)."""
    groups = run.read_json("decode.json")["groups"]
    rep.heading("R14: do all tokens become one token?", level=3)
    rep.figure(
        run.figure_path("decode_share"),
        "Share of a prompt's positions whose top-1 token (final norm + LM head) is its most common one, against "
        "passes (mean over prompts; band down to the smallest; dashed: positions >= 1); right: distinct tokens",
    )
    rep.table(
        [
            {
                "group": name,
                "passes": g["passes"][-1],
                "share (mean)": g["final"]["share_mean"],
                "share (min)": g["final"]["share_min"],
                "share, positions >= 1": g["final"]["share_no_sink_mean"],
                "distinct tokens": g["final"]["distinct_mean"],
                "most common token": repr(g["final"]["mode_token_text"]),
                "prompts with it": f"{g['final']['prompts_with_that_mode']}/{g['prompts']}",
            }
            for name, g in groups.items()
        ],
        caption="decoded tokens after the last pass",
    )


def write_report(path: Path, command: str) -> Path:
    """Write `report.html` of the run folder `path`, a run of `command` ("consensus simulate" ...)."""
    build = {"consensus simulate": simulate_report, "consensus phase": phase_report}.get(command, model_report)
    return build(path).write(Path(path) / "report.html")
