"""Implementations of `attnlab paths sample` and `attnlab paths prune` (spec §7, §8, §11)."""

from __future__ import annotations

import argparse
import time

import numpy as np
import torch

from attnlab.paths import plots
from attnlab.paths.commands import _fmtN, _resolved, _run_dir, data_from_args, validate_common
from attnlab.paths.diagnostics import ebfmi, summarize
from attnlab.paths.errors import check
from attnlab.paths.experiment import PathData, theory_point
from attnlab.paths.predictor import metrics
from attnlab.paths.sampling import CollapsedTarget, FullTarget, PredictorSums, sample
from attnlab.report import Report

GATES = {"rhat_max": 1.01, "ess_bulk_min": 400, "ebfmi_min": 0.3, "divergence_rate": 0.005}


def add_sampler_opts(p: argparse.ArgumentParser) -> None:
    p.add_argument("--sampler", choices=["hmc", "mala"], default="hmc", help="sampler (default hmc)")
    p.add_argument("--target", choices=["collapsed", "full"], default="collapsed",
                   help="posterior: collapsed (V0 integrated out, default) or full (all weights)")
    p.add_argument("--chains", type=int, default=4, help="chains (default 4)")
    p.add_argument("--warmup", type=int, default=1000, help="warmup iterations (default 1000)")
    p.add_argument("--draws", type=int, default=2000, help="kept draws per chain (default 2000)")
    p.add_argument("--leapfrog", type=int, default=16, help="HMC leapfrog steps (default 16)")
    p.add_argument("--thin", type=int, default=1, help="keep every k-th draw (default 1)")
    p.add_argument("--predict-every", type=int, default=5, help="update the predictor every k kept draws (default 5)")
    p.add_argument("--method", choices=["newton", "lbfgs", "fixed_point"], default="newton", help="theory solver")


def run_sampler(data: PathData, N: int, T: float, chains: int, warmup: int, draws: int, kind: str = "hmc",
                n_leapfrog: int = 16, thin: int = 1, predict_every: int = 5, seed: int = 0,
                progress: bool = True, target_kind: str = "collapsed") -> dict:
    """Sampling at width N: U_hat (Eq 14) with MCSE, diagnostics, gates and the sampled predictor. The predictor
    is the Rao-Blackwellised mean over the upper-weight draws (valid for both targets: their upper-weight
    marginals are the same posterior)."""
    cfg = data.cfg.with_widths(N)
    cls = FullTarget if target_kind == "full" else CollapsedTarget
    target = cls(cfg, data.gram, data.y_train, T)
    sums = PredictorSums(target, data.xit_test, every=predict_every)
    t0 = time.perf_counter()
    res = sample(target, chains, warmup, draws, n_leapfrog, kind, seed=seed, thin=thin, on_draw=sums,
                 progress=progress)
    wall = time.perf_counter() - t0
    n = res.U.shape[-1]
    iu = np.triu_indices(n)
    s_U = summarize(res.U[:, :, iu[0], iu[1]])
    s_a = summarize(res.U_a[..., None])
    s_lp = summarize(res.log_prob[..., None])
    mean, var, fixed = sums.result()
    s_f = summarize(fixed)
    U_hat, U_mcse = np.zeros((n, n)), np.zeros((n, n))
    U_hat[iu], U_mcse[iu] = s_U["mean"], s_U["mcse"]
    U_hat, U_mcse = U_hat + np.triu(U_hat, 1).T, U_mcse + np.triu(U_mcse, 1).T
    rh = np.concatenate([s_U["rhat"], s_a["rhat"], s_lp["rhat"], s_f["rhat"]])
    es = np.concatenate([s_U["ess_bulk"], s_a["ess_bulk"], s_lp["ess_bulk"], s_f["ess_bulk"]])
    n_iter = res.U.shape[1] * thin
    rec = {"N": N, "T": T, "alpha": data.P / N, "sampler": kind, "target": target_kind, "chains": chains, "warmup": warmup, "draws": draws,
           "U_hat": U_hat, "U_mcse": U_mcse, "U_a_hat": float(s_a["mean"][0]), "U_a_mcse": float(s_a["mcse"][0]),
           "rhat_max": float(np.nanmax(rh)), "ess_bulk_min": float(np.nanmin(es)),
           "accept_mean": float(res.accept.mean()), "divergences": int(res.divergences.sum()),
           "numerical_rejections": int(res.numerical_rejections.sum()),
           "ebfmi_min": float(ebfmi(res.energy).min()), "step_size": res.step_size,
           "ess_per_s": float(np.nanmin(es)) / wall, "wall_s": wall, "pred_mean": mean, "pred_var": var}
    rec.update({f"sampled_{k}": v for k, v in metrics(_Pred(mean, var), data.y_test).items()})
    rec["converged"] = bool(rec["rhat_max"] <= GATES["rhat_max"] and rec["ess_bulk_min"] >= GATES["ess_bulk_min"]
                            and rec["ebfmi_min"] >= GATES["ebfmi_min"]
                            and rec["divergences"] <= GATES["divergence_rate"] * chains * n_iter)
    return rec


class _Pred:
    def __init__(self, mean, var):
        self.mean, self.var = mean, var


def cmd_sample(args: argparse.Namespace) -> int:
    """Sample at one width, solve the theory there, and compare U and the predictor."""
    validate_common(args)
    check(args.N >= 1 and float(args.N).is_integer(), f"--N: sampling needs a positive integer width, got {args.N}")
    check(args.chains >= 1, f"--chains: need at least 1 chain, got {args.chains}")
    check(args.draws >= 4, f"--draws: need at least 4 draws, got {args.draws}")
    torch.manual_seed(args.seed)
    run = _run_dir(args, "sample")
    run.write_config({"command": "paths sample", **_resolved(args)})
    run.write_manifest(args.seed)
    data = data_from_args(args)
    sp, th = theory_point(data, args.N, args.temperature, args.entropy_form, args.method)
    rec = run_sampler(data, int(args.N), args.temperature, args.chains, args.warmup, args.draws, args.sampler,
                      args.leapfrog, args.thin, args.predict_every, args.seed, target_kind=args.target)
    rec["rel_frob_err"] = float(np.linalg.norm(rec["U_hat"] - sp.U) / np.linalg.norm(sp.U))
    rec["theory"] = th
    rec["pred_gap"] = float(np.sqrt(np.mean((rec["pred_mean"] - _theory_mean(data, sp.U, args.temperature)) ** 2)))
    np.save(run.path / "U.npy", sp.U)
    np.save(run.path / "U_hat.npy", rec["U_hat"])
    run.write_json("metrics.json", {k: v for k, v in rec.items() if k not in ("pred_mean", "pred_var")})
    names = data.cfg.path_names()
    rep = Report(f"attention paths: sample (N={_fmtN(args.N)}, T={args.temperature})")
    rep.table([{k: rec[k] for k in ["N", "alpha", "sampler", "rhat_max", "ess_bulk_min", "accept_mean",
                                   "divergences", "ebfmi_min", "rel_frob_err", "sampled_accuracy", "wall_s",
                                   "converged"]} | {"theory_accuracy": th["accuracy"]}])
    rep.figure(plots.u_heatmaps(run.figure_path(f"U_heatmap_N{_fmtN(args.N)}"), sp.U, names, rec["U_hat"],
                                f"{args.entropy_form} theory vs sampled, N={_fmtN(args.N)}"))
    rep.write(run.path / "report.html")
    if not rec["converged"]:
        print(f"warning: sampler gates failed (R-hat {rec['rhat_max']:.3f}, bulk ESS {rec['ess_bulk_min']:.0f}); "
              "results carry converged=false")
    print(f"sampled U vs {args.entropy_form} theory: relative Frobenius error {rec['rel_frob_err']:.3f}; "
          f"accuracy sampled {rec['sampled_accuracy']:.4f}, theory {th['accuracy']:.4f}")
    print(f"run folder: {run.path}")
    return 0


def _theory_mean(data: PathData, U: np.ndarray, T: float) -> np.ndarray:
    from attnlab.paths.predictor import predict

    return predict(U, data.gram, data.y_train, T, data.xit_test).mean


def add_prune_opts(p: argparse.ArgumentParser) -> None:
    p.add_argument("--steps", type=int, default=300, help="gradient-descent steps (default 300; spec default 3000)")
    p.add_argument("--heads", type=int, default=4, help="heads per layer (default 4)")
    p.add_argument("--layers", type=int, default=2, help="layers (default 2)")
    p.add_argument("--width", type=int, default=128, help="GD network width (default 128)")
    p.add_argument("--d-qk", type=int, default=16, help="query/key dimension (default 16)")
    p.add_argument("--P", type=int, default=300, help="theory episodes (default 300)")
    p.add_argument("--n-test", type=int, default=1000, help="test episodes (default 1000)")
    p.add_argument("--Ns", type=float, nargs="+", default=[20.0, 200.0], help="theory widths tried on validation")
    p.add_argument("--temperatures", type=float, nargs="+", default=[0.1, 1.0], help="temperatures tried on validation")
    p.add_argument("--pool", type=int, default=4000, help="training episodes pool for GD batches (default 4000)")
    p.add_argument("--seed", type=int, default=42, help="random seed (default 42)")
    p.add_argument("--out", default=None, help="run folder (default runs/paths-prune-<timestamp>)")


def cmd_prune(args: argparse.Namespace) -> None | int:
    from attnlab.paths.prune_run import run_prune

    for name in ("steps", "heads", "layers", "width", "d_qk", "P", "n_test", "pool"):
        check(getattr(args, name) >= 1, f"--{name.replace('_', '-')}: must be >= 1, got {getattr(args, name)}")
    check(args.heads >= 2, f"--heads: pruning needs at least 2 heads per layer, got {args.heads}")
    for T in args.temperatures:
        check(T > 0, f"--temperatures: each must be > 0, got {T}")
    for N in args.Ns:
        check(N > 0, f"--Ns: widths must be positive, got {N}")
    run = _run_dir(args, "prune")
    run.write_config({"command": "paths prune", **_resolved(args)})
    run.write_manifest(args.seed)
    run_prune(args, run)
    print(f"run folder: {run.path}")
    return 0
