"""The trace adapter for transformers causal LMs (spec extreme-tokens §5, §7, §10.2).

`traced(model, recorder, interventions)` is a context manager that yields a `TraceSession` bound to that block
(nothing is kept at module level). Inside it:
  - attention runs through the function "attnlab" registered with transformers' `AttentionInterface`
    (`hf_attention.attention`: `attnlab.tracing.fast.fused_layer`, torch's fused kernel and statistics from its
    log-sum-exp, by default; the exact chunked function of `hf_attention`, every weight handed to the recorder, for
    the layers and `stats="chunked"` the fused kernel cannot do) and a forward pre-hook on every attention module
    hands the session to it as the keyword `attnlab_session`;
  - a forward pre-hook on the first block records the residual stream after the embedding and forward hooks on
    every block record it after each block (before the final norm);
  - the intervention values of `attnlab.tracing.interventions` are compiled into hooks: `ZeroHead` zeroes the slice
    [h·d_h, (h+1)·d_h) of the output projection's INPUT (never after it), `ZeroMLP` the MLP output, `ZeroLayer`
    the attention and MLP outputs, `ZeroDims` residual coordinates after a block, and `MoveToSink` makes a head's
    rows one-hot on key 0 inside the attention function.
Without a recorder and without `MoveToSink` the model keeps its own (sdpa) attention. Inputs go to the device of
the model's embedding; reductions run where the layer lives and are accumulated on the CPU. Every hook is removed and
the attention implementation restored when the block ends.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from torch import nn

from attnlab.errors import InputError
from attnlab.tracing.adapters import eager
from attnlab.tracing.adapters.arch import Arch, get_arch
from attnlab.tracing.adapters.hf_attention import (
    ATTN_NAME,
    CHUNK_ELEMENTS,
    additive_causal_mask,
    check_stats,
    register_attention,
    value_factor,
)
from attnlab.tracing.adapters.hf_points import (
    UserHook,
    attention_hooks,
    hidden_of,
    input_device,
    install_user_hooks,
    split_point,
    with_hidden,
)
from attnlab.tracing.adapters.hooked import (
    ATTN_POINTS,
    PATTERN_POINTS,
    AttnHooks,
    apply_qkv_hooks,
    hooked_attention,
)
from attnlab.tracing.extras import ExtraStatistic
from attnlab.tracing.fast import FlexCalls, head_nll, head_of, next_token_nll
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
from attnlab.tracing.kernels import check_math_fallback
from attnlab.tracing.recorder import TraceRecorder


@dataclass
class Plan:
    """Interventions compiled per layer: what each hook point does."""

    zero_heads: dict[int, tuple[int, ...]] = field(default_factory=dict)  # layer -> heads zeroed before W_O
    zero_mlps: set[int] = field(default_factory=set)
    zero_attn: set[int] = field(default_factory=set)  # ZeroLayer: attention output too
    zero_dims: dict[int, list[tuple[tuple[int, ...] | None, list[int]]]] = field(default_factory=dict)
    sink: dict[int, list[MoveToSink]] = field(default_factory=dict)  # layer -> move-to-sink heads

    @property
    def switches_attention(self) -> bool:
        return bool(self.sink)


def compile_plan(interventions: Iterable[Intervention], shape: ModelShape) -> Plan:
    """Validate the intervention values against `shape` (one-line `InputError`) and group them by layer."""
    plan = Plan()
    heads: dict[int, set[int]] = {}
    for iv in validate(interventions, shape):
        if isinstance(iv, ZeroHead):
            heads.setdefault(int(iv.layer), set()).add(int(iv.head))
        elif isinstance(iv, ZeroMLP):
            plan.zero_mlps.add(int(iv.layer))
        elif isinstance(iv, ZeroLayer):
            plan.zero_mlps.add(int(iv.layer))
            plan.zero_attn.add(int(iv.layer))
        elif isinstance(iv, ZeroDims):
            pos = None if iv.positions is None else tuple(int(p) for p in iv.positions)
            plan.zero_dims.setdefault(int(iv.layer), []).append((pos, [int(d) for d in iv.dims]))
        elif isinstance(iv, MoveToSink):
            if all(s.head != iv.head for s in plan.sink.get(int(iv.layer), [])):
                plan.sink.setdefault(int(iv.layer), []).append(iv)
    plan.zero_heads = {layer: tuple(sorted(h)) for layer, h in heads.items()}
    for layer in plan.sink:
        plan.sink[layer].sort(key=lambda s: s.head)
    return plan


# (layer, n_kv) -> ((W_O module id, data pointer, version), factors): `TraceSession.value_factor`'s cache
FactorCache = dict[tuple[int, int], tuple[tuple[int, int, int], torch.Tensor]]


@dataclass
class TraceSession:
    """One traced block on one model: its architecture, recorder, compiled interventions and caches."""

    model: Any  # a transformers causal LM
    arch: Arch
    recorder: TraceRecorder | None
    plan: Plan
    chunk_elements: int = CHUNK_ELEMENTS
    masks: dict[tuple[int, int, int, int], torch.Tensor] = field(default_factory=dict)
    factors: FactorCache = field(default_factory=dict)
    scratch_buffers: dict[tuple[str, torch.device], torch.Tensor] = field(default_factory=dict)
    switched: bool = False  # attention runs through the "attnlab" function
    stats: str = "fast"  # "fast" (fused, few-key statistics), "full" (fused, full-row too) or "chunked"
    layers_seen: set[int] = field(default_factory=set)  # layers whose attention ran in the current forward
    grad: bool = False  # autograd on: every layer through `hooked.hooked_attention` (differentiable torch)
    attn_hooks: AttnHooks = field(default_factory=dict)  # hooks inside the attention function (`adapters.hooked`)
    grad_stats: dict[int, list[dict[str, torch.Tensor]]] = field(default_factory=dict)  # grad=True: per batch
    flex: Any = None  # `stats="full"` on CUDA: the compiled flex call and its block masks (`flex_calls`)

    def layer_of(self, module: nn.Module) -> int:
        """The decoder layer of an attention module (by identity; `layer_idx` is not on every family)."""
        for i, a in enumerate(self.arch.attn):
            if a is module:
                return i
        return int(getattr(module, "layer_idx", -1))

    def value_factor(self, layer: int, n_kv: int) -> torch.Tensor:
        """[H_kv,d_h,G·d_h] the triangular factors R_hᵀ (R_hᵀR_h = W_O^hᵀW_O^h) of layer `layer` for values of `n_kv`
        heads (`hf_attention.value_factor`), on the device of W_O: computed once, and again only when that weight
        is replaced or changed in place (the cache can outlive the session: `traced(factors=...)`)."""
        w = self.arch.w_o_heads(layer)
        stamp = (id(self.arch.out_proj[layer]), w.data_ptr(), w._version)
        hit = self.factors.get((layer, n_kv))
        if hit is None or hit[0] != stamp:
            hit = self.factors[(layer, n_kv)] = (stamp, value_factor(w, n_kv))
        return hit[1]

    def scratch(self, name: str, shape: tuple[int, ...], device: torch.device) -> torch.Tensor:
        """An fp32 tensor of `shape` carved from a buffer kept for the session (grown when too small): reusing it
        spares the allocator and the page faults of a fresh [B·H,C,T] block per chunk. Its contents are garbage."""
        n = math.prod(shape)
        buf = self.scratch_buffers.get((name, device))
        if buf is None or buf.numel() < n:
            buf = self.scratch_buffers[(name, device)] = torch.empty(n, dtype=torch.float32, device=device)
        return buf[:n].view(shape)

    def flex_calls(self) -> Any:
        """The session's `tracing.fast.flex.FlexCalls` (the compiled swapped call of `stats="full"` on CUDA and its
        causal block masks), made on first use: a new session's compile wrapper reuses the process's compiled code
        (`tracing.fast.flex`'s docstring)."""
        if self.flex is None:
            self.flex = FlexCalls.compiled()
        return self.flex

    def qkv_hooks(self, layer: int, qkv: tuple[torch.Tensor, ...]) -> tuple[torch.Tensor, ...]:
        """(query, key, value) after the user's hook_q/k/v at `layer` (`hooked.apply_qkv_hooks`)."""
        return apply_qkv_hooks(self.attn_hooks[layer], qkv)

    def wants_pattern(self, layer: int) -> bool:
        """Whether `layer` runs `hooked_attention` (a scores or pattern hook there, or grad=True)."""
        return self.grad or any(p in self.attn_hooks.get(layer, {}) for p in PATTERN_POINTS)

    def hooked_attention(self, layer: int, qkv: tuple[torch.Tensor, torch.Tensor, torch.Tensor],
                         mask: torch.Tensor | None, scaling: float, kw: dict[str, Any]) -> torch.Tensor:  # fmt: skip
        """Output [B,T,H,d_v] of `hooked.hooked_attention` for `layer` (the whole pattern made and hooked)."""
        self.layers_seen.add(layer)
        return hooked_attention(self, layer, qkv, mask, scaling, kw)

    def causal_mask(self, q0: int, q1: int, tk: int, offset: int) -> torch.Tensor:
        key = (q0, q1, tk, offset)
        if key not in self.masks:
            self.masks[key] = additive_causal_mask(q0, q1, tk, offset)
        return self.masks[key]

    def forward(self, ids: torch.Tensor, attention_mask: torch.Tensor | None = None) -> torch.Tensor:
        """[B,T,V] logits of `ids` [B,T] (one full pass, no KV cache), recording into the recorder if any.

        attention_mask [B,T] (1 = token, 0 = padding) reaches the attention function inside the mask transformers
        builds; the recorder still averages over every query, so traces are meant for unpadded windows. A 4D
        additive mask [B or 1, 1, T, T] (0 = visible, dtype min = hidden) is used as given by the model's own
        attention (`attnlab deploy window`'s sliding windows). Autograd is on only when the session's `grad` is."""
        with torch.set_grad_enabled(self.grad):
            return self._run(self.model, ids, attention_mask).logits

    def forward_statistics(self, ids: torch.Tensor) -> None:
        """Record `ids` [B,T] as `forward` does, for a caller that keeps no logits (`attnlab.trace` without
        `logits=True` or `grad=True`): where the family's logits are its head on the final hidden state
        (`tracing.fast.head_of`), the base model alone runs and the unembedding is skipped (the [B,T,V] product:
        ~22 % of a SmolLM2 forward at T = 512); else the whole model runs and its logits are let go. Every hook point
        (`ln_final.hook_normalized` the last) lies inside the base model, so the same hooks fire."""
        plain = head_of(self.model)
        with torch.set_grad_enabled(self.grad):
            self._run(self.model if plain is None else plain[0], ids, None)

    def forward_nll(self, ids: torch.Tensor) -> torch.Tensor:
        """[B] next-token NLL of `ids` [B,T] (`tracing.fast.next_token_nll`'s), recording as `forward` does; where the
        family's logits are its head on the final hidden state (`tracing.fast.head_of`) the [B,T,V] logits are never
        made: the NLL comes from blocks of the vocabulary (`tracing.fast.head_nll`)."""
        plain = head_of(self.model)
        if plain is None:
            return next_token_nll(self.forward(ids), ids)
        base, head, post = plain
        with torch.set_grad_enabled(self.grad):
            return head_nll(self._run(base, ids, None).last_hidden_state, ids, head, post)

    def _run(self, module: Any, ids: torch.Tensor, attention_mask: torch.Tensor | None) -> Any:
        """`module` (the model, or its base model) on `ids` [B,T] with no KV cache, recording; its output."""
        if self.recorder is not None:
            self.recorder.begin_batch(ids if self.recorder.V else None, batch_size=ids.shape[0])
            self.recorder.sinks.set_tokens(ids)
        self.layers_seen.clear()
        if not self.switched:  # the model's own sdpa: refuse a math fallback whose scores do not fit
            heads = (self.arch.n_heads, self.arch.n_kv_heads, self.arch.head_dim)
            check_math_fallback(self.model, heads, (ids.shape[0], ids.shape[1]), attention_mask is not None)
        dev = input_device(self.model)
        mask = None if attention_mask is None else attention_mask.to(dev)
        more = eager.forward_kwargs(self)  # the eager fallback's output_attentions (`adapters.eager`)
        if more:
            eager.check_eager_memory(self.arch, self.model, ids)
        out = module(input_ids=ids.to(dev), attention_mask=mask, use_cache=False, **more)
        want = eager.expected_layers(self.arch)
        if (self.switched or more) and self.layers_seen != want:
            missing = sorted(want - self.layers_seen)
            raise InputError(
                f"{self.arch.model_type}: its attention does not go through transformers' "
                f"AttentionInterface in every layer ({type(self.arch.attn[missing[0]]).__name__} of "
                f"{len(missing)} of {self.arch.n_layers} layers computes its own), so attnlab cannot trace or move it"
            )
        return out


def _zero_output(mod: nn.Module, args: Any, out: Any) -> Any:
    """Forward hook: the module (MLP or attention) adds nothing to the residual stream. A module that adds the
    residual itself (BLOOM's attention and MLP, MPT's MLP: `eager.residual_arg`) returns that residual instead."""
    residual = eager.residual_arg(mod, args)
    zero = torch.zeros_like(hidden_of(out)) if residual is None else residual
    return zero if torch.is_tensor(out) else with_hidden(out, zero)


def _zero_heads_hook(heads: tuple[int, ...], n_heads: int, head_dim: int) -> Callable[..., Any]:
    """Pre-hook on W_O: z [B,T,H·d_h] with the slices of `heads` set to 0."""

    def pre(mod: nn.Module, args: tuple) -> tuple:
        z = args[0].clone()
        zv = z.view(*z.shape[:-1], n_heads, head_dim)
        zv[..., list(heads), :] = 0.0
        return (z,) + tuple(args[1:])

    return pre


def _block_hook(layer: int, dims: list, rec: TraceRecorder | None) -> Callable[..., Any]:
    """Forward hook on block `layer`: zero residual coordinates `dims` [(positions|None, [dims])], then record."""

    def post(mod: nn.Module, args: Any, output: Any) -> Any:
        hidden = hidden_of(output)
        if dims:
            hidden = hidden.clone()
            for pos, d in dims:
                if pos is None:
                    hidden[..., d] = 0.0
                else:
                    for p in pos:
                        hidden[:, p, d] = 0.0
        if rec is not None:
            rec.residual(layer + 1, hidden)
        return with_hidden(output, hidden) if dims else None

    return post


def _install_hooks(sess: TraceSession, switch: bool) -> list[Any]:
    """Every hook of one session (handles returned for removal)."""
    arch, rec, plan = sess.arch, sess.recorder, sess.plan
    handles = []
    for layer, heads in plan.zero_heads.items():
        handles.append(
            arch.out_proj[layer].register_forward_pre_hook(_zero_heads_hook(heads, arch.n_heads, arch.head_dim))
        )
    for layer in sorted(plan.zero_mlps):
        handles.append(arch.mlp[layer].register_forward_hook(_zero_output))
    for layer in sorted(plan.zero_attn):
        handles.append(arch.attn[layer].register_forward_hook(_zero_output))
    if switch:

        def give_session(mod: nn.Module, args: tuple, kwargs: dict) -> tuple[tuple, dict]:
            return args, {**kwargs, "attnlab_session": sess}

        mods = eager.session_modules(arch)  # only modules that take **kwargs (`adapters.eager`)
        handles += [a.register_forward_pre_hook(give_session, with_kwargs=True) for a in mods]
    handles += eager.install(sess)  # the eager fallback's and a hybrid's non-attention layers' hooks
    if rec is not None:

        def pre0(mod: nn.Module, args: tuple, kwargs: dict) -> None:
            rec.residual(0, args[0] if args else kwargs["hidden_states"])

        handles.append(arch.blocks[0].register_forward_pre_hook(pre0, with_kwargs=True))
    for layer in range(arch.n_layers):
        dims = plan.zero_dims.get(layer, [])
        if dims or rec is not None:
            handles.append(arch.blocks[layer].register_forward_hook(_block_hook(layer, dims, rec)))
    if rec is not None and sess.stats != "fast":
        handles += _install_sink_hooks(arch, rec)
    return handles


def _install_sink_hooks(arch: Arch, rec: TraceRecorder) -> list[Any]:
    """Under full-row statistics, for the secondary sinks (`tracing.sinks`): a pre-hook on every block keeps the
    residual at position 0 entering it [B,d], and a hook on its MLP hands the output [B,T,d] and that residual to
    `rec.sinks.mlp` (ℓ2 norms and cosines, [B,T])."""
    resid0: dict[int, torch.Tensor] = {}
    handles = []
    for layer in range(arch.n_layers):

        def keep(mod: nn.Module, args: tuple, kwargs: dict, l: int = layer) -> None:
            resid0[l] = (args[0] if args else kwargs["hidden_states"])[:, 0].detach().clone()

        def mlp_out(mod: nn.Module, args: Any, output: Any, l: int = layer) -> None:
            rec.sinks.mlp(l, hidden_of(output), resid0.pop(l))

        handles.append(arch.blocks[layer].register_forward_pre_hook(keep, with_kwargs=True))
        handles.append(arch.mlp[layer].register_forward_hook(mlp_out))
    return handles


@contextlib.contextmanager
def traced(
    model: Any,
    recorder: TraceRecorder | None = None,
    interventions: Iterable[Intervention] = (),
    chunk_elements: int = CHUNK_ELEMENTS,
    hooks: dict[str, UserHook] | None = None,
    stats: str = "fast",
    factors: FactorCache | None = None,
    arch: Arch | None = None,
) -> Iterator[TraceSession]:
    """Within the block, forwards of `model` fill `recorder` and apply `interventions`; yields the session.

    `stats`: "fast" records every statistic that needs a few keys per row from the fused kernel's log-sum-exp
    (row entropy and the column means of keys ≥ 1 are NaN), "full" adds those by two more fused calls, "chunked"
    runs every layer through the exact chunked function (`hf_attention.chunked_reason`).

    `hooks` {point: fn(tensor, point)} (points from `hf_hook_points`) run first at their points, then the
    interventions, then the recording; a tensor a hook returns replaces the activation (`adapters.hooked`).

    `factors`: a dict kept by the caller across blocks on one model (`attnlab scan`'s domains), so that the value
    norms' per-layer factors (`TraceSession.value_factor`: ~60 ms for SmolLM2) are computed once; a new one if None.

    `arch`: the model's `get_arch(model)` where the caller has it already (the tree is walked once a session); the
    session holds it (`TraceSession.arch`)."""
    check_stats(stats)
    arch = get_arch(model) if arch is None else arch
    plan = compile_plan(interventions, arch.shape)
    if recorder is not None and (recorder.L, recorder.H) != (arch.n_layers, arch.n_heads):
        raise InputError(
            f"recorder is for {recorder.L} layers × {recorder.H} heads, the model has {arch.n_layers} × {arch.n_heads}"
        )
    eager.check_layers(arch, plan, model, recorder is not None)
    inside = attention_hooks({n: f for n, f in (hooks or {}).items() if split_point(n, arch)[1] in ATTN_POINTS})
    switch = (recorder is not None or plan.switches_attention or bool(inside)) and arch.interface
    sess = TraceSession(
        model=model,
        arch=arch,
        recorder=recorder,
        plan=plan,
        chunk_elements=chunk_elements,
        switched=switch,
        stats=stats,
        factors={} if factors is None else factors,
        attn_hooks=inside,
    )
    previous = model.config._attn_implementation
    if switch and previous == ATTN_NAME:
        raise InputError("traced() blocks cannot be nested on one model")
    handles = install_user_hooks(model, arch, dict(hooks or {}))  # before the switch: resid_mid's discovery forward
    if switch:
        register_attention()
        model.set_attn_implementation(ATTN_NAME)
    handles += _install_hooks(sess, switch)
    try:
        yield sess
    finally:
        for h in handles:
            h.remove()
        if switch:
            model.set_attn_implementation(previous)


def new_recorder(
    model: nn.Module,
    seq_len: int,
    keep_patterns: Iterable[tuple[int, int]] = (),
    vocab_size: int = 0,
    extras: Mapping[str, ExtraStatistic] | None = None,
    arch: Arch | None = None,
) -> TraceRecorder:
    """A `TraceRecorder` sized for `model` at sequence length `seq_len` (checked against its context), with the
    study's `extras` {name: `ExtraStatistic`} (`attnlab.tracing.extras`); `arch`: `get_arch(model)` if given. Its
    accumulators live on the model's device (issue 41 item 2: on a GPU, no host bookkeeping per statistic)."""
    arch = get_arch(model) if arch is None else arch
    arch.check_seq_len(seq_len)
    keep = [(int(l), int(h)) for l, h in keep_patterns]
    for l, h in keep:
        arch.shape.check_head(l, h)
        arch.check_attention_layer(l, f"keep_patterns ({l}, {h})")  # a hybrid's state-space layer has no pattern
    device = next((p.device for p in model.parameters()), torch.device("cpu"))  # the sums live beside the model
    return TraceRecorder(arch.n_layers, arch.n_heads, seq_len, vocab_size=vocab_size, keep_patterns=keep, extras=extras,
                         device=device)  # fmt: skip


def check_traceable(model: nn.Module, arch: Arch | None = None) -> None:
    """Refuse, before any work, a model whose attention does not go through transformers' AttentionInterface
    (one traced forward of two tokens); `arch`: `get_arch(model)` where the caller has it."""
    arch = get_arch(model) if arch is None else arch
    with torch.no_grad(), traced(model, new_recorder(model, 2, arch=arch), arch=arch) as sess:
        sess.forward(torch.zeros(1, 2, dtype=torch.long))


@torch.no_grad()
def forward_logits(
    model: nn.Module,
    ids: torch.Tensor,
    recorder: TraceRecorder | None = None,
    interventions: Iterable[Intervention] = (),
) -> torch.Tensor:
    """[B,T,V] logits of `ids` [B,T], recording into `recorder` and applying `interventions` for this batch."""
    with traced(model, recorder, interventions) as sess:
        return sess.forward(ids)


def trace_windows(
    model: nn.Module,
    ids: torch.Tensor,
    batch_size: int = 1,
    keep_patterns: Iterable[tuple[int, int]] = (),
    desc: str = "scan",
    extras: Mapping[str, ExtraStatistic] | None = None,
    stats: str = "fast",
    factors: FactorCache | None = None,
    arch: Arch | None = None,
) -> tuple[Trace, np.ndarray]:
    """Stream windows `ids` [N,T] through the model in batches; returns their Trace and per-window NLL [N].
    `stats`, `factors`: as `traced`'s; `arch`: `get_arch(model)` where the caller has it (a scan's, once).

    `extras` {name: `ExtraStatistic`} see every batch beside the recorder; read them with their own `result()`."""
    from tqdm import tqdm

    arch = get_arch(model) if arch is None else arch  # once for the recorder and the session
    rec = new_recorder(model, ids.shape[1], keep_patterns=keep_patterns, extras=extras, arch=arch)
    nll = []
    with traced(model, rec, stats=stats, factors=factors, arch=arch) as sess:
        for b0 in tqdm(range(0, ids.shape[0], batch_size), desc=desc, leave=False):
            batch = ids[b0 : b0 + batch_size]
            nll.append(sess.forward_nll(batch))
    return rec.result(), torch.cat(nll).numpy()


def windows_nll(
    model: nn.Module, ids: torch.Tensor, interventions: Iterable[Intervention] = (), batch_size: int = 4
) -> np.ndarray:
    """[N] next-token NLL of windows `ids` [N,T] with `interventions` applied (model's own attention otherwise)."""
    out = []
    with traced(model, None, list(interventions)) as sess:
        for b in range(0, ids.shape[0], batch_size):
            out.append(sess.forward_nll(ids[b : b + batch_size]))
    return torch.cat(out).numpy()
