"""The direct computations behind some reproduction targets of consensus: library functions run with no study command,
checked against the spec's formulas (each `compute(seed, size)` returns named numbers, which reproduce saves): the
tails, late phase, rho, the loop benchmark, the unit identities (R2a, R4a, R4b, C-norm, C-order, C-ref, C-meas), the
rotating-V lags (R4c) and the equiangular rho gap (R5b). The tiny random Llama stacks (R8, C-llama) are in
`checks_llama.py`. The unit tests that cover the same formulas call the same library functions; the rows are in
`targets.py`, the measures that read study runs in `measures.py`."""

from __future__ import annotations

import math
import time
from typing import Any

import numpy as np

from attnlab.core.targets import QUIET_LOAD, TIMING_THREADS, machine_load


def cons_tails(seed: int, size: dict) -> dict:
    """R2c: fitted slope of log E_pair over E in [1e-11, 1e-3] against spec 4.6, n = 8, d = 5, P = V = I: per case
    the worst |slope / prediction - 1| over the starts, and per start (`worst_rel_err start<i>`, the same starts in
    every case) the worst over the cases, which the row's bootstrap over starts resamples."""
    import torch

    from attnlab.consensus.dynamics import AttentionSpec
    from attnlab.consensus.integrators import integrate
    from attnlab.consensus.schedules import Constant
    from attnlab.consensus.theory import fit_log_slope, tail_slope

    n, beta, rows = 8, 0.5, {}
    per_start = np.zeros(size["batch"])
    for case in ("full_SA", "full_USA", "causal_SA", "causal_USA"):
        mask, kind = case.split("_")
        g = torch.Generator().manual_seed(seed + 3)
        X0 = torch.randn(size["batch"], n, 5, generator=g, dtype=torch.float64)
        X0[..., 0] = X0[..., 0].abs() + 2.0  # a hemisphere start
        t_max = 45.0 if mask == "causal" else 12.0
        spec = AttentionSpec(kind, mask, torch.tensor([beta]))
        tr = integrate(X0, Constant(), spec, t_max=t_max, h=0.05, method="rk4", measures=("E_pair",))
        pred = tail_slope(case, beta=beta, n=n)
        errs = np.array([abs(fit_log_slope(tr.t, E, 1e-11, 1e-3) / pred - 1) for E in tr.measures["E_pair"]])
        rows[f"{case}_predicted"] = pred
        rows[f"{case}_rel_err"] = float(errs.max())
        per_start = np.maximum(per_start, errs)
    return rows | per_start_numbers("worst_rel_err", per_start)


def per_start_numbers(key: str, values: Any, what: str = "start") -> dict[str, float]:
    """{"<key> <what><i>": values[i]}: a worst-case statistic per start (or prompt), flat for the experiment's mark;
    the row's interval resamples them (`targets.worst_case_intervals`)."""
    return {f"{key} {what}{i}": float(v) for i, v in enumerate(np.asarray(values, dtype=float))}


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


def _loop_euler_step(X: Any, P: Any, beta: float, h: float) -> Any:
    """One projected-Euler step of one start X [n, d] with a Python loop over queries and keys (B1's baseline)."""
    import numpy as np

    n, _ = X.shape
    out = np.empty_like(X)
    for i in range(n):
        scores = np.array([beta * float(X[i] @ P @ X[j]) for j in range(n)])
        w = np.exp(scores - scores.max())
        v = sum(w[j] / w.sum() * X[j] for j in range(n))
        y = X[i] + h * (v - float(X[i] @ v) * X[i])
        out[i] = y / np.linalg.norm(y)
    return out


def cons_bench(seed: int, size: dict) -> dict:
    """B1 (consensus §11): batched RK4 and Euler on 256 starts, n = 32, d = 8, SA, t = 30, h = 0.1, float64
    (`consensus.integrators.integrate`, as `consensus simulate` calls it), and the per-token loop baseline on
    `baseline_starts` starts x `baseline_steps` steps, extrapolated per start-step (RK4: 4 field evaluations)."""
    import math

    import torch

    from attnlab.consensus.dynamics import AttentionSpec
    from attnlab.consensus.integrators import integrate
    from attnlab.consensus.schedules import Constant

    B, n, d, T, h, beta = 256, 32, 8, 30.0, 0.1, 1.0
    g = torch.Generator().manual_seed(seed)
    X0 = torch.randn(B, n, d, generator=g, dtype=torch.float64)
    X0 = X0 / X0.norm(dim=-1, keepdim=True)
    P = torch.randn(1, d, d, generator=g, dtype=torch.float64) / math.sqrt(d)
    spec = AttentionSpec("SA", "full", torch.tensor([beta]))
    out: dict[str, float] = {}
    for method in ("euler", "rk4"):
        t0 = time.perf_counter()
        integrate(X0, Constant(P, None), spec, T, h, method, measures=("E_first",))
        out[f"{method}_seconds"] = time.perf_counter() - t0
    starts, steps = size["baseline_starts"], size["baseline_steps"]
    t0 = time.perf_counter()
    for b in range(starts):
        X = X0[b].numpy().copy()
        for _ in range(steps):
            X = _loop_euler_step(X, P[0].numpy(), beta, h)
    per_start_step = (time.perf_counter() - t0) / (starts * steps)
    full_steps = B * int(round(T / h))
    out["speedup_euler"] = per_start_step * full_steps / out["euler_seconds"]
    out["speedup_rk4"] = 4 * per_start_step * full_steps / out["rk4_seconds"]
    return out


B2_THREADS = TIMING_THREADS  # consensus §11: "≤ 60 s on 2 cores"


def cons_b2(seed: int, size: dict) -> dict:
    """B2 (consensus §11): the phase diagram at `PhaseConfig`'s defaults (n = 32, d = 8, 90 β in [0.1, 9], 256
    starts, t ≤ 30, h = 0.1, projected Euler, float64; `sweeps.phase_diagram`, as `consensus phase` calls it),
    timed on `size["threads"]` (default `B2_THREADS`) torch threads set for this experiment only by the CLI helper
    (`core.clitools.threads`). `load_at_start` is the 1-minute load average when it began (`os.getloadavg`):
    `quiet` is 1 when it was below `QUIET_LOAD`, so the time is the machine's own. Other keys of `size` override
    `PhaseConfig` fields (a smaller sweep, for tests)."""
    from attnlab.consensus.config import PhaseConfig
    from attnlab.consensus.sweeps import Sweep, phase_diagram
    from attnlab.core.clitools import threads

    cfg = PhaseConfig(seed=seed, **{k: v for k, v in size.items() if k != "threads"})
    sweep = Sweep(cfg.n, cfg.d, cfg.starts, cfg.t_max, cfg.h, cfg.integrator, cfg.kind, cfg.seed)
    n_threads, load = int(size.get("threads", B2_THREADS)), machine_load()
    with threads(n_threads):
        t0 = time.perf_counter()
        pdg = phase_diagram(np.linspace(cfg.beta_min, cfg.beta_max, cfg.num_betas), sweep)
        seconds = time.perf_counter() - t0
    return {"phase_seconds": seconds, "threads": float(n_threads), "load_at_start": float(load),
            "quiet": float(load < QUIET_LOAD), "frac_finite": float(np.isfinite(pdg.frac).all())}  # fmt: skip


def _sphere_starts(B: int, n: int, d: int, seed: int) -> Any:
    """[B, n, d] Gaussian tokens normalised onto the sphere (float64)."""
    import torch

    g = torch.Generator().manual_seed(seed)
    X = torch.randn(B, n, d, generator=g, dtype=torch.float64)
    return X / X.norm(dim=-1, keepdim=True)


def _hemisphere_drops() -> dict:
    """R2a: V = I, random P, tokens near the boundary of the hemisphere <w, x> > 0: the largest per-step drop of
    min_i <w, x_i>, per integrator family (projected Euler and post-norm; RK4 and exp-Euler), both masks."""
    import numpy as np
    import torch

    from attnlab.consensus.dynamics import AttentionSpec
    from attnlab.consensus.integrators import integrate
    from attnlab.consensus.schedules import make_schedule

    g = torch.Generator().manual_seed(6)
    X = torch.randn(8, 8, 4, generator=g, dtype=torch.float64)
    X[..., 0] = 0.02 + 0.3 * torch.rand(8, 8, generator=g, dtype=torch.float64)
    X = X / X.norm(dim=-1, keepdim=True)
    drops = {"euler_postnorm": -math.inf, "rk4_exp_euler": -math.inf}
    for method, family in (("euler", "euler_postnorm"), ("postnorm", "euler_postnorm"), ("rk4", "rk4_exp_euler"),
                           ("exp_euler", "rk4_exp_euler")):  # fmt: skip
        for mask in ("full", "causal"):
            for kind, scale in (("SA", 3.0), ("USA", 0.5)):
                sch = make_schedule("random", d=4, heads=2, seed=7, scale=scale, delta=0.5)
                tr = integrate(X, sch, AttentionSpec(kind, mask, torch.tensor([1.0, 1.0])), t_max=4.0, h=0.05,
                               method=method, record_every=1)  # fmt: skip
                assert tr.states is not None  # record_every=1 keeps every state
                margin = tr.states[..., 0].min(-1)
                drops[family] = max(drops[family], float(np.max(margin[:, :-1] - margin[:, 1:])))
    return {f"R2a_max_drop_{k}": v for k, v in drops.items()}


def _energy_and_top_eigenvector() -> dict:
    """R4a: V = P symmetric (and P = I), RK4: the largest relative per-step drop of F_{β,P}; R4b: constant symmetric
    V with gap 0.4, t = 60: the largest 1 − |<x_i, v_1>|, both masks."""
    import numpy as np
    import torch

    from attnlab.consensus import measures as M
    from attnlab.consensus.dynamics import AttentionSpec
    from attnlab.consensus.integrators import integrate
    from attnlab.consensus.schedules import Constant
    from attnlab.consensus.theory import consensus_point

    d, beta, rel_drop = 4, 1.5, -math.inf
    A = torch.randn(d, d, generator=torch.Generator().manual_seed(8), dtype=torch.float64) / d**0.5
    for kind in ("SA", "USA"):
        for P, Pm in ((None, torch.eye(d, dtype=torch.float64)), (((A + A.T) / 2)[None], (A + A.T) / 2)):
            spec = AttentionSpec(kind, "full", torch.tensor([beta]))
            tr = integrate(_sphere_starts(8, 10, d, 9), Constant(P, P), spec, t_max=8.0, h=0.05, method="rk4",
                           record_every=1)  # fmt: skip
            X = torch.from_numpy(tr.states)
            F = np.stack([M.energy(X[:, k], beta, Pm).numpy() for k in range(X.shape[1])], 1)
            rel_drop = max(rel_drop, float(((F[:, :-1] - F[:, 1:]) / np.abs(F[:, :-1])).max()))
    g = torch.Generator().manual_seed(11)
    Q, _ = torch.linalg.qr(torch.randn(d, d, generator=g, dtype=torch.float64))
    V = Q @ torch.diag(torch.tensor([1.0, 0.6, 0.2, -0.3], dtype=torch.float64)) @ Q.T
    P2 = torch.randn(1, d, d, generator=g, dtype=torch.float64) / d
    v1, _, _ = consensus_point(V.numpy())
    align = np.zeros(8)  # per start (the same 8 starts under both masks): the largest 1 - |<x_i, v_1>|
    for mask in ("full", "causal"):
        spec = AttentionSpec("SA", mask, torch.tensor([1.0], dtype=torch.float64))
        tr = integrate(_sphere_starts(8, 6, d, 12), Constant(P2, V[None]), spec, t_max=60.0, h=0.1, method="rk4",
                       measures=())  # fmt: skip
        align = np.maximum(align, (1 - np.abs(tr.final.numpy() @ v1)).max(-1))
    return {"R4a_max_rel_energy_drop": rel_drop, "R4b_max_misalignment": float(align.max()),
            **per_start_numbers("R4b_max_misalignment", align)}  # fmt: skip


def _norms() -> dict:
    """C-norm: the largest | ‖x_i‖ − 1 | over every recorded state, each integrator and schedule (two heads, random
    V)."""
    import numpy as np
    import torch

    from attnlab.consensus.dynamics import AttentionSpec
    from attnlab.consensus.integrators import integrate
    from attnlab.consensus.schedules import make_schedule

    worst = 0.0
    for method in ("rk4", "euler", "exp_euler", "postnorm"):
        for schedule in ("constant", "periodic", "cycle", "random"):
            sch = make_schedule(schedule, d=4, heads=2, seed=1, value="random", delta=0.5)
            tr = integrate(_sphere_starts(4, 6, 4, 0), sch, AttentionSpec("SA", "full", torch.tensor([1.0, 2.0])),
                           t_max=3.0, h=0.05, method=method, record_every=1)  # fmt: skip
            assert tr.states is not None
            worst = max(worst, float(np.abs(np.linalg.norm(tr.states, axis=-1) - 1).max()))
    return {"C-norm_max_abs_norm_minus_1": worst}


def _solver_problem(mask: str, seed: int) -> tuple:
    """(X0 [1, 8, 4], P [2, 4, 4], V [2, 4, 4], spec): two SA heads with random P and V, as
    tests/consensus/test_solvers.py builds them."""
    import torch

    from attnlab.consensus.dynamics import AttentionSpec

    g = torch.Generator().manual_seed(seed)
    P = torch.randn(2, 4, 4, generator=g, dtype=torch.float64) / 2
    V = torch.randn(2, 4, 4, generator=g, dtype=torch.float64) / 2
    X0 = torch.randn(1, 8, 4, generator=g, dtype=torch.float64)
    return X0 / X0.norm(dim=-1, keepdim=True), P, V, AttentionSpec("SA", mask, torch.tensor([1.0, 0.7]))


def _orders_and_references() -> dict:
    """C-order: the observed order of each integrator from halving h (0.1 -> 0.05, against RK4 at h = 0.2/64, t = 1);
    C-ref: RK4 at h = 0.01 against DOP853 (rtol = atol = 1e-13) to t = 5, both masks, and USA on the circle against
    the angle ODE to t = 3."""
    import numpy as np
    import torch
    from scipy.integrate import solve_ivp

    from attnlab.consensus.dynamics import AttentionSpec, velocity
    from attnlab.consensus.integrators import integrate
    from attnlab.consensus.schedules import Constant

    X0, P, V, spec = _solver_problem("full", 1)
    sch = Constant(P, V)
    ref = integrate(X0, sch, spec, t_max=1.0, h=0.2 / 64, method="rk4", measures=()).final
    out: dict[str, float] = {}
    for method in ("rk4", "euler", "exp_euler", "postnorm"):
        errs = [float((integrate(X0, sch, spec, t_max=1.0, h=h, method=method, measures=()).final - ref).abs().max())
                for h in (0.1, 0.05)]  # fmt: skip
        out[f"C-order_{method}"] = float(np.log2(errs[0] / errs[1]))
    dop = 0.0
    for mask in ("full", "causal"):
        X0, P, V, spec = _solver_problem(mask, 0)

        def rhs(_t: float, y: Any, X0: Any = X0, P: Any = P, V: Any = V, spec: Any = spec) -> Any:
            return velocity(torch.from_numpy(y).reshape(X0.shape), P, V, spec).reshape(-1).numpy()

        exact = solve_ivp(rhs, (0, 5.0), X0.reshape(-1).numpy(), method="DOP853", rtol=1e-13, atol=1e-13).y[:, -1]
        tr = integrate(X0, Constant(P, V), spec, t_max=5.0, h=0.01, method="rk4", measures=())
        dop = max(dop, float(np.abs(tr.final.reshape(-1).numpy() - exact).max()))
    n, beta = 6, 1.3
    th0 = np.linspace(0, 2.5, n) + 0.1 * np.arange(n) ** 2

    def angles(_t: float, th: Any) -> Any:
        diff = th[:, None] - th[None, :]
        return -(np.exp(beta * np.cos(diff)) * np.sin(diff)).sum(1) / n

    th = solve_ivp(angles, (0, 3.0), th0, method="DOP853", rtol=1e-13, atol=1e-13).y[:, -1]
    X0c = torch.from_numpy(np.stack([np.cos(th0), np.sin(th0)], -1)).unsqueeze(0)
    usa = AttentionSpec("USA", "full", torch.tensor([beta], dtype=torch.float64))
    Xc = integrate(X0c, Constant(), usa, t_max=3.0, h=0.01, method="rk4", measures=()).final[0].numpy()
    circle = float(np.abs(Xc - np.stack([np.cos(th), np.sin(th)], -1)).max())
    return out | {"C-ref_rk4_vs_dop853": dop, "C-ref_usa_circle_vs_angle_ode": circle}


def _measure_identities() -> dict:
    """C-meas (spec §6 identities, `consensus.measures`): at consensus E_first = E_pair = max_gap = 0 and top share =
    participation ratio = 1; 4 orthonormal tokens: participation ratio 4, top share 1/4; an antipodal pair: E_first 1,
    max_gap 2; every measure invariant under a rotation. The largest deviation, and whether the cluster counts of
    consensus (1) and of 3 planted clusters (3) are right."""
    import torch

    from attnlab.consensus import measures as M

    X = torch.tensor([0.3, -0.2, 0.9], dtype=torch.float64).repeat(1, 5, 1)
    errs = [abs(float(M.compute([n], X)[n])) for n in ("E_first", "E_pair", "max_gap")]
    errs += [abs(float(M.top_share(X)) - 1), abs(float(M.participation_ratio(X)) - 1)]
    Q = torch.eye(6, dtype=torch.float64)[:4].unsqueeze(0)
    errs += [abs(float(M.participation_ratio(Q)) - 4), abs(float(M.top_share(Q)) - 0.25)]
    pair = torch.tensor([[[1.0, 0.0], [-1.0, 0.0]]], dtype=torch.float64)
    errs += [abs(float(M.E_first(pair)) - 1), abs(float(M.max_gap(pair)) - 2)]
    g = torch.Generator().manual_seed(1)
    Y = torch.randn(3, 7, 4, generator=g, dtype=torch.float64)
    R, _ = torch.linalg.qr(torch.randn(4, 4, generator=g, dtype=torch.float64))
    names = ("E_first", "E_pair", "max_gap", "clustered_fraction", "cluster_count", "top_share", "participation_ratio",
             "energy")  # fmt: skip
    a, b = M.compute(names, Y), M.compute(names, Y @ R.T)
    errs += [float((a[n].double() - b[n].double()).abs().max()) for n in names]
    centres = torch.eye(5, dtype=torch.float64)[:3].repeat_interleave(4, 0)
    planted = centres + 1e-4 * torch.randn(12, 5, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    counts_right = int(M.cluster_count(X)) == 1 and int(M.cluster_count(planted.unsqueeze(0))) == 3
    return {"C-meas_max_identity_err": max(errs), "C-meas_cluster_counts_right": float(counts_right)}


def cons_units(seed: int, size: dict) -> dict:
    """The consensus R2a, R4a, R4b, C-norm, C-order, C-ref and C-meas numbers (module section above)."""
    return {**_hemisphere_drops(), **_energy_and_top_eigenvector(), **_norms(), **_orders_and_references(),
            **_measure_identities()}  # fmt: skip


# --- issue 18: R4c, R5b (R8, C-llama: checks_llama.py) ----------------------------------------------------------------
_LAMBDAS = (1.0, 0.6, 0.2, -0.3)  # R4b's spectrum of V: gap lambda_1 - lambda_2 = 0.4


def _rotating_value(P: Any, lam: tuple[float, ...], omega: float) -> Any:
    """A schedule with constant P [1, d, d] and V(t) = R(wt) diag(lam) R(wt)^T [1, d, d], R(a) the rotation by a in
    the (e_1, e_2) plane: V's top eigenvector v_1(t) = (cos wt, sin wt, 0, ...) turns at rate w = `omega` in its
    top eigenplane (spec 4.4)."""
    import torch

    from attnlab.consensus.schedules import Schedule

    class RotatingValue(Schedule):
        name = "rotating value"

        def weights(self, t: float) -> tuple[Any, Any]:
            c, s = math.cos(omega * t), math.sin(omega * t)
            R = torch.eye(len(lam), dtype=torch.float64)
            R[0, 0], R[0, 1], R[1, 0], R[1, 1] = c, -s, s, c
            return P, (R @ torch.diag(torch.tensor(lam, dtype=torch.float64)) @ R.T)[None]

    return RotatingValue()


def rotating_lags(omega: float, mask: str, starts: int, seed: int, lam: tuple[float, ...] = _LAMBDAS,
                  t_max: float = 60.0) -> tuple[np.ndarray, float]:  # fmt: skip
    """R4c: SA, n = 6, d = len(lam), random constant P (as R4b), V rotating at rate `omega` (`_rotating_value`),
    RK4 h = 0.1 to `t_max`, states every t = 1. After the transient (t >= t_max / 2: consensus forms and the
    angle relaxes at rate lambda_1 - lambda_2 = 0.4, e^-12 by then): the angle by which the consensus point (the
    normalised token mean) lags behind v_1(t) in the rotation plane, `[starts, records]` (positive: behind), and the
    largest 1 - |<x_i, mean>| there (how closely the tokens are at consensus)."""
    import torch

    from attnlab.consensus.dynamics import AttentionSpec
    from attnlab.consensus.integrators import integrate

    d = len(lam)
    P = torch.randn(1, d, d, generator=torch.Generator().manual_seed(seed + 11), dtype=torch.float64) / d
    spec = AttentionSpec("SA", mask, torch.tensor([1.0], dtype=torch.float64))
    tr = integrate(_sphere_starts(starts, 6, d, seed + 12), _rotating_value(P, lam, omega), spec, t_max=t_max,
                   h=0.1, method="rk4", measures=(), record_every=10)  # fmt: skip
    assert tr.states is not None  # record_every=10 keeps every tenth state
    late = tr.t_states >= t_max / 2
    S, t = tr.states[:, late], tr.t_states[late]  # [starts, records, n, d]
    m = S.mean(2)
    m /= np.linalg.norm(m, axis=-1, keepdims=True)
    ahead = (np.arctan2(m[..., 1], m[..., 0]) - omega * t + np.pi / 2) % np.pi - np.pi / 2  # +-v_1: one point
    spread = float((1 - np.abs(np.einsum("brnd,brd->brn", S, m))).max())
    return -ahead, spread


def cons_lag(seed: int, size: dict) -> dict:
    """R4c: for each mask and rate w of the profile, the largest relative error of the lag after the transient
    (t in [30, 60], every start and record) against `theory.predicted_lag(w, lambda_1, lambda_2)` = w / 0.4
    (spec 4.4), and the largest over all; per start (the same starts for every mask and w) the largest over them
    (`R4c_max_rel_err_lag start<i>`)."""
    from attnlab.consensus.theory import predicted_lag

    out: dict[str, float] = {}
    per_start = np.zeros(size["starts"])
    for mask in size["masks"]:
        for omega in size["omegas"]:
            lag, spread = rotating_lags(omega, mask, size["starts"], seed)
            err = np.abs(lag / predicted_lag(omega, _LAMBDAS[0], _LAMBDAS[1]) - 1).max(-1)  # [starts]
            out[f"R4c_rel_err {mask} w={omega:g}"] = float(err.max())
            out["R4c_max_spread_after_transient"] = max(out.get("R4c_max_spread_after_transient", 0.0), spread)
            per_start = np.maximum(per_start, err)
    worst = max(v for k, v in out.items() if k.startswith("R4c_rel_err"))
    return out | {"R4c_max_rel_err_lag": worst} | per_start_numbers("R4c_max_rel_err_lag", per_start)


def rho_gap(X0: Any, kind: str, beta: float) -> float:
    """R5b for starts X0 [batch, n, d]: the sup over starts of `rho_gaps`."""
    return float(rho_gaps(X0, kind, beta).max())


def rho_gaps(X0: Any, kind: str, beta: float) -> np.ndarray:
    """R5b per start of X0 [batch, n, d] (full attention, P = V = I, RK4 h = 0.05 to t = 12, states every 4 steps, as
    tests/consensus/test_slow_theory.py): [batch], the sup over recorded times of |mean off-diagonal cosine -
    rho(t)|, rho from GLPR's equiangular ODE (spec 4.5) with rho(0) = 0."""
    import torch

    from attnlab.consensus.dynamics import AttentionSpec
    from attnlab.consensus.integrators import integrate
    from attnlab.consensus.schedules import Constant
    from attnlab.consensus.theory import rho_solution

    n = X0.shape[1]
    spec = AttentionSpec(kind, "full", torch.tensor([beta]))
    tr = integrate(X0, Constant(), spec, t_max=12.0, h=0.05, method="rk4", measures=(), record_every=4)
    assert tr.states is not None  # record_every=4 keeps every fourth state
    S = torch.from_numpy(tr.states)
    off = ((S @ S.transpose(-1, -2)).sum((-1, -2)) - n) / (n * (n - 1))  # [batch, records]
    return np.abs(off.numpy() - rho_solution(tr.t_states, beta, n, kind)[None]).max(-1)


def cons_rho_sim(seed: int, size: dict) -> dict:
    """R5b: d = 512, n = 32, `starts` Gaussian starts (nearly orthogonal tokens, rho(0) ~ 0), SA at beta = 1 and 4,
    USA at beta = 1: each case's sup-gap (`rho_gaps`), the largest, and per start (the same starts in every case)
    the largest over the cases (`R5b_max_gap start<i>`)."""
    import torch

    X0 = torch.randn(size["starts"], 32, 512, generator=torch.Generator().manual_seed(seed + 22), dtype=torch.float64)
    gaps = {f"R5b_gap {kind} beta={beta:g}": rho_gaps(X0, kind, beta) for kind, beta in (("SA", 1.0), ("SA", 4.0),
                                                                                         ("USA", 1.0))}  # fmt: skip
    out = {k: float(g.max()) for k, g in gaps.items()}
    per_start = np.max(np.stack(list(gaps.values())), 0)
    return (
        out
        | {"R5b_max_gap": max(out.values()), "R5b_starts": size["starts"]}
        | per_start_numbers("R5b_max_gap", per_start)
    )
