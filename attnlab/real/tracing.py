"""Streaming traces and interventions on transformers causal LMs (spec extreme-tokens §5, §7, §10.2).

`traced(model, recorder, interventions)` is a context manager. Inside it:
  - attention runs through the function "attnlab" registered with transformers' `AttentionInterface`: eager math
    (s = q kᵀ·scaling, causal mask, fp32 softmax, KV heads repeated for grouped-query attention), computed in chunks
    of queries so that no [B,H,T,T] tensor is held; each chunk of weights [B,H,C,T] goes to the recorder, and the
    logit statistics s_i0 and mean_{1≤j≤i−1} s_ij come from q and a running sum of k (O(T·d_h)).
    The per-head value norms ‖W_O^h v_{g(h),i}‖ (g(h) = h ÷ (H/H_kv)) use the Gram matrix W_O^hᵀ W_O^h.
  - a forward pre-hook on the first block records the residual stream after the embedding and forward hooks on
    every block record it after each block (before the final norm);
  - `Interventions` zero heads (the slice [h·d_h, (h+1)·d_h) of the output projection's INPUT, never after it),
    zero MLP outputs, zero residual coordinates after a block, or move a head's attention onto key 0.
Without a recorder and without move-to-sink heads the model keeps its own (sdpa) attention.
"""

from __future__ import annotations

import contextlib
import weakref
from dataclasses import dataclass, field

import torch
from torch import nn

from attnlab.errors import AttnlabError
from attnlab.real.arch import Arch, get_arch
from attnlab.real.stream import StreamingRecorder

ATTN_NAME = "attnlab"
CHUNK_ELEMENTS = 1 << 22       # at most ~4M fp32 scores (16 MiB) per query chunk
MASKED = -1e30                 # finite "minus infinity": exp underflows to exactly 0 and 0 · MASKED = 0
_GRAMS: "weakref.WeakKeyDictionary[nn.Module, tuple]" = weakref.WeakKeyDictionary()


@dataclass
class Interventions:
    """What to switch off. zero_heads: {(layer, head)}; zero_mlps: {layer}; zero_dims: [(layer, pos|None, [dims])]
    (pos None = every position; applied to the residual after block `layer`); sink_heads: {(layer, head)} whose
    every query row i ≥ 0 becomes one-hot on key 0 (spec §7 `MoveAttnToSink`)."""

    zero_heads: set = field(default_factory=set)
    zero_mlps: set = field(default_factory=set)
    zero_dims: list = field(default_factory=list)
    sink_heads: set = field(default_factory=set)

    def validate(self, arch: Arch) -> None:
        for l, h in set(self.zero_heads) | set(self.sink_heads):
            arch.check_head(int(l), int(h))
        for l in self.zero_mlps:
            arch.check_layer(int(l), "MLP layer")
        for l, pos, dims in self.zero_dims:
            arch.check_layer(int(l))
            for d in dims:
                if not 0 <= int(d) < arch.d_model:
                    raise AttnlabError(f"residual dimension {d} out of range 0..{arch.d_model - 1}")

    def is_empty(self) -> bool:
        return not (self.zero_heads or self.zero_mlps or self.zero_dims or self.sink_heads)


@dataclass
class _Session:
    arch: Arch
    recorder: StreamingRecorder | None
    interventions: Interventions
    chunk_elements: int
    masks: dict = field(default_factory=dict)

    def gram(self, layer: int) -> torch.Tensor:
        """[H,d_h,d_h] W_O^hᵀ W_O^h in float64 (cached per output projection until its weight changes)."""
        mod = self.arch.out_proj[layer]
        key = (mod.weight.data_ptr(), mod.weight._version)
        hit = _GRAMS.get(mod)
        if hit is None or hit[0] != key:
            w = self.arch.w_o_heads(layer).double()                                # [H,d,d_h]
            hit = (key, w.transpose(1, 2) @ w)
            _GRAMS[mod] = hit
        return hit[1]

    def causal_mask(self, q0: int, q1: int, tk: int, offset: int) -> torch.Tensor:
        """[q1−q0, tk] additive mask: 0 where key j ≤ query i + offset, MASKED after."""
        key = (q0, q1, tk, offset)
        if key not in self.masks:
            self.masks[key] = _causal_mask(q0, q1, tk, offset)
        return self.masks[key]


_ACTIVE: _Session | None = None


def _causal_mask(q0: int, q1: int, tk: int, offset: int) -> torch.Tensor:
    future = torch.ones(q1 - q0, tk, dtype=torch.bool).triu(q0 + offset + 1)
    return torch.zeros(q1 - q0, tk).masked_fill_(future, MASKED)


def _expand_kv(x: torch.Tensor, n_heads: int) -> torch.Tensor:
    """[B,H_kv,T,d_h] -> [B,H,T,d_h]; query head h reads KV head h ÷ (H/H_kv) (as transformers' repeat_kv)."""
    groups = n_heads // x.shape[1]
    return x if groups == 1 else x.repeat_interleave(groups, dim=1)


def _logit_stats(query: torch.Tensor, key: torch.Tensor, scaling: float) -> tuple[torch.Tensor, torch.Tensor]:
    """s0 [B,H,T] = s_i0 and rest [B,H,T] = (1/(i−1)) Σ_{j=1}^{i−1} s_ij, via a running sum of keys (fp32)."""
    B, H, T, D = query.shape
    q = query.float()
    k = _expand_kv(key.float(), H)
    s0 = (q * k[:, :, :1]).sum(-1) * scaling
    ksum = torch.zeros_like(k)
    if T > 2:
        ksum[:, :, 2:] = torch.cumsum(k[:, :, 1:T - 1], dim=2)                      # Σ_{j=1}^{i-1} k_j at i
    denom = (torch.arange(T, dtype=torch.float32) - 1).clamp_min(1.0)
    rest = (q * ksum).sum(-1) * scaling / denom
    return s0, rest


def attnlab_attention(module: nn.Module, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                      attention_mask: torch.Tensor | None, scaling: float | None = None, dropout: float = 0.0,
                      **kwargs) -> tuple[torch.Tensor, None]:
    """Eager attention in query chunks. query [B,H,T,d_h], key/value [B,H_kv,Tk,d_h] -> output [B,T,H,d_h]."""
    sess = _ACTIVE
    B, H, T, D = query.shape
    Tk = key.shape[2]
    scaling = D ** -0.5 if scaling is None else scaling
    layer = int(getattr(module, "layer_idx", -1))
    rec = sess.recorder if sess is not None else None
    sink = sorted(h for l, h in sess.interventions.sink_heads if l == layer) if sess is not None else []
    if rec is not None and Tk != T:
        raise AttnlabError("tracing needs one full forward pass without a KV cache (use_cache=False)")
    k = _expand_kv(key, H).float()
    v = _expand_kv(value, H)
    chunk = max(1, min(T, (sess.chunk_elements if sess else CHUNK_ELEMENTS) // max(1, B * H * Tk)))
    out = torch.empty(B, H, T, D, dtype=value.dtype, device=value.device)
    offset = Tk - T
    qf = query.float()
    kt = k.reshape(B * H, Tk, D).transpose(1, 2)
    for q0 in range(0, T, chunk):
        q1 = min(T, q0 + chunk)
        qc = qf[:, :, q0:q1].reshape(B * H, q1 - q0, D)
        if attention_mask is None:                      # s = q kᵀ·scaling + causal mask, fused
            mask = sess.causal_mask(q0, q1, Tk, offset) if sess is not None else _causal_mask(q0, q1, Tk, offset)
            s = torch.baddbmm(mask.expand(B * H, q1 - q0, Tk), qc, kt, alpha=scaling).view(B, H, q1 - q0, Tk)
        else:
            s = torch.bmm(qc, kt).view(B, H, q1 - q0, Tk) * scaling
            m = attention_mask[:, :, q0:q1, :Tk]
            s = s.masked_fill(~m, MASKED) if m.dtype == torch.bool else s + m.clamp_min(MASKED)
        w = torch.softmax(s, dim=-1, dtype=torch.float32)
        if sink:
            w[:, sink] = 0.0
            w[:, sink, :, 0] = 1.0
        if rec is not None:
            rec.attention_rows(layer, q0, w, scores=None if sink else s)
        out[:, :, q0:q1] = torch.matmul(w.to(v.dtype), v)
    if rec is not None:
        rec.logits(layer, *_logit_stats(query, key, scaling))
        vv = v.double()
        vn2 = (torch.matmul(vv, sess.gram(layer)) * vv).sum(-1)                               # [B,H,T]
        rec.value_norms(layer, vn2.clamp_min(0).sqrt().transpose(1, 2))
    return out.transpose(1, 2).contiguous(), None


def register_attention() -> None:
    """Register "attnlab" with transformers' AttentionInterface (idempotent)."""
    from transformers import AttentionInterface

    AttentionInterface.register(ATTN_NAME, attnlab_attention)


def _hidden_of(output):
    return output[0] if isinstance(output, tuple) else output


def _with_hidden(output, hidden):
    return (hidden,) + tuple(output[1:]) if isinstance(output, tuple) else hidden


def _install_hooks(arch: Arch, sess: _Session) -> list:
    handles = []
    rec, iv = sess.recorder, sess.interventions
    H, D = arch.n_heads, arch.head_dim
    by_layer: dict[int, list[int]] = {}
    for l, h in iv.zero_heads:
        by_layer.setdefault(int(l), []).append(int(h))
    for l, heads in by_layer.items():
        def pre(mod, args, heads=tuple(sorted(heads))):
            z = args[0].clone()
            zv = z.view(*z.shape[:-1], H, D)
            zv[..., list(heads), :] = 0.0
            return (z,) + tuple(args[1:])
        handles.append(arch.out_proj[l].register_forward_pre_hook(pre))
    for l in iv.zero_mlps:
        handles.append(arch.mlp[int(l)].register_forward_hook(
            lambda mod, args, out: torch.zeros_like(out) if torch.is_tensor(out) else _with_hidden(
                out, torch.zeros_like(_hidden_of(out)))))
    if rec is not None:
        def pre0(mod, args, kwargs):
            hidden = args[0] if args else kwargs["hidden_states"]
            rec.residual(0, hidden)
        handles.append(arch.blocks[0].register_forward_pre_hook(pre0, with_kwargs=True))
    for l in range(arch.n_layers):
        dims = [(pos, list(d)) for ll, pos, d in iv.zero_dims if int(ll) == l]
        if not dims and rec is None:
            continue

        def post(mod, args, output, l=l, dims=dims):
            hidden = _hidden_of(output)
            if dims:
                hidden = hidden.clone()
                for pos, d in dims:
                    if pos is None:
                        hidden[..., d] = 0.0
                    else:
                        hidden[:, pos, d] = 0.0
            if rec is not None:
                rec.residual(l + 1, hidden)
            return _with_hidden(output, hidden) if dims else None
        handles.append(arch.blocks[l].register_forward_hook(post))
    return handles


@contextlib.contextmanager
def traced(model: nn.Module, recorder: StreamingRecorder | None = None, interventions: Interventions | None = None,
           chunk_elements: int = CHUNK_ELEMENTS):
    """Within the block, forwards of `model` fill `recorder` and apply `interventions` (see module docstring)."""
    global _ACTIVE
    if _ACTIVE is not None:
        raise AttnlabError("traced() blocks cannot be nested")
    arch = get_arch(model)
    iv = interventions or Interventions()
    iv.validate(arch)
    if recorder is not None and (recorder.L, recorder.H) != (arch.n_layers, arch.n_heads):
        raise AttnlabError(f"recorder is for {recorder.L} layers × {recorder.H} heads, the model has "
                           f"{arch.n_layers} × {arch.n_heads}")
    sess = _Session(arch=arch, recorder=recorder, interventions=iv, chunk_elements=chunk_elements)
    switch = recorder is not None or bool(iv.sink_heads)
    previous = model.config._attn_implementation
    if switch:
        register_attention()
        model.set_attn_implementation(ATTN_NAME)
    handles = _install_hooks(arch, sess)
    _ACTIVE = sess
    try:
        yield sess
    finally:
        _ACTIVE = None
        for h in handles:
            h.remove()
        if switch:
            model.set_attn_implementation(previous)


def new_recorder(model: nn.Module, seq_len: int, keep_patterns=(), vocab_size: int = 0) -> StreamingRecorder:
    """A `StreamingRecorder` sized for `model` at sequence length `seq_len` (checked against its context)."""
    arch = get_arch(model)
    arch.check_seq_len(seq_len)
    for l, h in keep_patterns:
        arch.check_head(int(l), int(h))
    return StreamingRecorder(arch.n_layers, arch.n_heads, seq_len, vocab_size=vocab_size,
                             keep_patterns=keep_patterns)


@torch.no_grad()
def forward_logits(model: nn.Module, ids: torch.Tensor, recorder: StreamingRecorder | None = None,
                   interventions: Interventions | None = None) -> torch.Tensor:
    """[B,T,V] logits of `ids` [B,T], recording into `recorder` and applying `interventions` for this batch."""
    with traced(model, recorder, interventions):
        if recorder is not None:
            recorder.begin_batch(ids if recorder.V else None, batch_size=ids.shape[0])
        return model(input_ids=ids, use_cache=False).logits
