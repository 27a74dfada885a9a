"""The §10 adjudication as the spec fixes it: the grid, the sampler gates with doubling, gate 1 (full against
collapsed), the s >= 0.10 filter and the §10.8 verdict.

`adjudicate.compare_point` makes one point; `protocol_point` reruns it with doubled draws (up to twice) until the
gates of §7.3 pass; `gate_full_vs_collapsed` is §10.1's second gate; `form_verdict` applies §10.8 to the points:
only points with separation s >= 0.10 count; form f is supported in a configuration if |a_f| <= 3 SE on every
diagonal entry at both alpha (the extrapolation over the counted widths) and e_f <= 0.05 at N = 64; rejected if
|a_f| > 5 SE on any diagonal entry; the winner is supported in C1, C2 and C3 with the other form rejected in one.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from attnlab.paths.sampling.adjudicate import CONFIGS, compare_point, extrapolate
from attnlab.paths.sampling.posterior import until_gates

S_MIN, SUPPORT_SE, REJECT_SE, E_MAX, E_AT_N = 0.10, 3.0, 5.0, 0.05, 64  # §10.8
GATE1_MCSE = 3.0  # §10.1: full and collapsed U_hat within 3 combined MCSE
FORMS = ("chain", "simple")


def grid(configs: tuple[str, ...] = tuple(CONFIGS), alphas: tuple[float, ...] = (1.0, 4.0),
         Ns: tuple[int, ...] = (8, 16, 32, 64), paper_point: bool = True) -> list[tuple]:  # fmt: skip
    """(config, alpha, N, T) of §10.3: every config x alpha x N at T = 0.1, and C3 at the paper's point (P = 100,
    T = 0.01, N in {10, 30}: alpha = 100/N)."""
    points = [(c, a, N, 0.1) for c in configs for a in alphas for N in Ns]
    return points + ([("C3", 100.0 / N, N, 0.01) for N in (10, 30)] if paper_point and "C3" in configs else [])


def protocol_point(config: str, alpha: float, N: int, T: float, warmup: int, draws: int, n_leapfrog: int,
                   n_test: int, doublings: int = 2, seed: int = 0) -> dict:  # fmt: skip
    """One point of §10.4: collapsed HMC with `draws`, doubled up to `doublings` times until the sampler's gates
    pass (`sampler_converged`); the record of the last try, with `draws_used` and `tries`."""

    def run(d: int) -> dict:
        return compare_point(config, alpha, N, T, 4, warmup, d, n_leapfrog, n_test, seed)

    return until_gates(run, draws, doublings, lambda r: bool(r["sampler_converged"]))


def gate_full_vs_collapsed(warmup: int, draws: int, n_leapfrog: int, n_test: int, seed: int = 0) -> dict:
    """§10.1's second gate at C1, N = 8, alpha = 4, T = 0.1: the largest |U_hat_full - U_hat_collapsed| / combined
    MCSE over U's entries, and whether both samplers passed their gates."""
    from attnlab.paths.sampling.posterior import sample_point
    from attnlab.paths.tasks.data import build_data

    data = build_data("markov", 32, n_test, variant=CONFIGS["C1"])
    out = {k: sample_point(data, 8, 0.1, 4, warmup, draws, "hmc", n_leapfrog, 1, 5, seed, False, k)
           for k in ("full", "collapsed")}  # fmt: skip
    comb = np.sqrt(np.asarray(out["full"]["U_mcse"]) ** 2 + np.asarray(out["collapsed"]["U_mcse"]) ** 2)
    diff = np.abs(np.asarray(out["full"]["U_hat"]) - np.asarray(out["collapsed"]["U_hat"]))
    return {"gate1_max_diff_over_mcse": float(np.max(diff / np.maximum(comb, 1e-300))),
            "gate1_samplers_converged": float(out["full"]["converged"] and out["collapsed"]["converged"])}  # fmt: skip


def counted(points: list[dict], config: str, alpha: float) -> list[dict]:
    """The T = 0.1 points of (config, alpha) with s >= 0.10 (§10.8), by N."""
    keep = [p for p in points if p["config"] == config and p["alpha"] == alpha and p["T"] == 0.1]
    return sorted([p for p in keep if p["s"] >= S_MIN], key=lambda p: p["N"])


def form_status(points: list[dict], config: str, alphas: tuple[float, ...], form: str) -> dict:
    """Form `form` in `config`: the largest |a|/SE over diagonal entries and alphas, e_f at N = 64 (largest over
    alphas; NaN when that point is filtered out), supported / rejected by §10.8. An alpha with fewer than 3 counted
    widths has no fit, so the form cannot be supported there."""
    worst, fitted, e64 = 0.0, True, []
    for a in alphas:
        pts = counted(points, config, a)
        e64 += [p[f"e_{form}"] for p in pts if p["N"] == E_AT_N] or [float("nan")]
        if len(pts) < 3:
            fitted = False
            continue
        worst = max(worst, float(np.max(np.abs(extrapolate(pts, form)["z"]))))
    e_max = max(e64) if not any(np.isnan(e64)) else float("nan")
    supported = fitted and worst <= SUPPORT_SE and e_max <= E_MAX
    return {"max_a_over_se": worst if fitted else float("nan"), "e_N64": e_max, "supported": supported,
            "rejected": worst > REJECT_SE}  # fmt: skip


def form_verdict(points: list[dict], configs: tuple[str, ...] = tuple(CONFIGS),
                 alphas: tuple[float, ...] = (1.0, 4.0)) -> dict[str, Any]:  # fmt: skip
    """§10.8 over `configs`: per form and config its status, and the winner ("chain", "simple" or "undecided")."""
    status = {f: {c: form_status(points, c, alphas, f) for c in configs} for f in FORMS}
    winner = "undecided"
    for f, other in (FORMS, FORMS[::-1]):
        if all(s["supported"] for s in status[f].values()) and any(s["rejected"] for s in status[other].values()):
            winner = f
    return {"status": status, "winner": winner}
