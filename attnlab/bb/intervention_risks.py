"""`bb intervene`'s computation: risks of a trained BB model under each intervention (spec extreme-tokens §7).

The interventions are the values of `attnlab.tracing.interventions`; the toy adapter compiles them into hooks.
"""

from __future__ import annotations

import math
from typing import Any

import torch

from attnlab.bb.config import TrainConfig
from attnlab.bb.experiment import attention_layers
from attnlab.bb.metrics import bb_metrics
from attnlab.bb.training import first_nonfinite
from attnlab.errors import NumericalError
from attnlab.toy.model import ToyTransformer
from attnlab.toy.task import BBTask
from attnlab.tracing.adapters.toy import trace_toy
from attnlab.tracing.interventions import Intervention, MoveToSink, ZeroHead, ZeroLayer, ZeroMLP

REPORTED = (
    "risk_backcopy",
    "excess_risk_backcopy",
    "risk_bigram",
    "excess_risk_bigram",
    "attn_sink",
    "value_norm_bos",
    "resid_norm_bos",
    "delta_logit",
)


def default_interventions(model: ToyTransformer, task: BBTask, inputs: torch.Tensor) -> list[Intervention]:
    """Zero each head, each MLP, each layer, and move each head's attention onto `<s>` (all / non-trigger rows).
    `inputs` [N,T] is the batch the non-trigger query mask is built for."""
    ivs: list[Intervention] = []
    non_trigger = ~task.trigger_mask(inputs)
    for layer, block in enumerate(model.blocks):
        if block.attn is not None:
            for h in range(model.cfg.n_heads):
                ivs.append(ZeroHead(layer, h))
                ivs.append(MoveToSink(layer, h))
                ivs.append(MoveToSink(layer, h, queries=non_trigger, label="non-trigger queries"))
        if block.mlp is not None:
            ivs.append(ZeroMLP(layer))
        ivs.append(ZeroLayer(layer))
    return ivs


def evaluate_interventions(
    cfg: TrainConfig, task: BBTask, model: ToyTransformer, step: int, interventions: list[Intervention] | None = None
) -> list[dict]:
    """Rows {intervention, step, risks..., change in risks} for the full model and each intervention.

    The forwards run where `model` is (its parameters' device; call inside `attnlab.core.device.on_device`): the
    evaluation batch [N,T+1] is drawn on the cpu, as on every device, and its inputs copied there once; each
    evaluation's trace comes back reduced (`TraceRecorder`) and its logits [N,T,V] in one copy, for the risks
    (float64 on the cpu, against the numpy oracle). Raises `NumericalError` when the weights or the full model's
    risks are not finite (a diverged run).
    """
    bad = first_nonfinite(model)
    if bad is not None:
        raise NumericalError(f"the run diverged: parameter {bad} is not finite in the checkpoint of step {step}")
    seqs = task.eval_batch(cfg.eval_batch, cfg.seq_len, cfg.eval_seed)
    inputs = torch.as_tensor(seqs[:, :-1])  # [N,T] on the cpu: the query masks are built from it
    ivs = default_interventions(model, task, inputs) if interventions is None else interventions
    tokens = inputs.to(next(model.parameters()).device)
    layers = attention_layers(model)
    rows: list[dict] = []
    for iv in [None, *ivs]:
        # the whole batch in one chunk: query masks are batch-aligned
        trace, logits = trace_toy(model, tokens, task.V, interventions=() if iv is None else (iv,), chunk=len(tokens))
        rows.append(_row(iv, step, bb_metrics(trace, logits.cpu(), seqs, task, layers), rows[0] if rows else None))
    return rows


def _row(iv: Intervention | None, step: int, metrics: dict, full: dict | None) -> dict:
    """One row of interventions.json: the REPORTED metrics, and their change from the `full` model's row (None: this
    is the full model's row, whose risks must be finite)."""
    row: dict[str, Any] = {"intervention": "none (full model)" if iv is None else iv.name, "step": step}
    row.update({k: metrics[k] for k in REPORTED})
    if full is not None:
        for k in ("risk_backcopy", "risk_bigram"):
            row[f"delta_{k}"] = row[k] - full[k]
    elif not all(math.isfinite(row[k]) for k in ("risk_backcopy", "risk_bigram")):
        raise NumericalError(
            f"the run diverged: the full model's risks are not finite at step {step} "
            f"(backcopy {row['risk_backcopy']}, bigram {row['risk_bigram']})"
        )
    return row
