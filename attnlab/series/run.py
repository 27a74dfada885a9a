"""`attnlab series train` as a function: `train_series(SeriesTrainConfig(...), out)` -> `RunResult` (R25).

The run folder holds config.json, manifest.json, metrics.jsonl (one line per saved step: train and evaluation
loss), checkpoints/step_N/ (HF folders: `attnlab scan --model RUN/checkpoints` scans them as a series),
bb_eval.txt (the evaluation sequences as text, for `attnlab scan --text RUN/bb_eval.txt --prefix bos`),
summary.json, figures/loss.png and report.html. `mode="resume"` continues from the latest checkpoint; one
that has nothing left to do changes no file. An interrupt between two save steps checkpoints into `interrupted/`
(outside the series, removed by the next save), so checkpoints/ always holds what an uninterrupted run holds.
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from attnlab.configs import config_from_dict
from attnlab.errors import AttnlabError, InputError
from attnlab.runs import RunDir, RunResult, open_run, read_json, write_text
from attnlab.series import _train as T
from attnlab.series.config import SeriesTrainConfig

INTERRUPTED = "interrupted"  # the checkpoint of an interrupt between save steps (outside the series; resumable)


def save_steps(cfg: SeriesTrainConfig) -> set[int]:
    """Steps with a checkpoint: 0, every `save_every`, and the last."""
    return {*range(0, cfg.steps, cfg.save_every), cfg.steps}


def _check_resume(run: RunDir, cfg: SeriesTrainConfig) -> tuple[int, Path]:
    """(step, folder) of the newest complete checkpoint, after checking that the saved config agrees with `cfg`."""
    saved = config_from_dict(SeriesTrainConfig, run.read_config())
    diff = [
        f"{k}: {v!r} -> {cfg.frozen_part()[k]!r}" for k, v in saved.frozen_part().items() if cfg.frozen_part()[k] != v
    ]
    if diff:
        raise InputError(f"--resume: the config differs from the saved one in {run.path}: {'; '.join(diff)}")
    points = [(s, run.file("checkpoints") / f"step_{s}") for s in T.checkpoint_steps(run.file("checkpoints"))]
    if (run.file(INTERRUPTED) / T.STATE).is_file():
        state = read_json(run.file(INTERRUPTED) / T.STATE, "checkpoint state")
        if not isinstance(state, dict) or not isinstance(state.get("step"), int):
            raise InputError(f"checkpoint state {run.file(INTERRUPTED) / T.STATE} is corrupt; restore or delete it")
        points.append((state["step"], run.file(INTERRUPTED)))
    if not points:
        raise InputError(f"--resume: no complete checkpoint in {run.file('checkpoints')}")
    step, folder = max(points)
    if step > cfg.steps:
        raise InputError(f"--steps {cfg.steps} is below the run's latest checkpoint step {step}")
    return step, folder


def _finished(run: RunDir, start: int, steps: int) -> bool:
    """Whether the run already ended at `steps` (its last checkpoint, summary.json and report.html are there)."""
    if start != steps or not run.file("summary.json").is_file() or not run.file("report.html").is_file():
        return False
    saved = run.read_json("summary.json")
    return isinstance(saved, dict) and saved.get("step") == steps


def eval_text(task: Any, cfg: SeriesTrainConfig) -> tuple[torch.Tensor, str]:
    """The fixed evaluation batch [E, T+1] and its characters after `<s>`, concatenated (bb_eval.txt)."""
    seqs = torch.as_tensor(task.eval_batch(cfg.eval_batch, cfg.seq_len))
    chars = task.vocab.chars
    return seqs, "".join(chars[int(i)] for row in seqs[:, 1:].tolist() for i in row)


def train_loop(run: RunDir, cfg: SeriesTrainConfig, task: Any, start: tuple[int, Path] | None) -> dict:
    """Updates from `start` (None: a new run from step 0; else the resumed checkpoint's (step, folder)) to
    cfg.steps, a checkpoint and a metrics line at every save step; Ctrl-C/SIGTERM checkpoints (`_interrupted`)."""
    from attnlab.bb.training import signals_deferred

    model, tok = T.build_model(cfg, task), T.char_tokenizer(task)
    opt = T.make_optimizer(model, cfg)
    step = 0 if start is None else start[0]
    if start is not None:
        T.load_checkpoint(start[1], model, opt)
        run.reset_metrics(keep_until_step=step)
    seqs, _ = eval_text(task, cfg)
    saves, last = save_steps(cfg), float("nan")

    def save(folder: Path | None = None) -> None:
        """A checkpoint of the series with its metrics line, or (folder given) one outside it, without."""
        state = {"step": step, "config": cfg.to_dict()}
        if folder is not None:
            T.save_checkpoint(folder, model, tok, opt, state)
            return
        model.eval()
        with torch.no_grad():
            ev = float(T.loss_of(model, seqs[:, :-1], seqs[:, 1:]))
        model.train()
        T.save_checkpoint(run.file("checkpoints") / f"step_{step}", model, tok, opt, state)
        run.append_metrics({"step": step, "train_loss": last, "eval_loss": ev})
        shutil.rmtree(run.file(INTERRUPTED), ignore_errors=True)  # superseded by this later checkpoint

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
        raise _interrupted(run, step, step in saves, save) from None
    return {"step": step, "resumed_from": None if start is None else start[0],
            "checkpoints": len(T.checkpoint_steps(run.file("checkpoints")))}  # fmt: skip


def _interrupted(run: RunDir, step: int, scheduled: bool, save: Callable[..., None]) -> AttnlabError:
    """Checkpoint an interrupted run and say where. A step of the series gets its checkpoint (once: metrics.jsonl
    must not repeat it); any other step is saved in `interrupted/`, outside the series, so checkpoints/ holds what
    an uninterrupted run would. Under --overwrite nothing is saved: the folder is discarded."""
    from attnlab.bb.training import discarded

    if run.replacing:
        return AttnlabError(f"interrupted at step {step}; {discarded(run)}", exit_code=130)
    folder = run.file("checkpoints") / f"step_{step}" if scheduled else run.file(INTERRUPTED)
    if not scheduled:
        save(folder)
    elif step not in T.checkpoint_steps(run.file("checkpoints")):
        save()
    return AttnlabError(f"interrupted at step {step}; checkpoint saved in {folder}; continue with --resume", 130)


def train_series(config: SeriesTrainConfig, out: str | Path | None = None, *, mode: str = "new") -> RunResult:
    """Train (or resume) a checkpoint series into `out` (None: runs/series-train-<time>); module docstring."""
    import pandas as pd

    from attnlab.series.report import write_report

    task = T.build_task(config)
    with open_run(out, "series train", config, mode=mode, seed=config.seed) as run:
        start = _check_resume(run, config) if mode == "resume" else None
        if start is not None and _finished(run, start[0], config.steps):
            return _unchanged(run, config)
        if start is not None:
            _drop_cut_checkpoints(run)
            run.write_config(config)  # steps may have grown
        write_text(run.file("bb_eval.txt"), eval_text(task, config)[1])  # scannable while training runs
        t0 = time.perf_counter()
        result = train_loop(run, config, task, start)
        summary = {**result, "wall_seconds": round(time.perf_counter() - t0, 2), "task": task.meta(),
                   "final_eval_loss": run.metrics()[-1]["eval_loss"]}  # fmt: skip
        run.write_json("summary.json", summary)
        write_report(run)
    return RunResult(path=run.path, config=config, summary=summary, tables={"metrics": pd.DataFrame(run.metrics())})


def _drop_cut_checkpoints(run: RunDir) -> None:
    for tmp in [*run.file("checkpoints").glob("*.tmp"), run.path / f"{INTERRUPTED}.tmp"]:  # cut off by a crash
        shutil.rmtree(tmp, ignore_errors=True)


def _unchanged(run: RunDir, config: SeriesTrainConfig) -> RunResult:
    """The result of a resume with nothing to do, read from the folder (no file is written)."""
    import pandas as pd

    note = f"nothing to do: {run.path} is already at step {config.steps} (--steps {config.steps}); no file changed"
    summary = {**run.read_json("summary.json"), "nothing_to_do": note}
    return RunResult(path=run.path, config=config, summary=summary, tables={"metrics": pd.DataFrame(run.metrics())})


RUNNERS = {"series train": (SeriesTrainConfig, train_series)}
