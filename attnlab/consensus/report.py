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
from attnlab.report import Report
from attnlab.runs import RunDir


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
    if cfg.d == 3:
        rep.figure(
            run.figure_path("sphere_t0"), "Tokens of start 0 on S^2: open = t 0, red = end, lines = trajectories"
        )
    rep.table(
        [{"measure": k, "value": v if not isinstance(v, dict) else str(v)} for k, v in metrics.items()],
        caption="metrics.json",
    )
    rep.paragraph(f"run folder: {run.path}")
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
    rep.figure(
        run.figure_path("phase_diagram"),
        "Mean clustered fraction over (t, beta); white dashes: equiangular t_eq(beta) (rho = 0.999); red dots: t50",
    )
    rep.table(
        [
            {"beta": float(b), "t50": float(a), "t_eq": float(c)}
            for b, a, c in zip(betas[::every], t50[::every], t_eq[::every])
        ],
        caption="t50 vs t_eq (every 10th beta)",
    )
    rep.paragraph(f"run folder: {run.path}")
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
    rep.paragraph(f"run folder: {run.path}")
    return rep


def write_report(path: Path, command: str) -> Path:
    """Write `report.html` of the run folder `path`, a run of `command` ("consensus simulate" ...)."""
    build = {"consensus simulate": simulate_report, "consensus phase": phase_report}.get(command, model_report)
    return build(path).write(Path(path) / "report.html")
