"""Iterating a Llama-shaped decoder stack for many passes (spec section 8).

Start from the token embeddings h0 `[batch, T, d]` and apply layer l(k) for k = 1..L*passes:
    h <- h + Attn_l(RMSNorm_in_l(h))                   (pre-attention norm keeps its learned gain)
    h <- h + MLP_l(RMSNorm_post_l(h))                  (only with MLPs on)
Variants: `constant` (l(k) = layer), `periodic` (l(k) = (k-1) mod L, the trained stack cycled) and `random`
(a fresh Llama-shaped stack per pass: Linear weights N(0, initializer_range^2), norm gains 1, seed s + pass).
Rotary embeddings are computed once; the mask is an explicit additive causal mask `[1, 1, T, T]`.
Measures (float64): E_first of the final-normed state (primary) and of the raw residual, E_pair over positions
>= 1, top_share, mean residual norm. The depth view reads the last position through the final norm and head.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from torch import nn

from attnlab.consensus import measures as M
from attnlab.errors import InputError, NumericalError, check_choice, check_int

VARIANTS = ("constant", "periodic", "random")


@dataclass
class StackRun:
    """Per-layer-step curves `[batch, steps+1]` (step 0 = embeddings) and the depth view `[batch, grid]`."""

    steps: np.ndarray
    curves: dict[str, np.ndarray]
    grid: np.ndarray
    depth: dict[str, np.ndarray] = field(default_factory=dict)


class StackRunner:
    """Handles on a Llama-like causal LM (`model.model.{embed_tokens, layers, norm, rotary_emb}`, `model.lm_head`)."""

    def __init__(self, model: nn.Module) -> None:
        inner = getattr(model, "model", None)
        if inner is None or not hasattr(inner, "layers") or not hasattr(inner, "rotary_emb"):
            raise InputError("model iteration needs a Llama-style causal LM (model.model.layers, rotary_emb)")
        # HF modules: attributes typed Any (nn.Module's __getattr__ types them Tensor | Module)
        self.model: Any = model
        self.inner: Any = inner
        self.config: Any = model.config
        self.layers: list[Any] = list(inner.layers)
        self.n_layers = len(self.layers)
        self._random_cache: dict[int, list[Any]] = {}

    def prepare(self, ids: torch.Tensor) -> tuple[torch.Tensor, tuple, torch.Tensor]:
        """Embeddings `[batch, T, d]`, rotary (cos, sin) and the additive causal mask `[1, 1, T, T]`."""
        h = self.inner.embed_tokens(ids)
        T = ids.shape[1]
        pos = torch.arange(T).unsqueeze(0)
        rot = self.inner.rotary_emb(h, pos)
        mask = torch.full((T, T), torch.finfo(h.dtype).min, dtype=h.dtype).triu(1)[None, None]
        return h, rot, mask

    def random_stack(self, seed: int) -> list[Any]:
        """A fresh stack of decoder layers with SmolLM2's shapes: Linear ~ N(0, initializer_range^2), gains 1."""
        if seed not in self._random_cache:
            from transformers.models.llama.modeling_llama import LlamaDecoderLayer

            cfg = copy.deepcopy(self.config)
            g = torch.Generator().manual_seed(seed)
            std = float(getattr(cfg, "initializer_range", 0.02))
            stack = []
            dtype = next(self.model.parameters()).dtype
            for i in range(self.n_layers):
                with torch.device("meta"):  # skip the default init; every parameter is filled below
                    layer = LlamaDecoderLayer(cfg, layer_idx=i)
                layer = layer.to_empty(device="cpu").to(dtype)
                with torch.no_grad():
                    for mod in layer.modules():
                        if isinstance(mod, nn.Linear):
                            mod.weight.normal_(0.0, std, generator=g)
                            if mod.bias is not None:
                                mod.bias.zero_()
                        elif (weight := getattr(mod, "weight", None)) is not None and weight.ndim == 1:
                            weight.fill_(1.0)
                layer.eval()
                stack.append(layer)
            self._random_cache = {seed: stack}
        return self._random_cache[seed]

    def layer_at(self, variant: str, k: int, layer: int, seed: int) -> Any:
        """The layer applied at layer step k >= 1."""
        if variant == "constant":
            return self.layers[layer]
        idx = (k - 1) % self.n_layers
        if variant == "periodic":
            return self.layers[idx]
        return self.random_stack(seed + (k - 1) // self.n_layers)[idx]

    @staticmethod
    def layer_step(layer: Any, h: torch.Tensor, rot: tuple, mask: torch.Tensor, mlp: bool) -> torch.Tensor:
        """h + Attn(norm_in(h)) (+ MLP(norm_post(.)) when `mlp`), `[batch, T, d]`."""
        a = layer.self_attn(hidden_states=layer.input_layernorm(h), position_embeddings=rot, attention_mask=mask)[0]
        h = h + a
        if mlp:
            h = h + layer.mlp(layer.post_attention_layernorm(h))
        return h

    def final(self, h: torch.Tensor) -> torch.Tensor:
        """Final RMSNorm (learned gain) of `[batch, T, d]`."""
        return self.inner.norm(h)

    def last_logprobs(self, h: torch.Tensor) -> torch.Tensor:
        """log p of the next token at the last position, `[batch, vocab]` float64."""
        return torch.log_softmax(self.model.lm_head(self.final(h[:, -1:, :]))[:, 0].double(), dim=-1)


def norm_gain_cv(runner: StackRunner) -> list[float]:
    """Coefficient of variation of each layer's pre-attention RMSNorm gain (distance from equal scales)."""
    out = []
    for layer in runner.layers:
        w = layer.input_layernorm.weight.detach().double()
        out.append(float(w.std() / w.abs().mean()))
    return out


def state_measures(runner: StackRunner, h: torch.Tensor) -> dict[str, np.ndarray]:
    """Measures of one state `[batch, T, d]`: E_first (final-normed, primary), E_first_raw, E_pair (normed,
    positions >= 1), top_share (normed), res_norm (mean residual norm); each `[batch]`."""
    with torch.no_grad():
        hn = runner.final(h).double()
    hr = h.detach().double()
    return {
        "E_first": M.E_first(hn).numpy(),
        "E_first_raw": M.E_first(hr).numpy(),
        "E_pair": M.E_pair(hn[:, 1:]).numpy(),
        "top_share": M.top_share(hn).numpy(),
        "res_norm": hr.norm(dim=-1).mean(-1).numpy(),
    }


def depth_grid(passes: int, n_layers: int) -> np.ndarray:
    """Every layer step in passes 1-2, then every pass end (layer steps)."""
    first = np.arange(0, min(2, passes) * n_layers + 1)
    ends = np.arange(3, passes + 1) * n_layers
    return np.concatenate([first, ends]).astype(int)


def control_prompts(ids: torch.Tensor, groups: list[int]) -> torch.Tensor:
    """Controls: positions 1..T-2 taken from the next prompt of the same group (first and last tokens kept)."""
    out = ids.clone()
    start = 0
    for size in groups:
        block = ids[start : start + size]
        if size > 1:
            out[start : start + size, 1:-1] = block.roll(-1, dims=0)[:, 1:-1]
        start += size
    return out


class _StackRecorder:
    """Measures of every layer step (`state_measures` of the first B rows) and, at the depth-grid steps, the next
    token's KL to the one-pass reference, top-1 agreement, entropy and (with controls, rows B:) C(k)."""

    def __init__(self, runner: StackRunner, B: int, grid: np.ndarray, p_ref: torch.Tensor | None, controls: bool):
        self.runner, self.B, self.p_ref = runner, B, p_ref
        self.grid = set(grid.tolist())
        self.rows: dict[str, list[np.ndarray]] = {}
        self.depth: dict[str, list[np.ndarray]] = {"KL_model": [], "top1_agree": [], "entropy": []}
        if controls:
            self.depth["C(k)"] = []

    def record(self, k: int, h: torch.Tensor) -> None:
        B = self.B
        for name, val in state_measures(self.runner, h[:B]).items():
            self.rows.setdefault(name, []).append(val)
        if self.p_ref is None or k not in self.grid:
            return
        p_ref = self.p_ref
        lp = self.runner.last_logprobs(h)
        lpm = lp[:B]
        self.depth["KL_model"].append((p_ref.exp() * (p_ref - lpm)).sum(-1).clamp_min(0).numpy())
        self.depth["top1_agree"].append((lpm.argmax(-1) == p_ref.argmax(-1)).double().numpy())
        self.depth["entropy"].append(-(lpm.exp() * lpm).sum(-1).numpy())
        if "C(k)" in self.depth:
            self.depth["C(k)"].append((lpm.exp() * (lpm - lp[B:])).sum(-1).clamp_min(0).numpy())


def _check_iteration(runner: StackRunner, ids: torch.Tensor, variant: str, passes: int, layer: int) -> None:
    check_choice(variant, VARIANTS, "model variant")
    check_int(passes, 1, "passes")
    if ids.ndim != 2 or ids.shape[1] < 2:
        raise InputError(f"prompts must be [batch, T] with T >= 2, got {tuple(ids.shape)}")
    if variant == "constant" and not 0 <= layer < runner.n_layers:
        raise InputError(f"layer {layer} outside 0..{runner.n_layers - 1}")


def iterate_stack(
    runner: StackRunner,
    ids: torch.Tensor,
    variant: str,
    passes: int,
    mlp: bool = True,
    layer: int = 20,
    seed: int = 0,
    feedback_final_norm: bool = False,
    depth_view: bool = True,
    controls: torch.Tensor | None = None,
    progress: bool = False,
) -> StackRun:
    """Iterate the stack for `passes` passes on `ids` `[batch, T]`; `controls` (same shape) adds C(k)."""
    _check_iteration(runner, ids, variant, passes, layer)
    B, L = ids.shape[0], runner.n_layers
    K = passes * L
    grid = depth_grid(passes, L) if depth_view else np.zeros(0, dtype=int)
    it: Iterable[int] = range(1, K + 1)
    if progress:
        from tqdm import tqdm

        it = tqdm(it, desc=f"{variant} mlp={'on' if mlp else 'off'}", leave=False)
    with torch.no_grad():
        h, rot, mask = runner.prepare(ids if controls is None else torch.cat([ids, controls]))
        p_ref = None
        if depth_view:  # the model's own next-token distribution: one pass with MLPs
            hr = h[:B]
            for lay in runner.layers:
                hr = runner.layer_step(lay, hr, rot, mask, True)
            p_ref = runner.last_logprobs(hr)
        rec = _StackRecorder(runner, B, grid, p_ref, controls is not None)
        rec.record(0, h)
        for k in it:
            h = runner.layer_step(runner.layer_at(variant, k, layer, seed), h, rot, mask, mlp)
            if not torch.isfinite(h).all():
                raise NumericalError(
                    f"non-finite hidden state at layer step {k} ({variant}); stopping (float32 overflow)"
                )
            if feedback_final_norm and k % L == 0 and k < K:
                h = runner.final(h)
            rec.record(k, h)
    return StackRun(
        steps=np.arange(K + 1),
        curves={k: np.stack(v, 1) for k, v in rec.rows.items()},
        grid=grid,
        depth={k: np.stack(v, 1) for k, v in rec.depth.items() if v},
    )
