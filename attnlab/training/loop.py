"""The one training loop of every study that trains a model (`bb train`, `series train`; spec extreme-tokens §4,
R25): a schedule of metrics lines and checkpoints, deferred signals, the NaN guard and bit-identical resume.

Step s means s updates done; the metrics line and checkpoint of step s are taken after update s (s = 0: the initial
model). Update k (0-based) trains on the study's `loss(k)`, whose batch is drawn from (seed, k), so a resumed run
sees the batches it would have seen and, on one thread, reaches bit-identical weights and metrics.

- Ctrl-C and SIGTERM are held while a step runs (its update, the step count, its metrics line and checkpoint), so
  they land between two whole steps; the run then saves the step it reached and ends with exit code 130.
- The NaN guard stops at the first non-finite loss, gradient or updated parameter, in one line naming the step and
  the tensor, and saves the last finite state (`nan_step_N`).
- `mode="resume"`: the run function builds its config with `attnlab.runs.resume.resumed_config` (a `Resume` of flags,
  or a full config from a notebook, checked against the saved one: the same message either way), then
  `Trainer.resume` continues from the newest checkpoint, refusing one written under another config hash.
"""

from __future__ import annotations

import math
import shutil
import signal
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from tqdm.auto import tqdm

from attnlab.errors import AttnlabError, InputError, NumericalError
from attnlab.runs import STEPPED, RunDir
from attnlab.runs.resume import config_diff, frozen_hash
from attnlab.training.checkpoint import (
    WriteModel,
    checkpoint_steps,
    latest_checkpoint,
    load_checkpoint,
    prune_checkpoints,
    read_state,
    save_checkpoint,
    state_file,
    write_weights,
)

INTERRUPTED = "interrupted"  # a series run's checkpoint of an interrupt between two save steps (outside the series)


def nothing_to_do(run: RunDir, steps: int, summary: str) -> bool:
    """Whether the run already ended at `steps`: its last checkpoint, `summary` (with that step) and report.html."""
    ckpt = latest_checkpoint(run.path)
    if ckpt is None or ckpt.name != f"step_{steps}" or not run.file(summary).is_file():
        return False
    if not run.file("report.html").is_file():
        return False
    saved = run.read_json(summary)
    return isinstance(saved, dict) and saved.get("step") == steps


# --- signals and the NaN guard --------------------------------------------------------------------------------
@contextmanager
def signals_deferred() -> Iterator[None]:
    """Hold SIGINT/SIGTERM until the block ends, so an interrupt never splits an optimiser update from the step
    counter (a checkpoint taken then would resume one update off). The handlers are swapped for ones that only note
    the signal, which is then raised again once the old handlers are back. (Blocking the signal in the main thread
    is not enough: the kernel hands a process signal to any thread that does not block it, e.g. tqdm's monitor, and
    Python then runs the handler in the main thread at once.)"""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    caught: list[int] = []
    held = (signal.SIGINT, signal.SIGTERM)
    old = [signal.signal(s, lambda signum, frame: caught.append(signum)) for s in held]
    try:
        yield
    finally:
        for s, handler in zip(held, old, strict=True):
            signal.signal(s, signal.SIG_DFL if handler is None else handler)
    if caught:
        signal.raise_signal(caught[0])


def first_nonfinite(model: torch.nn.Module, grads: bool = False) -> str | None:
    """Name of the first parameter (or its gradient) holding a NaN/inf, or None."""
    for name, p in model.named_parameters():
        t = p.grad if grads else p
        if t is not None and not torch.isfinite(t).all():
            return name
    return None


def norms_finite(tensors: list[torch.Tensor]) -> bool:
    """Whether the 2-norm of every tensor is finite (one foreach kernel; a NaN or inf anywhere makes its norm
    non-finite; a false alarm from an overflowing norm is settled by `first_nonfinite`)."""
    with torch.no_grad():
        return not tensors or bool(torch.isfinite(torch.stack(torch._foreach_norm(tensors))).all())


def discarded(run: RunDir) -> str:
    """What a failed `--overwrite` run leaves: the earlier run back in place, nothing of this one."""
    return f"--overwrite did not finish, so the earlier run is back in {run.path} and this run was discarded"


# --- the loop -------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Schedule:
    """When the loop writes: a metrics line at each step of `records`, a checkpoint `checkpoints/step_N` at each step
    of `checkpoints` (the last step always), keeping the newest `keep_last` (None: all). `series`: checkpoints/ is a
    checkpoint series (scanned as one), so an interrupt between checkpoint steps saves into `interrupted/` and a
    divergence into `nan_step_N/`, both outside it."""

    steps: int
    records: frozenset[int]
    checkpoints: frozenset[int]
    keep_last: int | None = None
    series: bool = False

    def __post_init__(self) -> None:
        object.__setattr__(self, "checkpoints", frozenset(self.checkpoints) | {self.steps})
        object.__setattr__(self, "records", frozenset(self.records))


@dataclass
class Job:
    """What a study trains: `loss(k)` is the scalar float32 loss of update k (its forward on batch k), and
    `record(step, loss)` the metrics of a step's line (`loss`: that of the update that reached it; nan at the start).
    `config` (with `to_dict()`) is saved in each checkpoint, hashed without the fields in `may_change`."""

    model: torch.nn.Module
    optimizer: torch.optim.Optimizer
    loss: Callable[[int], torch.Tensor]
    record: Callable[[int, float], dict]
    config: Any
    may_change: frozenset[str]
    write_model: WriteModel = write_weights


@dataclass(frozen=True)
class Outcome:
    """How the loop ended: the step reached, the checkpoint it resumed from (None: a new run) and its last one."""

    step: int
    resumed_from: Path | None
    resumed_step: int | None
    checkpoint: Path


Postfix = Callable[[dict, float], dict]  # (metrics line, loss) -> the progress bar's postfix


class Trainer:
    """One invocation of the loop on `run` (a folder `open_run` holds): `resume()` (optional), then `run_loop()`."""

    def __init__(
        self, run: RunDir, job: Job, schedule: Schedule, *, progress: bool = False, desc: str = "train",
        postfix: Postfix | None = None,
    ) -> None:  # fmt: skip
        self.run, self.job, self.schedule = run, job, schedule
        self.progress, self.desc, self.postfix = progress, desc, postfix
        self.step = 0
        self.resumed_from: Path | None = None
        self.resumed_step: int | None = None
        self.recorded: int | None = None  # step of the newest metrics line
        self.saved: int | None = None  # step of the newest checkpoint (written or loaded)
        self.last: Path | None = None  # its folder
        self.bar: Any = None

    def _hash(self) -> str:
        return frozen_hash(self.job.config.to_dict(), self.job.may_change)

    def _resume_point(self) -> tuple[int, Path]:
        """(step, folder) of the newest checkpoint: `checkpoints/step_N` or (a series) `interrupted/`."""
        points = [(s, self.run.path / "checkpoints" / f"step_{s}") for s in checkpoint_steps(self.run.path)]
        cut = self.run.file(INTERRUPTED)
        if state_file(cut) is not None:
            points.append((read_state(cut)["step"], cut))
        if not points:
            raise InputError(f"--resume: no complete checkpoint in {self.run.path / 'checkpoints'}")
        return max(points)

    def resume(self) -> None:
        """Continue from the newest checkpoint (refusing one of another config hash or beyond `steps`); keep the
        metrics lines up to its step, drop what a crash cut off, and save the config (`steps` may have grown)."""
        step, folder = self._resume_point()
        state = read_state(folder)
        saved = state.get("config_hash") or frozen_hash(state.get("config", {}), self.job.may_change)  # legacy series
        if saved != self._hash():
            diff = config_diff(state.get("config", {}), self.job.config.to_dict(), self.job.may_change)
            raise InputError(
                f"--resume: the config changed since {folder}: {'; '.join(diff or ['config hash differs'])}"
            )
        if step > self.schedule.steps:
            raise InputError(f"--steps {self.schedule.steps} is below the run's current step {step}")
        load_checkpoint(folder, self.job.model, self.job.optimizer)
        self.step = self.saved = self.resumed_step = step
        self.resumed_from = self.last = folder
        self.run.reset_metrics(keep_until_step=step)
        self.recorded = step if any(r.get("step") == step for r in self.run.metrics(STEPPED)) else None
        for tmp in [*self.run.path.glob("checkpoints/*.tmp"), self.run.file(INTERRUPTED + ".tmp")]:  # cut by a kill
            shutil.rmtree(tmp, ignore_errors=True)
        self.run.write_config(self.job.config)

    def run_loop(self) -> Outcome:
        """Train to `schedule.steps`; Ctrl-C/SIGTERM save the step reached and raise an exit-130 `AttnlabError`."""
        self.job.model.train()
        self.bar = tqdm(total=self.schedule.steps, initial=self.step, desc=self.desc, disable=not self.progress,
                        dynamic_ncols=True, mininterval=1.0)  # fmt: skip
        try:
            with signals_deferred():
                self._bookkeeping(None)  # step 0, or a line a resumed run lacks
            self._steps()
        except KeyboardInterrupt:
            self.bar.close()
            raise self._interrupted() from None
        self.bar.close()
        assert self.last is not None
        return Outcome(self.step, self.resumed_from, self.resumed_step, self.last)

    def _steps(self) -> None:
        """Updates until `schedule.steps`. The NaN guard reads one norm per tensor list (a single foreach kernel) for
        the loss and gradients, and for the updated parameters; only when a norm is not finite does it look for the
        tensor by name (a norm can overflow for huge finite values: then training goes on). On a GPU those two
        booleans are the only values read back between metrics lines."""
        model, opt = self.job.model, self.job.optimizer
        params: list[torch.Tensor] = list(model.parameters())
        last_finite = [p.detach().clone() for p in params]  # restored if an update makes a parameter non-finite
        while self.step < self.schedule.steps:
            loss = self.job.loss(self.step)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            if not norms_finite([loss.detach(), *(p.grad for p in params if p.grad is not None)]):
                self._check_loss_and_grads(loss)
            with signals_deferred():  # the update, the step count and the step's writes happen together
                with torch.no_grad():
                    torch._foreach_copy_(last_finite, [p.detach() for p in params])
                opt.step()
                if not norms_finite(params):
                    bad = first_nonfinite(model)
                    if bad is not None:
                        with torch.no_grad():
                            torch._foreach_copy_(params, last_finite)
                        self._diverged(loss.item(), f"parameter {bad} after the update")
                self.step += 1
                self.bar.update(1)
                self._bookkeeping(loss)

    def _bookkeeping(self, loss: torch.Tensor | None) -> None:
        """The metrics line and checkpoint due at this step, unless already written."""
        step, schedule = self.step, self.schedule
        if step in schedule.records and self.recorded != step:
            value = math.nan if loss is None else loss.item()
            line = {"step": step, **self.job.record(step, value)}
            self.run.append_metrics(line)
            self.recorded = step
            if self.postfix is not None:
                self.bar.set_postfix(self.postfix(line, value))
            self.job.model.train()
        if step in schedule.checkpoints and self.saved != step:
            self._checkpoint(self.run.path / "checkpoints" / f"step_{step}")
            if schedule.series:
                shutil.rmtree(self.run.file(INTERRUPTED), ignore_errors=True)  # superseded by this checkpoint

    def _checkpoint(self, folder: Path) -> Path:
        """Save the model and optimiser at this step into `folder` (pruning a `checkpoints/step_N` series)."""
        state = {"step": self.step, "config": self.job.config.to_dict(), "config_hash": self._hash()}
        save_checkpoint(folder, self.job.model, self.job.optimizer, state, self.job.write_model)
        if folder.parent == self.run.path / "checkpoints" and folder.name.startswith("step_"):
            self.saved, self.last = self.step, folder
            self.run.resume_hint = "continue it with --resume"  # a full disk from now on keeps the run
            if self.schedule.keep_last is not None:
                prune_checkpoints(self.run.path, self.schedule.keep_last)
        return folder

    def _interrupted(self) -> AttnlabError:
        """Save the step an interrupted run reached (once) and say where. A series saves a step between its
        checkpoint steps into `interrupted/`, so checkpoints/ holds what an uninterrupted run holds. Under
        --overwrite nothing is saved: the folder is discarded."""
        step = self.step
        if self.run.replacing:  # open_run discards this folder and puts the earlier run back
            return AttnlabError(f"interrupted at step {step}; {discarded(self.run)}", exit_code=130)
        folder = self.last
        if self.saved != step:
            inside = not self.schedule.series or step in self.schedule.checkpoints
            folder = self.run.path / "checkpoints" / f"step_{step}" if inside else self.run.file(INTERRUPTED)
            self._checkpoint(folder)
        return AttnlabError(
            f"interrupted at step {step}; checkpoint saved in {folder}; continue with --resume", exit_code=130
        )

    def _check_loss_and_grads(self, loss: torch.Tensor) -> None:
        """After a non-finite norm of the loss or gradients: name what is not finite (or go on after an overflow)."""
        loss_value = loss.item()
        if not math.isfinite(loss_value):
            first = first_nonfinite(self.job.model) or "none"
            self._diverged(loss_value, f"the loss (first non-finite parameter: {first})")
        bad = first_nonfinite(self.job.model, grads=True)
        if bad is not None:
            self._diverged(loss_value, f"the gradient of parameter {bad}")

    def _diverged(self, loss: float, what: str) -> None:
        """Save the last finite state (`nan_step_N`) and raise a `NumericalError` printed on its own line."""
        self.bar.close()
        if self.run.replacing:
            kept = discarded(self.run)
        else:
            root = self.run.path if self.schedule.series else self.run.path / "checkpoints"
            kept = f"last finite state saved in {self._checkpoint(root / f'nan_step_{self.step}')}"
        err = NumericalError(f"non-finite value in {what} at step {self.step} (loss {loss}); {kept}")
        err.after_progress = True  # type: ignore[attr-defined]
        raise err
