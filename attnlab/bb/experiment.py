"""A BB training run's pieces: task and model from a config, the evaluator that takes the §6 snapshots, the
arrays the report needs from the final model, and reloading a finished run (for `bb intervene`)."""

from __future__ import annotations

import copy
from pathlib import Path

import numpy as np
import torch
from safetensors.numpy import save as safetensors_bytes

from attnlab.bb.config import DEFAULT_CORPUS, TrainConfig, read_train_config
from attnlab.bb.metrics import active_token_probe, bb_metrics
from attnlab.errors import InputError
from attnlab.runs import RunDir, write_bytes
from attnlab.toy.model import ToyConfig, ToyTransformer
from attnlab.toy.task import BBTask, build_bb_task
from attnlab.tracing.adapters.toy import trace_toy
from attnlab.tracing.format import Trace
from attnlab.training.checkpoint import latest_checkpoint, load_checkpoint

REPORT_T = 32  # the attention map shows the first 32 tokens of evaluation sequence 0


def model_config(cfg: TrainConfig, task: BBTask) -> ToyConfig:
    return ToyConfig(
        vocab=task.V,
        d_model=cfg.d_model,
        n_layers=cfg.n_layers,
        n_heads=cfg.n_heads,
        d_mlp=cfg.d_mlp,
        max_len=cfg.seq_len,
        attn=cfg.attention,
        no_attn=list(cfg.no_attn),
        no_mlp=list(cfg.no_mlp),
        linear_mlp=list(cfg.linear_mlp),
        block=cfg.block,
    ).validate()


def task_for(cfg: TrainConfig) -> BBTask:
    return build_bb_task(None if cfg.corpus == DEFAULT_CORPUS else cfg.corpus, cfg.vocab_chars, cfg.n_triggers)


def build_model(cfg: TrainConfig, task: BBTask) -> ToyTransformer:
    """The initial model: torch's module initialisers draw from the global generator, so they run inside
    `fork_rng` seeded with `cfg.seed` (the caller's random state is left untouched)."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(cfg.seed)
        return ToyTransformer(model_config(cfg, task))


def attention_layers(model: ToyTransformer) -> list[int]:
    return [l for l, block in enumerate(model.blocks) if block.attn is not None]


class Evaluator:
    """The §6 metrics on the fixed evaluation batch `seqs` [N, T+1]; with `snapshots`, per-step arrays too.

    The metrics are computed on the cpu (float32 forward, float64 statistics). When the trained model lives on a
    GPU, `self.model` is a cpu copy whose weights are refreshed from it at each snapshot: one device-to-host copy
    of the weights per snapshot, none between snapshots."""

    def __init__(self, model: ToyTransformer, task: BBTask, seqs: np.ndarray, snapshots: Path | None = None):
        self.trained = model
        on_cpu = all(p.device.type == "cpu" for p in model.parameters())
        self.model = model if on_cpu else copy.deepcopy(model).cpu()
        self.task, self.seqs, self.snapshots = task, seqs, snapshots
        self.inputs = torch.as_tensor(seqs[:, :-1])
        self.attn_layers = attention_layers(model)

    def cpu_model(self) -> ToyTransformer:
        """The evaluated model with the trained weights (the trained model itself when it is on the cpu)."""
        if self.model is not self.trained:
            self.model.load_state_dict(self.trained.state_dict())
        return self.model

    def trace(self, interventions: tuple = (), chunk: int = 256) -> tuple[Trace, torch.Tensor]:
        return trace_toy(self.model, self.inputs, self.task.V, interventions=interventions, chunk=chunk)

    def __call__(self, step: int) -> dict:
        self.cpu_model()
        trace, logits = self.trace()
        metrics = bb_metrics(trace, logits, self.seqs, self.task, self.attn_layers)
        if self.snapshots is not None:
            self._save_snapshot(step, trace)
        return metrics

    def _save_snapshot(self, step: int, trace: Trace) -> None:
        """Per-token-type arrays and the 16×16 top-left attention block of evaluation sequence 0."""
        arrays = {
            "attn_key0_by_token": trace.attn_key0_by_token,
            "dlogit_by_token": trace.dlogit_by_token,
            "value_norm": trace.value_norm,
            "resid_norm": trace.resid_norm,
            "token_count": trace.token_count,
        }
        if self.attn_layers:
            arrays["attn_block16"] = self.pattern(self.inputs[:1, :16], self.attn_layers[0])[0]
        data = {k: np.ascontiguousarray(v, dtype=np.float32) for k, v in arrays.items()}
        assert self.snapshots is not None
        write_bytes(self.snapshots / f"step_{step}.safetensors", safetensors_bytes(data))

    def pattern(self, tokens: torch.Tensor, layer: int) -> np.ndarray:
        """The attention pattern [B,H,T,T] (float32) of `layer` on `tokens` [B,T], kept by the trace."""
        heads = range(self.model.cfg.n_heads)
        trace, _ = trace_toy(self.model, tokens, self.task.V, keep_patterns=[(layer, h) for h in heads])
        return np.stack([trace.patterns[(layer, h)] for h in heads], axis=1)


def report_arrays(cfg: TrainConfig, task: BBTask, model: ToyTransformer, seqs: np.ndarray) -> dict:
    """What the run's report shows of the final model, computed once at the end of training:
    `attention_map` [32,32] (first attention layer, head 0, evaluation sequence 0), `value_norms` [L,H,T]
    (‖W_O^h v^h_i‖ over the evaluation batch) and the §6.6 active-token probe per softmax layer."""
    out: dict = {"value_norms": None, "attention_map": None, "probe": []}
    layers = attention_layers(model)
    if not layers:
        return out
    T = min(REPORT_T, cfg.seq_len)
    tr, _ = trace_toy(model, torch.as_tensor(seqs[:1, :-1]), task.V, keep_patterns=[(layers[0], 0)])
    out["attention_map"] = tr.patterns[f"{layers[0]}.0"][0][:T, :T]
    full, _ = trace_toy(model, torch.as_tensor(seqs[:, :-1]), task.V)
    out["value_norms"] = full.value_norm
    names = task.vocab.token_names()
    for layer in layers if cfg.attention == "softmax" else []:
        p = active_token_probe(model, task, layer=layer)
        out["probe"].append(
            {
                "layer": layer,
                "active tokens": " ".join(names[t] for t in p["active_tokens"]) or "none",
                "triggers": " ".join(names[t] for t in task.triggers),
                "active = triggers": p["active_equals_triggers"],
            }
        )
    return out


def save_report_arrays(run: RunDir, arrays: dict, step: int, task: BBTask, seqs: np.ndarray) -> None:
    """`final/`: attention_map.npy, value_norms.npy and final.json (step, tokens, names, triggers, probe)."""
    for name in ("attention_map", "value_norms"):
        if arrays[name] is not None:
            run.save_npy(f"final/{name}.npy", arrays[name])
    run.write_json(
        "final/final.json",
        {
            "step": step,
            "tokens": seqs[0, :REPORT_T].tolist(),
            "token_names": task.vocab.token_names(),
            "triggers": task.triggers,
            "probe": arrays["probe"],
        },
    )


def load_run(run_dir: str | Path) -> tuple[TrainConfig, BBTask, ToyTransformer, dict]:
    """(config, task, model with the newest checkpoint's weights, checkpoint state) of a `bb train` run."""
    cfg = read_train_config(run_dir)
    task = task_for(cfg)
    model = build_model(cfg, task)
    ckpt = latest_checkpoint(Path(run_dir))
    if ckpt is None:
        raise InputError(f"no complete checkpoint in {Path(run_dir) / 'checkpoints'}")
    state = load_checkpoint(ckpt, model)
    model.eval()
    return cfg, task, model, state
