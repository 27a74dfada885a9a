"""The run functions of `attnlab bb {sample,train,intervene,theory,compare}`: config in, run folder out.

Each opens its folder with `open_run`, writes everything its report needs, writes report.html from the folder
and returns a `RunResult` whose tables are pandas DataFrames. No printing (a tqdm bar while training), no
process-wide state.
"""

from __future__ import annotations

import io
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch

from attnlab.bb.config import (
    CompareConfig,
    InterveneConfig,
    SampleConfig,
    SubspaceConfig,
    TheoryConfig,
    TrainConfig,
)
from attnlab.bb.experiment import (
    Evaluator,
    build_model,
    load_run,
    read_train_config,
    report_arrays,
    save_report_arrays,
    task_for,
)
from attnlab.bb.metrics import metric
from attnlab.bb.report import write_report
from attnlab.bb.tables import final_summary, metrics_table
from attnlab.bb.training import first_nonfinite, resumed, train_loop, train_tracker
from attnlab.core.device import on_device, resolve
from attnlab.errors import InputError, NumericalError
from attnlab.runs import STEPPED, RunDir, RunResult, frame, open_run, write_bytes
from attnlab.runs.budget import check_device_memory
from attnlab.runs.resume import Resume, not_a_config
from attnlab.toy.task import BBTask, build_bb_task
from attnlab.training.loop import nothing_to_do


def _tables(**frames: Any) -> dict:
    return {name: frame(rows) for name, rows in frames.items()}


# --- bb sample ---------------------------------------------------------------------------------------------------
def sample_statistics(task: BBTask, seqs: np.ndarray) -> dict:
    """Trigger fraction over positions 1..T−1 and the mean oracle entropy at bigram positions."""
    x = seqs[:, :-1]
    trig = task.is_trigger[x]
    o = task.oracle(seqs)
    ent = -(np.where(o > 0, o * np.log(np.where(o > 0, o, 1.0)), 0.0)).sum(-1)
    return {
        "trigger_fraction": float(trig[:, 1:].mean()),
        "oracle_bigram_entropy": float(ent[~trig].mean()),
        "n_sequences": int(seqs.shape[0]),
        "seq_len": int(seqs.shape[1] - 1),
    }


def sample(config: SampleConfig, out: str | Path | None = None, *, mode: str = "new") -> RunResult:
    """`n` BB sequences (stream 2 of the seed): sequences.npy int64 [n, T+1], bigram.npy float64 [V, V],
    meta.json (vocabulary, trigger ids, bos id) and metrics.json (sample statistics)."""
    task = build_bb_task(None if config.corpus == "pydoc_data" else config.corpus, config.vocab_chars, config.triggers)
    with open_run(out, "bb sample", config, mode=mode, seed=config.seed, prefix="bb-sample") as run:
        seqs = task.sample(config.n, config.seq_len, config.seed, stream=2)
        run.save_npy("sequences.npy", seqs)
        run.save_npy("bigram.npy", task.bigram_matrix())
        run.write_json("meta.json", task.meta())
        stats = sample_statistics(task, seqs)
        run.write_json("metrics.json", stats)
        write_report(run)
    return RunResult(run.path, config, stats, _tables(statistics=[stats]))


# --- bb train ----------------------------------------------------------------------------------------------------
def train(
    config: TrainConfig | Resume, out: str | Path | None = None, *, mode: str = "new", progress: bool = True
) -> RunResult:
    """Train a toy transformer on BB: metrics.jsonl on the snapshot schedule, snapshots/, checkpoints/,
    final/ (the arrays of the report), train_summary.json and report.html. `mode="resume"` continues `out`
    from its newest checkpoint: `config` is the saved config's changes (`Resume(changes={"steps": 400})`) or a
    full config that agrees with it but in `steps`, `ckpt_every`, `keep_last`, `log`, `device`. On a CUDA
    `config.device` the updates run there (batches are drawn on the cpu and copied); snapshots evaluate a cpu
    copy of the weights (`Evaluator`)."""
    not_a_config(config, mode, "bb train")
    config = resumed(config, out) if mode == "resume" else config
    assert isinstance(config, TrainConfig)
    device = _train_device(config)
    task = task_for(config)
    with open_run(out, "bb train", config, mode=mode, seed=config.seed, prefix="bb") as run:
        if mode == "resume":
            run.metrics(STEPPED)  # a bad metrics line: refused in one line naming it, before any work
        if mode == "resume" and nothing_to_do(run, config.steps, "train_summary.json"):
            return _unchanged(run, config)
        model = build_model(config, task).to(device)
        seqs = task.eval_batch(config.eval_batch, config.seq_len, config.eval_seed)
        evaluator = Evaluator(model, task, seqs, run.path / "snapshots")

        def batch_fn(step: int) -> tuple[torch.Tensor, torch.Tensor]:
            x = torch.as_tensor(task.train_batch(config.batch, config.seq_len, config.seed, step)).to(device)
            return x[:, :-1], x[:, 1:]

        tracker = train_tracker(run, config)
        t0 = time.perf_counter()
        with on_device(device):
            result = train_loop(
                run, model, config, batch_fn, evaluator, tracker, resume=mode == "resume", progress=progress
            )
        result["wall_seconds"] = round(time.perf_counter() - t0, 2)
        run.write_json("train_summary.json", result)
        cpu_model = evaluator.cpu_model()
        save_report_arrays(run, report_arrays(config, task, cpu_model, seqs), result["step"], task, seqs)
        write_report(run)
        tracker.log_outputs(run.path)  # --log: the figures and the report, now that they exist
        records = run.metrics(STEPPED)
    summary = final_summary(records)
    return RunResult(run.path, config, {"step": result["step"], **summary}, _tables(metrics=metrics_table(records)))


def _train_device(config: TrainConfig) -> torch.device:
    """The resolved device of a training run, after refusing (one line) a GPU it would not fit on."""
    from attnlab.bb.config import train_memory

    device = resolve(config.device)
    what = f"bb train --d-model {config.d_model} --seq-len {config.seq_len} --batch {config.batch}"
    check_device_memory(train_memory(config), what, device, "lower --batch, --seq-len or the model sizes")
    return device


def _unchanged(run: RunDir, config: TrainConfig) -> RunResult:
    """The result of a resume with nothing to do, read from the folder (no file is written)."""
    records = run.metrics(STEPPED)
    summary = final_summary(records)
    note = f"nothing to do: {run.path} is already at step {config.steps} (--steps {config.steps}); no file changed"
    return RunResult(
        run.path,
        config,
        {"step": config.steps, **summary, "nothing_to_do": note},
        _tables(metrics=metrics_table(records)),
    )


# --- bb intervene ------------------------------------------------------------------------------------------------
def intervene(config: InterveneConfig, out: str | Path | None = None, *, mode: str = "new") -> RunResult:
    """Risks of the final model of `config.run_dir` with each head/MLP/layer zeroed and attention moved to <s>;
    writes interventions.json and report.html into its own new folder (never into the training run). On a CUDA
    `config.device` the model is moved there and every evaluation forward runs there (`evaluate_interventions`)."""
    from attnlab.bb.intervention_risks import evaluate_interventions

    _separate_out(out, config.run_dir)
    device = _intervene_device(config)
    cfg, task, model, state = load_run(config.run_dir)
    with on_device(device):
        rows = evaluate_interventions(cfg, task, model.to(device), int(state["step"]))
    with open_run(out, "bb intervene", config, mode=mode, seed=cfg.seed, prefix="bb-intervene") as run:
        run.write_json("interventions.json", rows)
        write_report(run)
    return RunResult(run.path, config, {"step": int(state["step"])}, _tables(interventions=rows))


def _intervene_device(config: InterveneConfig) -> torch.device:
    """The resolved device of `bb intervene`, after refusing (one line) a GPU the evaluation would not fit on."""
    from attnlab.bb.config import intervene_memory

    device = resolve(config.device)
    cfg = read_train_config(config.run_dir)
    what = f"bb intervene on a run with --eval-batch {cfg.eval_batch} --seq-len {cfg.seq_len} --d-model {cfg.d_model}"
    check_device_memory(intervene_memory(cfg), what, device, "use --device cpu, or a GPU with more free memory")
    return device


def _separate_out(out: str | Path | None, run_dir: str) -> None:
    source = Path(run_dir).resolve()
    if out is not None and (Path(out).resolve() == source or source in Path(out).resolve().parents):
        raise InputError(f"--out {out} is inside the training run {run_dir}; choose a new folder")


# --- bb subspace -------------------------------------------------------------------------------------------------
def _check_finite_model(model: torch.nn.Module, run_dir: Path, step: int) -> None:
    """A NaN or Inf weight makes the subspaces meaningless: one line naming the parameter and the file."""
    bad = first_nonfinite(model)
    if bad is not None:
        path = run_dir / "checkpoints" / f"step_{step}" / "model.safetensors"
        raise NumericalError(f"the run diverged: parameter {bad} is not finite in {path}")


def subspace(config: SubspaceConfig, out: str | Path | None = None, *, mode: str = "new") -> RunResult:
    """R19: principal angles between the attention and MLP output subspaces of one layer of the final model of
    `config.run_dir` on its evaluation batch; writes subspace.json, figures/subspace.png and report.html into its
    own new folder (never into the training run)."""
    from attnlab.bb.principal_subspaces import block_outputs, subspace_measure

    _separate_out(out, config.run_dir)
    cfg, task, model, state = load_run(config.run_dir)
    _check_finite_model(model, Path(config.run_dir), int(state["step"]))
    if config.layer >= cfg.n_layers:
        raise InputError(f"--layer {config.layer} is out of range; {config.run_dir} has layers 0..{cfg.n_layers - 1}")
    if config.layer in cfg.no_attn or config.layer in cfg.no_mlp:
        raise InputError(f"--layer {config.layer} of {config.run_dir} lacks attention or an MLP; choose another")
    seqs = task.eval_batch(cfg.eval_batch, cfg.seq_len, cfg.eval_seed)
    attn, mlp = block_outputs(model, torch.as_tensor(seqs[:, :-1]), config.layer)
    measure = {"step": int(state["step"]), "block": cfg.block, **subspace_measure(attn, mlp, config.energy)}
    with open_run(out, "bb subspace", config, mode=mode, seed=cfg.seed, prefix="bb-subspace") as run:
        run.write_json("subspace.json", measure)
        write_report(run)
    keys = ("k_attn", "k_mlp", "min_angle_deg", "median_angle_deg", "energy_attn_in_mlp", "energy_mlp_in_attn")
    summary = {k: measure[k] for k in ("step", *keys)}
    return RunResult(run.path, config, summary, _tables(angles=[{"angle_deg": a} for a in measure["angles_deg"]]))


# --- bb theory ---------------------------------------------------------------------------------------------------
def theory(config: TheoryConfig, out: str | Path | None = None, *, mode: str = "new") -> RunResult:
    """Simulate §9.1–9.5: metrics.json (slopes, GD checks, Adam/SGD m), arrays.npz, setup.json, figures."""
    from attnlab.bb._theory.simulate import setup, simulate

    with open_run(out, "bb theory", config, mode=mode, seed=config.seed, prefix="bb-theory") as run:
        metrics, arrays = simulate(config.seed, config.t_max)
        run.write_json("setup.json", setup(config.seed, config.t_max))
        run.write_json("metrics.json", metrics)
        buf = io.BytesIO()
        np.savez(buf, **arrays)  # type: ignore[arg-type]
        write_bytes(run.path / "arrays.npz", buf.getvalue())
        write_report(run)
    slopes = metrics["late_slopes"]
    table = [{"quantity": k, "late_slope": v} for k, v in slopes.items() if not isinstance(v, list)]
    table += [{"quantity": f"alpha_{i}", "late_slope": v} for i, v in enumerate(slopes["alpha"])]
    return RunResult(run.path, config, metrics["reduced_recursion"], _tables(late_slopes=table))


# --- bb compare --------------------------------------------------------------------------------------------------
COMPARE_GROUPS = {
    "sink": ("attn_sink", "value_norm_bos", "resid_norm_bos"),
    "risk": ("excess_risk_backcopy", "excess_risk_bigram", "delta_logit"),
}


def _compared(runs: dict[str, list[dict]], layer: int) -> dict[str, list[dict]]:
    """{label: [{"step", key: value at `layer`, head 0}]}: the series of COMPARE_GROUPS that the figures draw."""
    keys = [k for ks in COMPARE_GROUPS.values() for k in ks]
    return {
        label: [{"step": r["step"], **{k: metric(r, k, layer) for k in keys}} for r in m] for label, m in runs.items()
    }


def _compare_inputs(config: CompareConfig) -> tuple[dict[str, list[dict]], int]:
    """{label: metrics} of the runs and the `lin_until` of the last; one line for a bad run or layer."""
    runs, lin_until = {}, 500
    for d in config.run_dirs:
        cfg = read_train_config(d)
        if config.layer >= cfg.n_layers:
            raise InputError(f"--layer {config.layer} is out of range; {d} has layers 0..{cfg.n_layers - 1}")
        runs[f"{cfg.attention}/{cfg.optimizer} lr {cfg.resolved_lr():g} ({Path(d).name})"] = RunDir(d).metrics(STEPPED)
        lin_until = cfg.lin_until
    return runs, lin_until


def compare(config: CompareConfig, out: str | Path | None = None, *, mode: str = "new") -> RunResult:
    """One figure per group of metrics (sink, risk) with one line per run, for layer `config.layer`: the compared
    series in compared.json, the figures' captions in figures.json."""
    runs, lin_until = _compare_inputs(config)
    with open_run(out, "bb compare", config, mode=mode, prefix="bb-compare") as run:
        series = {"lin_until": lin_until, "groups": COMPARE_GROUPS, "runs": _compared(runs, config.layer)}
        run.write_json("compared.json", series)
        captions = {
            f"compare_{name}": f"{', '.join(keys)} for {len(runs)} runs" for name, keys in COMPARE_GROUPS.items()
        }
        run.write_json("figures.json", captions)
        write_report(run)
    finals = [
        {"run": label, **{k: metric(m[-1], k, config.layer) for ks in COMPARE_GROUPS.values() for k in ks}}
        for label, m in runs.items()
        if m
    ]
    return RunResult(run.path, config, {}, _tables(final=finals))


RUNNERS: dict[str, tuple[type, Callable[..., RunResult]]] = {
    "bb sample": (SampleConfig, sample),
    "bb train": (TrainConfig, train),
    "bb intervene": (InterveneConfig, intervene),
    "bb subspace": (SubspaceConfig, subspace),
    "bb theory": (TheoryConfig, theory),
    "bb compare": (CompareConfig, compare),
}
