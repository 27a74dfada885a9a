"""Our number for each measured reproduction target of attention paths.

Measures are computed from the study runs of `attnlab.reproduce.experiments`, read back from their
folders: each takes `runs` (experiment name -> `attnlab.reproduce.execute.Outcome`) and returns named
numbers, the keys its target's `Check`s compare. Direct computations (`compute(seed, size)`) call library
functions with no study command, checked against the spec's formulas; the unit tests call the same
functions. The rows are in `targets.py`."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np

from attnlab.targets import claim_numbers, folder_of, run_of


def p_t5(runs: dict) -> dict:
    return dict(runs["paths_ua"].numbers)


def p_t10(runs: dict) -> dict:
    s = run_of(runs, "paths_solve").summary
    return {"max_grad": s["max_grad"], "converged": float(s["converged"])}


def _points(runs: dict) -> list[dict]:
    from attnlab.runs import read_jsonl

    rows = read_jsonl(Path(run_of(runs, "paths_sweep").path) / "points.jsonl")
    return sorted(rows, key=lambda r: float(r["N"]))


def p_s1(runs: dict) -> dict:
    rows = _points(runs)
    dist = [float(np.linalg.norm(np.asarray(r["U"]) - np.eye(np.asarray(r["U"]).shape[0]))) for r in rows]
    gaps = [r["accuracy"] - r["accuracy_gp"] for r in rows]
    return {
        "max_grad": max(r["max_grad"] for r in rows),
        "min_hessian_eig": min(r["hessian_min_eig"] for r in rows),
        "max_increase_U_minus_I": max(np.diff(dist)) if len(dist) > 1 else -math.inf,
        "min_gap_points": 100 * min(gaps),
        "N_of_largest_gap": float(rows[int(np.argmax(gaps))]["N"]),
    }


def p_s2(runs: dict) -> dict:
    a = json.loads((Path(run_of(runs, "paths_solve").path) / "alignment.json").read_text())
    ren, gp = a["renormalised"]["captured"][:5], a["gp"]["captured"][:5]
    return {"min_c_k_difference_k1_5": min(r - g for r, g in zip(ren, gp))}


def p_b1(runs: dict) -> dict:
    rows = _points(runs)
    return {
        "max_grad": max(r["max_grad"] for r in rows),
        "max_point_seconds": max(r["wall_s"] for r in rows),
        "sweep_seconds": runs["paths_sweep"].seconds[""],
        "widths": len(rows),
    }


def p_b3(runs: dict) -> dict:
    """B3: the collapsed sampler's run (its seconds, agreement with the theory) and, where the profile runs it, the
    full-weight sampler's seconds and agreement; ESS per second of both (the spec reports them)."""
    s = run_of(runs, "paths_sample").summary
    out = {
        "collapsed_seconds": runs["paths_sample"].seconds[""],
        "rel_frob_err": s["rel_frob_err"],
        "accuracy_gap_points": 100 * abs(s["sampled_accuracy"] - s["theory_accuracy"]),
        "rhat_max": s["rhat_max"],
        "collapsed_ess_per_s": s.get("ess_per_s", math.nan),
    }
    if "paths_sample_full" in runs:
        f = run_of(runs, "paths_sample_full").summary
        out |= {"full_seconds": runs["paths_sample_full"].seconds[""], "full_rel_frob_err": f["rel_frob_err"],
                "full_rhat_max": f["rhat_max"], "full_ess_per_s": f.get("ess_per_s", math.nan)}  # fmt: skip
    return out


def p_b5(runs: dict) -> dict:
    """B5, each clause of the spec's digits pipeline: GD test accuracy and training seconds, whether the chosen
    (N, T) is the grid's best on validation episodes, the rank correlation of head scores with single-head drops,
    and how many heads the progressive (ascending-score) pruning removed."""
    m = json.loads((Path(run_of(runs, "paths_prune").path) / "metrics.json").read_text())
    best = max(m["grid"], key=lambda g: g["val_accuracy"])
    return {
        "gd_test_accuracy": m["gd_test_accuracy"],
        "gd_train_seconds": m.get("gd_train_seconds", math.nan),
        "pipeline_seconds": runs["paths_prune"].seconds[""],
        "grid_points": len(m["grid"]),
        "chosen_on_validation": float(best["N"] == m["chosen_N"] and best["T"] == m["chosen_T"]),
        "spearman_score_vs_drop": m["spearman_rho"],
        "heads_pruned_progressively": len(m["progressive"]["ascending score"]) - 1,
    }


def p_s6(runs: dict) -> dict:
    """S6: sampled-vs-theory error at N = 10, off-diagonal fraction of U at the smallest alpha and its growth."""
    from attnlab.paths.claims import offdiag_fraction, verdict_S6
    from attnlab.runs import read_jsonl

    folder = folder_of(runs["paths_layers"])
    out = claim_numbers(verdict_S6, folder, "sampled_vs_theory_err")
    recs = sorted(read_jsonl(folder / "sweep" / "points.jsonl"), key=lambda r: r["alpha"])
    fr = [offdiag_fraction(np.asarray(r["U"])) for r in recs]
    converged = json.loads((folder / "sample" / "metrics.json").read_text())["converged"]
    return out | {"offdiag_small_alpha": fr[0], "offdiag_growth": max(fr) / max(fr[0], 1e-300),
                  "sampler_converged": float(bool(converged))}  # fmt: skip


def p_s7(runs: dict) -> dict:
    from attnlab.paths.claims import verdict_S7

    return claim_numbers(verdict_S7, folder_of(runs["paths_ensemble"]), "rel_frob_err_gd")


def p_s8(runs: dict) -> dict:
    from attnlab.paths.claims import verdict_S8

    folder = folder_of(runs["paths_outputs"])
    converged = json.loads((folder / "metrics.json").read_text())["converged"]
    return claim_numbers(verdict_S8, folder, "rel_frob_err") | {"sampler_converged": float(bool(converged))}


def p_s9(runs: dict) -> dict:
    """S9: scalar predictor vs the GP at the same T (the spec's comparison) and at T/u_1 (relative RMS), and matrix
    minus GP test accuracy."""
    from attnlab.paths.claims import verdict_S9

    folder = folder_of(runs["paths_renorm"])
    c = json.loads((folder / "metrics.json").read_text())["renorm_comparison"]
    out = claim_numbers(verdict_S9, folder, "matrix_minus_gp_accuracy")
    return out | {
        "scalar_vs_gp_same_T": c["rms_pred_scalar_vs_gp"] / c["rms_pred_gp"],
        "scalar_vs_gp_matched_T": c["rms_pred_scalar_vs_gp_matched_T"] / c["rms_pred_gp"],
    }


def p_s10(runs: dict) -> dict:
    """S10: theory minus GP test accuracy on a trained network's attention maps (and the network's own)."""
    from attnlab.paths.claims import verdict_S10

    folder = folder_of(runs["paths_plugin"])
    m = json.loads((folder / "metrics.json").read_text())
    out = claim_numbers(verdict_S10, folder, "theory_minus_gp_accuracy")
    return out | {"theory_accuracy": m["accuracy"], "gp_accuracy": m["accuracy_gp"],
                  "network_accuracy": m["network_accuracy"]}  # fmt: skip


def p_s3(runs: dict) -> dict:
    """S3: the 2-path variant converges; renormalised minus GP test accuracy in points. No ablation is run."""
    s = run_of(runs, "paths_2path").summary
    return {"converged": float(s["converged"]), "gap_points": 100 * (s["accuracy"] - s["accuracy_gp"])}


def p_prune(runs: dict) -> dict:
    """Seed claim ("pruning with minimal performance loss"): test-accuracy drop after pruning the lowest-scored head
    and after the whole ascending-score curve, against the mean of the random orders."""
    m = json.loads((Path(run_of(runs, "paths_prune").path) / "metrics.json").read_text())
    curves, full = m["progressive"], m["gd_test_accuracy"]
    random_means = [float(np.mean(v)) for k, v in curves.items() if k.startswith("random")]
    asc = curves["ascending score"]
    return {"drop_first_pruned": full - asc[1] if len(asc) > 1 else math.nan,
            "ascending_minus_random_mean": float(np.mean(asc)) - float(np.mean(random_means)),
            "heads_pruned": len(asc) - 1}  # fmt: skip


def p_s5(runs: dict) -> dict:
    """S5: the digits smoke run's GD steps, its hand-off error (max |GD attention − theory attention|) and whether
    every head score is finite."""
    res = run_of(runs, "paths_smoke")
    m = json.loads((Path(res.path) / "metrics.json").read_text())
    return {"gd_steps": res.config.steps, "handoff_attention_err": m["handoff_attention_err"],
            "head_scores_finite": float(bool(np.all(np.isfinite(m["score"]))))}  # fmt: skip


def paths_ua(seed: int, size: dict) -> dict:
    """T5: U_a's closed form against the 1-D minimiser of its action, as tests/paths/test_theory.py checks it: a
    bounded minimiser (good to ~sqrt(eps) only, shown as closed_form_vs_bounded_minimiser) refined by a root-finder
    on the action's derivative bracketed within 1e-4 of it (good to eps: closed_form_vs_minimiser, judged)."""
    import math

    import torch
    from scipy.optimize import brentq, minimize_scalar

    from attnlab.paths.theory.action import U_a_closed_form

    err, rough_err, resid, s2L, s2a = 0.0, 0.0, 0.0, 1.3, 0.8
    for H_L, N_L, N_a, trace in [(2, 10.0, 10.0, 3.0), (1, 5.0, 20.0, 0.4), (4, 30.0, 7.0, 9.0)]:

        def action(u: float, H_L: int = H_L, N_L: float = N_L, N_a: float = N_a, tr: float = trace) -> float:
            return N_a * (u / s2a - math.log(u)) + N_L * (tr / (u * s2L) + H_L * math.log(u))

        def slope(u: float, H_L: int = H_L, N_L: float = N_L, N_a: float = N_a, tr: float = trace) -> float:
            return N_a / s2a - N_a / u - N_L * tr / (s2L * u**2) + N_L * H_L / u

        rough = minimize_scalar(action, bounds=(1e-6, 1e3), method="bounded", options={"xatol": 1e-13}).x
        ref = brentq(slope, rough * (1 - 1e-4), rough * (1 + 1e-4), xtol=1e-15, rtol=1e-15)
        cf = float(U_a_closed_form(torch.tensor(trace, dtype=torch.float64), H_L, N_L, N_a, s2L, s2a))
        err = max(err, abs(cf - ref) / max(1.0, ref))
        rough_err = max(rough_err, float(abs(cf - rough) / max(1.0, rough)))
        resid = max(resid, abs(slope(cf)))
    return {"closed_form_vs_minimiser": err, "closed_form_vs_bounded_minimiser": rough_err,
            "stationarity_residual": resid}  # fmt: skip


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
