"""`bb train` on the shared training loop (`attnlab.training.loop`): the optimiser, the loss (bf16 autocast, TF32), the
snapshot and checkpoint schedule of a `TrainConfig`, and its resume rules (spec extreme-tokens §4).

Step s means s updates done; snapshot s is taken after update s (s = 0: the initial model). Update k (0-based)
uses `batch_fn(k)`, so a resumed run sees exactly the batches it would have seen, and (on one thread) reaches
bit-identical weights and metrics.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import torch

from attnlab.bb.config import TRAIN_HASH_SKIP, TrainConfig
from attnlab.bb.metrics import metric
from attnlab.bb.schedule import snapshot_steps
from attnlab.core.tracking import Tracker
from attnlab.runs import RunDir
from attnlab.runs.resume import Resume, resumed_config
from attnlab.training.loop import Job, Schedule, Trainer, first_nonfinite

__all__ = ["MAY_CHANGE", "first_nonfinite", "make_optimizer", "resumed", "schedule", "train_loop"]

BatchFn = Callable[[int], tuple[torch.Tensor, torch.Tensor]]  # step -> (inputs [B,T], targets [B,T])
SnapshotFn = Callable[[int], dict]  # step -> metrics dict

# fields a resumed run may change ("threads": a field of configs saved before issue 8)
MAY_CHANGE = frozenset(TRAIN_HASH_SKIP) | {"threads"}


def make_optimizer(model: torch.nn.Module, cfg: TrainConfig) -> torch.optim.Optimizer:
    """AdamW or SGD with momentum; constant lr, weight decay on every parameter (as the reference; spec §4)."""
    if cfg.optimizer == "adam":
        return torch.optim.AdamW(
            model.parameters(),
            lr=cfg.resolved_lr(),
            betas=tuple(cfg.betas),  # type: ignore[arg-type]
            eps=cfg.eps,
            weight_decay=cfg.weight_decay,
        )
    return torch.optim.SGD(
        model.parameters(), lr=cfg.resolved_lr(), momentum=cfg.momentum, weight_decay=cfg.weight_decay
    )


@contextmanager
def _autocast(precision: str, device: torch.device) -> Iterator[None]:
    """bf16 autocast of the forward pass on CUDA for precision "bf16"; float32 otherwise (the loss is float32)."""
    if precision != "bf16" or device.type != "cuda":
        yield
        return
    with torch.autocast("cuda", dtype=torch.bfloat16):
        yield


@contextmanager
def _tf32(enabled: bool) -> Iterator[None]:
    """TF32 matmuls and convolutions on CUDA while training (precision "tf32"), restored afterwards."""
    if not enabled:
        yield
        return
    old = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = True
    try:
        yield
    finally:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = old


def resumed(config: TrainConfig | Resume, out: str | Path | None) -> TrainConfig:
    """The config `bb train --resume` continues with (`attnlab.training.loop.resumed_config`): the saved one with the
    changes of a `Resume`, or `config` if it agrees with the saved one outside `MAY_CHANGE`."""
    from attnlab.bb.config import read_train_config

    return resumed_config(config, out, "bb train", read_train_config, MAY_CHANGE)


def schedule(cfg: TrainConfig) -> Schedule:
    """Snapshots on the §6 schedule; a checkpoint every `ckpt_every` steps and at the last, the newest `keep_last`
    kept."""
    snaps = snapshot_steps(cfg.steps, cfg.lin_every, cfg.lin_until, cfg.per_decade)
    ckpts = range(cfg.ckpt_every, cfg.steps, cfg.ckpt_every)
    return Schedule(cfg.steps, frozenset(snaps), frozenset(ckpts), keep_last=cfg.keep_last)


def loss_fn(model: torch.nn.Module, cfg: TrainConfig, batch_fn: BatchFn) -> Callable[[int], torch.Tensor]:
    """Update k's cross-entropy over batch k (forward in bf16 autocast for precision "bf16"; the loss in float32)."""

    def loss(step: int) -> torch.Tensor:
        inputs, targets = batch_fn(step)
        with _autocast(cfg.precision, inputs.device):
            logits = model(inputs)
        return torch.nn.functional.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), targets.reshape(-1))

    return loss


def _postfix(line: dict, loss: float) -> dict:
    """The progress bar's loss (of the update that reached this line; none before the first update: the loss is
    nan there) and the line's Attn<s>."""
    sink = metric(line, "attn_sink")
    shown = {} if math.isnan(loss) else {"loss": f"{loss:.3f}"}
    return {**shown, "sink": "-" if sink is None else f"{sink:.2f}"}


def train_tracker(run: RunDir, cfg: TrainConfig) -> Tracker:
    """The `--log` trackers of a training run (nothing is written when `cfg.log` names none)."""
    return Tracker(cfg.log, run.path, run.path.name, {k: v for k, v in cfg.to_dict().items() if k != "log"})


def train_loop(
    run: RunDir, model: torch.nn.Module, cfg: TrainConfig, batch_fn: BatchFn, snapshot_fn: SnapshotFn,
    tracker: Tracker, *, resume: bool = False, progress: bool = True,
) -> dict:  # fmt: skip
    """Train `model` in `run` to `cfg.steps` (from the newest checkpoint when `resume`), mirroring each metrics line
    to `tracker` (`train_tracker`); returns {'step', 'resumed_from', 'checkpoint'} (paths relative to the run
    folder)."""

    def record(step: int, loss: float) -> dict:
        metrics = snapshot_fn(step)
        tracker.log({"step": step, **metrics}, step)
        return metrics

    job = Job(model, make_optimizer(model, cfg), loss_fn(model, cfg, batch_fn), record, cfg, MAY_CHANGE)
    trainer = Trainer(run, job, schedule(cfg), progress=progress, desc=f"train {cfg.attention}/{cfg.optimizer}",
                      postfix=_postfix)  # fmt: skip
    if resume:
        trainer.resume()
    with tracker, _tf32(cfg.precision == "tf32"):
        outcome = trainer.run_loop()
    return {"step": outcome.step, "resumed_from": _relative(run, outcome.resumed_from),
            "checkpoint": _relative(run, outcome.checkpoint)}  # fmt: skip


def _relative(run: RunDir, path: Path | None) -> str | None:
    """A path inside the run folder, relative to it (run folders can move; pages show no machine paths)."""
    return None if path is None else path.relative_to(run.path).as_posix()
