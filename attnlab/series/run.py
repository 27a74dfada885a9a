"""`attnlab series train` as a function: `train_series(SeriesTrainConfig(...), out)` -> `RunResult` (R25).

The run folder holds config.json, manifest.json, metrics.jsonl (one line per saved step: train and evaluation
loss), checkpoints/step_N/ (HF folders: `attnlab scan --model RUN/checkpoints` scans them as a series),
bb_eval.txt (the evaluation sequences as text, for `attnlab scan --text RUN/bb_eval.txt --prefix bos`),
summary.json, figures/loss.png and report.html. `mode="resume"` continues from the latest checkpoint.
"""

from __future__ import annotations

import shutil
import time
from pathlib import Path
from typing import Any

import torch

from attnlab.configs import config_from_dict
from attnlab.errors import AttnlabError, InputError
from attnlab.runs import RunDir, RunResult, open_run, write_text
from attnlab.series import _train as T
from attnlab.series.config import SeriesTrainConfig


def save_steps(cfg: SeriesTrainConfig) -> set[int]:
    """Steps with a checkpoint: 0, every `save_every`, and the last."""
    return {*range(0, cfg.steps, cfg.save_every), cfg.steps}


def _check_resume(run: RunDir, cfg: SeriesTrainConfig) -> int:
    """The latest complete checkpoint's step, after checking that the saved config agrees with `cfg`."""
    saved = config_from_dict(SeriesTrainConfig, run.read_config())
    diff = [
        f"{k}: {v!r} -> {cfg.frozen_part()[k]!r}" for k, v in saved.frozen_part().items() if cfg.frozen_part()[k] != v
    ]
    if diff:
        raise InputError(f"--resume: the config differs from the saved one in {run.path}: {'; '.join(diff)}")
    steps = T.checkpoint_steps(run.file("checkpoints"))
    if not steps:
        raise InputError(f"--resume: no complete checkpoint in {run.file('checkpoints')}")
    if steps[-1] > cfg.steps:
        raise InputError(f"--steps {cfg.steps} is below the run's latest checkpoint step {steps[-1]}")
    for tmp in run.file("checkpoints").glob("*.tmp"):  # a checkpoint cut off by a crash
        shutil.rmtree(tmp, ignore_errors=True)
    return steps[-1]


def eval_text(task: Any, cfg: SeriesTrainConfig) -> tuple[torch.Tensor, str]:
    """The fixed evaluation batch [E, T+1] and its characters after `<s>`, concatenated (bb_eval.txt)."""
    seqs = torch.as_tensor(task.eval_batch(cfg.eval_batch, cfg.seq_len))
    chars = task.vocab.chars
    return seqs, "".join(chars[int(i)] for row in seqs[:, 1:].tolist() for i in row)


def train_loop(run: RunDir, cfg: SeriesTrainConfig, task: Any, start: int | None) -> dict:
    """Updates from `start` (None: a new run from step 0; else the resumed checkpoint's step) to cfg.steps, a
    checkpoint and a metrics line at every save step; Ctrl-C/SIGTERM checkpoints."""
    from attnlab.bb.training import signals_deferred

    model, tok = T.build_model(cfg, task), T.char_tokenizer(task)
    opt = T.make_optimizer(model, cfg)
    step = start or 0
    if start is not None:
        T.load_checkpoint(run.file("checkpoints") / f"step_{start}", model, opt)
        run.reset_metrics(keep_until_step=start)
    seqs, _ = eval_text(task, cfg)
    saves, last = save_steps(cfg), float("nan")

    def save() -> None:
        model.eval()
        with torch.no_grad():
            ev = float(T.loss_of(model, seqs[:, :-1], seqs[:, 1:]))
        model.train()
        T.save_checkpoint(
            run.file("checkpoints") / f"step_{step}", model, tok, opt, {"step": step, "config": cfg.to_dict()}
        )
        run.append_metrics({"step": step, "train_loss": last, "eval_loss": ev})

    model.train()
    try:
        if start is None:
            save()
        while step < cfg.steps:
            loss = T.loss_of(model, *T.batch(task, cfg, step))
            last = loss.item()
            T.check_finite_loss(last, step)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            with signals_deferred():  # the update and the step count change together
                opt.step()
                step += 1
            if step in saves:
                save()
    except KeyboardInterrupt:
        if step not in T.checkpoint_steps(run.file("checkpoints")):  # not twice (metrics.jsonl would repeat it)
            save()
        raise AttnlabError(
            f"interrupted at step {step}; checkpoint saved; continue with --resume", exit_code=130
        ) from None
    return {
        "step": step,
        "resumed_from": start,
        "checkpoints": len(T.checkpoint_steps(run.file("checkpoints"))),
    }


def train_series(config: SeriesTrainConfig, out: str | Path | None = None, *, mode: str = "new") -> RunResult:
    """Train (or resume) a checkpoint series into `out` (None: runs/series-train-<time>); module docstring."""
    import pandas as pd

    from attnlab.series.report import write_report

    task = T.build_task(config)
    with open_run(out, "series train", config, mode=mode, seed=config.seed) as run:
        start = _check_resume(run, config) if mode == "resume" else None
        if mode == "resume":
            run.write_config(config)  # steps may have grown
        write_text(run.file("bb_eval.txt"), eval_text(task, config)[1])  # scannable while training runs
        t0 = time.perf_counter()
        result = train_loop(run, config, task, start)
        summary = {**result, "wall_seconds": round(time.perf_counter() - t0, 2), "task": task.meta(),
                   "final_eval_loss": run.metrics()[-1]["eval_loss"]}  # fmt: skip
        run.write_json("summary.json", summary)
        write_report(run.path)
    return RunResult(path=run.path, config=config, summary=summary, tables={"metrics": pd.DataFrame(run.metrics())})


RUNNERS = {"series train": (SeriesTrainConfig, train_series)}
