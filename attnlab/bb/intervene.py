"""`attnlab bb intervene`: risks of a trained BB model under each intervention (spec extreme-tokens §7)."""

from __future__ import annotations

from pathlib import Path

import torch

from attnlab.extreme.experiment import Evaluator, load_run
from attnlab.extreme.interventions import MoveAttnToSink, ZeroHead, ZeroLayer, ZeroMLP, combine_hooks
from attnlab.extreme.metrics import bb_metrics

REPORTED = ("risk_backcopy", "excess_risk_backcopy", "risk_bigram", "excess_risk_bigram", "attn_sink",
            "value_norm_bos", "resid_norm_bos", "delta_logit")


def default_interventions(model, task, inputs: torch.Tensor) -> list:
    """Zero each head, each MLP, each layer, and force each head's attention onto `<s>` (all / non-trigger rows)."""
    ivs: list = []
    non_trigger = ~task.trigger_mask(inputs)
    for layer, block in enumerate(model.blocks):
        if block.attn is not None:
            for h in range(model.cfg.n_heads):
                ivs.append(ZeroHead(layer, h))
                ivs.append(MoveAttnToSink(layer, h))
                ivs.append(MoveAttnToSink(layer, h, queries=non_trigger, label="non-trigger queries"))
        if block.mlp is not None:
            ivs.append(ZeroMLP(layer))
        ivs.append(ZeroLayer(layer))
    return ivs


def evaluate_interventions(run_dir: Path, interventions: list | None = None) -> list[dict]:
    """Rows {intervention, risks..., change in risks} for the full model and each intervention."""
    cfg, task, model, state = load_run(run_dir)
    seqs = task.eval_batch(cfg.eval_batch, cfg.seq_len, cfg.eval_seed)
    ev = Evaluator(model, task, seqs)
    ivs = default_interventions(model, task, ev.inputs) if interventions is None else interventions
    rows = []
    base = None
    for iv in [None] + ivs:
        hooks = combine_hooks([iv], model) if iv is not None else None
        trace, logits = trace_all(ev, hooks)
        m = bb_metrics(trace, logits, seqs, task, ev.attn_layers)
        row = {"intervention": "none (full model)" if iv is None else iv.name, "step": state["step"]}
        row.update({k: m[k] for k in REPORTED})
        if base is None:
            base = row
        else:
            for k in ("risk_backcopy", "risk_bigram"):
                row[f"delta_{k}"] = row[k] - base[k]
        rows.append(row)
    return rows


def trace_all(ev: Evaluator, hooks: dict | None):
    """Trace the whole evaluation batch in one chunk (query masks are batch-aligned)."""
    from attnlab.trace.toy import trace_toy

    return trace_toy(ev.model, ev.inputs, ev.task.V, extra_hooks=hooks, chunk=ev.inputs.shape[0])
