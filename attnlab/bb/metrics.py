"""BB metrics from a trace and the logits on the fixed evaluation batch (spec extreme-tokens §6).

Per layer l and head h (stored as described at `pack`, read back with `metric`):
  attn_sink        Attn⟨s⟩: mean A_i0 over non-trigger queries i ≥ 1 (§6.1; query 0 excluded, see below)
  attn_sink_with0  the same including query 0 (A_00 = 1 under softmax; the spec's variant)

Query 0 sees only itself: under softmax A_00 = 1 adds ≈ 1/(0.7T), and under ReLU attention A_00 = ReLU(s_00) is
not a probability at all (it reached 0.15 of the average at cpu scale while every other query gave < 1e-3), so the
headline metric excludes it (decision recorded in docs/extreme-tokens.md).
  delta_logit      mean over non-trigger, non-special query types of Δ = s_i0 − mean_{1≤j≤i−1} s_ij (§6.2)
  value_norm_bos   ‖W_O v⟨s⟩‖ at position 0; value_norm_others: mean over positions ≥ 1 (§6.3)
  resid_norm_bos   ‖x^{l+1}_0‖ after block l; resid_norm_others: mean over b, i ≥ 1 (§6.4)
and the risks (§6.5, §2.4): loss_*, risk_*, excess_risk_* for backcopy and bigram positions.
"""

from __future__ import annotations

import numpy as np
import torch

from attnlab.toy.task import BBTask
from attnlab.tracing.adapters.toy import trace_toy
from attnlab.tracing.format import Trace


def risks(logits: torch.Tensor, seqs: np.ndarray, task: BBTask) -> dict:
    """Cross-entropy losses and oracle risks per position class. logits [B,T,V]; seqs [B,T+1]."""
    logp = torch.log_softmax(logits.double(), -1)
    x = torch.as_tensor(seqs[:, :-1])
    y = torch.as_tensor(seqs[:, 1:])
    trig = task.trigger_mask(x)
    nll = -logp.gather(-1, y.unsqueeze(-1)).squeeze(-1)  # [B,T]
    oracle = torch.as_tensor(task.oracle(seqs))  # [B,T,V]
    cross = -(oracle * torch.where(oracle > 0, logp, torch.zeros(()))).sum(-1)  # [B,T]
    ent = -(oracle * torch.where(oracle > 0, oracle.clamp_min(1e-300).log(), torch.zeros(()))).sum(-1)
    out = {}
    for name, mask in (("backcopy", trig), ("bigram", ~trig)):
        if mask.any():
            out[f"loss_{name}"] = float(nll[mask].mean())
            out[f"risk_{name}"] = float(cross[mask].mean())
            out[f"excess_risk_{name}"] = float((cross[mask] - ent[mask]).mean())
            out[f"oracle_entropy_{name}"] = float(ent[mask].mean())
        else:
            out.update({f"{k}_{name}": float("nan") for k in ("loss", "risk", "excess_risk", "oracle_entropy")})
    out["loss"] = float(nll.mean())
    return out


# --- the stored form of per-layer / per-head metrics ---------------------------------------------------------
# In memory every per-head metric is a grid [layer][head] (None for a layer without attention) and every
# per-layer metric a list [layer]. metrics.jsonl keeps the compact form it has always had (so seeded runs stay
# byte-identical): a grid's head lists become floats for one head, and the layer list becomes its only entry for
# one layer. `metric()` is the one reader: it infers (layers, heads) from the record and undoes the packing.
PER_HEAD = (
    "attn_sink",
    "attn_sink_with0",
    "delta_logit",
    "delta_logit_q10",
    "delta_logit_q90",
    "delta_logit_trigger",
    "value_norm_bos",
    "value_norm_others",
)
PER_LAYER = ("resid_norm_bos", "resid_norm_others")

Grid = list  # [layer] of (list [head] of float) or None


def pack(values: list) -> object:
    """The stored form of a grid [layer][head] (or a per-layer list [layer]); see the note above."""
    layers = [v if v is None or not isinstance(v, list) else (v[0] if len(v) == 1 else v) for v in values]
    return layers[0] if len(layers) == 1 else layers


def record_shape(record: dict) -> tuple[int, int]:
    """(layers, heads) of a metrics record, read from its stored per-layer and per-head values."""
    resid = record.get("resid_norm_bos")
    n_layers = len(resid) if isinstance(resid, list) else 1
    sink = record.get("attn_sink")
    per_layer = sink if n_layers > 1 and isinstance(sink, list) else [sink]
    heads = [len(v) if isinstance(v, list) else 1 for v in per_layer if v is not None]
    return n_layers, max(heads, default=1)


def metric(record: dict, name: str, layer: int = 0, head: int = 0) -> float | None:
    """The value of metric `name` for (layer, head) in one metrics record (None: absent, or no attention there).

    Scalars (risks, losses, `resid_norm_embed_bos`) ignore layer and head; per-layer metrics ignore head.
    """
    value = record.get(name)
    if name not in PER_HEAD and name not in PER_LAYER:
        return None if value is None else float(value)
    n_layers, n_heads = record_shape(record)
    if not 0 <= layer < n_layers:
        return None
    if n_layers > 1:
        value = value[layer] if isinstance(value, list) else None
    if name in PER_LAYER or value is None:
        return None if value is None else float(value)
    if n_heads > 1:
        value = value[head] if isinstance(value, list) and 0 <= head < len(value) else None
    elif head != 0:
        return None
    return None if value is None else float(value)


def _heads(arr: np.ndarray) -> list[float]:
    return [float(a) for a in np.asarray(arr, dtype=float).reshape(-1)]


def _attention_grids(trace: Trace, task: BBTask, attn_layers: list[int]) -> dict[str, Grid]:
    """Per-head metrics §6.1-6.3 as grids [layer][head] (None for a layer without attention)."""
    specials = {task.vocab.bos, task.vocab.delim}
    non_trigger = [v for v in range(task.V) if not task.is_trigger[v] and v != task.vocab.delim]
    plain = [v for v in non_trigger if v not in specials]
    trig = list(task.triggers)
    grids: dict[str, Grid] = {name: [] for name in PER_HEAD}
    for layer in range(trace.n_layers):
        if layer not in attn_layers:
            for grid in grids.values():
                grid.append(None)
            continue
        d = trace.dlogit_by_token[layer][:, plain]  # [H, types]
        d = np.where(trace.dlogit_count[plain] > 0, d, np.nan)
        dt = np.where(trace.dlogit_count[trig] > 0, trace.dlogit_by_token[layer][:, trig], np.nan)
        row = {
            "attn_sink": trace.attn_key0_over_tokens(plain)[layer],
            "attn_sink_with0": trace.attn_key0_over_tokens(non_trigger)[layer],
            "delta_logit": np.nanmean(d, -1),
            "delta_logit_q10": np.nanquantile(d, 0.1, axis=-1),
            "delta_logit_q90": np.nanquantile(d, 0.9, axis=-1),
            "delta_logit_trigger": np.nanmean(dt, -1),
            "value_norm_bos": trace.value_norm[layer, :, 0],
            "value_norm_others": trace.value_norm[layer, :, 1:].mean(-1),
        }
        for name, values in row.items():
            grids[name].append(_heads(values))
    return grids


def bb_metrics(
    trace: Trace, logits: torch.Tensor, seqs: np.ndarray, task: BBTask, attn_layers: list[int] | None = None
) -> dict:
    """All §6 metrics of one snapshot, in the stored form (`pack`). `attn_layers`: layers with attention."""
    L = trace.n_layers
    attn_layers = list(range(L)) if attn_layers is None else attn_layers
    m: dict = {name: pack(grid) for name, grid in _attention_grids(trace, task, attn_layers).items()}
    m["resid_norm_bos"] = pack([float(trace.resid_norm[l + 1, 0]) for l in range(L)])
    m["resid_norm_others"] = pack([float(trace.resid_norm[l + 1, 1:].mean()) for l in range(L)])
    m["resid_norm_embed_bos"] = float(trace.resid_norm[0, 0])
    m.update(risks(logits, seqs, task))
    return m


def value_norms_first_tokens(trace: Trace, layer: int = 0, head: int = 0, n: int = 10) -> list[float]:
    """‖W_O^h v^h_i‖ for the first n positions (the value-drain bar chart)."""
    return [float(v) for v in trace.value_norm[layer, head, :n]]


def active_token_probe(model, task: BBTask, layer: int = 0, head: int = 0, threshold: float = 0.89) -> dict:
    """§6.6: for input [<s>, every non-special token, probe], A_{last,0} per probe; active if < threshold."""
    n = task.vocab.n_chars
    base = [task.vocab.bos] + list(range(n))
    tokens = torch.tensor([base + [v] for v in range(n)])
    if tokens.shape[1] > model.cfg.max_len:
        tokens = tokens[:, -model.cfg.max_len :]
        tokens[:, 0] = task.vocab.bos
    captured = {}

    def grab(x: torch.Tensor, name: str) -> None:  # x: the pattern [N,H,T,T]; keep A_{last,0} of `head`
        captured["A"] = x[:, head, -1, 0].detach().clone()

    trace_toy(model, tokens, chunk=tokens.shape[0], hooks={f"blocks.{layer}.attn.hook_pattern": grab})  # one forward
    a = captured["A"].numpy()
    active = [int(v) for v in range(n) if a[v] < threshold]
    return {
        "attn_last_to_sink": a.tolist(),
        "active_tokens": active,
        "active_equals_triggers": sorted(active) == sorted(task.triggers),
    }
