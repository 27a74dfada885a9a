"""Implementations of `attnlab paths solve` and `attnlab paths sweep` (spec §11)."""

from __future__ import annotations

import argparse
import math
import time

import numpy as np

from attnlab.errors import AttnlabError
from attnlab.paths import plots
from attnlab.paths.errors import check
from attnlab.paths.experiment import PathData, ablations, alignment_record, build_data, sweep, theory_point
from attnlab.report import Report
from attnlab.runs import RunDir, default_run_dir

DEFAULT_NS = [10, 30, 50, 100, 300, 500, 1000]


def validate_common(args: argparse.Namespace) -> None:
    """Refuse bad values before any data is built."""
    check(args.temperature > 0, f"--temperature: must be > 0, got {args.temperature}")
    check(args.P >= 2, f"--P: need at least 2 training examples, got {args.P}")
    Ns = getattr(args, "Ns", None) or [getattr(args, "N", 1.0)]
    for N in Ns:
        check(N > 0, f"--N: widths must be positive (or inf for the GP limit), got {N}")


def data_from_args(args: argparse.Namespace) -> PathData:
    return build_data(args.task, args.P, args.n_test, getattr(args, "variant", "4path"), getattr(args, "heads", 2),
                      getattr(args, "layers", 2), seed=args.seed, memory_budget=getattr(args, "memory_budget", None))


def _run_dir(args: argparse.Namespace, command: str) -> RunDir:
    out = args.out if args.out is not None else default_run_dir(f"paths-{command}")
    return RunDir(out, "paths")


def _resolved(args: argparse.Namespace) -> dict:
    return {k: v for k, v in vars(args).items() if k != "func"}


def cmd_solve(args: argparse.Namespace) -> int:
    """One (N, T) point: U.npy, kernels.npz, metrics.json, figures, report.html."""
    validate_common(args)
    run = _run_dir(args, "solve")
    run.write_config({"command": "paths solve", **_resolved(args)})
    run.write_manifest(args.seed)
    data = data_from_args(args)
    sp, rec = theory_point(data, args.N, args.temperature, args.entropy_form, args.method, args.tol)
    np.save(run.path / "U.npy", sp.U)
    np.savez(run.path / "kernels.npz", C_train=data.gram.path_kernels().numpy(), y_train=data.y_train,
             y_test=data.y_test, xit_train=data.gram.xit.numpy(), xit_test=data.xit_test.numpy(),
             path_names=np.array(data.cfg.path_names()))
    sp.save(run.path / "saddle_point")
    run.write_json("metrics.json", rec)
    names = data.cfg.path_names()
    f1 = plots.u_heatmaps(run.figure_path(f"U_heatmap_N{_fmtN(args.N)}"), sp.U, names, title=f"U at N={args.N}")
    f2 = plots.solver_trace(run.figure_path("solver_trace"), sp.trace) if sp.trace else None
    f3 = plots.kernel_alignment(run.figure_path("kernel_alignment"), alignment_record(data, sp.U))
    rep = Report(f"attention paths: solve ({args.task}, N={args.N}, T={args.temperature})")
    rep.table([{k: rec[k] for k in ["N", "T", "alpha", "entropy_form", "converged", "iterations", "max_grad",
                                   "hessian_min_eig", "action", "accuracy", "accuracy_gp", "wall_s"]}])
    for f in [f1, f2, f3]:
        if f is not None:
            rep.figure(f)
    rep.write(run.path / "report.html")
    print(f"accuracy {rec['accuracy']:.4f} (GP {rec['accuracy_gp']:.4f}), max|grad| {sp.max_grad:.2e}, "
          f"{sp.iterations} iterations, converged={sp.converged}")
    print(f"run folder: {run.path}")
    if not sp.converged and not args.allow_unconverged:
        raise AttnlabError(f"solver did not converge (max|grad| = {sp.max_grad:.3g} >= tol {args.tol:g}); "
                           f"pass --allow-unconverged to keep the result", exit_code=2)
    return 0


def _fmtN(N: float) -> str:
    return "inf" if math.isinf(N) else f"{N:g}"


def run_sweep(data: PathData, Ns: list[float], T: float, form: str, method: str, tol: float, run: RunDir,
              title: str) -> tuple[Report, list[dict]]:
    """Sweep, write points.jsonl / metrics.json / figures, and return the report section."""
    t0 = time.perf_counter()
    res = sweep(data, Ns, T, form, method, tol)
    recs = [r for _, r in res]
    for sp, r in res:  # U ablations: off-diagonal zeroed / diagonal equalised to U[0, 0]
        ab = ablations(data, sp.U, T)
        r["accuracy_diagonal_only"], r["accuracy_equalised_diagonal"] = ab["diagonal_only"], ab["equalised_diagonal"]
    for r in recs:
        run.append_metrics(r)
    (run.path / "points.jsonl").write_bytes(run.metrics_path.read_bytes())
    run.write_json("metrics.json", {"points": recs, "wall_s": time.perf_counter() - t0})
    names = data.cfg.path_names()
    rep = Report(title)
    rep.paragraph(f"Markov-style sweep over N with the {form} entropy, T = {T}, P = {data.P}; points run from "
                  f"large to small N, each warm-started. Wall time {time.perf_counter() - t0:.1f} s.")
    rep.table([{k: r[k] for k in ["N", "alpha", "converged", "iterations", "max_grad", "hessian_min_eig",
                                 "accuracy", "accuracy_diagonal_only", "accuracy_equalised_diagonal"]
                + [k for k in r if k.startswith("accuracy_gp")]} for r in recs])
    rep.figure(plots.accuracy_vs_alpha(run.figure_path("accuracy_vs_alpha"), recs), "accuracy vs alpha")
    smallest = res[-1][0]
    rep.figure(plots.u_heatmaps(run.figure_path(f"U_heatmap_N{_fmtN(recs[-1]['N'])}"), smallest.U, names),
               f"U at N = {recs[-1]['N']}")
    rep.figure(plots.kernel_alignment(run.figure_path("kernel_alignment"), alignment_record(data, smallest.U)),
               f"kernel-task alignment at N = {recs[-1]['N']}")
    return rep, recs


def cmd_sweep(args: argparse.Namespace) -> int:
    """Accuracy vs alpha over a list of widths, with the GP baselines."""
    validate_common(args)
    run = _run_dir(args, "sweep")
    run.write_config({"command": "paths sweep", **_resolved(args)})
    run.write_manifest(args.seed)
    data = data_from_args(args)
    rep, recs = run_sweep(data, args.Ns, args.temperature, args.entropy_form, args.method, args.tol, run,
                          f"attention paths: sweep ({args.task})")
    rep.write(run.path / "report.html")
    for r in recs:
        print(f"N={_fmtN(r['N'])}: accuracy {r['accuracy']:.4f} (GP {r['accuracy_gp']:.4f}) converged={r['converged']}")
    print(f"run folder: {run.path}")
    bad = [r["N"] for r in recs if not r["converged"]]
    if bad and not args.allow_unconverged:
        raise AttnlabError(f"solver did not converge at N = {bad}; pass --allow-unconverged to keep them", exit_code=2)
    return 0
