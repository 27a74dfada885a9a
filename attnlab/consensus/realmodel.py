"""Iterating the decoder stack of any supported causal LM for many passes (spec section 8).

Start from the input of the first decoder block h0 `[batch, T, d]` (token embeddings, plus learned positions or
scaling where the family has them) and apply block l(k) for k = 1..L*passes, each block being the model's own
decoder layer (found by `get_arch`, so sequential and parallel blocks, dense and MoE MLPs alike):
    h <- Block_l(h)                                   (with the MLPs on)
    h <- Block_l(h) with its MLP's output zeroed      (MLPs off; for Llama: h + Attn_l(RMSNorm_in_l(h)))
Each block gets the keyword arguments (rotary embeddings, its own mask: causal, sliding window, ...) that the
model's own forward passes it, captured once, and runs alone, by the trace layer's layer-by-layer adapter
(`attnlab.tracing.adapters.blockwise`; MLPs off is the `ZeroMLP` mechanism). The final norm is the one architecture
discovery finds (`Arch.final_norm`).
Variants: `constant` (l(k) = layer), `periodic` (l(k) = (k-1) mod L, the trained stack cycled) and `random`
(a fresh stack per pass, copies of the trained blocks with Linear weights N(0, initializer_range^2), 1-D norm
weights 1, seed s + pass).
Measures (float64): E_first of the final-normed state (primary) and of the raw residual, E_pair over positions
>= 1, top_share, mean residual norm. The depth view reads the last position through the final norm and head.
With `decode`, every position is decoded at every pass end (R14): top1 = argmax_v (W_head norm_f(h))_v `[batch, T]`
(the head's positive logit scaling and monotone soft-cap leave the argmax unchanged, so they are not applied).
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
from attnlab.consensus.names import VARIANTS
from attnlab.errors import InputError, NumericalError, check_choice, check_int
from attnlab.tracing.adapters.blockwise import (
    BlockCalls,
    BlockParts,
    NormMap,
    block_parts,
    capture_block_calls,
    run_block,
)


@dataclass
class StackRun:
    """Per-layer-step curves `[batch, steps+1]` (step 0 = embeddings) and the depth view `[batch, grid]`."""

    steps: np.ndarray
    curves: dict[str, np.ndarray]
    grid: np.ndarray
    depth: dict[str, np.ndarray] = field(default_factory=dict)
    top1: np.ndarray | None = None  # [batch, passes+1, T] decoded token ids at pass ends (pass 0: embeddings)


class StackRunner:
    """Handles on a causal LM's decoder stack, final norm and head, found by architecture discovery, `get_arch`."""

    def __init__(self, model: nn.Module) -> None:
        from attnlab.tracing.adapters.arch import get_arch

        arch = get_arch(model)
        # HF modules: attributes typed Any (nn.Module's __getattr__ types them Tensor | Module)
        self.model: Any = model
        self.config: Any = model.config
        self.arch = arch
        self.layers: list[Any] = list(arch.blocks)
        self.n_layers = len(self.layers)
        self.norm: Any = arch.final_norm if arch.final_norm is not None else nn.Identity()
        self._parts: dict[int, tuple[int, BlockParts]] = {
            id(b): (i, BlockParts(b, m, n)) for i, (b, m, n) in enumerate(zip(self.layers, arch.mlp, arch.input_norms))
        }
        self._random_cache: dict[int, list[Any]] = {}

    def prepare(self, ids: torch.Tensor) -> tuple[torch.Tensor, BlockCalls]:
        """The first block's input `[batch, T, d]` and every block's other arguments, from one forward of the model
        (tensors among those arguments made on another device, such as a default causal mask, moved to h's)."""
        h, ctx = capture_block_calls(self.model, self.layers, ids)
        return h, BlockCalls([_moved(call, h.device) for call in ctx.calls], ctx.batch)

    def random_stack(self, seed: int) -> list[Any]:
        """A fresh stack with the model's block shapes: Linear ~ N(0, initializer_range^2), 1-D norm weights 1."""
        if seed not in self._random_cache:
            g = torch.Generator().manual_seed(seed)
            std = float(getattr(self.config, "initializer_range", 0.02))
            stack = []
            for i in range(self.n_layers):
                layer = copy.deepcopy(self.layers[i])  # every parameter is redrawn or reset below
                self._parts[id(layer)] = (i, block_parts(layer, self.config))
                _redraw(layer, std, g)
                layer.eval()
                stack.append(layer)
            for old in self._random_cache.values():  # one stack is kept; forget the handles of the last one
                for b in old:
                    self._parts.pop(id(b), None)
            self._random_cache = {seed: stack}
        return self._random_cache[seed]

    def input_norm(self, layer: Any) -> Any:
        """The input (pre-attention) norm of block `layer`, found by architecture discovery; None if post-norm."""
        return self._parts[id(layer)][1].input_norm

    def norm_map(self, layer: Any) -> NormMap | None:
        """What replaces block `layer`'s input norm in `layer_step` (None: the block's own norm)."""
        return None

    def layer_at(self, variant: str, k: int, layer: int, seed: int) -> Any:
        """The layer applied at layer step k >= 1."""
        if variant == "constant":
            return self.layers[layer]
        idx = (k - 1) % self.n_layers
        if variant == "periodic":
            return self.layers[idx]
        return self.random_stack(seed + (k - 1) // self.n_layers)[idx]

    def layer_step(self, layer: Any, h: torch.Tensor, ctx: BlockCalls, mlp: bool) -> torch.Tensor:
        """Block `layer` applied to h `[batch, T, d]` with its captured arguments; its MLP zeroed unless `mlp`."""
        i, parts = self._parts[id(layer)]
        return run_block(parts, h, ctx.calls[i], zero_mlp=not mlp, input_norm=self.norm_map(layer))

    def weight_vector(self, layer: Any, attention_only: bool) -> torch.Tensor:
        """Block `layer`'s matrices (every parameter with ndim >= 2; with `attention_only`, those outside its MLP:
        the attention projections) flattened and joined, float64 on the cpu `[n_weights]` (norm gains are 1-D and
        left out)."""
        mlp = {id(p) for p in self._parts[id(layer)][1].mlp.parameters()}
        ws = [p.detach().to("cpu", torch.float64).reshape(-1) for p in layer.parameters()
              if p.ndim >= 2 and not (attention_only and id(p) in mlp)]  # fmt: skip
        return torch.cat(ws)

    def final(self, h: torch.Tensor) -> torch.Tensor:
        """The model's final norm (learned gain) of `[batch, T, d]` (identity if it has none)."""
        return self.norm(h)

    def top1(self, h: torch.Tensor) -> torch.Tensor:
        """The decoded token of every position, argmax_v (W_head norm_f(h))_v: `[batch, T]` int64 from h
        `[batch, T, d]` (R14)."""
        return self.model.get_output_embeddings()(self.final(h)).argmax(-1)

    def model_logprobs(self, ids: torch.Tensor) -> torch.Tensor:
        """log p of the next token at the last position from the model's own forward on `ids` `[batch, T]`:
        `[batch, vocab]` float64."""
        logits = self.model(input_ids=ids, use_cache=False).logits[:, -1]
        return torch.log_softmax(logits.double(), -1)

    def last_logprobs(self, h: torch.Tensor) -> torch.Tensor:
        """log p of the next token at the last position, `[batch, vocab]` float64 (the head's logit scaling and
        final soft-cap as the model applies them: Cohere's logit_scale, Granite's logits_scaling, Gemma 2's cap)."""
        logits = self.model.get_output_embeddings()(self.final(h[:, -1:, :]))[:, 0]
        scale = getattr(self.model, "logit_scale", None)
        if isinstance(scale, (int, float)) and scale != 1:
            logits = logits * scale
        div = getattr(self.config, "logits_scaling", None)
        if isinstance(div, (int, float)) and div != 1:
            logits = logits / div
        cap = getattr(self.config, "final_logit_softcapping", None)
        if cap:
            logits = torch.tanh(logits / cap) * cap
        return torch.log_softmax(logits.double(), dim=-1)


def _moved(value: Any, device: torch.device) -> Any:
    """`value` (a tensor, or tuples, lists and dicts of them) with every tensor on `device`."""
    if isinstance(value, torch.Tensor):
        return value if value.device == device else value.to(device)
    if isinstance(value, (tuple, list)):
        return type(value)(_moved(v, device) for v in value)
    if isinstance(value, dict):
        return {k: _moved(v, device) for k, v in value.items()}
    return value


def _normal(p: torch.Tensor, std: float, g: torch.Generator) -> None:
    """p ~ N(0, std^2) from the cpu generator `g`: drawn in place on the cpu, copied elsewhere (the same draws on
    every device)."""
    if p.device.type == "cpu":
        p.normal_(0.0, std, generator=g)
    else:
        p.copy_(torch.empty(p.shape, dtype=p.dtype).normal_(0.0, std, generator=g))


@torch.no_grad()
def _redraw(layer: nn.Module, std: float, g: torch.Generator) -> None:
    """In module order: Linear weights ~ N(0, std^2) with zero biases, other weight matrices (Conv1D, stacked MoE
    experts) ~ N(0, std^2), 1-D norm weights 1."""
    for mod in layer.modules():
        if isinstance(mod, nn.Linear):
            _normal(mod.weight, std, g)
            if mod.bias is not None:
                mod.bias.zero_()
            continue
        for name, p in mod.named_parameters(recurse=False):
            if p.ndim >= 2:
                _normal(p, std, g)
            elif name == "weight":
                p.fill_(1.0)


def norm_gain_cv(runner: StackRunner) -> list[float]:
    """Coefficient of variation of each layer's first norm gain (its pre-attention norm: distance from equal
    scales); NaN for a block without a 1-D norm weight."""
    out = []
    for layer in runner.layers:
        w = getattr(runner.input_norm(layer), "weight", None)
        if not isinstance(w, torch.Tensor) or w.ndim != 1:
            out.append(float("nan"))
            continue
        w = w.detach().double()
        out.append(float(w.std() / w.abs().mean()))
    return out


def state_measures(runner: StackRunner, h: torch.Tensor) -> dict[str, np.ndarray]:
    """Measures of one state `[batch, T, d]`: E_first (final-normed, primary), E_first_raw, E_pair (normed,
    positions >= 1), top_share (normed), res_norm (mean residual norm); each `[batch]`."""
    return {k: v.cpu().numpy() for k, v in state_tensors(runner, h).items()}


def state_tensors(runner: StackRunner, h: torch.Tensor) -> dict[str, torch.Tensor]:
    """`state_measures` as float64 tensors `[batch]` on h's device (nothing read back but the measures' checks)."""
    with torch.no_grad():
        hn = runner.final(h).double()
    hr = h.detach().double()
    return {
        "E_first": M.E_first(hn),
        "E_first_raw": M.E_first(hr),
        "E_pair": M.E_pair(hn[:, 1:]),
        "top_share": M.top_share(hn),
        "res_norm": hr.norm(dim=-1).mean(-1),
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
    token's KL to the one-pass reference, top-1 agreement, entropy and (with controls, rows B:) C(k).

    On the cpu each step is measured at once. On another device the states of a pass are kept there and measured
    together at its end (`flush`: one batched call, one copy to the host), and so are the depth-view values."""

    def __init__(
        self,
        runner: StackRunner,
        B: int,
        grid: np.ndarray,
        p_ref: torch.Tensor | None,
        controls: bool,
        decode: bool = False,
        per_pass: bool = False,
    ):
        self.runner, self.B, self.p_ref, self.decode, self.per_pass = runner, B, p_ref, decode, per_pass
        self.grid = set(grid.tolist())
        self.rows: dict[str, list[np.ndarray]] = {}
        self.top1: list[np.ndarray] = []  # [batch, T] per pass end (with `decode`)
        self.depth: dict[str, list[np.ndarray]] = {"KL_model": [], "top1_agree": [], "entropy": []}
        if controls:
            self.depth["C(k)"] = []
        self.pending: list[torch.Tensor] = []  # states [B, T, d] not yet measured
        self.pending_depth: dict[str, list[torch.Tensor]] = {k: [] for k in self.depth}

    def record(self, k: int, h: torch.Tensor) -> None:
        B = self.B
        self.pending.append(h[:B])
        if self.decode and k % self.runner.n_layers == 0:
            self.top1.append(self.runner.top1(h[:B]).cpu().numpy())
        if self.p_ref is not None and k in self.grid:
            p_ref = self.p_ref
            lp = self.runner.last_logprobs(h)
            lpm = lp[:B]
            self.pending_depth["KL_model"].append((p_ref.exp() * (p_ref - lpm)).sum(-1).clamp_min(0))
            self.pending_depth["top1_agree"].append((lpm.argmax(-1) == p_ref.argmax(-1)).double())
            self.pending_depth["entropy"].append(-(lpm.exp() * lpm).sum(-1))
            if "C(k)" in self.depth:
                self.pending_depth["C(k)"].append((lpm.exp() * (lpm - lp[B:])).sum(-1).clamp_min(0))
        if not self.per_pass or k % self.runner.n_layers == 0:
            self.flush()

    def flush(self) -> None:
        """Measure the pending states (one batched call where there are several) and copy everything to the host."""
        if len(self.pending) == 1:
            values = {k: v[None] for k, v in state_tensors(self.runner, self.pending[0]).items()}
        elif self.pending:
            m, (B, T, d) = len(self.pending), self.pending[0].shape
            flat = state_tensors(self.runner, torch.stack(self.pending).reshape(m * B, T, d))
            values = {k: v.reshape(m, B) for k, v in flat.items()}
        else:
            values = {}
        for name, val in values.items():
            self.rows.setdefault(name, []).extend(val.cpu().numpy())
        for name, vals in self.pending_depth.items():
            self.depth[name].extend(v.cpu().numpy() for v in vals)
            vals.clear()
        self.pending.clear()


def _check_finite(finite: list[torch.Tensor], k: int, variant: str) -> None:
    """Raise naming the first non-finite layer step among the pending checks of steps k-len+1..k (one read-back)."""
    ok = torch.stack(finite).cpu().numpy()
    first = k - len(finite) + 1
    finite.clear()
    if not ok.all():
        step = first + int(np.argmin(ok))
        raise NumericalError(f"non-finite hidden state at layer step {step} ({variant}); stopping (float32 overflow)")


def _check_iteration(runner: StackRunner, ids: torch.Tensor, variant: str, passes: int, layer: int) -> None:
    check_choice(variant, VARIANTS, "model variant")
    check_int(passes, 1, "passes")
    if ids.ndim != 2 or ids.shape[1] < 2:
        raise InputError(f"prompts must be [batch, T] with T >= 2, got {tuple(ids.shape)}")
    if variant == "constant" and not 0 <= layer < runner.n_layers:
        raise InputError(f"layer {layer} outside 0..{runner.n_layers - 1}")


def stack_roughness(runner: StackRunner, variant: str, layer: int = 20, seed: int = 0) -> dict[str, float]:
    """The roughness of a variant's weight sequence (consensus spec §3: r = mean_k ‖W_{k+1} − W_k‖_F/‖W_k‖_F) over
    the layer steps k = 1..L, one cycle of the stack including the step into the next pass (so for `periodic` the
    mean over the cycle, for `random` L − 1 steps within a fresh stack and one across two): `roughness_attn` with W
    the block's attention projections (the P and V of the theory), `roughness_block` with every matrix of the block
    (attention and MLP). 0 for `constant`; about √2 for `random` (independent draws of equal scale)."""
    rows: dict[str, list[float]] = {"roughness_attn": [], "roughness_block": []}
    prev: list[torch.Tensor] = []
    for k in range(1, runner.n_layers + 2):
        block = runner.layer_at(variant, k, layer, seed)
        cur = [runner.weight_vector(block, True), runner.weight_vector(block, False)]
        for key, a, b in zip(rows, prev, cur):
            rows[key].append(float((b - a).norm() / a.norm().clamp_min(1e-300)))
        prev = cur
    return {k: float(np.mean(v)) for k, v in rows.items()}


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
    decode: bool = False,
    per_pass: bool | None = None,
) -> StackRun:
    """Iterate the stack for `passes` passes on `ids` `[batch, T]`; `controls` (same shape) adds C(k); `decode`
    adds the top-1 token of every position at every pass end (`StackRun.top1`, R14). `per_pass`: measure and
    check a pass's states together at its end (None: off the cpu; the results do not depend on it)."""
    _check_iteration(runner, ids, variant, passes, layer)
    B, L = ids.shape[0], runner.n_layers
    K = passes * L
    grid = depth_grid(passes, L) if depth_view else np.zeros(0, dtype=int)
    it: Iterable[int] = range(1, K + 1)
    if progress:
        from tqdm import tqdm

        it = tqdm(it, desc=f"{variant} mlp={'on' if mlp else 'off'}", leave=False)
    with torch.no_grad():
        h, ctx = runner.prepare(ids if controls is None else torch.cat([ids, controls]))
        # the model's own next-token distribution, from its own forward (not from our block-by-block pass, so the
        # one-pass KL_model checks the runner against the model instead of against itself)
        p_ref = runner.model_logprobs(ids) if depth_view else None
        per_pass = h.device.type != "cpu" if per_pass is None else per_pass
        rec = _StackRecorder(runner, B, grid, p_ref, controls is not None, decode, per_pass)
        rec.record(0, h)
        finite: list[torch.Tensor] = []  # per layer step, kept on the device and checked at pass ends
        for k in it:
            h = runner.layer_step(runner.layer_at(variant, k, layer, seed), h, ctx, mlp)
            finite.append(torch.isfinite(h).all())
            if not per_pass or k % L == 0:
                _check_finite(finite, k, variant)
            if feedback_final_norm and k % L == 0 and k < K:
                h = runner.final(h)
            rec.record(k, h)
        rec.flush()
    return StackRun(
        steps=np.arange(K + 1),
        curves={k: np.stack(v, 1) for k, v in rec.rows.items()},
        grid=grid,
        depth={k: np.stack(v, 1) for k, v in rec.depth.items() if v},
        top1=np.stack(rec.top1, 1) if rec.top1 else None,
    )


def top1_stats(top1: np.ndarray) -> dict[str, np.ndarray]:
    """Per row of top1 `[..., T]` (decoded token ids): `share` = fraction of positions whose token is the row's most
    common one, `distinct` = number of distinct tokens, `mode` = the most common token (the smallest id on a tie);
    each `[...]`."""
    flat = top1.reshape(-1, top1.shape[-1])
    share, distinct, mode = [], [], []
    for row in flat:
        vals, counts = np.unique(row, return_counts=True)
        i = int(np.argmax(counts))
        share.append(counts[i] / row.size)
        distinct.append(len(vals))
        mode.append(vals[i])
    shape = top1.shape[:-1]
    return {
        "share": np.asarray(share, dtype=np.float64).reshape(shape),
        "distinct": np.asarray(distinct, dtype=np.int64).reshape(shape),
        "mode": np.asarray(mode, dtype=np.int64).reshape(shape),
    }
