"""Fill a `TraceRecorder` from the toy transformer's hook points (the same format real models use)."""

from __future__ import annotations

import torch

from attnlab.models.toy import ToyTransformer
from attnlab.trace.format import Trace
from attnlab.trace.recorder import TraceRecorder


def toy_trace_hooks(model: ToyTransformer, rec: TraceRecorder) -> dict:
    """Hooks that stream scores/patterns, per-head value norms ‖W_O^h v^h_i‖ and residual norms into `rec`."""
    hooks: dict = {"embed": lambda x, name: rec.residual(0, x)}
    scores: dict[int, torch.Tensor] = {}
    for layer, block in enumerate(model.blocks):
        hooks[f"blocks.{layer}.resid_post"] = (lambda l: lambda x, name: rec.residual(l + 1, x))(layer)
        if block.attn is None:
            continue
        p = f"blocks.{layer}.attn."

        def keep_scores(x, name, l=layer):
            scores[l] = x

        def on_pattern(x, name, l=layer):
            rec.attention(l, x, scores.pop(l, None))

        def on_v(v, name, l=layer, attn=block.attn):
            w_o = attn.head_output_weights()                                # [H,D,d]
            rec.value_norms(l, torch.einsum("bthk,hdk->bthd", v, w_o).norm(dim=-1))

        hooks[p + "scores"] = keep_scores
        hooks[p + "pattern"] = on_pattern
        hooks[p + "v"] = on_v
    return hooks


@torch.no_grad()
def trace_toy(model: ToyTransformer, tokens: torch.Tensor, vocab_size: int | None = None, keep_patterns=(),
              extra_hooks: dict | None = None, chunk: int = 256) -> tuple[Trace, torch.Tensor]:
    """Run `tokens` [N,T] through the model in chunks; return (Trace, logits [N,T,V]).

    `extra_hooks` (e.g. interventions) run before the recording hooks at the same points.
    """
    cfg = model.cfg
    T = tokens.shape[1]
    rec = TraceRecorder(cfg.n_layers, cfg.n_heads, T, vocab_size=cfg.vocab if vocab_size is None else vocab_size,
                        keep_patterns=keep_patterns)
    record = toy_trace_hooks(model, rec)
    spec: dict = {}
    for name, fn in (extra_hooks or {}).items():
        spec.setdefault(name, []).extend([fn] if callable(fn) else list(fn))
    for name, fn in record.items():
        spec.setdefault(name, []).append(fn)
    was_training = model.training
    model.eval()
    logits = []
    with model.hooks(spec):
        for start in range(0, tokens.shape[0], chunk):
            part = tokens[start:start + chunk]
            rec.begin_batch(part)
            logits.append(model(part))
    model.train(was_training)
    return rec.result(), torch.cat(logits)
