"""Run functions of `attnlab paths solve|sweep|sample|prune`: compute, save everything the report needs, report.

Each is `fn(config, out=None, *, mode="new") -> RunResult` and writes one run folder (docs/attention-paths.md):

- `solve`: `U.npy` [n_paths, n_paths], `kernels.npz`, `K_train.npy` (K(U) [P, P]), `saddle_point.{safetensors,json}`,
  `metrics.json`, `paths.json` (path names), `alignment.json`; an unconverged solve keeps the folder and raises
  `NumericalError` (exit 2) unless `allow_unconverged`;
- `sweep`: `metrics.jsonl` (one line per width, written as each point finishes; `--resume` continues after the
  last complete line from `checkpoints/`), `points.jsonl`, `metrics.json`, `paths.json`, `alignment.json` (and
  `report_title.json` when a `title` is given);
- `sample`: `U.npy`, `U_hat.npy`, `metrics.json`, `paths.json`;
- `prune`: `gd_model.{safetensors,json}`, `metrics.json`.

Sizes are checked against memory before the folder is opened, so a refused size leaves nothing behind.
Device (`--device`, issue 22): `solve`, `sweep` and `prune` solve on it (`attnlab.paths.theory.solver`; the data
and the predictor stay on the cpu) and `prune` trains its network there; `sample` runs its chains there.
`RUNNERS` maps each command to (config class, run function) for `attnlab rerun` and sweeps.
"""

from __future__ import annotations

import io
import math
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from attnlab.errors import InputError, NumericalError
from attnlab.paths import report
from attnlab.paths.config import EnsembleConfig, PruneConfig, SampleConfig, SolveConfig, SweepConfig
from attnlab.paths.figures import fmt_N
from attnlab.paths.tasks.data import PathData, build_data, check_sizes, task_shape
from attnlab.runs import RunDir, RunResult, frame, open_run, read_jsonl, write_bytes, write_jsonl
from attnlab.runs.configs import config_to_dict

Config = SolveConfig | SweepConfig | SampleConfig | EnsembleConfig


def _frame(rows: list[dict]) -> Any:
    return frame(rows)


def _scalars(rec: dict) -> dict:
    """The scalar entries of a record (arrays such as U left out), for tables."""
    return {k: v for k, v in rec.items() if not isinstance(v, (list, tuple, dict, np.ndarray))}


def _precheck(config: Config, device: Any = None, command: str = "paths solve") -> None:
    """Refuse sizes that cannot fit before any folder is opened or any data drawn: the RAM, and a GPU's memory
    for the solves of `command` on `device`."""
    n_tok, N0, H = task_shape(config.task, config.variant, config.heads, config.layers, None)
    mode = check_sizes(config.P, config.n_test, n_tok, N0, H, "auto", config.memory_budget)
    if device is not None:
        _check_solve_memory(f"{command} --P {config.P}", device, (config.P, math.prod(H), N0, mode), H, config)


def _check_solve_memory(what: str, device: Any, shape: tuple[int, int, int, str], H: list[int], config: Any) -> None:
    """One line, before the folder opens, when the solves of a Gram of `shape` (P, n_paths, N0, mode) would not
    fit the GPU's memory (`attnlab.paths.theory.solver.device_bytes`); nothing on the cpu."""
    from attnlab.paths.theory.action import order_parameter_sizes
    from attnlab.paths.theory.solver import check_solve_memory

    outputs = getattr(config, "outputs", 1)
    sizes = order_parameter_sizes(H, config.entropy_form, outputs)
    kind = "path-output pairs" if outputs > 1 else "paths"
    check_solve_memory(f"{what} ({shape[1]} {kind}, {shape[3]} mode)", device, shape, sizes, config.method)


def _data(config: Config) -> PathData:
    return build_data(config.task, config.P, config.n_test, config.variant, config.heads, config.layers,
                      seed=config.seed, memory_budget=config.memory_budget)  # fmt: skip


def _check_resume(run: RunDir, config: Any, mode: str) -> None:
    """On --resume, refuse a config that differs from the saved one, naming the fields."""
    if mode != "resume":
        return
    saved, now = run.read_config(), config_to_dict(config)
    diff = sorted(k for k in set(saved) | set(now) if saved.get(k) != now.get(k))
    if diff:
        verb = "differs" if len(diff) == 1 else "differ"
        raise InputError(f"--resume: {', '.join(diff)} {verb} from the saved config.json of {run.path}; "
                         "resume with the same options, or use --overwrite / a new --out")  # fmt: skip


def _write_paths(run: RunDir, data: PathData) -> None:
    run.write_json("paths.json", {"path_names": data.cfg.path_names(), "heads": data.cfg.H})


# --- solve -----------------------------------------------------------------------------------------------------
def solve(config: SolveConfig, out: str | Path | None = None, *, mode: str = "new") -> RunResult:
    """The order parameter U at one (N, T) point, its test accuracy and the GP baselines (spec §5.6, §6); the
    solve on `config.device` (the data, predictor and files on the cpu)."""
    from attnlab.core.device import on_device, resolve
    from attnlab.paths.theory.points import alignment_record, theory_point

    device = resolve(config.device)  # cuda without a GPU: one line, before anything
    if config.outputs > 1:
        return _solve_outputs(config, out, mode, device)
    if config.attention == "precomputed":
        return _solve_plugin(config, out, mode, device)
    _precheck(config, device)
    with open_run(out, "paths solve", config, mode=mode, seed=config.seed, prefix="paths-solve") as run:
        _check_resume(run, config, mode)
        data = _data(config)
        gram = data.gram.to(device)  # the path kernels copied once (on the cpu: the data's own)
        with on_device(device):
            sp, rec = theory_point(data, config.N, config.temperature, config.entropy_form, config.method,
                                   config.tol, gram=gram)  # fmt: skip
            if config.renorm == "scalar":
                rec = _scalar_renorm(data, config, sp.U, rec, gram)
        rec |= _ablation_record(data, sp.U, config.temperature)  # of the matrix U (S3; spec §9.1)
        run.save_npy("U.npy", np.asarray(rec["U"]))
        buf = io.BytesIO()
        np.savez(buf, C_train=data.gram.path_kernels().numpy(), y_train=data.y_train, y_test=data.y_test,
                 xit_train=data.gram.xit.numpy(), xit_test=data.xit_test.numpy(),
                 path_names=np.array(data.cfg.path_names()))  # fmt: skip
        write_bytes(run.file("kernels.npz"), buf.getvalue())
        run.save_npy("K_train.npy", _renormalised_kernel(data, rec["U"]))
        sp.save(run.file("saddle_point"))
        run.write_json("metrics.json", rec)
        _write_paths(run, data)
        run.write_json("alignment.json", alignment_record(data, sp.U))
        report.write_report(run)
    summary = {k: rec[k] for k in ("accuracy", "accuracy_gp", "max_grad", "iterations", "converged")}
    result = RunResult(run.path, config, summary, {"point": _frame([_scalars(rec)])})
    if not sp.converged and not config.allow_unconverged:
        raise NumericalError(f"solver did not converge (max|grad| = {sp.max_grad:.3g} >= tol {config.tol:g}); "
                             f"results kept in {run.path}; pass --allow-unconverged to accept them")  # fmt: skip
    return result


def _ablation_record(data: PathData, U: Any, T: float) -> dict[str, float]:
    """`accuracy_diagonal_only` and `accuracy_equalised_diagonal`: test accuracy of the two ablations of U (spec
    §9.1, `theory.points.ablated_U`), computed on the cpu from the data's Gram."""
    from attnlab.paths.theory.points import ABLATIONS, ablations

    ab = ablations(data, np.asarray(U), T)
    return {f"accuracy_{k}": ab[k] for k in ABLATIONS}


def _renormalised_kernel(data: PathData, U: Any) -> np.ndarray:
    """K(U) = sum U^{pi pi'} C^{pi pi'} on the training points [P, P] (spec K2), saved for the report's kernel view."""
    import torch

    return data.gram.kernel(torch.as_tensor(np.asarray(U), dtype=torch.float64)).numpy()


def _scalar_renorm(data: PathData, config: SolveConfig, U_matrix: np.ndarray, rec: dict, gram: Any) -> dict:
    """`--renorm scalar` (spec §16, S9): the record of the scalar saddle point (solved on `gram`'s device), with
    the matrix solve kept under `renorm_comparison` (accuracies and predictor gaps of scalar, matrix and GP)."""
    from attnlab.paths.theory.points import make_problem
    from attnlab.paths.theory.renorm import renorm_record, scalar_U

    prob = make_problem(data, config.N, config.temperature, config.entropy_form, gram)
    cmp = renorm_record(data, prob, U_matrix)
    U = scalar_U(prob, cmp["u_scalar"][0]).cpu().numpy()
    return {**rec, "renorm": "scalar", "U": U, "accuracy": cmp["accuracy_scalar"], "renorm_comparison": cmp}


def _multi_data(config: SolveConfig | SampleConfig) -> Any:
    from attnlab.paths.sampling.outputs import build_multi

    return build_multi(config.P, config.n_test, config.variant, config.outputs, config.memory_budget)


def _write_multi_paths(run: RunDir, md: Any) -> None:
    from attnlab.paths.sampling.outputs import OUTPUT_NAMES

    names = [f"{p}|{o}" for p in md.cfg.path_names() for o in OUTPUT_NAMES[: md.M]]
    run.write_json("paths.json", {"path_names": names, "heads": md.cfg.H, "outputs": md.M})


def _solve_outputs(config: SolveConfig, out: str | Path | None, mode: str, device: Any) -> RunResult:
    """`paths solve --outputs M` (spec §16, S8): U over (path, output) pairs on the Markov task's M targets."""
    from attnlab.core.device import on_device
    from attnlab.paths.sampling.outputs import multi_theory
    from attnlab.paths.theory.predictor import alignment

    md = _multi_data(config)  # sizes are checked here, before the folder is opened
    g = md.gram
    _check_solve_memory(f"paths solve --outputs {md.M} --P {config.P}", device, (g.P, g.n_paths, g.N0, g.mode),
                        md.cfg.H, config)  # fmt: skip
    with open_run(out, "paths solve", config, mode=mode, seed=config.seed, prefix="paths-solve") as run:
        _check_resume(run, config, mode)
        with on_device(device):
            sp, rec = multi_theory(md, config.N, config.temperature, config.entropy_form, config.method, config.tol,
                                   device=device)  # fmt: skip
        run.save_npy("U.npy", sp.U)
        sp.save(run.file("saddle_point"))
        run.write_json("metrics.json", rec)
        _write_multi_paths(run, md)
        run.write_json("alignment.json", {"renormalised": alignment(sp.U, md.gram, md.Y_train.reshape(-1))})
        report.write_report(run)
    summary = {k: rec[k] for k in ("accuracy", "accuracy_gp", "max_grad", "iterations", "converged")}
    if not sp.converged and not config.allow_unconverged:
        raise NumericalError(f"solver did not converge (max|grad| = {sp.max_grad:.3g}); results kept in {run.path}")
    return RunResult(run.path, config, summary, {"point": _frame([_scalars(rec)])})


def _solve_plugin(config: SolveConfig, out: str | Path | None, mode: str, device: Any) -> RunResult:
    """`paths solve --attention precomputed --from RUN` (spec §16, S10): the trained network's attention maps as
    precomputed heads; theory vs GP vs the network itself on the same test episodes."""
    from attnlab.core.device import on_device
    from attnlab.paths.pruning import plugin
    from attnlab.paths.tasks.digits import digit_episodes
    from attnlab.paths.theory.points import alignment_record, theory_point

    model = plugin.load_trained(str(config.from_run))
    data, net_acc = plugin.plugin_data(model, config.P, config.n_test, config.memory_budget)
    g = data.gram
    _check_solve_memory(f"paths solve --attention precomputed --P {config.P}", device,
                        (g.P, g.n_paths, g.N0, g.mode), data.cfg.H, config)  # fmt: skip
    with open_run(out, "paths solve", config, mode=mode, seed=config.seed, prefix="paths-solve") as run:
        _check_resume(run, config, mode)
        with on_device(device):
            sp, rec = theory_point(data, config.N, config.temperature, config.entropy_form, config.method,
                                   config.tol, gram=data.gram.to(device))  # fmt: skip
        rec |= {"attention": "precomputed", "from_run": str(config.from_run), "network_accuracy": net_acc,
                "handoff_gap": plugin.handoff_gap(model, digit_episodes(20, "test")[0])}  # fmt: skip
        run.save_npy("U.npy", sp.U)
        sp.save(run.file("saddle_point"))
        run.write_json("metrics.json", rec)
        _write_paths(run, data)
        run.write_json("alignment.json", alignment_record(data, sp.U))
        report.write_report(run)
    summary = {k: rec[k] for k in ("accuracy", "accuracy_gp", "max_grad", "iterations", "converged")}
    summary["network_accuracy"] = net_acc
    if not sp.converged and not config.allow_unconverged:
        raise NumericalError(f"solver did not converge (max|grad| = {sp.max_grad:.3g}); results kept in {run.path}")
    return RunResult(run.path, config, summary, {"point": _frame([_scalars(rec)])})


def _sample_outputs(config: SampleConfig, out: str | Path | None, mode: str) -> RunResult:
    """`paths sample --outputs M`: HMC over the upper weights with readout A [M, N_a] against the theory's U."""
    from attnlab.paths.sampling.outputs import multi_sample, multi_theory

    md = _multi_data(config)
    with open_run(out, "paths sample", config, mode=mode, seed=config.seed, prefix="paths-sample") as run:
        _check_resume(run, config, mode)
        T = config.temperature
        sp, th = multi_theory(md, config.N, T, config.entropy_form, config.method)
        rec = multi_sample(md, int(config.N), T, config.chains, config.warmup, config.draws, config.leapfrog,
                           config.seed)  # fmt: skip
        rec["rel_frob_err"] = float(np.linalg.norm(rec["U_hat"] - sp.U) / np.linalg.norm(sp.U))
        gates = rec["rhat_max"] <= 1.01 and rec["ess_bulk_min"] >= 400
        rec |= {"N": config.N, "alpha": md.P / config.N, "sampler": "hmc", "ebfmi_min": None,
                "sampled_accuracy": None, "wall_s": rec["sample_wall_s"], "converged": bool(gates),
                "theory": th, "outputs": md.M}  # fmt: skip
        run.save_npy("U.npy", sp.U)
        run.save_npy("U_hat.npy", rec["U_hat"])
        run.write_json("metrics.json", rec)
        _write_multi_paths(run, md)
        report.write_report(run)
    summary = {k: rec[k] for k in ("rhat_max", "ess_bulk_min", "converged", "rel_frob_err", "sampled_accuracy")}
    summary["theory_accuracy"] = th["accuracy"]
    return RunResult(run.path, config, summary, {"sample": _frame([_scalars(rec)])})


# --- sweep -----------------------------------------------------------------------------------------------------
def _sweep_start(run: RunDir, mode: str, order: list[float]) -> tuple[list[dict], list | None]:
    """(complete records already in metrics.jsonl, warm start of the next point). A fresh run starts empty;
    on resume the records must be the first widths of the sweep order, and a line cut by a kill is dropped."""
    import torch

    if mode != "resume":
        return [], None
    recs = run.metrics(("N", "converged"))
    if [r["N"] for r in recs] != order[: len(recs)]:
        raise InputError(f"--resume: {run.metrics_path} does not hold the first widths of this sweep; use --overwrite")
    write_jsonl(run.metrics_path, recs)  # drop a cut last line before appending
    if not recs or not recs[-1]["converged"] or math.isinf(float(recs[-1]["N"])):
        return recs, None
    chain = run.file(f"checkpoints/chain_{len(recs) - 1}.npz")
    if not chain.is_file():
        raise InputError(f"--resume: {chain} is missing; use --overwrite to start the sweep again")
    with np.load(chain) as z:
        return recs, [torch.tensor(z[f"U_{l + 1}"]) for l in range(len(z.files))]


def _save_chain(run: RunDir, index: int, chain: list[np.ndarray]) -> None:
    buf = io.BytesIO()
    arrays: dict[str, Any] = {f"U_{l + 1}": u for l, u in enumerate(chain)}
    np.savez(buf, **arrays)
    write_bytes(run.file(f"checkpoints/chain_{index}.npz"), buf.getvalue())


def sweep(
    config: SweepConfig, out: str | Path | None = None, *, mode: str = "new", title: str | None = None
) -> RunResult:
    """Accuracy vs alpha over widths (large to small N, each warm-started), with the GP baselines and the two
    U ablations; one metrics line per width as it finishes."""
    from attnlab.core.device import on_device, resolve
    from attnlab.paths.theory.points import alignment_record, sweep_points

    device = resolve(config.device)  # the solves run there; the data, predictor and ablations on the cpu
    _precheck(config, device, "paths sweep")
    order = sorted(config.Ns, reverse=True)
    with open_run(out, "paths sweep", config, mode=mode, seed=config.seed, prefix="paths-sweep") as run:
        _check_resume(run, config, mode)
        if mode == "resume" and _sweep_finished(run, order):
            return _sweep_result(run.path, config, nothing_to_do=True)
        t0 = time.perf_counter()
        data = _data(config)
        recs, init = _sweep_start(run, mode, order)
        T = config.temperature
        todo = order[len(recs) :]
        with on_device(device):
            points = sweep_points(data, todo, T, config.entropy_form, config.method, config.tol, init,
                                  gram=data.gram.to(device))  # fmt: skip
            for sp, r in points:
                r |= _ablation_record(data, sp.U, T)  # off-diagonal zeroed / diagonal equalised to U[0, 0]
                _save_chain(run, len(recs), sp.chain)
                run.append_metrics(r)
                run.resume_hint = "continue it with --resume"
                recs.append(r)
        write_bytes(run.file("points.jsonl"), run.metrics_path.read_bytes())
        run.write_json("metrics.json", {"points": recs, "wall_s": time.perf_counter() - t0})
        _write_paths(run, data)
        run.write_json("alignment.json", alignment_record(data, np.asarray(recs[-1]["U"])))
        if title is not None:
            run.write_json(report.TITLE_FILE, {"title": title})
        report.write_report(run)
    return _sweep_result(run.path, config)


def _sweep_finished(run: RunDir, order: list[float]) -> bool:
    """Whether every width of the sweep is done and its results and report are written (a cut line is not)."""
    text = run.metrics_path.read_text() if run.metrics_path.is_file() else ""
    recs = run.metrics(("N", "converged"))
    done = [r["N"] for r in recs] == order and text.endswith("\n") and len(text.splitlines()) == len(recs)
    return done and all(run.file(f).is_file() for f in ("points.jsonl", "metrics.json", "report.html"))


def _sweep_result(path: Path, config: SweepConfig, nothing_to_do: bool = False) -> RunResult:
    """The sweep's result from points.jsonl; unconverged widths are a NumericalError unless allowed."""
    rows = read_jsonl(path / "points.jsonl")
    summary: dict[str, Any] = {"accuracy": {fmt_N(r["N"]): r["accuracy"] for r in rows}}
    if nothing_to_do:
        summary["nothing_to_do"] = f"nothing to do: {path} already holds every width of the sweep; no file changed"
    result = RunResult(path, config, summary, {"points": _frame([_scalars(r) for r in rows])})
    bad = [r["N"] for r in rows if not r["converged"]]
    if bad and not config.allow_unconverged:
        raise NumericalError(f"solver did not converge at N = {bad}; results kept in {path}; "
                             "pass --allow-unconverged to accept them")  # fmt: skip
    return result


# --- sample ----------------------------------------------------------------------------------------------------
def sample(config: SampleConfig, out: str | Path | None = None, *, mode: str = "new") -> RunResult:
    """Posterior sampling at width N against the theory there: sampled U_hat vs U, predictor gap, gates."""
    from attnlab.paths.sampling.posterior import sample_point, until_gates
    from attnlab.paths.theory.points import theory_point
    from attnlab.paths.theory.predictor import predict

    if config.outputs > 1:
        return _sample_outputs(config, out, mode)
    from attnlab.core.device import on_device, resolve
    from attnlab.paths.sampling.posterior import check_sample_memory

    _precheck(config)
    device = resolve(config.device)  # the chains run there; the theory solve stays on the cpu (scipy)
    with open_run(out, "paths sample", config, mode=mode, seed=config.seed, prefix="paths-sample") as run:
        _check_resume(run, config, mode)
        data = _data(config)
        check_sample_memory(config, data.gram, device)  # one line; the failed run leaves no folder
        T = config.temperature
        sp, th = theory_point(data, config.N, T, config.entropy_form, config.method)

        def draw(draws: int) -> dict:  # one try; --doublings reruns it with doubled draws until the gates pass
            return sample_point(data, int(config.N), T, config.chains, config.warmup, draws, config.sampler,
                                config.leapfrog, config.thin, config.predict_every, config.seed,
                                target_kind=config.target, device=device)  # fmt: skip

        with on_device(device):
            rec = until_gates(draw, config.draws, config.doublings)
        rec["rel_frob_err"] = float(np.linalg.norm(rec["U_hat"] - sp.U) / np.linalg.norm(sp.U))
        rec["theory"] = th
        theory_mean = predict(sp.U, data.gram, data.y_train, T, data.xit_test).mean
        rec["pred_gap"] = float(np.sqrt(np.mean((rec["pred_mean"] - theory_mean) ** 2)))
        run.save_npy("U.npy", sp.U)
        run.save_npy("U_hat.npy", rec["U_hat"])
        run.write_json("metrics.json", {k: v for k, v in rec.items() if k not in ("pred_mean", "pred_var")})
        _write_paths(run, data)
        report.write_report(run)
    keys = ("rhat_max", "ess_bulk_min", "converged", "rel_frob_err", "sampled_accuracy", "draws_used", "tries")
    summary = {k: rec[k] for k in keys} | {"theory_accuracy": th["accuracy"]}
    return RunResult(run.path, config, summary, {"sample": _frame([_scalars(rec)])})


# --- prune -----------------------------------------------------------------------------------------------------
def prune(config: PruneConfig, out: str | Path | None = None, *, mode: str = "new") -> RunResult:
    """GD training on digit episodes -> hand-off of Q/K -> theory U ((N, T) chosen on validation episodes) ->
    head scores -> single-head and progressive pruning drops (spec §8, §9.3). On `config.device`: the GD training
    and the theory solves; the trained network's evaluations (forward passes) on the cpu."""
    from attnlab.core.device import on_device, resolve
    from attnlab.paths.pruning.gradient_descent import save_checkpoint
    from attnlab.paths.pruning.pipeline import check_prune_memory, prune_pipeline, train_network
    from attnlab.paths.tasks.digits import N0, N_TOK

    device = resolve(config.device)
    gram_mode = check_sizes(config.P, config.n_test, N_TOK, N0, [config.heads] * config.layers)
    check_prune_memory(config, gram_mode, device)
    with open_run(out, "paths prune", config, mode=mode, seed=config.seed, prefix="paths-prune") as run:
        _check_resume(run, config, mode)
        t0 = time.perf_counter()
        with on_device(device):
            model, log = train_network(config, device)  # the model comes back on the cpu
        train_seconds = time.perf_counter() - t0
        save_checkpoint(model, run.file("gd_model"))
        with on_device(device):
            rec = prune_pipeline(config, model, log, device)
        rec |= {"gd_train_seconds": train_seconds}  # B5's "GD training < 5 min"
        run.write_json("metrics.json", rec)
        report.write_report(run)
    keys = ("gd_test_accuracy", "spearman_rho", "spearman_rho_theory", "chosen_N", "chosen_T", "gd_train_seconds")
    summary = {k: rec[k] for k in keys}
    heads = [{"head": h, "score": s, "acc_drop": d, "theory_acc_drop": t}
             for h, s, d, t in zip(rec["heads"], rec["score"], rec["acc_drop"], rec["theory_acc_drop"])]  # fmt: skip
    return RunResult(run.path, config, summary, {"heads": _frame(heads), "grid": _frame(rec["grid"])})


# --- ensemble --------------------------------------------------------------------------------------------------
def ensemble(config: EnsembleConfig, out: str | Path | None = None, *, mode: str = "new") -> RunResult:
    """S7: U_GD from `runs` gradient-descent runs (frozen attention, values trained on the negative log posterior)
    against the theory's U at (N, T). Writes `U.npy` (theory), `U_gd.npy`, `U_runs.npy` [runs, n, n],
    `loss_curve.npy` [runs, records], `metrics.json`, `paths.json`, figures and `report.html`."""
    from attnlab.paths.sampling.gd_ensemble import gd_ensemble, rel_frob, run_spread
    from attnlab.paths.theory.points import theory_point

    _precheck(config)
    with open_run(out, "paths ensemble", config, mode=mode, seed=config.seed, prefix="paths-ensemble") as run:
        _check_resume(run, config, mode)
        data = _data(config)
        T = config.temperature
        sp, th = theory_point(data, config.N, T, config.entropy_form, config.method)
        gd = gd_ensemble(data, int(config.N), T, config.runs, config.steps, config.lr, config.seed)
        for name in ("U_gd", "U_runs", "loss_curve"):
            run.save_npy(f"{name}.npy", gd[name])
        run.save_npy("U.npy", sp.U)
        rec = {"N": config.N, "T": T, "runs": config.runs, "steps": config.steps, "lr": config.lr,
               "rel_frob_err_gd": rel_frob(gd["U_gd"], sp.U), "run_spread": run_spread(gd["U_runs"]),
               "accuracy_U_gd": gd["accuracy_U_gd"], "theory": th, "final_loss": gd["final_loss"],
               "train_mse_max": float(gd["train_mse"].max()), "gd_wall_s": gd["gd_wall_s"]}  # fmt: skip
        if config.sampled is not None:
            U_hat = np.load(Path(config.sampled) / "U_hat.npy")
            if U_hat.shape != sp.U.shape:
                raise InputError(f"--sampled: U_hat.npy is {U_hat.shape}, this network's U is {sp.U.shape}")
            rec["rel_frob_err_gd_vs_sampled"] = rel_frob(gd["U_gd"], U_hat)
            rec["rel_frob_err_sampled_vs_theory"] = rel_frob(U_hat, sp.U)
        run.write_json("metrics.json", rec)
        _write_paths(run, data)
        report.write_report(run)
    summary = {k: rec[k] for k in ("rel_frob_err_gd", "run_spread", "accuracy_U_gd")}
    summary["theory_accuracy"] = th["accuracy"]
    return RunResult(run.path, config, summary, {"ensemble": _frame([_scalars(rec)])})


RUNNERS: dict[str, tuple[type, Callable[..., RunResult]]] = {
    "paths solve": (SolveConfig, solve),
    "paths sweep": (SweepConfig, sweep),
    "paths sample": (SampleConfig, sample),
    "paths prune": (PruneConfig, prune),
    "paths ensemble": (EnsembleConfig, ensemble),
}
