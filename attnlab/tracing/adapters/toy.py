"""The toy-transformer adapter: fill a `TraceRecorder` from the model's named hook points, and compile the
intervention values of `attnlab.tracing.interventions` into hooks at those points (spec extreme-tokens §5, §7).

The hook points are the model's `HookPoint` modules, found by `named_modules()` under TransformerLens's names
(`blocks.0.hook_resid_pre`, `blocks.0.attn.hook_z`, ...), as TransformerLens finds its own: no list of them is kept.
The adapter only uses the model's public surface (`cfg`, `blocks[l].attn / .mlp`, its module tree, `hooks(spec)`,
`head_output_weights()`), so the trace layer does not import the BB study.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

import torch

from attnlab.errors import InputError
from attnlab.toy.model import HookPoint
from attnlab.tracing.adapters.hooked import differentiable_stats
from attnlab.tracing.format import Trace
from attnlab.tracing.interventions import (
    Intervention,
    ModelShape,
    MoveToSink,
    ZeroDims,
    ZeroHead,
    ZeroLayer,
    ZeroMLP,
    validate,
)
from attnlab.tracing.recorder import TraceRecorder

if TYPE_CHECKING:
    from attnlab.toy.model import ToyTransformer

HookFn = Callable[[torch.Tensor, str], Any]


def toy_shape(model: ToyTransformer) -> ModelShape:
    """The `ModelShape` interventions are checked against: layers, heads, width, which layers have attention/MLP."""
    cfg = model.cfg
    return ModelShape(
        n_layers=cfg.n_layers,
        n_heads=cfg.n_heads,
        d_model=cfg.d_model,
        attn_layers=tuple(l for l, b in enumerate(model.blocks) if b.attn is not None),
        mlp_layers=tuple(l for l, b in enumerate(model.blocks) if b.mlp is not None),
    )


def _zero(x: torch.Tensor, name: str) -> torch.Tensor:
    return torch.zeros_like(x)


def _zero_head(head: int) -> HookFn:
    def fn(z: torch.Tensor, name: str) -> torch.Tensor:  # z [B,T,H,d] before W_O
        z = z.clone()
        z[:, :, head] = 0.0
        return z

    return fn


def _move_to_sink(head: int, queries: torch.Tensor | None) -> HookFn:
    """Rows of `head` (all, or where the bool mask `queries` [B,T] is set) become one-hot on key 0. Made on the
    pattern's device (the mask is copied there once a call) and selected with `torch.where`, not a boolean index,
    so a GPU forward waits for no read-back; the values are the same."""

    def fn(pattern: torch.Tensor, name: str) -> torch.Tensor:  # pattern [B,H,T,T]
        B, H, T, _ = pattern.shape
        device = pattern.device
        rows = torch.ones(B, T, dtype=torch.bool, device=device) if queries is None else _query_mask(queries, device)
        if tuple(rows.shape) != (B, T):
            raise InputError(f"query mask shape {tuple(rows.shape)} does not match the batch [{B},{T}]")
        one_hot = torch.zeros(T, dtype=pattern.dtype, device=device)
        one_hot[0] = 1.0
        pattern = pattern.clone()
        pattern[:, head] = torch.where(rows.unsqueeze(-1), one_hot, pattern[:, head])  # [B,T,1] picks [T] or [B,T,T]
        return pattern

    return fn


def _query_mask(queries: Any, device: torch.device) -> torch.Tensor:
    """A `MoveToSink.queries` mask as a bool tensor on `device`; one line if it is not boolean."""
    rows = torch.as_tensor(queries, device=device)
    if rows.dtype != torch.bool:
        raise InputError(f"a MoveToSink query mask must be boolean [batch, query], got dtype {rows.dtype}")
    return rows


def _zero_dims(dims: tuple[int, ...], positions: tuple[int, ...] | None) -> HookFn:
    def fn(x: torch.Tensor, name: str) -> torch.Tensor:  # x [B,T,D] after the block
        x = x.clone()
        if positions is None:
            x[:, :, list(dims)] = 0.0
        else:
            for p in positions:
                x[:, p, list(dims)] = 0.0
        return x

    return fn


def _compile(iv: Intervention, model: ToyTransformer) -> dict[str, HookFn]:
    """{hook point: fn} of one (validated) intervention."""
    p = f"blocks.{iv.layer}."
    if isinstance(iv, ZeroHead):
        return {p + "attn.hook_z": _zero_head(iv.head)}
    if isinstance(iv, ZeroMLP):
        return {p + "hook_mlp_out": _zero}
    if isinstance(iv, ZeroLayer):
        block = model.blocks[iv.layer]
        return {
            **({p + "hook_attn_out": _zero} if block.attn is not None else {}),
            **({p + "hook_mlp_out": _zero} if block.mlp is not None else {}),
        }
    if isinstance(iv, ZeroDims):
        return {p + "hook_resid_post": _zero_dims(tuple(iv.dims), iv.positions)}
    assert isinstance(iv, MoveToSink)
    return {p + "attn.hook_pattern": _move_to_sink(iv.head, iv.queries)}


def toy_hooks(model: ToyTransformer, interventions: Iterable[Intervention]) -> dict[str, list[HookFn]]:
    """Validate `interventions` against the model and compile them into {hook point: [fns]} (applied in order)."""
    merged: dict[str, list[HookFn]] = {}
    for iv in validate(interventions, toy_shape(model)):
        for point, fn in _compile(iv, model).items():
            merged.setdefault(point, []).append(fn)
    return merged


def toy_trace_hooks(model: ToyTransformer, rec: TraceRecorder) -> dict[str, HookFn]:
    """Hooks that stream scores/patterns, per-head value norms ‖W_O^h v^h_i‖ and residual norms into `rec`."""
    hooks: dict[str, HookFn] = {"hook_embed": lambda x, name: rec.residual(0, x)}
    scores: dict[int, torch.Tensor] = {}  # local to this call: the scores of a layer until its pattern arrives
    for layer, block in enumerate(model.blocks):
        hooks[f"blocks.{layer}.hook_resid_post"] = (lambda l: lambda x, name: rec.residual(l + 1, x))(layer)
        if block.attn is None:
            continue
        p = f"blocks.{layer}.attn."

        def keep_scores(x: torch.Tensor, name: str, l: int = layer) -> None:
            scores[l] = x

        def on_pattern(x: torch.Tensor, name: str, l: int = layer) -> None:
            rec.attention(l, x, scores.pop(l, None))

        def on_v(v: torch.Tensor, name: str, l: int = layer, attn: Any = block.attn) -> None:
            w_o = attn.head_output_weights()  # [H,D,d]
            rec.value_norms(l, torch.einsum("bthk,hdk->bthd", v.detach(), w_o.detach()).norm(dim=-1))

        hooks[p + "hook_attn_scores"] = keep_scores
        hooks[p + "hook_pattern"] = on_pattern
        hooks[p + "hook_v"] = on_v
    return hooks


def toy_hook_points(model: ToyTransformer) -> list[str]:
    """TransformerLens names of every point the model offers: its `HookPoint` modules, in `named_modules()` order."""
    return [name for name, module in model.named_modules() if isinstance(module, HookPoint)]


def toy_user_hooks(model: ToyTransformer, hooks: dict[str, HookFn] | None) -> dict[str, list[HookFn]]:
    """The user's hooks {TransformerLens name: fn(tensor, name)} as the model's hook spec (one-line InputError on an
    unknown point); each fn sees the point's name."""
    points = set(toy_hook_points(model))
    spec: dict[str, list[HookFn]] = {}
    for name, fn in (hooks or {}).items():
        if name not in points:
            raise InputError(f"unknown hook point {name!r}; attnlab.hook_points(model) lists the {len(points)} points")
        spec.setdefault(name, []).append(fn)
    return spec


@torch.no_grad()
def run_with_hooks(model: ToyTransformer, tokens: torch.Tensor, hooks: dict[str, HookFn]) -> torch.Tensor:
    """Logits [B,T,V] of one eval-mode forward of `tokens` [B,T] with only the user's `hooks` (TransformerLens
    names) installed: no recorder, so attention keeps the model's own (fused, where it applies) path."""
    was_training = model.training
    model.eval()
    try:
        with model.hooks(toy_user_hooks(model, hooks)):
            return model(tokens)
    finally:
        model.train(was_training)


def trace_toy(
    model: ToyTransformer,
    tokens: torch.Tensor,
    vocab_size: int | None = None,
    keep_patterns: Iterable[tuple[int, int]] = (),
    interventions: Iterable[Intervention] = (),
    chunk: int = 256,
    hooks: dict[str, HookFn] | None = None,
    grad: bool = False,
) -> tuple[Trace, torch.Tensor]:
    """Run `tokens` [N,T] through the model in chunks of `chunk`; return (Trace, logits [N,T,V]).

    `interventions` are compiled by `toy_hooks` and run before the recording hooks at the same points, so the
    trace sees the intervened model. A `MoveToSink.queries` mask [N,T] needs `chunk >= N`. `hooks` {TransformerLens
    name: fn(tensor, name)} (`toy_hook_points`) run first; a returned tensor replaces the activation. `grad`:
    autograd on, and the Trace's `grad_stats` {name: [N,L,H(,T)]} keep the graph (`hooked.differentiable_stats`).
    """
    cfg = model.cfg
    T = tokens.shape[1]
    rec = TraceRecorder(
        cfg.n_layers,
        cfg.n_heads,
        T,
        vocab_size=cfg.vocab if vocab_size is None else vocab_size,
        keep_patterns=keep_patterns,
    )
    spec: dict[str, list[HookFn]] = toy_user_hooks(model, hooks)
    for name, fns in toy_hooks(model, interventions).items():
        spec.setdefault(name, []).extend(fns)
    for name, fn in toy_trace_hooks(model, rec).items():
        spec.setdefault(name, []).append(fn)
    stats: dict[int, list[dict[str, torch.Tensor]]] = {}
    for layer in (l for l, b in enumerate(model.blocks) if grad and b.attn is not None):

        def keep_stats(x: torch.Tensor, name: str, l: int = layer) -> None:
            stats.setdefault(l, []).append(differentiable_stats(x))

        spec.setdefault(f"blocks.{layer}.attn.hook_pattern", []).append(keep_stats)
    was_training = model.training
    model.eval()
    logits = []
    try:
        with model.hooks(spec), torch.set_grad_enabled(grad):
            for start in range(0, tokens.shape[0], chunk):
                part = tokens[start : start + chunk]
                rec.begin_batch(part)
                logits.append(model(part))
    finally:
        model.train(was_training)
    tr = rec.result()
    if stats:
        per = [stats[l] for l in sorted(stats)]
        tr.grad_stats = {
            k: torch.cat([torch.stack([p[b][k] for p in per], 1) for b in range(len(per[0]))], 0) for k in per[0][0]
        }
    return tr, torch.cat(logits)
