"""`bb theory`'s computation: the §9 mutual-reinforcement flow and the §9.5 Adam-vs-SGD residual models.

`simulate(seed, t_max)` returns (metrics, arrays): the fitted slopes, GD checks and Adam/SGD m values, and the
named trajectories that `bb theory` saves as arrays.npz. A few seconds on one core.
"""

from __future__ import annotations

import math
import time

import numpy as np

from attnlab.bb._theory import flow, residual
from attnlab.errors import check

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
    check(
        math.isfinite(t_max) and t_max >= 1e5,
        f"t_max={t_max:g} is out of range; need a finite t_max >= 1e5 so the late window [t_max/10, t_max] "
        f"follows the transient window [1e3, 1e4]",
    )


def _at(traj: flow.Trajectory, t: float) -> int:
    """Index of the sample nearest to t in log time."""
    return int(np.argmin(np.abs(np.log(np.maximum(traj.t, 1e-300)) - math.log(t))))


def setup(seed: int, t_max: float) -> dict:
    """The fixed choices of the theory run (written as setup.json next to the results)."""
    return {
        "seed": seed,
        "t_max": t_max,
        "m": M_TOKENS,
        "K": K_VOCAB,
        "context_sizes": list(MIXED_NS),
        "context_weights": "uniform",
        "single_n_control": SINGLE_N[0],
        "integrator": {
            "method": "LSODA",
            "rtol": 1e-10,
            "atol": 1e-12,
            "t_min": T_MIN,
            "points_per_decade": POINTS_PER_DECADE,
        },
        "gradient_descent": {"lr": GD_LR, "steps": GD_STEPS},
        "residual": {
            "lr": RESIDUAL_LR,
            "m0": RESIDUAL_M0,
            "steps": RESIDUAL_STEPS,
            "two_param_lrs": list(TWO_PARAM_LRS),
            "c": 0.0,
            "adam": {"beta1": 0.9, "beta2": 0.999, "eps": 1e-8, "bias_corrected": True},
            "sgd": {"momentum": 0.0},
        },
    }


def simulate(seed: int = 0, t_max: float = 1e9) -> tuple[dict, dict[str, np.ndarray]]:
    """Run everything; returns (metrics, arrays): named numpy arrays for `arrays.npz`."""
    check_t_max(t_max)
    clock = time.perf_counter()
    flow_metrics, flow_arrays = _flow(seed, t_max)
    t_flow = time.perf_counter() - clock
    clock2 = time.perf_counter()
    res_metrics, res_arrays = _residual()
    seconds = {"flow": t_flow, "residual": time.perf_counter() - clock2}
    return {**flow_metrics, **res_metrics, "seconds": seconds}, {**flow_arrays, **res_arrays}


def _flow(seed: int, t_max: float) -> tuple[dict, dict[str, np.ndarray]]:
    """§9.1-9.4: the mixed-n flow, the single-n control and plain gradient descent."""
    n_points = int(round(POINTS_PER_DECADE * math.log10(t_max / T_MIN))) + 1
    prob = flow.make_problem(seed, M_TOKENS, K_VOCAB, MIXED_NS)
    single_prob = flow.make_problem(seed, M_TOKENS, K_VOCAB, SINGLE_N)
    traj = flow.integrate_flow(prob, t_max=t_max, n_points=n_points, t_min=T_MIN)
    single = flow.integrate_flow(single_prob, t_max=t_max, n_points=n_points, t_min=T_MIN)
    gd = flow.gradient_descent(prob, lr=GD_LR, steps=GD_STEPS)
    lo, hi = late_window(t_max)
    i_gd = _at(traj, float(GD_STEPS))
    change = float(np.abs(single.alpha[-1] - single.alpha[_at(single, hi / 100)]).max())
    metrics: dict = {
        "late_window": [lo, hi],
        "late_slopes": flow.window_slopes(traj, lo, hi),
        "transient_window": list(TRANSIENT),
        "transient_slopes": flow.window_slopes(traj, *TRANSIENT),
        "final": {
            "t": float(traj.t[-1]),
            "alpha": traj.alpha[-1],
            "beta_spread": float(traj.beta_spread[-1]),
            "loss": float(traj.loss[-1]),
        },
        "single_n": {
            "n": SINGLE_N[0],
            "alpha_final": single.alpha[-1],
            "alpha_change_last_two_decades": change,
            "loss_final": float(single.loss[-1]),
        },
        "gradient_descent": {
            "lr": GD_LR,
            "steps": GD_STEPS,
            "max_loss_increase": float(np.diff(gd.loss).max()),
            "min_alpha_increment": float(np.diff(gd.alpha, axis=0).min()),
            "alpha_final": gd.alpha[-1],
            "loss_final": float(gd.loss[-1]),
            "flow_alpha_at_same_t": traj.alpha[i_gd],
            "flow_t": float(traj.t[i_gd]),
        },
    }
    arrays = {
        "flow_t": traj.t,
        "flow_alpha": traj.alpha,
        "flow_beta": traj.beta,
        "flow_loss": traj.loss,
        "single_t": single.t,
        "single_alpha": single.alpha,
        "single_beta": single.beta,
        "single_loss": single.loss,
        "gd_alpha": gd.alpha,
        "gd_loss": gd.loss,
        "problem_pi": prob.pi,
        "problem_p": prob.p,
        "problem_xi": prob.xi,
        "problem_ns": prob.ns,
    }
    return metrics, arrays


def _residual() -> tuple[dict, dict[str, np.ndarray]]:
    """§9.5: the reduced recursion (with the SGD closed form) and the two-parameter model under Adam and SGD."""
    opts = residual.OPTIMIZERS
    reduced = {o: residual.reduced_recursion(o, RESIDUAL_LR, RESIDUAL_M0, RESIDUAL_STEPS) for o in opts}
    t = np.arange(1, RESIDUAL_STEPS + 1.0)
    closed = np.concatenate([[RESIDUAL_M0], residual.sgd_closed_form(RESIDUAL_M0, RESIDUAL_LR, t)])
    lrs = np.array(TWO_PARAM_LRS)
    two = {o: residual.two_param_model(o, lrs, c=0.0, m0=RESIDUAL_M0, y0=0.0, steps=RESIDUAL_STEPS) for o in opts}
    metrics = {
        "reduced_recursion": {
            "lr": RESIDUAL_LR,
            "m0": RESIDUAL_M0,
            "steps": RESIDUAL_STEPS,
            "m_adam": float(reduced["adam"][-1]),
            "m_sgd": float(reduced["sgd"][-1]),
            "m_sgd_closed_form": float(closed[-1]),
        },
        "two_param": {
            "lrs": list(TWO_PARAM_LRS),
            "c": 0.0,
            "m0": RESIDUAL_M0,
            "y0": 0.0,
            "steps": RESIDUAL_STEPS,
            **{f"m_ratio_{o}": two[o]["m"][-1] / RESIDUAL_M0 for o in opts},
            **{f"y_final_{o}": two[o]["y"][-1] for o in opts},
        },
    }
    arrays = {
        "reduced_m_adam": reduced["adam"],
        "reduced_m_sgd": reduced["sgd"],
        "reduced_m_closed_form": closed,
        "two_param_lrs": lrs,
        **{f"two_param_{k}_{o}": two[o][k] for o in opts for k in ("y", "m", "loss")},
    }
    return metrics, arrays
