"""BB metrics from a trace and the logits on the fixed evaluation batch (spec extreme-tokens §6).

Per layer l (head h; the BB models have one head, multi-head models get a list per layer):
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

from attnlab.tasks.bb import BBTask
from attnlab.trace.format import Trace


def risks(logits: torch.Tensor, seqs: np.ndarray, task: BBTask) -> dict:
    """Cross-entropy losses and oracle risks per position class. logits [B,T,V]; seqs [B,T+1]."""
    logp = torch.log_softmax(logits.double(), -1)
    x = torch.as_tensor(seqs[:, :-1])
    y = torch.as_tensor(seqs[:, 1:])
    trig = task.trigger_mask(x)
    nll = -logp.gather(-1, y.unsqueeze(-1)).squeeze(-1)                       # [B,T]
    oracle = torch.as_tensor(task.oracle(seqs))                                # [B,T,V]
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


def _per_layer(values: list) -> object:
    """Scalars for a 1-layer model, lists indexed by layer otherwise."""
    return values[0] if len(values) == 1 else values


def _per_head(arr: np.ndarray) -> object:
    """A head vector becomes a float for one head, a list for several."""
    arr = np.asarray(arr, dtype=float)
    return float(arr[0]) if arr.size == 1 else [float(a) for a in arr]


def bb_metrics(trace: Trace, logits: torch.Tensor, seqs: np.ndarray, task: BBTask,
               attn_layers: list[int] | None = None) -> dict:
    """All §6 metrics for one snapshot. `attn_layers`: layers that have attention (others give None)."""
    L = trace.n_layers
    attn_layers = list(range(L)) if attn_layers is None else attn_layers
    V = task.V
    specials = {task.vocab.bos, task.vocab.delim}
    non_trigger = [v for v in range(V) if not task.is_trigger[v] and v != task.vocab.delim]
    plain = [v for v in non_trigger if v not in specials]
    trig = list(task.triggers)
    m: dict = {}
    sink, sink0, dl, dl_lo, dl_hi, dl_trig, vb, vo = ([] for _ in range(8))
    for layer in range(L):
        if layer not in attn_layers:
            for lst in (sink, sink0, dl, dl_lo, dl_hi, dl_trig, vb, vo):
                lst.append(None)
            continue
        sink.append(_per_head(trace.attn_key0_over_tokens(plain)[layer]))
        sink0.append(_per_head(trace.attn_key0_over_tokens(non_trigger)[layer]))
        d = trace.dlogit_by_token[layer][:, plain]                               # [H, types]
        d = np.where(trace.dlogit_count[plain] > 0, d, np.nan)
        dl.append(_per_head(np.nanmean(d, -1)))
        dl_lo.append(_per_head(np.nanquantile(d, 0.1, axis=-1)))
        dl_hi.append(_per_head(np.nanquantile(d, 0.9, axis=-1)))
        dt = np.where(trace.dlogit_count[trig] > 0, trace.dlogit_by_token[layer][:, trig], np.nan)
        dl_trig.append(_per_head(np.nanmean(dt, -1)))
        vb.append(_per_head(trace.value_norm[layer, :, 0]))
        vo.append(_per_head(trace.value_norm[layer, :, 1:].mean(-1)))
    m["attn_sink"] = _per_layer(sink)
    m["attn_sink_with0"] = _per_layer(sink0)
    m["delta_logit"] = _per_layer(dl)
    m["delta_logit_q10"] = _per_layer(dl_lo)
    m["delta_logit_q90"] = _per_layer(dl_hi)
    m["delta_logit_trigger"] = _per_layer(dl_trig)
    m["value_norm_bos"] = _per_layer(vb)
    m["value_norm_others"] = _per_layer(vo)
    m["resid_norm_bos"] = _per_layer([float(trace.resid_norm[l + 1, 0]) for l in range(L)])
    m["resid_norm_others"] = _per_layer([float(trace.resid_norm[l + 1, 1:].mean()) for l in range(L)])
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
        tokens = tokens[:, -model.cfg.max_len:]
        tokens[:, 0] = task.vocab.bos
    captured = {}

    def grab(x, name):
        captured["A"] = x[:, head, -1, 0].detach().clone()

    with torch.no_grad(), model.hooks({f"blocks.{layer}.attn.pattern": grab}):
        model.eval()
        model(tokens)
    a = captured["A"].numpy()
    active = [int(v) for v in range(n) if a[v] < threshold]
    return {"attn_last_to_sink": a.tolist(), "active_tokens": active,
            "active_equals_triggers": sorted(active) == sorted(task.triggers)}
