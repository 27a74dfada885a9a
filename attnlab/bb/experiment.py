"""A BB training run end to end: task -> model -> training with snapshots -> metrics in the run folder."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from safetensors.numpy import save_file

from attnlab.errors import AttnlabError
from attnlab.extreme.metrics import bb_metrics
from attnlab.models.toy import ToyConfig, ToyTransformer
from attnlab.runs import RunDir
from attnlab.tasks.bb import BBTask, build_bb_task
from attnlab.trace.toy import trace_toy
from attnlab.train.checkpoint import latest_checkpoint, load_checkpoint
from attnlab.train.loop import train
from attnlab.train.presets import TrainConfig, config_from_dict


def model_config(cfg: TrainConfig, task: BBTask) -> ToyConfig:
    return ToyConfig(vocab=task.V, d_model=cfg.d_model, n_layers=cfg.n_layers, n_heads=cfg.n_heads,
                     d_mlp=cfg.d_mlp, max_len=cfg.seq_len, attn=cfg.attention, no_attn=list(cfg.no_attn),
                     no_mlp=list(cfg.no_mlp), linear_mlp=list(cfg.linear_mlp)).validate()


def task_for(cfg: TrainConfig) -> BBTask:
    return build_bb_task(None if cfg.corpus == "pydoc_data" else cfg.corpus, cfg.vocab_chars, cfg.n_triggers)


def build_model(cfg: TrainConfig, task: BBTask) -> ToyTransformer:
    torch.manual_seed(cfg.seed)
    return ToyTransformer(model_config(cfg, task))


@dataclass
class Evaluator:
    """Computes the §6 metrics on the fixed evaluation batch and writes per-snapshot arrays."""

    model: ToyTransformer
    task: BBTask
    seqs: np.ndarray               # [N, T+1]
    run: RunDir | None = None

    def __post_init__(self) -> None:
        self.inputs = torch.as_tensor(self.seqs[:, :-1])
        self.attn_layers = [l for l in range(self.model.cfg.n_layers) if l not in self.model.cfg.no_attn]

    def trace(self, extra_hooks: dict | None = None, keep_patterns=()):
        return trace_toy(self.model, self.inputs, self.task.V, keep_patterns=keep_patterns, extra_hooks=extra_hooks)

    def __call__(self, step: int) -> dict:
        trace, logits = self.trace()
        metrics = bb_metrics(trace, logits, self.seqs, self.task, self.attn_layers)
        if self.run is not None:
            self._save_snapshot(step, trace)
        return metrics

    def _save_snapshot(self, step: int, trace) -> None:
        """Per-token-type arrays and the 16×16 top-left attention block of evaluation sequence 0."""
        folder = self.run.path / "snapshots"
        folder.mkdir(exist_ok=True)
        arrays = {"attn_key0_by_token": trace.attn_key0_by_token, "dlogit_by_token": trace.dlogit_by_token,
                  "value_norm": trace.value_norm, "resid_norm": trace.resid_norm,
                  "token_count": trace.token_count}
        if self.attn_layers:
            captured = {}
            layer = self.attn_layers[0]

            def grab(x, name):
                captured["A"] = x[0].detach().clone()

            with torch.no_grad(), self.model.hooks({f"blocks.{layer}.attn.pattern": grab}):
                self.model(self.inputs[:1, :16])
            arrays["attn_block16"] = captured["A"].numpy()
        save_file({k: np.ascontiguousarray(v, dtype=np.float32) for k, v in arrays.items()},
                  str(folder / f"step_{step}.safetensors"))


def run_training(cfg: TrainConfig, out: Path, resume: bool = False, progress: bool = True) -> RunDir:
    """Train one BB model into `out` (config.json, manifest.json, metrics.jsonl, snapshots/, checkpoints/)."""
    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    run = RunDir(out, "bb")
    if resume and not (run.path / "config.json").exists():
        raise AttnlabError(f"--resume: {run.path} has no config.json; is it a BB run folder?")
    task = task_for(cfg)
    if not resume:
        run.write_config(cfg.to_dict())
        run.write_manifest(cfg.seed, **task.meta())
    model = build_model(cfg, task)
    seqs = task.eval_batch(cfg.eval_batch, cfg.seq_len, cfg.eval_seed)
    evaluator = Evaluator(model, task, seqs, run)

    def batch_fn(step: int):
        x = torch.as_tensor(task.train_batch(cfg.batch, cfg.seq_len, cfg.seed, step))
        return x[:, :-1], x[:, 1:]

    t0 = time.perf_counter()
    result = train(model, cfg, run, batch_fn, evaluator, resume=resume, progress=progress)
    result["wall_seconds"] = round(time.perf_counter() - t0, 2)
    run.write_json("train_summary.json", result)
    return run


def load_run(run_dir: Path, checkpoint: Path | None = None) -> tuple[TrainConfig, BBTask, ToyTransformer, dict]:
    """Rebuild (config, task, model with the newest checkpoint's weights, state) from a BB run folder."""
    run_dir = Path(run_dir)
    cfg_path = run_dir / "config.json"
    if not cfg_path.exists():
        raise AttnlabError(f"{run_dir} is not a BB run folder (no config.json)")
    try:
        cfg = config_from_dict(json.loads(cfg_path.read_text()))
    except (json.JSONDecodeError, TypeError) as exc:
        raise AttnlabError(f"unreadable config {cfg_path}: {exc}") from None
    task = task_for(cfg)
    model = build_model(cfg, task)
    ckpt = checkpoint or latest_checkpoint(run_dir)
    if ckpt is None:
        raise AttnlabError(f"no complete checkpoint in {run_dir / 'checkpoints'}")
    state = load_checkpoint(ckpt, model)
    model.eval()
    return cfg, task, model, state
