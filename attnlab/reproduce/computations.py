"""The direct computations behind a few targets: library functions checked against the spec's formulas, with no
study command to run (each returns named numbers, which reproduce saves). The unit tests that cover the same
formulas call the same library functions."""

from __future__ import annotations

import time
from typing import Any


def real_probe(seed: int, size: dict) -> dict:
    """Greedy next token after "The capital of France is", the same with dim 507 zeroed after block 11, and the
    time of a cached reload of SmolLM2."""
    import torch

    from attnlab.hf.loader import load_causal_lm
    from attnlab.tracing.adapters.hf import forward_logits
    from attnlab.tracing.interventions import ZeroDims

    load_causal_lm("smollm2")  # builds the fp32 cache on the first call
    t0 = time.perf_counter()
    lm = load_causal_lm("smollm2")
    reload_s = time.perf_counter() - t0
    ids = torch.tensor([lm.tokenizer("The capital of France is", add_special_tokens=False)["input_ids"]])
    clean = int(forward_logits(lm.model, ids)[0, -1].argmax())
    ablated = int(forward_logits(lm.model, ids, interventions=[ZeroDims(11, (507,), (0,))])[0, -1].argmax())
    return {
        "greedy": lm.tokenizer.decode([clean]),
        "greedy_dim507_zeroed": lm.tokenizer.decode([ablated]),
        "reload_seconds": reload_s,
    }


def cons_tails(seed: int, size: dict) -> dict:
    """R2c: fitted slope of log E_pair over E in [1e-11, 1e-3] against spec 4.6, n = 8, d = 5, P = V = I."""
    import torch

    from attnlab.consensus.dynamics import AttentionSpec
    from attnlab.consensus.integrators import integrate
    from attnlab.consensus.schedules import Constant
    from attnlab.consensus.theory import fit_log_slope, tail_slope

    n, beta, rows = 8, 0.5, {}
    for case in ("full_SA", "full_USA", "causal_SA", "causal_USA"):
        mask, kind = case.split("_")
        g = torch.Generator().manual_seed(seed + 3)
        X0 = torch.randn(size["batch"], n, 5, generator=g, dtype=torch.float64)
        X0[..., 0] = X0[..., 0].abs() + 2.0  # a hemisphere start
        t_max = 45.0 if mask == "causal" else 12.0
        spec = AttentionSpec(kind, mask, torch.tensor([beta]))
        tr = integrate(X0, Constant(), spec, t_max=t_max, h=0.05, method="rk4", measures=("E_pair",))
        pred = tail_slope(case, beta=beta, n=n)
        slopes = [fit_log_slope(tr.t, E, 1e-11, 1e-3) for E in tr.measures["E_pair"]]
        rows[f"{case}_predicted"] = pred
        rows[f"{case}_rel_err"] = max(abs(s / pred - 1) for s in slopes)
    return rows


def _antipodal_starts(batch: int, seed: int) -> Any:
    """[batch, 6, 3] unit tokens outside every open hemisphere: 5 random ones and minus their normalised sum, so
    0 is a positive combination of the tokens (LP margin 0)."""
    import torch

    g = torch.Generator().manual_seed(seed + 11)
    X = torch.randn(batch, 6, 3, generator=g, dtype=torch.float64)
    X[:, 5] = -X[:, :5].div(X[:, :5].norm(dim=-1, keepdim=True)).sum(1)
    return X / X.norm(dim=-1, keepdim=True)


def _entry(states: Any) -> tuple[int | None, Any]:
    """First recorded step whose LP margin is > 1e-9 (bisection: the margin stays positive once it is, spec 4.4),
    and the LP's w there; (None, None) if the tokens never enter an open hemisphere."""
    import torch

    from attnlab.consensus.measures import hemisphere_lp

    def margin(i: int) -> tuple[float, Any]:
        m, w = hemisphere_lp(torch.as_tensor(states[i : i + 1]))
        return float(m[0]), w[0]

    if margin(len(states) - 1)[0] <= 1e-9:
        return None, None
    lo, hi = 0, len(states) - 1  # margin(lo) <= 1e-9 < margin(hi)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if margin(mid)[0] > 1e-9 else (mid, hi)
    return hi, margin(hi)[1]


def cons_late(seed: int, size: dict) -> dict:
    """R2b: full attention, V = P = I, n = 6, d = 3, starts outside every open hemisphere; RK4 h = 0.1 to t = 60
    with every state recorded: the per-step drop of min_i<w, x_i> after entry (w: the LP's at entry) and the share
    of starts with E_pair < 1e-8 at t = 60."""
    import numpy as np
    import torch

    from attnlab.consensus.dynamics import AttentionSpec
    from attnlab.consensus.integrators import integrate
    from attnlab.consensus.measures import hemisphere_lp, hemisphere_margin
    from attnlab.consensus.schedules import Constant

    X0 = _antipodal_starts(size["batch"], seed)
    tr = integrate(X0, Constant(), AttentionSpec("SA", "full", torch.tensor([1.0])), t_max=60.0, h=0.1,
                   method="rk4", measures=("E_pair",), record_every=1)  # fmt: skip
    states = tr.states
    assert states is not None  # record_every=1 keeps every state
    drops, entered = [], 0
    for b in range(X0.shape[0]):
        step, w = _entry(states[b])
        if step is None:
            continue
        entered += 1
        m = hemisphere_margin(torch.as_tensor(states[b, step:]), torch.as_tensor(w)).numpy()
        drops.append(float(np.max(m[:-1] - m[1:], initial=-np.inf)))
    return {
        "start_lp_margin_max": float(hemisphere_lp(X0)[0].max()),
        "max_margin_drop_after_entry": max(drops, default=float("nan")),
        "share_entered": entered / X0.shape[0],
        "share_E_pair_below_1e-8": float((tr.measures["E_pair"][:, -1] < 1e-8).mean()),
        "starts": X0.shape[0],
    }


def cons_rho(seed: int, size: dict) -> dict:
    """R5a: rho = 1 is a fixed point; slopes near 1 against -2 (SA) and -2 e^beta (USA), n = 16."""
    import numpy as np

    from attnlab.consensus.theory import rho_rhs

    eps, n, worst_sa, worst_usa, fixed = 1e-7, 16, 0.0, 0.0, 0.0
    for beta in (0.5, 1.0, 2.0, 4.0):
        fixed = max(fixed, abs(float(rho_rhs(1.0, beta, n, "SA"))), abs(float(rho_rhs(1.0, beta, n, "USA"))))
        sa = -float(rho_rhs(1 - eps, beta, n, "SA")) / eps
        usa = -float(rho_rhs(1 - eps, beta, n, "USA")) / eps
        worst_sa = max(worst_sa, abs(sa + 2.0))
        worst_usa = max(worst_usa, abs(usa / (-2 * np.exp(beta)) - 1))
    return {"rho_rhs_at_1": fixed, "sa_slope_abs_err": worst_sa, "usa_slope_rel_err": worst_usa}


def paths_ua(seed: int, size: dict) -> dict:
    """T5: U_a's closed form against a 1-D bounded minimiser of its action, and the stationarity residual."""
    import math

    import torch
    from scipy.optimize import minimize_scalar

    from attnlab.paths.theory import U_a_closed_form

    err, resid, s2L, s2a = 0.0, 0.0, 1.3, 0.8
    for H_L, N_L, N_a, trace in [(2, 10.0, 10.0, 3.0), (1, 5.0, 20.0, 0.4), (4, 30.0, 7.0, 9.0)]:

        def action(u: float, H_L: int = H_L, N_L: float = N_L, N_a: float = N_a, tr: float = trace) -> float:
            return N_a * (u / s2a - math.log(u)) + N_L * (tr / (u * s2L) + H_L * math.log(u))

        ref = minimize_scalar(action, bounds=(1e-6, 1e3), method="bounded", options={"xatol": 1e-13}).x
        cf = float(U_a_closed_form(torch.tensor(trace, dtype=torch.float64), H_L, N_L, N_a, s2L, s2a))
        err = max(err, abs(cf - ref) / max(1.0, ref))
        resid = max(resid, abs(N_a / s2a - N_a / cf - N_L * trace / (s2L * cf**2) + N_L * H_L / cf))
    return {"closed_form_vs_minimiser": err, "stationarity_residual": resid}
