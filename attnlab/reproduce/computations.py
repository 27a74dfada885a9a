"""The direct computations behind a few targets: library functions checked against the spec's formulas, with no
study command to run (each returns named numbers, which reproduce saves). The unit tests that cover the same
formulas call the same library functions."""

from __future__ import annotations

import math
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

    from attnlab.paths.theory.action import U_a_closed_form

    err, resid, s2L, s2a = 0.0, 0.0, 1.3, 0.8
    for H_L, N_L, N_a, trace in [(2, 10.0, 10.0, 3.0), (1, 5.0, 20.0, 0.4), (4, 30.0, 7.0, 9.0)]:

        def action(u: float, H_L: int = H_L, N_L: float = N_L, N_a: float = N_a, tr: float = trace) -> float:
            return N_a * (u / s2a - math.log(u)) + N_L * (tr / (u * s2L) + H_L * math.log(u))

        ref = minimize_scalar(action, bounds=(1e-6, 1e3), method="bounded", options={"xatol": 1e-13}).x
        cf = float(U_a_closed_form(torch.tensor(trace, dtype=torch.float64), H_L, N_L, N_a, s2L, s2a))
        err = max(err, abs(cf - ref) / max(1.0, ref))
        resid = max(resid, abs(N_a / s2a - N_a / cf - N_L * trace / (s2L * cf**2) + N_L * H_L / cf))
    return {"closed_form_vs_minimiser": err, "stationarity_residual": resid}


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


# --- attention-paths §13 CI-fast checks (T1-T4, T7-T9): the library functions tests/paths/ checks, on a tiny random
# network of bilinear heads (P = 10, N0 = 6, n_tok = 4), their largest deviation recorded ------------------------
def _tiny_paths(H: tuple[int, ...], P: int = 10, readout: str = "last", seed: int = 0) -> tuple:
    """(network, x [P, n_tok, N0], y [P], its path Gram) for random bilinear heads per layer `H`."""
    import numpy as np
    import torch

    from attnlab.paths.networks.architecture import HeadSpec, PathConfig, PathNetwork
    from attnlab.paths.networks.kernels import PathGram, scaled_paths

    rng = np.random.default_rng(seed)
    layers = [[HeadSpec("bilinear", W=rng.standard_normal((6, 6)) / 2) for _ in range(h)] for h in H]
    net = PathNetwork(PathConfig(layers, tuple([5.0] * (len(H) + 1)), tuple([1.0] * (len(H) + 2)), readout))
    x = torch.tensor(rng.standard_normal((P, 4, 6)))
    y = np.where(np.arange(P) < P // 2, 1.0, -1.0)
    return net, x, y, PathGram(scaled_paths(net.paths(x)))


def _problem(gram: Any, y: Any, H: tuple[int, ...], N: float = 5.0, T: float = 0.1, form: str = "chain",
             variances: tuple[float, ...] | None = None) -> Any:  # fmt: skip
    import torch

    from attnlab.paths.theory.action import Problem

    L = len(H)
    return Problem(gram, torch.tensor(y), T, list(H), tuple([float(N)] * (L + 1)),
                   tuple(variances or [1.0] * (L + 2)), form)  # fmt: skip


def _paths_t1_t3() -> dict:
    """T1 layer form vs path form; T2 attention rows sum to 1 and layer 2 is softmax of the raw x; T3 Gram mode,
    factor mode and the direct contraction."""
    import numpy as np
    import torch

    from attnlab.paths.networks.kernels import PathGram

    t1 = 0.0
    for H, readout in [((2, 2), "last"), ((2, 1), "mean"), ((3,), "first")]:
        net, x, _, _ = _tiny_paths(H, readout=readout)
        w = net.init_weights(x.shape[-1], torch.Generator().manual_seed(1))
        t1 = max(t1, float((net.forward(x, w) - net.forward_paths(x, w)).abs().max()))
    net, x, _, gram = _tiny_paths((2, 2))
    A = net.attention(x)
    t2 = max(float((a.sum(-1) - 1).abs().max()) for a in A)
    for h, head in enumerate(net.cfg.layers[1]):
        score = (x @ torch.as_tensor(head.W) @ x.transpose(1, 2)).transpose(1, 2)
        t2 = max(t2, float((A[1][:, h] - torch.softmax(score, -1)).abs().max()))
    M = torch.tensor(np.random.default_rng(2).standard_normal((4, 4)))
    U = M @ M.T
    direct = sum(U[p, q] * gram.xit[:, p] @ gram.xit[:, q].T for p in range(4) for q in range(4))
    fac = PathGram(gram.xit, mode="factor")
    t3 = max(float((g.kernel(U) - direct).abs().max()) for g in (gram, fac))
    return {"T1_max_abs_diff": t1, "T2_max_abs_diff": t2, "T3_max_abs_diff": t3}


def _paths_t4_t7() -> dict:
    """T4 the entropy gradient at the GP point and the solver at N = 1e12; T7 the analytic gradient against
    autograd and central finite differences (relative)."""
    import numpy as np
    import torch

    from attnlab.paths.theory.action import action_value, entropy_gp_gradient, evaluate
    from attnlab.paths.theory.solver import solve_saddle_point

    _, _, y, gram = _tiny_paths((2, 2))
    grad = max(entropy_gp_gradient(_problem(gram, y, (2, 2), 7.0, form=f, variances=(1.0, 1.3, 0.7, 1.1)))
               for f in ("chain", "simple"))  # fmt: skip
    huge = float(np.abs(solve_saddle_point(_problem(gram, y, (2, 2), N=1e12), hessian=False).U - np.eye(4)).max())
    auto_err, fd_err, rng = 0.0, 0.0, np.random.default_rng(0)
    for form in ("chain", "simple"):
        prob = _problem(gram, y, (2, 2), N=4.0, form=form)
        Ms = [torch.tensor(rng.standard_normal((n, n))) for n in prob.sizes()]
        Us = [(M @ M.T / M.shape[0] + torch.eye(M.shape[0], dtype=torch.float64)).requires_grad_(True) for M in Ms]
        ev = evaluate(prob, Us)
        for g, auto in zip(ev.grads, torch.autograd.grad(action_value(prob, Us), Us)):
            auto_err = max(auto_err, float((g.detach() - 0.5 * (auto + auto.T)).abs().max()))
        for l, U in enumerate(Us):
            D = torch.tensor(rng.standard_normal(U.shape))
            D = D + D.T
            shifted = [[u.detach() + (s * 1e-5 * D if k == l else 0) for k, u in enumerate(Us)] for s in (1, -1)]
            fd = float(action_value(prob, shifted[0]) - action_value(prob, shifted[1])) / 2e-5
            an = float((ev.grads[l].detach() * D).sum())
            fd_err = max(fd_err, abs(fd - an) / max(1.0, abs(an)))
    return {"T4_gp_entropy_gradient": float(grad), "T4_huge_N_max_abs_U_minus_I": huge,
            "T7_grad_vs_autograd": auto_err, "T7_grad_vs_fd_rel": fd_err}  # fmt: skip


def _paths_t8_t9() -> dict:
    """T8 H = 1 (L = 1, 2; both forms): the solver (tol 1e-11) against `scalar_reference`, and U -> Σ² as α -> 0;
    T9 the predictor at U = Σ²I against GP regression (mean, variance) and the smallest variance."""
    import numpy as np
    import torch

    from attnlab.paths.theory.action import scalar_reference
    from attnlab.paths.theory.predictor import gp_U, predict
    from attnlab.paths.theory.solver import solve_saddle_point

    ref_err, small_err = 0.0, 0.0
    for L in (1, 2):
        _, _, y, gram = _tiny_paths((1,) * L, P=12)
        for form in ("chain", "simple"):
            for N in (3.0, 30.0):
                prob = _problem(gram, y, (1,) * L, N=N, T=0.05, form=form)
                sp = solve_saddle_point(prob, tol=1e-11, hessian=False)
                ref = scalar_reference(gram.path_kernels()[0, 0], prob.Y, 0.05, prob.alpha, L, form)
                ref_err = max(ref_err, abs(sp.U[0, 0] - ref) / max(1, ref) if sp.converged else math.inf)
            small = solve_saddle_point(_problem(gram, y, (1,) * L, N=1e10, T=0.05, form=form), hessian=False)
            small_err = max(small_err, abs(small.U[0, 0] - 1.0))
    _, _, y, gram = _tiny_paths((2, 2))
    K = sum(gram.xit[:, p] @ gram.xit[:, p].T for p in range(4))
    pred = predict(gp_U(4), gram, y, 0.1, gram.xit)
    reg = K + 0.1 * torch.eye(10, dtype=torch.float64)
    mean = (K @ torch.linalg.solve(reg, torch.tensor(y))).numpy()
    var = torch.diag(K - K @ torch.linalg.solve(reg, K)).numpy()
    return {"T8_solver_vs_root_finder": float(ref_err), "T8_small_alpha_U_minus_1": float(small_err),
            "T9_mean_vs_gp": float(np.abs(pred.mean - mean).max()), "T9_var_vs_gp": float(np.abs(pred.var - var).max()),
            "T9_min_var": float(pred.var.min())}  # fmt: skip


def paths_units(seed: int, size: dict) -> dict:
    """The attention-paths T1-T4 and T7-T9 numbers (module section above)."""
    return {**_paths_t1_t3(), **_paths_t4_t7(), **_paths_t8_t9()}


# --- consensus §7 CI-fast checks (R2a, R4a, R4b, C-norm): `integrate` as tests/consensus/test_invariants.py runs it --
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
    align = 0.0
    for mask in ("full", "causal"):
        spec = AttentionSpec("SA", mask, torch.tensor([1.0], dtype=torch.float64))
        tr = integrate(_sphere_starts(8, 6, d, 12), Constant(P2, V[None]), spec, t_max=60.0, h=0.1, method="rk4",
                       measures=())  # fmt: skip
        align = max(align, float((1 - np.abs(tr.final.numpy() @ v1)).max()))
    return {"R4a_max_rel_energy_drop": rel_drop, "R4b_max_misalignment": align}


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


# --- attention-paths §13 sampler checks (T12, T14, T17): the diagnostics and the collapsed target tests/paths/ uses --
def _ar1_chains(rho: float, n: int, chains: int, seed: int) -> Any:
    """[chains, n] stationary AR(1) chains with coefficient `rho` and unit innovations."""
    import numpy as np

    rng = np.random.default_rng(seed)
    x = np.zeros((chains, n))
    x[:, 0] = rng.standard_normal(chains) / math.sqrt(1 - rho**2)
    for t in range(1, n):
        x[:, t] = rho * x[:, t - 1] + rng.standard_normal(chains)
    return x


def _diagnostics() -> dict:
    """T12: the largest relative error of ESS and bulk ESS against n(1 − ρ)/(1 + ρ) for ρ = 0, 0.5, 0.9 (4 chains
    of 4000), and R̂ of 4 chains of 1000 when one is shifted by 2."""
    from attnlab.paths.sampling.diagnostics import ess, ess_bulk, rhat

    err = 0.0
    for rho in (0.0, 0.5, 0.9):
        x = _ar1_chains(rho, 4000, 4, 1)
        expect = x.size * (1 - rho) / (1 + rho)
        err = max(err, abs(ess(x) - expect) / expect, abs(ess_bulk(x) - expect) / expect)
    x = _ar1_chains(0.5, 1000, 4, 2)
    x[0] += 2.0
    return {"T12_ess_max_rel_err": float(err), "T12_rhat_shifted": float(rhat(x))}


def _collapsed() -> dict:
    """T14: prior-only collapsed HMC (4 chains, 300 + 600 draws) on a tiny network: the largest |mean Û − Σ²I| in
    MCSE units; T17: the collapsed log density against the explicit Gaussian marginal over V^(0) (its Jacobian)."""
    import numpy as np
    import torch

    from attnlab.paths.networks.architecture import PathNetwork
    from attnlab.paths.sampling.diagnostics import summarize
    from attnlab.paths.sampling.sampler import CollapsedTarget, sample_chains

    net, x, y, gram = _tiny_paths((2, 2), P=6)
    tgt = CollapsedTarget(net.cfg.with_widths(4), gram, y, 0.1, prior_only=True)
    res = sample_chains(tgt, chains=4, warmup=300, draws=600, n_leapfrog=8, seed=0, progress=False)
    iu = np.triu_indices(4)
    s = summarize(res.U[:, :, iu[0], iu[1]])
    z = float(np.max(np.abs(s["mean"] - np.eye(4)[iu]) / s["mcse"]))
    net, x, y, gram = _tiny_paths((2, 2), P=8)
    cfg = net.cfg.with_widths(3)
    tgt = CollapsedTarget(cfg, gram, y, 0.2)
    theta = tgt.prior_draw(2, torch.Generator().manual_seed(5))
    lp, _ = tgt.log_prob(theta)
    pnet, Y, worst = PathNetwork(cfg), torch.tensor(y), 0.0
    for c in range(2):
        w = tgt.unpack(theta[c : c + 1])
        w = {"V": [v[0] for v in w["V"]], "a": w["a"][0]}
        V0 = torch.zeros(3, x.shape[-1], dtype=torch.float64)
        J = torch.autograd.functional.jacobian(lambda v, w=w: pnet.forward(x, {**w, "V0": v}), V0).reshape(8, -1)
        cov = J @ J.T * cfg.variances[0] + 0.2 * torch.eye(8, dtype=torch.float64)
        marg = -0.5 * torch.logdet(cov) - 0.5 * Y @ torch.linalg.solve(cov, Y)
        prior = -0.5 * (theta[c] ** 2 / tgt.prior_sd**2).sum()
        worst = max(worst, abs(float(lp[c] - prior - marg)))
    return {"T14_max_z": z, "T17_max_abs_diff": worst}


def paths_sampling_units(seed: int, size: dict) -> dict:
    """The attention-paths T12, T14 and T17 numbers (module section above)."""
    return {**_diagnostics(), **_collapsed()}
