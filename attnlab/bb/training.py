"""The training loop: snapshots on a schedule, checkpoints, resume, Ctrl-C/SIGTERM safety and the NaN guard
(spec extreme-tokens §4).

Step s means s updates done; snapshot s is taken after update s (s = 0: the initial model). Update k (0-based)
uses `batch_fn(k)`, so a resumed run sees exactly the batches it would have seen, and (on one thread) reaches
bit-identical weights and metrics.
"""

from __future__ import annotations

import math
import signal
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import torch
from tqdm.auto import tqdm

from attnlab.bb.checkpoint import latest_checkpoint, load_checkpoint, prune_checkpoints, save_checkpoint
from attnlab.bb.config import TRAIN_HASH_SKIP, TrainConfig, train_hash
from attnlab.bb.metrics import metric
from attnlab.bb.schedule import snapshot_steps
from attnlab.errors import AttnlabError, InputError, NumericalError
from attnlab.runs import RunDir, read_json
from attnlab.tracking import Tracker

BatchFn = Callable[[int], tuple[torch.Tensor, torch.Tensor]]  # step -> (inputs [B,T], targets [B,T])
SnapshotFn = Callable[[int], dict]  # step -> metrics dict


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


def first_nonfinite(model: torch.nn.Module, grads: bool = False) -> str | None:
    """Name of the first parameter (or its gradient) holding a NaN/inf, or None."""
    for name, p in model.named_parameters():
        t = p.grad if grads else p
        if t is not None and not torch.isfinite(t).all():
            return name
    return None


def _norms_finite(tensors: list[torch.Tensor]) -> bool:
    """Whether the 2-norm of every tensor is finite (one foreach kernel; a NaN or inf anywhere makes its norm
    non-finite; a false alarm from an overflowing norm is settled by `first_nonfinite`)."""
    with torch.no_grad():
        return not tensors or bool(torch.isfinite(torch.stack(torch._foreach_norm(tensors))).all())


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


def discarded(run: RunDir) -> str:
    """What a failed `--overwrite` run leaves: the earlier run back in place, nothing of this one."""
    return f"--overwrite did not finish, so the earlier run is back in {run.path} and this run was discarded"


def config_diff(old: dict, new: dict) -> list[str]:
    """'field: old -> new' for every field that may not change on resume."""
    return [
        f"{k}: {old.get(k)!r} -> {new.get(k)!r}"
        for k in sorted(set(old) | set(new))
        if k not in TRAIN_HASH_SKIP and k != "threads" and old.get(k) != new.get(k)
    ]


class Trainer:
    """One invocation of the loop on `run` (a held run folder): `run_loop()` trains to `cfg.steps`."""

    def __init__(
        self,
        model: torch.nn.Module,
        cfg: TrainConfig,
        run: RunDir,
        batch_fn: BatchFn,
        snapshot_fn: SnapshotFn,
        progress: bool = True,
    ) -> None:
        self.model, self.cfg, self.run = model, cfg, run
        self.batch_fn, self.snapshot_fn, self.progress = batch_fn, snapshot_fn, progress
        self.opt = make_optimizer(model, cfg)
        self.snaps = set(snapshot_steps(cfg.steps, cfg.lin_every, cfg.lin_until, cfg.per_decade))
        self.step = 0
        self.resumed_from: str | None = None
        self.tracker = Tracker(cfg.log, run.path, run.path.name, {k: v for k, v in cfg.to_dict().items() if k != "log"})

    def checkpoint(self, step: int, name: str | None = None) -> str:
        folder = save_checkpoint(
            self.run.path / "checkpoints" / (name or f"step_{step}"),
            self.model,
            self.opt,
            {"step": step, "config": self.cfg.to_dict(), "config_hash": train_hash(self.cfg)},
        )
        if name is None:
            prune_checkpoints(self.run.path, self.cfg.keep_last)
        return str(folder)

    def resume(self) -> None:
        """Load the newest checkpoint (refusing one of another config) and keep the metrics up to its step."""
        ckpt = latest_checkpoint(self.run.path)
        if ckpt is None:
            raise InputError(f"--resume: no complete checkpoint in {self.run.path / 'checkpoints'}")
        state = read_json(ckpt / "state.json", "checkpoint state")
        if not isinstance(state, dict) or "step" not in state:
            raise InputError(f"checkpoint state {ckpt / 'state.json'} is corrupt (no step); restore or delete it")
        if state.get("config_hash") != train_hash(self.cfg):
            diff = config_diff(state.get("config", {}), self.cfg.to_dict()) or ["config hash differs"]
            raise InputError(f"--resume: the config changed since {ckpt}: {'; '.join(diff)}")
        if int(state["step"]) > self.cfg.steps:
            raise InputError(f"--steps {self.cfg.steps} is below the run's current step {state['step']}")
        load_checkpoint(ckpt, self.model, self.opt)
        self.step, self.resumed_from = int(state["step"]), str(ckpt)
        self.run.reset_metrics(keep_until_step=self.step)

    def snapshot(self, loss_value: float | None = None, bar: tqdm | None = None) -> None:
        record = {"step": self.step, **self.snapshot_fn(self.step)}
        self.run.append_metrics(record)
        self.tracker.log(record, self.step)
        if bar is not None:
            sink = metric(record, "attn_sink")
            bar.set_postfix(loss=f"{loss_value:.3f}", sink="-" if sink is None else f"{sink:.2f}")
        self.model.train()

    def run_loop(self) -> dict:
        """Train to `cfg.steps`; returns {'step', 'resumed_from', 'checkpoint'}."""
        done = {r.get("step") for r in self.run.metrics()} if self.step else set()
        if self.step in self.snaps and self.step not in done:  # also a snapshot cut off by an interrupt
            self.snapshot()
        self.model.train()
        bar = tqdm(
            total=self.cfg.steps,
            initial=self.step,
            desc=f"train {self.cfg.attention}/{self.cfg.optimizer}",
            disable=not self.progress,
            dynamic_ncols=True,
            mininterval=1.0,
        )
        try:
            with self.tracker, _tf32(self.cfg.precision == "tf32"):
                self._steps(bar)
        except KeyboardInterrupt:
            bar.close()
            if self.run.replacing:  # open_run discards this folder and puts the earlier run back
                raise AttnlabError(f"interrupted at step {self.step}; {discarded(self.run)}", exit_code=130) from None
            path = self.checkpoint(self.step)
            raise AttnlabError(
                f"interrupted at step {self.step}; checkpoint saved in {path}; continue with --resume", exit_code=130
            ) from None
        bar.close()
        final = self.checkpoint(self.step)
        return {
            "step": self.step,
            "resumed_from": self._relative(self.resumed_from),
            "checkpoint": self._relative(final),
        }

    def _relative(self, path: str | None) -> str | None:
        """A path inside the run folder, relative to it (run folders can move; pages show no machine paths)."""
        return None if path is None else Path(path).relative_to(self.run.path).as_posix()

    def _steps(self, bar: tqdm) -> None:
        """Updates until `cfg.steps`. The NaN guard reads one norm per tensor list (a single foreach kernel) for the
        loss and gradients, and for the updated parameters; only when a norm is not finite does it look for the
        tensor by name (a norm can overflow for huge finite values: then training goes on). On a GPU those two
        booleans are the only values read back between snapshots (the loss is read at snapshots only)."""
        params: list[torch.Tensor] = list(self.model.parameters())
        last_finite = [p.detach().clone() for p in params]  # restored if an update makes a parameter non-finite
        while self.step < self.cfg.steps:
            inputs, targets = self.batch_fn(self.step)
            with _autocast(self.cfg.precision, inputs.device):
                logits = self.model(inputs)
            loss = torch.nn.functional.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), targets.reshape(-1))
            self.opt.zero_grad(set_to_none=True)
            loss.backward()
            if not _norms_finite([loss.detach(), *(p.grad for p in params if p.grad is not None)]):
                self._check_loss_and_grads(bar, loss)
            with signals_deferred():  # update and step count change together (SIGTERM/Ctrl-C land after)
                with torch.no_grad():
                    torch._foreach_copy_(last_finite, [p.detach() for p in params])
                self.opt.step()
                if not _norms_finite(params):
                    bad = first_nonfinite(self.model)
                    if bad is not None:
                        with torch.no_grad():
                            torch._foreach_copy_(params, last_finite)
                        self._diverged(bar, loss.item(), f"parameter {bad} after the update")
                self.step += 1
            bar.update(1)
            if self.step in self.snaps:
                self.snapshot(loss.item(), bar)
            if self.step % self.cfg.ckpt_every == 0 and self.step < self.cfg.steps:
                self.checkpoint(self.step)

    def _check_loss_and_grads(self, bar: tqdm, loss: torch.Tensor) -> None:
        """After a non-finite norm of the loss or gradients: name what is not finite (or go on after an overflow)."""
        loss_value = loss.item()
        if not math.isfinite(loss_value):
            self._diverged(
                bar, loss_value, f"the loss (first non-finite parameter: {first_nonfinite(self.model) or 'none'})"
            )
        bad = first_nonfinite(self.model, grads=True)
        if bad is not None:
            self._diverged(bar, loss_value, f"the gradient of parameter {bad}")

    def _diverged(self, bar: tqdm, loss: float, what: str) -> None:
        """Save the last finite state and raise a `NumericalError` printed on its own line."""
        bar.close()
        if self.run.replacing:
            kept = discarded(self.run)
        else:
            kept = f"last finite state saved in {self.checkpoint(self.step, name=f'nan_step_{self.step}')}"
        err = NumericalError(f"non-finite value in {what} at step {self.step} (loss {loss}); {kept}")
        err.after_progress = True  # type: ignore[attr-defined]
        raise err
