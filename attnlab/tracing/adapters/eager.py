"""The HF trace adapter's layers that do not go through the "attnlab" attention function (issue 40, item 5).

**Eager fallback.** Families whose attention module computes its own attention instead of calling the function
transformers' `AttentionInterface` names (GPT-Neo, MPT, Falcon, BLOOM, XGLM: `arch.uses_interface`) are traced
from the weights their eager attention computes anyway: the model runs with `output_attentions=True`, and a forward
hook on each attention module hands its weights A [B,H,T,T] to the recorder by query chunks (`attention_rows`: the
same reductions as the exact chunked path, spec extreme-tokens §5), then drops them from the module's output, so
that only one layer's [B,H,T,T] is alive at a time (the model's own list of attentions gets None). The cost is T²:
`eager_bytes` = EAGER_COPIES · B·H·T²·max(itemsize, 4) bytes for the layer being computed (the family's scores,
its fp32 softmax and the weights at the model's dtype), refused in one line before the forward when it does not fit
(`attnlab.runs.budget`). The logit statistics s_i0, mean s_ij and the value norms need q, k and v, which these
modules never hand out: they come out NaN. The trace notes the path as "output_attentions"
(`Trace.attention_paths`; "eager" there is attnlab's own exact chunked function).
Refused before any forward: `MoveToSink` (the weights are the model's own) and a model loaded with a flash
attention implementation (it computes no weights).

**Layers without attention.** A hybrid (Jamba: `Arch.attention_layers`) mixes tokens in its other layers by a
state-space layer; their attention statistics are NaN (fed as NaN through the recorder's own entry points) and their
path is "none". Hook points and interventions on attention (`attn.hook_z`, `hook_attn_out`, `ZeroHead`,
`MoveToSink`) are refused on those layers in one line.

**Our keyword.** The session reaches the "attnlab" function as the keyword `attnlab_session`, given by a pre-hook
only to attention modules whose forward takes `**kwargs` and calls that function (`session_modules`): no keyword of
ours reaches a module that does not expect it (GPT-Neo's MLP was taken for its attention before, and got it).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import torch
from torch import nn

from attnlab.errors import InputError
from attnlab.runs.budget import check_device_memory, check_memory
from attnlab.tracing.adapters.arch import Arch

if TYPE_CHECKING:
    from attnlab.tracing.adapters.hf import Plan, TraceSession
    from attnlab.tracing.recorder import TraceRecorder

EAGER_COPIES = 3  # [B,H,T,T] tensors alive at once in a family's eager attention: scores, fp32 softmax, weights
EAGER_ROWS = 128  # query rows per chunk handed to the recorder
FLASH = ("flash_attention_2", "flash_attention_3", "flex_attention")


def takes_kwargs(module: nn.Module) -> bool:
    """Whether the module's forward accepts arbitrary keywords (`**kwargs`)."""
    try:
        params = inspect.signature(module.forward).parameters.values()
    except (TypeError, ValueError):
        return False
    return any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params)


def session_modules(arch: Arch) -> list[nn.Module]:
    """The attention modules that are handed the session as the keyword `attnlab_session`: those of attention layers
    whose forward takes `**kwargs` (and so passes it on to the attention function), none on the eager fallback."""
    if not arch.interface:
        return []
    return [arch.attn[l] for l in arch.attention_set if takes_kwargs(arch.attn[l])]


def check_layers(arch: Arch, plan: Plan, model: Any, recording: bool) -> None:
    """One-line refusals before any forward: attention interventions on layers without attention; on the eager
    fallback (`recording`: a recorder is given), `MoveToSink` and a flash attention implementation."""
    for layer, heads in plan.zero_heads.items():
        arch.check_attention_layer(layer, f"ZeroHead({layer}, {heads[0]})")
    for layer in plan.sink:
        arch.check_attention_layer(layer, f"MoveToSink({layer}, {plan.sink[layer][0].head})")
    if arch.interface:
        return
    name = type(arch.attn[arch.attention_set[0]]).__name__
    if plan.sink:
        raise InputError(
            f"{arch.model_type}: MoveToSink needs attnlab's attention function, and {name} computes its own "
            "attention (outside transformers' AttentionInterface)"
        )
    impl = str(getattr(model.config, "_attn_implementation", "eager"))
    if recording and impl in FLASH:
        raise InputError(
            f"{arch.model_type}: {name} computes its own attention and, loaded with {impl}, no attention weights; "
            "load it with attn_implementation='eager' to trace it"
        )


def eager_bytes(arch: Arch, batch: int, seq_len: int, dtype: torch.dtype) -> int:
    """Bytes of the eager fallback's T² tensors for one layer at a time: EAGER_COPIES · B·H·T²·max(itemsize, 4)."""
    size = max(torch.empty(0, dtype=dtype).element_size(), 4)
    return EAGER_COPIES * batch * arch.n_heads * seq_len * seq_len * size


def check_eager_memory(arch: Arch, model: nn.Module, ids: torch.Tensor) -> None:
    """Refuse in one line, before the forward, an eager-fallback batch `ids` [B,T] whose T² tensors do not fit:
    half the RAM on the cpu, 90% of the free memory on a GPU (`attnlab.runs.budget`)."""
    p = next(iter(model.parameters()), None)
    dtype = p.dtype if p is not None else torch.float32
    device = p.device if p is not None else torch.device("cpu")
    need = eager_bytes(arch, int(ids.shape[0]), int(ids.shape[1]), dtype)
    what = (
        f"{arch.model_type}'s eager attention (it bypasses transformers' AttentionInterface; "
        f"{EAGER_COPIES}·B·H·T² = {EAGER_COPIES}·{ids.shape[0]}·{arch.n_heads}·{ids.shape[1]}² numbers a layer)"
    )
    fix = "use a smaller batch_size or fewer tokens"
    if device.type == "cpu":
        check_memory(need, what, fix=fix)
    else:
        check_device_memory(need, what, device, fix=fix)


def residual_arg(module: nn.Module, args: tuple) -> torch.Tensor | None:
    """The residual stream a module adds to its own output (its forward's second parameter is named `residual`:
    BLOOM's attention and MLP, MPT's MLP), from its positional arguments; None for a module that does not."""
    try:
        names = list(inspect.signature(module.forward).parameters)
    except (TypeError, ValueError):
        return None
    if len(names) > 1 and names[1] == "residual" and len(args) > 1 and torch.is_tensor(args[1]):
        return args[1]
    return None


def _record_eager(rec: TraceRecorder, layer: int, weights: torch.Tensor) -> None:
    """One layer's weights A [B,H,T,T] into the recorder: path "output_attentions", rows by chunks, NaN logit
    statistics and value norms (the module hands out no q, k, v)."""
    B, H, T, _ = weights.shape
    rec.attention_path(layer, "output_attentions")
    for q0 in range(0, T, EAGER_ROWS):
        q1 = min(T, q0 + EAGER_ROWS)
        rec.attention_rows(layer, q0, weights[:, :, q0:q1, :q1].detach().float())
    nan = torch.full((B, H, T), float("nan"))
    rec.logits(layer, nan, nan)
    rec.value_norms(layer, torch.full((B, T, H), float("nan")))


def _eager_hook(sess: TraceSession, layer: int) -> Callable[..., Any]:
    """Forward hook on an attention module of the eager fallback: record its weights, then drop them."""

    def post(mod: nn.Module, args: Any, out: Any) -> Any:
        w = out[1] if isinstance(out, tuple) and len(out) > 1 else None
        rec = sess.recorder
        if not torch.is_tensor(w) or w.dim() != 4 or rec is None:
            raise InputError(
                f"{sess.arch.model_type}: {type(mod).__name__} returned no attention weights with "
                "output_attentions=True, so attnlab cannot trace it"
            )
        sess.layers_seen.add(layer)
        _record_eager(rec, layer, w)
        return (out[0], None, *out[2:])

    return post


def _none_hook(sess: TraceSession, layer: int) -> Callable[..., Any]:
    """Forward hook on a hybrid's non-attention mixer: its layer's attention statistics are NaN, its path "none"."""

    def post(mod: nn.Module, args: Any, out: Any) -> None:
        rec = sess.recorder
        if rec is None:
            return
        B, H, T = (out[0] if isinstance(out, tuple) else out).shape[0], rec.H, rec.T
        rec.attention_path(layer, "none")
        rec.fused_rows(layer, torch.full((B, H, T), float("nan")), torch.full((B, H), float("nan")),
                       torch.full((B, H, T), float("nan")))  # fmt: skip
        nan = torch.full((B, H, T), float("nan"))
        rec.logits(layer, nan, nan)
        rec.value_norms(layer, torch.full((B, T, H), float("nan")))

    return post


class _EagerConfig:
    """Sets the model config's attention implementation to "eager" for the session; `remove()` puts it back (a
    handle like the hooks'). Falcon built for "sdpa" but asked for `output_attentions` takes its eager branch with
    sdpa's boolean mask added to the scores as 0/1, weights that are not causal (transformers 5.24): under "eager" it
    builds the additive mask its eager branch expects."""

    def __init__(self, config: Any) -> None:
        self.config, self.previous = config, config._attn_implementation
        config._attn_implementation = "eager"

    def remove(self) -> None:
        self.config._attn_implementation = self.previous


def install(sess: TraceSession) -> list[Any]:
    """The hooks of the eager fallback (with a recorder, on every attention layer of a model outside the interface,
    and the config's "eager" implementation) and of a hybrid's non-attention layers; handles returned for removal."""
    arch = sess.arch
    handles: list[Any] = []
    if sess.recorder is None:
        return handles
    if not arch.interface:
        handles.append(_EagerConfig(sess.model.config))
    attention = set(arch.attention_set)
    for layer in range(arch.n_layers):
        if layer not in attention:
            handles.append(arch.attn[layer].register_forward_hook(_none_hook(sess, layer)))
        elif not arch.interface:
            handles.append(arch.attn[layer].register_forward_hook(_eager_hook(sess, layer)))
    return handles


def forward_kwargs(sess: TraceSession) -> dict[str, Any]:
    """What the model's forward is called with besides ids and mask: `output_attentions=True` on the eager fallback."""
    return {"output_attentions": True} if sess.recorder is not None and not sess.arch.interface else {}


def expected_layers(arch: Arch) -> set[int]:
    """The layers whose attention the traced forward must see."""
    return set(arch.attention_set)
