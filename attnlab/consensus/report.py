"""Reports of the consensus commands, built from a run folder only (`manifest.json`'s command, `config.json`,
`metrics.json`, saved arrays and the figures the run drew): nothing is recomputed and no model is loaded.

`write_report(run)` writes `report.html` into the run folder, the page of the command that wrote it.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from attnlab.consensus.config import PhaseConfig, SimulateConfig
from attnlab.consensus.figures import depth_series, floats, phase_figure, phase_title, simulate_title, sphere_figure
from attnlab.errors import InputError
from attnlab.reports.page import Report, element_id, flat_rows
from attnlab.runs import RunDir
from attnlab.runs.configs import config_from_dict


def _simulate_report(run: RunDir) -> Report:
    """The simulation's title, E curves, the tokens of start 0 over t and its metrics table."""
    cfg = config_from_dict(SimulateConfig, run.read_config())
    metrics = run.read_json("metrics.json")
    rep = Report("Consensus: simulation")
    rep.paragraph(simulate_title(cfg))
    rep.figure(
        run.path / "figures" / "E_vs_time.png",
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


def _phase_report(run: RunDir) -> Report:
    """The phase diagram and t50 against t_eq for every 10th beta."""
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


def _model_report(run: RunDir) -> Report:
    """The caveat, E_first against depth, the depth view and the fall of E_first per group."""
    info, metrics = run.read_json("model.json"), run.read_json("metrics.json")
    rep = Report(f"Consensus: iterated {info['name']}")
    rep.paragraph(metrics["caveat"])
    rep.figure(
        run.path / "figures" / "E_vs_depth.png",
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
        _decode_section(rep, run)
    rep.paragraph(f"run folder: {run.path.name}")
    return rep


def _decode_section(rep: Report, run: RunDir) -> None:
    """R14: the decoded top-1 tokens against passes (figure and a table of the last pass per group)."""
    groups = run.read_json("decode.json")["groups"]
    rep.heading("R14: do all tokens become one token?", level=3)
    rep.figure(
        run.path / "figures" / "decode_share.png",
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


def _norm_report(run: RunDir) -> Report:
    """R13: the per-layer error of the sphere idealisation (figure and table) and the falls of E_first."""
    m = run.read_json("metrics.json")
    rep = Report("Consensus: RMSNorm as a projection onto a sphere (R13)")
    rep.figure(
        run.file("R13.png"),
        "Left: per-layer relative error of the fitted translated, scaled sphere and of the sphere times the mean "
        "gain (held-out prompts); right: mean log10 E_first over periodic passes, real vs idealised norm",
    )
    layers = ("rel_error_mean", "rel_error_p90", "rel_error_gain_mean", "gain_cv")
    rep.table([{"layer": i, **{k: m[k][i] for k in layers}} for i in range(int(m["n_layers"]))],
              caption="Relative error |y - y_hat| / |y| per layer")  # fmt: skip
    rep.table(flat_rows({k: v for k, v in m.items() if k not in layers}), caption="Falls of E_first (metrics.json)")
    rep.paragraph(f"run folder: {run.path.name}")
    return rep


BUILDERS = {
    "consensus simulate": _simulate_report,
    "consensus phase": _phase_report,
    "consensus model": _model_report,
    "consensus norm": _norm_report,
}


def write_report(run: RunDir) -> Path:
    """Write `report.html` of the run folder `run`: the page of the consensus command its manifest names."""
    command = run.read_manifest().get("command")
    if command not in BUILDERS:
        raise InputError(f"{run.path}: a run of {command!r}, not of a consensus command ({', '.join(BUILDERS)})")
    return BUILDERS[command](run).write(run.file("report.html"))
