"""The user's side of the hooks `attnlab.trace` runs: named hook functions resolved from a dict or TransformerLens'
`fwd_hooks` list (`resolve_hooks`, `HookName`), the cache's keepers (`cache_hooks`), `MeanAblate`'s writer
(`mean_hook`), and the memory checks made before any forward. The adapters register what these return."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

from attnlab.errors import InputError
from attnlab.tracing.inputs import embedding_rows, is_toy, n_layers
from attnlab.tracing.interventions import MeanAblate

if TYPE_CHECKING:
    import torch

    from attnlab.tracing.padding import Batch

HookFn = Callable[["torch.Tensor", str], Any]


def module_hook_points(model: Any, linear_inputs: bool = False) -> list[str]:
    """The named hook points of a toy or transformers module (`attnlab.hook_points`, which also takes a name)."""
    if is_toy(model):
        from attnlab.tracing.adapters.toy import toy_hook_points

        return list(toy_hook_points(model))
    from attnlab.tracing.adapters.arch import get_arch
    from attnlab.tracing.adapters.hf_points import hf_hook_points

    return hf_hook_points(get_arch(model), linear_inputs=linear_inputs, model=model)


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
    check_points(named, model)
    everywhere = module_hook_points(model, linear_inputs=not is_toy(model)) if len(named) < len(pairs) else []
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
    if is_toy(model):
        cfg = model.cfg
        return {"heads": cfg.n_heads, "d_head": cfg.d_model // cfg.n_heads, "d_model": cfg.d_model, "vocab": cfg.vocab}
    from attnlab.tracing.adapters.arch import get_arch

    arch = get_arch(model)
    return {"heads": arch.n_heads, "d_head": arch.head_dim, "d_model": arch.d_model, "vocab": embedding_rows(model)}


GRAD_COPIES = 6  # [B,H,T,T] tensors autograd keeps per layer under grad=True (scores, pattern, the statistics' terms)


def _check_grad_memory(model: Any, ids_shape: tuple[int, int]) -> None:
    """One line before any forward when grad=True's graph would not fit: every layer of every sequence keeps about
    GRAD_COPIES [H,T,T] tensors until the caller lets the graph go (the logits keep it whole)."""
    from attnlab.runs.budget import check_memory

    (n, T), heads = ids_shape, _model_sizes(model)["heads"]
    item = next(iter(model.parameters())).element_size()
    need = GRAD_COPIES * n * n_layers(model) * heads * T * T * item
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
        points = [q for q in module_hook_points(model, linear_inputs=not is_toy(model)) if cache(q)]
    else:
        points = [cache] if isinstance(cache, str) else list(cache)
        check_points(points, model)
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


def check_points(points: Iterable[str], model: Any) -> None:
    """One-line InputError for the first name in `points` that is not a hook point of `model`."""
    points = list(points)
    if not points:
        return
    valid = set(module_hook_points(model, linear_inputs=not is_toy(model)))  # discovered once for every name
    for point in points:
        if point not in valid:
            raise InputError(f"unknown hook point {point!r}; attnlab.hook_points(model) lists the valid ones")


def mean_hook(iv: MeanAblate, mean: torch.Tensor) -> HookFn:
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
