"""The training loop: snapshots on a schedule, checkpoints, resume, Ctrl-C safety and the NaN guard (spec §4)."""

from __future__ import annotations

import json
import math
from typing import Callable

import torch
from tqdm.auto import tqdm

from attnlab.errors import AttnlabError
from attnlab.runs import RunDir
from attnlab.train.checkpoint import latest_checkpoint, load_checkpoint, prune_checkpoints, save_checkpoint
from attnlab.train.presets import TrainConfig
from attnlab.train.schedule import snapshot_steps

BatchFn = Callable[[int], tuple[torch.Tensor, torch.Tensor]]   # step -> (inputs [B,T], targets [B,T])
SnapshotFn = Callable[[int], dict]                             # step -> metrics dict


def make_optimizer(model: torch.nn.Module, cfg: TrainConfig) -> torch.optim.Optimizer:
    """AdamW or SGD with momentum; constant lr, weight decay on every parameter (as the reference; spec §4)."""
    lr = cfg.resolved_lr()
    if cfg.optimizer == "adam":
        return torch.optim.AdamW(model.parameters(), lr=lr, betas=tuple(cfg.betas), eps=cfg.eps,
                                 weight_decay=cfg.weight_decay)
    return torch.optim.SGD(model.parameters(), lr=lr, momentum=cfg.momentum, weight_decay=cfg.weight_decay)


def _first_nonfinite(model: torch.nn.Module, grads: bool) -> str | None:
    for name, p in model.named_parameters():
        t = p.grad if grads else p
        if t is not None and not torch.isfinite(t).all():
            return name
    return None


def _config_diff(old: dict, new: dict) -> list[str]:
    skip = {"steps", "ckpt_every", "keep_last", "threads"}
    return [f"{k}: {old.get(k)!r} -> {new.get(k)!r}" for k in sorted(set(old) | set(new))
            if k not in skip and old.get(k) != new.get(k)]


def train(model: torch.nn.Module, cfg: TrainConfig, run: RunDir, batch_fn: BatchFn, snapshot_fn: SnapshotFn,
          resume: bool = False, progress: bool = True) -> dict:
    """Train `model` for `cfg.steps` optimiser updates; returns {'step', 'resumed_from', 'checkpoint'}.

    step s means s updates done; snapshot s is taken after update s (s = 0: the initial model).
    Update k (0-based) uses `batch_fn(k)`, so a resumed run sees exactly the batches it would have seen.
    """
    opt = make_optimizer(model, cfg)
    start = 0
    resumed_from = None
    if resume:
        ckpt = latest_checkpoint(run.path)
        if ckpt is None:
            raise AttnlabError(f"--resume: no complete checkpoint in {run.path / 'checkpoints'}")
        state = json.loads((ckpt / "state.json").read_text()) if (ckpt / "state.json").exists() else {}
        diff = _config_diff(state.get("config", {}), cfg.to_dict())
        if diff:
            raise AttnlabError(f"--resume: the config changed since {ckpt}: {'; '.join(diff)}")
        state = load_checkpoint(ckpt, model, opt)
        start = int(state["step"])
        resumed_from = str(ckpt)
        run.reset_metrics(keep_until_step=start)
    else:
        run.reset_metrics()
    snaps = set(snapshot_steps(cfg.steps, cfg.lin_every, cfg.lin_until, cfg.per_decade))

    def checkpoint(step: int, name: str | None = None) -> str:
        folder = save_checkpoint(run.path / "checkpoints" / (name or f"step_{step}"), model, opt,
                                 {"step": step, "config": cfg.to_dict(), "config_hash": cfg.model_hash()})
        if name is None:
            prune_checkpoints(run.path, cfg.keep_last)
        return str(folder)

    if start == 0 and 0 in snaps:
        run.append_metrics({"step": 0, **snapshot_fn(0)})
    model.train()
    step = start
    params = [p for p in model.parameters()]
    last_finite = [p.detach().clone() for p in params]   # restored if an update makes a parameter non-finite
    bar = tqdm(total=cfg.steps, initial=start, desc=f"train {cfg.attention}/{cfg.optimizer}", disable=not progress,
               dynamic_ncols=True, mininterval=1.0)
    try:
        while step < cfg.steps:
            inputs, targets = batch_fn(step)
            logits = model(inputs)
            loss = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))
            loss_value = loss.item()
            if not math.isfinite(loss_value):
                _diverged(run, model, step, loss_value, "the loss", checkpoint)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            bad = _first_nonfinite(model, grads=True)
            if bad is not None:
                _diverged(run, model, step, loss_value, f"the gradient of {bad}", checkpoint)
            with torch.no_grad():
                torch._foreach_copy_(last_finite, [p.detach() for p in params])
            opt.step()
            if not bool(torch.isfinite(torch.stack(torch._foreach_norm(params))).all()):
                bad = _first_nonfinite(model, grads=False)
                with torch.no_grad():
                    torch._foreach_copy_(params, last_finite)
                _diverged(run, model, step, loss_value, f"parameter {bad} after the update", checkpoint)
            step += 1
            bar.update(1)
            if step in snaps:
                record = {"step": step, **snapshot_fn(step)}
                run.append_metrics(record)
                bar.set_postfix(loss=f"{loss_value:.3f}", sink=_short(record.get("attn_sink")))
                model.train()
            if step % cfg.ckpt_every == 0 and step < cfg.steps:
                checkpoint(step)
    except KeyboardInterrupt:
        bar.close()
        path = checkpoint(step)
        raise AttnlabError(f"interrupted at step {step}; checkpoint saved in {path}; continue with --resume",
                           exit_code=130) from None
    bar.close()
    return {"step": step, "resumed_from": resumed_from, "checkpoint": checkpoint(step)}


def _short(v) -> str:
    if isinstance(v, list):
        v = v[0]
    if isinstance(v, list):
        v = v[0]
    return "-" if v is None else f"{v:.2f}"


def _diverged(run: RunDir, model, step: int, loss: float, what: str, checkpoint) -> None:
    path = checkpoint(step, name=f"nan_step_{step}")
    raise AttnlabError(f"non-finite value in {what} at step {step} (loss {loss}); last finite state saved in {path}",
                       exit_code=2)
