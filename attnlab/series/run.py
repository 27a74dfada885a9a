"""`attnlab series train` as a function: `train_series(SeriesTrainConfig(...), out)` -> `RunResult` (R25).

The run folder holds config.json, manifest.json, metrics.jsonl (one line per saved step: train and evaluation
loss), checkpoints/step_N/ (HF folders: `attnlab scan --model RUN/checkpoints` scans them as a series),
bb_eval.txt (the evaluation sequences as text, for `attnlab scan --text RUN/bb_eval.txt --prefix bos`),
summary.json, figures/loss.png and report.html. The loop is `attnlab.training.loop`'s. `mode="resume"` continues from
the latest checkpoint; one that has nothing left to do changes no file. An interrupt between two save steps
checkpoints into `interrupted/` (outside the series, removed by the next save), so checkpoints/ always holds what
an uninterrupted run holds.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import torch

from attnlab.core.device import on_device, resolve
from attnlab.runs import STEPPED, RunDir, RunResult, check_out_folder, open_run, write_text
from attnlab.runs.configs import config_from_dict
from attnlab.runs.resume import Resume, not_a_config, resumed_config
from attnlab.series import _train as T
from attnlab.series.config import RESUMABLE, SeriesTrainConfig
from attnlab.training.checkpoint import checkpoint_steps
from attnlab.training.loop import Job, Schedule, Trainer, nothing_to_do

MAY_CHANGE = frozenset(RESUMABLE)  # the fields a resumed run may change


def save_steps(cfg: SeriesTrainConfig) -> set[int]:
    """Steps with a checkpoint: 0, every `save_every`, and the last."""
    return {*range(0, cfg.steps, cfg.save_every), cfg.steps}


def saved_config(path: Path) -> SeriesTrainConfig:
    """The config of the `series train` run in `path`; one line if it is no such run or its config is corrupt."""
    check_out_folder(path, "resume", "series train")
    return config_from_dict(SeriesTrainConfig, RunDir(path).read_config())


def eval_text(task: Any, cfg: SeriesTrainConfig) -> tuple[torch.Tensor, str]:
    """The fixed evaluation batch [E, T+1] and its characters after `<s>`, concatenated (bb_eval.txt)."""
    seqs = torch.as_tensor(task.eval_batch(cfg.eval_batch, cfg.seq_len))
    chars = task.vocab.chars
    return seqs, "".join(chars[int(i)] for row in seqs[:, 1:].tolist() for i in row)


def train_loop(
    run: RunDir, cfg: SeriesTrainConfig, task: Any, resume: bool, device: torch.device | None = None
) -> dict:
    """Updates to cfg.steps (from the newest checkpoint when `resume`), a checkpoint and a metrics line (train loss
    of the last update, evaluation loss) at every save step; returns {'step', 'resumed_from', 'checkpoints'}.
    `device`: where the model trains. Its initial weights and every batch are drawn on the cpu (seeded, the same on
    every device) and copied there; losses are read back only at save steps (the metrics lines)."""
    device = torch.device("cpu") if device is None else device
    model, tok = T.build_model(cfg, task).to(device), T.char_tokenizer(task)
    seqs, text = eval_text(task, cfg)
    seqs = seqs.to(device)

    def record(step: int, last: float) -> dict:
        model.eval()
        with torch.no_grad():
            return {"train_loss": last, "eval_loss": float(T.loss_of(model, seqs[:, :-1], seqs[:, 1:]))}

    def loss(step: int) -> torch.Tensor:
        inputs, targets = T.batch(task, cfg, step)
        return T.loss_of(model, inputs.to(device), targets.to(device))

    saves = frozenset(save_steps(cfg))
    job = Job(model, T.make_optimizer(model, cfg), loss, record, cfg, MAY_CHANGE, T.hf_writer(tok))
    trainer = Trainer(run, job, Schedule(cfg.steps, saves, saves, series=True))
    if resume:
        trainer.resume()
    write_text(run.file("bb_eval.txt"), text)  # scannable while training runs
    outcome = trainer.run_loop()
    return {"step": outcome.step, "resumed_from": outcome.resumed_step,
            "checkpoints": len(checkpoint_steps(run.path))}  # fmt: skip


def train_series(config: SeriesTrainConfig | Resume, out: str | Path | None = None, *, mode: str = "new") -> RunResult:
    """Train (or resume) a checkpoint series into `out` (None: runs/series-train-<time>); module docstring. With
    `mode="resume"`, `config` is the saved config's changes (`Resume(changes={"steps": 400})`) or a full config that
    agrees with it but in `steps` and `save_every`."""
    import pandas as pd

    from attnlab.series.report import write_report

    not_a_config(config, mode, "series train")
    config = resumed_config(config, out, "series train", saved_config, MAY_CHANGE) if mode == "resume" else config
    assert isinstance(config, SeriesTrainConfig)
    device = _device(config)
    task = T.build_task(config)
    with open_run(out, "series train", config, mode=mode, seed=config.seed) as run:
        if mode == "resume":
            run.metrics(STEPPED)  # a bad metrics line: refused in one line naming it, before any work
        if mode == "resume" and nothing_to_do(run, config.steps, "summary.json"):
            return _unchanged(run, config)
        t0 = time.perf_counter()
        with on_device(device):
            result = train_loop(run, config, task, mode == "resume", device)
        summary = {**result, "wall_seconds": round(time.perf_counter() - t0, 2), "task": task.meta(),
                   "final_eval_loss": run.metrics(STEPPED)[-1]["eval_loss"]}  # fmt: skip
        run.write_json("summary.json", summary)
        write_report(run)
    return RunResult(
        path=run.path, config=config, summary=summary, tables={"metrics": pd.DataFrame(run.metrics(STEPPED))}
    )


def _device(cfg: SeriesTrainConfig) -> torch.device:
    """The resolved device of a series run; on a GPU, a size over its memory is refused in one line (the same
    estimate as the RAM check)."""
    from attnlab.runs import budget

    device = resolve(cfg.device)
    vocab = cfg.vocab_chars + 2
    sizes = (vocab, cfg.d_model, cfg.n_layers, cfg.seq_len, cfg.d_mlp, cfg.n_heads, max(cfg.batch, cfg.eval_batch))
    need = budget.transformer_train_bytes(*sizes)
    budget.check_device_memory(need, f"series train --batch {cfg.batch} --seq-len {cfg.seq_len}", device)
    return device


def _unchanged(run: RunDir, config: SeriesTrainConfig) -> RunResult:
    """The result of a resume with nothing to do, read from the folder (no file is written)."""
    import pandas as pd

    note = f"nothing to do: {run.path} is already at step {config.steps} (--steps {config.steps}); no file changed"
    summary = {**run.read_json("summary.json"), "nothing_to_do": note}
    return RunResult(
        path=run.path, config=config, summary=summary, tables={"metrics": pd.DataFrame(run.metrics(STEPPED))}
    )


RUNNERS = {"series train": (SeriesTrainConfig, train_series)}
