"""The `simulate` and `phase` commands: run the toy dynamics, save re-integrable arrays, figures and a report.

`simulate` writes `E.npy` [batch, steps+1] (E_first), `t.npy`, `x0.npy` [batch, n, d], `weights.npz` (per interval
for time-varying schedules), `metrics.json`, `timeseries.csv`, figures and `report.html` (spec section 10).
`phase` writes `frac.npy` [beta, steps+1], `betas.npy`, `t.npy`, `metrics.json` and `phase_diagram.png`.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import torch

from attnlab.consensus import plots
from attnlab.consensus.dynamics import AttentionSpec, check_tokens
from attnlab.consensus.errors import ConsensusInputError, check_size
from attnlab.consensus.integrators import integrate
from attnlab.consensus.schedules import make_schedule, roughness, schedule_arrays
from attnlab.consensus.stats import log_band, timeseries_rows
from attnlab.consensus.sweeps import phase_diagram
from attnlab.consensus.theory import fit_log_slope, tail_slope
from attnlab.report import Report
from attnlab.runs import RunDir


@dataclass
class SimulateConfig:
    """Resolved configuration of `attnlab consensus simulate`."""

    n: int = 32
    d: int = 3
    batch: int = 64
    beta: float = 1.0
    heads: int = 1
    kind: str = "SA"
    mask: str = "full"
    schedule: str = "constant"
    key_query: str = "gaussian"
    value: str = "identity"
    scale: float = 1.0
    omega: float = 1.0
    delta: float = 1.0
    layers: int = 4
    t_max: float = 30.0
    h: float = 0.1
    integrator: str = "rk4"
    record_every: int = 10
    seed: int = 0


def run_simulate(cfg: SimulateConfig, out: Path, progress: bool = True) -> tuple[RunDir, dict, Report]:
    """Integrate `cfg.batch` uniform starts and write the run folder; returns (run, metrics, report)."""
    check_size(cfg.n, 2, "n (tokens)")
    check_size(cfg.d, 2, "d (dimension)")
    check_size(cfg.batch, 1, "batch (starts)")
    check_size(cfg.heads, 1, "heads")
    if cfg.record_every < 0:
        raise ConsensusInputError(f"record_every must be >= 0, got {cfg.record_every}")
    sch = make_schedule(cfg.schedule, cfg.d, cfg.heads, cfg.seed, scale=cfg.scale, value=cfg.value,
                        omega=cfg.omega, delta=cfg.delta, layers=cfg.layers, key_query=cfg.key_query)
    spec = AttentionSpec(cfg.kind, cfg.mask, torch.full((cfg.heads,), float(cfg.beta)))
    g = torch.Generator().manual_seed(cfg.seed)
    X0 = check_tokens(torch.randn(cfg.batch, cfg.n, cfg.d, generator=g, dtype=torch.float64))
    run = RunDir(out, "consensus")
    run.write_config(asdict(cfg))
    t0 = time.perf_counter()
    tr = integrate(X0, sch, spec, cfg.t_max, cfg.h, cfg.integrator,
                   measures=("E_first", "E_pair", "clustered_fraction"), record_every=cfg.record_every,
                   progress=progress, stop_on_error=True)
    wall = time.perf_counter() - t0
    E = tr.measures["E_first"]
    np.save(run.path / "E.npy", E)
    np.save(run.path / "E_pair.npy", tr.measures["E_pair"])
    np.save(run.path / "t.npy", tr.t)
    np.save(run.path / "x0.npy", X0.numpy())
    np.save(run.path / "states.npy", tr.states)
    np.save(run.path / "t_states.npy", tr.t_states)
    np.savez(run.path / "weights.npz", **schedule_arrays(sch, cfg.t_max))
    slopes = [fit_log_slope(tr.t, e) for e in tr.measures["E_pair"]]
    predicted = None
    if cfg.value == "identity" and cfg.kind == "SA":
        predicted = tail_slope("full_SA" if cfg.mask == "full" else "causal_SA")
    band = log_band(E[:, -1:])
    metrics = {"final_E_first": {"median": float(np.median(E[:, -1])), "q10": float(np.quantile(E[:, -1], 0.1)),
                                 "q90": float(np.quantile(E[:, -1], 0.9)), "mean_log10": float(band["mean_log10"][0]),
                                 "ci_log10": [float(band["lo_log10"][0]), float(band["hi_log10"][0])]},
               "share_E_first_below_1e-6": float((E[:, -1] < 1e-6).mean()),
               "final_clustered_fraction_mean": float(tr.measures["clustered_fraction"][:, -1].mean()),
               "tail_slope_log_E_pair": {"median": float(np.nanmedian(slopes)) if np.isfinite(slopes).any() else None,
                                         "fitted_starts": int(np.isfinite(slopes).sum()), "predicted": predicted},
               "roughness": roughness(sch, cfg.t_max), "stopped": tr.stopped, "t_reached": float(tr.t[-1]),
               "wall_seconds": round(wall, 3), "E_floor_float64": 2.2e-16}
    run.write_json("metrics.json", metrics)
    run.write_csv("timeseries.csv", timeseries_rows(tr.t, {cfg.schedule: E}, "E_first",
                                                    every=max(1, len(tr.t) // 200)))
    run.write_manifest(cfg.seed, command="consensus simulate")
    title = (f"{cfg.kind}, {cfg.mask} mask, {cfg.schedule} P ({cfg.key_query}, scale {cfg.scale:g}), V={cfg.value}, "
             f"beta={cfg.beta:g}, n={cfg.n}, d={cfg.d}, {cfg.batch} starts, {cfg.integrator} h={cfg.h:g}")
    fig_E = plots.plot_E_curves(run.figure_path("E_vs_time"), tr.t,
                                {"E_first": E, "E_pair": tr.measures["E_pair"]}, ylabel="E", title=title)
    rep = Report("Consensus: simulation")
    rep.paragraph(title)
    rep.figure(fig_E, "E_first and E_pair against time: median over starts, band = 95% bootstrap CI of mean log10 E")
    if cfg.d == 3:
        fig_s = plots.plot_sphere(run.figure_path("sphere_t0"), tr.states[0], title=f"start 0, t in [0, {tr.t[-1]:g}]")
        rep.figure(fig_s, "Tokens of start 0 on S^2: open = t 0, red = end, lines = trajectories")
    rep.table([{"measure": k, "value": v if not isinstance(v, dict) else str(v)} for k, v in metrics.items()],
              caption="metrics.json")
    rep.paragraph(f"run folder: {run.path}")
    rep.write(run.path / "report.html")
    if tr.stopped:
        print(f"stopped early: {tr.stopped}")
    return run, metrics, rep


@dataclass
class PhaseConfig:
    """Resolved configuration of `attnlab consensus phase`."""

    n: int = 32
    d: int = 8
    starts: int = 256
    beta_min: float = 0.1
    beta_max: float = 9.0
    num_betas: int = 90
    t_max: float = 30.0
    h: float = 0.1
    integrator: str = "euler"
    kind: str = "SA"
    float32: bool = False
    seed: int = 0


def run_phase(cfg: PhaseConfig, out: Path, progress: bool = True) -> tuple[RunDir, dict, Report]:
    """Compute the (t, beta) phase diagram and write the run folder; returns (run, metrics, report)."""
    check_size(cfg.n, 2, "n (tokens)")
    check_size(cfg.d, 2, "d (dimension)")
    check_size(cfg.starts, 1, "starts")
    check_size(cfg.num_betas, 1, "num_betas")
    if not 0 <= cfg.beta_min <= cfg.beta_max:
        raise ConsensusInputError(f"need 0 <= beta_min <= beta_max, got {cfg.beta_min}, {cfg.beta_max}")
    run = RunDir(out, "consensus")
    run.write_config(asdict(cfg))
    betas = np.linspace(cfg.beta_min, cfg.beta_max, cfg.num_betas)
    t0 = time.perf_counter()
    pdg = phase_diagram(betas, cfg.n, cfg.d, cfg.starts, cfg.t_max, cfg.h, cfg.integrator, cfg.kind, cfg.seed,
                        dtype=torch.float32 if cfg.float32 else torch.float64, progress=progress)
    wall = time.perf_counter() - t0
    np.save(run.path / "frac.npy", pdg.frac)
    np.save(run.path / "betas.npy", pdg.betas)
    np.save(run.path / "t.npy", pdg.t)
    rel = (pdg.t50 - pdg.t_eq) / pdg.t_eq
    metrics = {"t50": pdg.t50, "t_eq": pdg.t_eq, "relative_gap_t50_vs_t_eq": rel,
               "median_abs_relative_gap": float(np.nanmedian(np.abs(rel))) if np.isfinite(rel).any() else None,
               "betas_never_half_clustered": int(np.isnan(pdg.t50).sum()), "wall_seconds": round(wall, 2)}
    run.write_json("metrics.json", metrics)
    run.write_manifest(cfg.seed, command="consensus phase")
    title = (f"Q=K=V=I, {cfg.kind}, n={cfg.n}, d={cfg.d}, {cfg.starts} starts, {cfg.integrator} h={cfg.h:g}"
             + (", float32" if cfg.float32 else ""))
    fig = plots.plot_phase(run.figure_path("phase_diagram"), pdg.betas, pdg.t, pdg.frac, pdg.t_eq, pdg.t50, title)
    rep = Report("Consensus: phase diagram")
    rep.paragraph(title + f"; {wall:.1f} s.")
    rep.figure(fig, "Mean clustered fraction over (t, beta); white dashes: equiangular t_eq(beta) (rho = 0.999); "
                    "red dots: t50")
    rep.table([{"beta": float(b), "t50": float(a), "t_eq": float(c)} for b, a, c in
               zip(pdg.betas[::max(1, len(betas) // 10)], pdg.t50[::max(1, len(betas) // 10)],
                   pdg.t_eq[::max(1, len(betas) // 10)])], caption="t50 vs t_eq (every 10th beta)")
    rep.paragraph(f"run folder: {run.path}")
    rep.write(run.path / "report.html")
    return run, metrics, rep
