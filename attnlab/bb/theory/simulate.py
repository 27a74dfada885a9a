"""`attnlab bb theory`: simulate the §9 mutual-reinforcement flow and the §9.5 Adam-vs-SGD residual models.

`run_theory(out, seed, t_max)` writes into the run folder `out`:
  config.json, manifest.json, metrics.json (fitted slopes, GD checks, Adam/SGD m values), arrays.npz
  (trajectories), figures/*.png and report.html; it returns the Report section. A few seconds on one core.
"""

from __future__ import annotations

import math
import time
from pathlib import Path

import numpy as np

from attnlab.errors import check
from attnlab.extreme.theory import figures, flow, residual
from attnlab.report import Report
from attnlab.runs import RunDir

M_TOKENS, K_VOCAB = 3, 10
MIXED_NS = tuple(range(1, 11))
SINGLE_N = (5,)
GD_LR, GD_STEPS = 1.0, 10_000
TRANSIENT = (1e3, 1e4)
RESIDUAL_LR, RESIDUAL_M0, RESIDUAL_STEPS = 0.3, 10.0, 10_000
TWO_PARAM_LRS = (0.01, 0.03, 0.1, 0.3)
POINTS_PER_DECADE = 20
T_MIN = 1e-2


def late_window(t_max: float) -> tuple[float, float]:
    """The late fitting window: the last decade [t_max/10, t_max] (= [1e8, 1e9] at the default t_max)."""
    return t_max / 10.0, t_max


def check_t_max(t_max: float) -> None:
    """Raise one clear line unless 1e5 <= t_max < inf."""
    check(math.isfinite(t_max) and t_max >= 1e5,
            f"t_max={t_max:g} is out of range; need a finite t_max >= 1e5 so the late window [t_max/10, t_max] "
            f"follows the transient window [1e3, 1e4]")


def _at(traj: flow.Trajectory, t: float) -> int:
    """Index of the sample nearest to t in log time."""
    return int(np.argmin(np.abs(np.log(np.maximum(traj.t, 1e-300)) - math.log(t))))


def simulate(seed: int = 0, t_max: float = 1e9) -> tuple[dict, dict]:
    """Run everything; returns (metrics, arrays) — the arrays are named numpy arrays for `arrays.npz`."""
    check_t_max(t_max)
    n_points = int(round(POINTS_PER_DECADE * math.log10(t_max / T_MIN))) + 1
    prob = flow.make_problem(seed, M_TOKENS, K_VOCAB, MIXED_NS)
    single_prob = flow.make_problem(seed, M_TOKENS, K_VOCAB, SINGLE_N)
    clock = time.perf_counter()
    traj = flow.integrate_flow(prob, t_max=t_max, n_points=n_points, t_min=T_MIN)
    single = flow.integrate_flow(single_prob, t_max=t_max, n_points=n_points, t_min=T_MIN)
    gd = flow.gradient_descent(prob, lr=GD_LR, steps=GD_STEPS)
    t_flow = time.perf_counter() - clock
    lo, hi = late_window(t_max)
    i_gd = _at(traj, float(GD_STEPS))
    metrics: dict = {
        "late_window": [lo, hi],
        "late_slopes": flow.window_slopes(traj, lo, hi),
        "transient_window": list(TRANSIENT),
        "transient_slopes": flow.window_slopes(traj, *TRANSIENT),
        "final": {"t": float(traj.t[-1]), "alpha": traj.alpha[-1], "beta_spread": float(traj.beta_spread[-1]),
                  "loss": float(traj.loss[-1])},
        "single_n": {"n": SINGLE_N[0], "alpha_final": single.alpha[-1],
                     "alpha_change_last_two_decades": float(np.abs(single.alpha[-1]
                                                                   - single.alpha[_at(single, hi / 100)]).max()),
                     "loss_final": float(single.loss[-1])},
        "gradient_descent": {"lr": GD_LR, "steps": GD_STEPS,
                             "max_loss_increase": float(np.diff(gd.loss).max()),
                             "min_alpha_increment": float(np.diff(gd.alpha, axis=0).min()),
                             "alpha_final": gd.alpha[-1], "loss_final": float(gd.loss[-1]),
                             "flow_alpha_at_same_t": traj.alpha[i_gd], "flow_t": float(traj.t[i_gd])},
    }
    clock2 = time.perf_counter()
    reduced = {o: residual.reduced_recursion(o, RESIDUAL_LR, RESIDUAL_M0, RESIDUAL_STEPS) for o in residual.OPTIMIZERS}
    closed = np.concatenate([[RESIDUAL_M0], residual.sgd_closed_form(RESIDUAL_M0, RESIDUAL_LR,
                                                                     np.arange(1, RESIDUAL_STEPS + 1.0))])
    lrs = np.array(TWO_PARAM_LRS)
    two = {o: residual.two_param_model(o, lrs, c=0.0, m0=RESIDUAL_M0, y0=0.0, steps=RESIDUAL_STEPS)
           for o in residual.OPTIMIZERS}
    metrics["reduced_recursion"] = {"lr": RESIDUAL_LR, "m0": RESIDUAL_M0, "steps": RESIDUAL_STEPS,
                                    "m_adam": float(reduced["adam"][-1]), "m_sgd": float(reduced["sgd"][-1]),
                                    "m_sgd_closed_form": float(closed[-1])}
    metrics["two_param"] = {"lrs": list(TWO_PARAM_LRS), "c": 0.0, "m0": RESIDUAL_M0, "y0": 0.0,
                            "steps": RESIDUAL_STEPS,
                            **{f"m_ratio_{o}": two[o]["m"][-1] / RESIDUAL_M0 for o in residual.OPTIMIZERS},
                            **{f"y_final_{o}": two[o]["y"][-1] for o in residual.OPTIMIZERS}}
    metrics["seconds"] = {"flow": t_flow, "residual": time.perf_counter() - clock2}
    arrays = {"flow_t": traj.t, "flow_alpha": traj.alpha, "flow_beta": traj.beta, "flow_loss": traj.loss,
              "single_t": single.t, "single_alpha": single.alpha, "single_beta": single.beta,
              "single_loss": single.loss, "gd_alpha": gd.alpha, "gd_loss": gd.loss,
              "problem_pi": prob.pi, "problem_p": prob.p, "problem_xi": prob.xi, "problem_ns": prob.ns,
              "reduced_m_adam": reduced["adam"], "reduced_m_sgd": reduced["sgd"], "reduced_m_closed_form": closed,
              "two_param_lrs": lrs, **{f"two_param_{k}_{o}": two[o][k] for o in residual.OPTIMIZERS
                                       for k in ("y", "m", "loss")}}
    return metrics, {"traj": traj, "single": single, "reduced": reduced, "closed": closed, "two": two,
                     "lrs": lrs, "npz": arrays}


def run_theory(out: Path, seed: int = 0, t_max: float = 1e9) -> Report:
    """Simulate §9.1–9.5, write the run folder `out` and return the report section."""
    check_t_max(t_max)
    run = RunDir(out, "extreme")
    config = {"command": "bb theory", "seed": seed, "t_max": t_max, "m": M_TOKENS, "K": K_VOCAB,
              "context_sizes": list(MIXED_NS), "context_weights": "uniform", "single_n_control": SINGLE_N[0],
              "integrator": {"method": "LSODA", "rtol": 1e-10, "atol": 1e-12, "t_min": T_MIN,
                             "points_per_decade": POINTS_PER_DECADE},
              "gradient_descent": {"lr": GD_LR, "steps": GD_STEPS},
              "residual": {"lr": RESIDUAL_LR, "m0": RESIDUAL_M0, "steps": RESIDUAL_STEPS,
                           "two_param_lrs": list(TWO_PARAM_LRS), "c": 0.0,
                           "adam": {"beta1": 0.9, "beta2": 0.999, "eps": 1e-8, "bias_corrected": True},
                           "sgd": {"momentum": 0.0}}}
    run.write_config(config)
    run.write_manifest(seed)
    metrics, data = simulate(seed, t_max)
    run.write_json("metrics.json", metrics)
    np.savez(run.path / "arrays.npz", **data["npz"])
    fig_alpha = figures.plot_alpha(data["traj"], data["single"], run.figure_path("theory_alpha"))
    fig_beta = figures.plot_beta_loss(data["traj"], run.figure_path("theory_beta_loss"))
    fig_res = figures.plot_residual(data["reduced"], data["closed"], data["two"], data["lrs"],
                                    run.figure_path("theory_residual_adam_sgd"))
    report = _report(metrics, fig_alpha, fig_beta, fig_res, run.path)
    report.write(run.path / "report.html")
    return report


def _report(metrics: dict, fig_alpha: Path, fig_beta: Path, fig_res: Path, folder: Path) -> Report:
    """The report section: slope table, Adam/SGD table, three figures."""
    rep = Report("Theory: mutual reinforcement and the Adam residual peak")
    rep.paragraph(f"Run folder: {folder}. Gradient flow of the simplified loss (spec §9.1–9.4; m = {M_TOKENS} "
                  f"query tokens, K = {K_VOCAB}, context size n uniform on 1..10) integrated with LSODA "
                  "(rtol 1e-10, atol 1e-12); slopes are least-squares fits against log t.")
    late, tr = metrics["late_slopes"], metrics["transient_slopes"]
    lo, hi = metrics["late_window"]
    rows = []
    for name, key, expect in [("α_v (each v)", "alpha", "0.5"), ("log ‖β − mean β‖", "log_beta_spread", "−0.5"),
                              ("log ℓ", "log_loss", "−1")]:
        fmt = (lambda x: ", ".join(f"{a:.4f}" for a in x)) if key == "alpha" else (lambda x: f"{x:.4f}")
        rows.append({"quantity": name, "predicted late slope": expect,
                     f"slope [{lo:.0e}, {hi:.0e}]": fmt(late[key]),
                     f"slope [{TRANSIENT[0]:.0e}, {TRANSIENT[1]:.0e}] (transient)": fmt(tr[key])})
    rep.table(rows, caption="Slopes against log t")
    s, g = metrics["single_n"], metrics["gradient_descent"]
    rep.paragraph(f"Negative control, single n = {s['n']}: the flow converges (max |Δα| over the last two decades "
                  f"{s['alpha_change_last_two_decades']:.2e}, ℓ = {s['loss_final']:.1e}). Plain gradient descent "
                  f"(lr {g['lr']:g}, {g['steps']} steps): largest loss increase {g['max_loss_increase']:.2e}, "
                  f"smallest α increment {g['min_alpha_increment']:.2e}.")
    rep.figure(fig_alpha, "α_v against t (log axis) with the ½ log t guide; dashed: single-n control")
    rep.figure(fig_beta, "‖β − mean β‖ and ℓ on log-log axes with t^−½ and t^−1 guides")
    r, tp = metrics["reduced_recursion"], metrics["two_param"]
    rows = [{"model": "reduced recursion, lr 0.3", "Adam m": r["m_adam"], "SGD m": r["m_sgd"],
             "SGD closed form": r["m_sgd_closed_form"]}]
    for j, lr in enumerate(tp["lrs"]):
        rows.append({"model": f"two-parameter, lr {lr:g}", "Adam m": float(tp["m_ratio_adam"][j]) * tp["m0"],
                     "SGD m": float(tp["m_ratio_sgd"][j]) * tp["m0"]})
    rep.table(rows, caption=f"Residual norm m after {r['steps']} steps from m0 = {r['m0']:g} (spec §9.5)")
    rep.figure(fig_res, "m(t) under Adam and SGD: Adam's normalised steps grow the residual, SGD's barely move it")
    return rep
