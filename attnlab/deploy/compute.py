"""The measurements of `attnlab deploy`: next-token loss of the same windows under quantisation and window
policies (spec extreme-tokens §14, R23).

A window's NLL is its mean −log p(x_{t+1} | x_≤t) over t = 0..T−2; a policy's perplexity on a domain is
exp(mean NLL over the windows), with the standard error of the mean NLL beside it.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import numpy as np
import torch
from torch import nn

from attnlab.deploy._quant import OutlierLog, QuantSpec, quant_hooks
from attnlab.deploy._window import position_nll, windows_position_nll
from attnlab.deploy.config import QuantizeConfig, SlidingWindowConfig
from attnlab.errors import InputError
from attnlab.tracing.adapters.arch import Arch
from attnlab.tracing.adapters.hf import traced


def nll_stats(nll: np.ndarray) -> dict:
    """Mean NLL, perplexity and the standard error of the mean over windows, from per-window NLL [N]."""
    mean = float(nll.mean())
    se = float(nll.std(ddof=1) / np.sqrt(len(nll))) if len(nll) > 1 else 0.0
    return {"nll": mean, "perplexity": float(np.exp(mean)), "nll_se": se, "windows": int(len(nll))}


# ---- quantisation -----------------------------------------------------------------------------------------------


def quant_conditions(cfg: QuantizeConfig) -> Iterator[tuple[str, str]]:
    """(site, policy) pairs in run order: "none" once (site "-"), then each site's quantised policies."""
    if "none" in cfg.policies:
        yield "-", "none"
    for site in cfg.sites:
        for policy in cfg.policies:
            if policy != "none":
                yield site, policy


def quant_label(site: str, policy: str, bits: int) -> str:
    """Display name of a condition, e.g. "int8 exclude (linear)"."""
    return "none" if policy == "none" else f"int{bits} {policy} ({site})"


@torch.no_grad()
def quant_nll(
    model: nn.Module, arch: Arch, ids: torch.Tensor, spec: QuantSpec | None, batch_size: int
) -> tuple[np.ndarray, OutlierLog]:
    """[N] per-window NLL of `ids` [N,T] with activations fake-quantised by `spec` (None: as loaded), through
    the trace layer's forward with the quantiser at `spec.site`'s named hook points; and the outlier log."""
    log = OutlierLog()
    out: list[np.ndarray] = []
    with traced(model, hooks=quant_hooks(arch, spec, log) if spec is not None else None) as sess:
        for b in range(0, ids.shape[0], batch_size):
            batch = ids[b : b + batch_size]
            out.append(position_nll(sess.forward(batch), batch).mean(-1))
    return np.concatenate(out), log


def quant_domain(
    model: nn.Module, arch: Arch, cfg: QuantizeConfig, domain: str, ids: torch.Tensor
) -> tuple[list[dict], list[dict], list[dict]]:
    """Every condition on one domain's windows: (perplexity rows, per-window rows, outlier rows)."""
    rows, samples, outliers = [], [], []
    logged = "exclude" if "exclude" in cfg.policies else "clip"
    for site, policy in quant_conditions(cfg):
        spec = None if policy == "none" else QuantSpec(policy, site, cfg.bits, cfg.outlier_ratio, cfg.max_outliers)
        t0 = time.perf_counter()
        nll, log = quant_nll(model, arch, ids, spec, cfg.batch_size)
        label = quant_label(site, policy, cfg.bits)
        head = {"domain": domain, "site": site, "policy": policy, "label": label}
        rows.append({**head, **nll_stats(nll), "seconds": time.perf_counter() - t0})
        samples += [{**head, "window": k, "nll": float(v)} for k, v in enumerate(nll)]
        if policy == logged:
            outliers += [{"domain": domain, "site": site, **r} for r in log.rows()]
    return rows, samples, outliers


def frequent_outliers(outliers: list[dict], windows: int) -> dict:
    """{domain: {site: {"layer.module": [channels flagged in at least half of the windows]}}}."""
    out: dict = {}
    for r in outliers:
        if r["windows"] * 2 >= windows:
            key = f"{r['layer']}.{r['module']}"
            out.setdefault(r["domain"], {}).setdefault(r["site"], {}).setdefault(key, []).append(r["channel"])
    return out


# ---- sliding windows --------------------------------------------------------------------------------------------


def window_policies(cfg: SlidingWindowConfig) -> list[tuple[str, int | None, int]]:
    """(name, window or None, sink tokens): full attention, then "window W" and "sink+window W" per window."""
    out: list[tuple[str, int | None, int]] = [("full", None, 0)]
    for w in cfg.windows:
        out += [(f"window {w}", w, 0), (f"sink+window {w}", w, cfg.sink_tokens)]
    return out


def check_full_attention(arch: Arch, tokens: int) -> None:
    """Refuse a model whose own layers already use a sliding window shorter than `tokens` (the mask given here
    would replace it, so "full" would not be the model's own attention)."""
    own = arch.sliding_window
    if own is not None and own < tokens:
        raise InputError(
            f"{arch.model_type} already uses a sliding window of {own} keys in some layers, shorter than --tokens "
            f"{tokens}; deploy window needs full-attention layers (use --tokens {own} or less)"
        )


def tail_start(cfg: SlidingWindowConfig) -> int:
    """First query position at which every window policy has dropped a key: max W (predictions from i ≥ W)."""
    return max(cfg.windows)


def window_domain(
    model: nn.Module, cfg: SlidingWindowConfig, domain: str, ids: torch.Tensor
) -> tuple[list[dict], dict[str, np.ndarray]]:
    """Every window policy on one domain's windows: (rows, {policy: per-position NLL [N, T−1]})."""
    rows, arrays = [], {}
    t_tail = tail_start(cfg)
    for name, w, sinks in window_policies(cfg):
        t0 = time.perf_counter()
        pos = windows_position_nll(model, ids, w, sinks, cfg.batch_size)
        tail = nll_stats(pos[:, t_tail:].mean(-1)) if t_tail < pos.shape[1] else None
        rows.append(
            {
                "domain": domain,
                "policy": name,
                "window": "" if w is None else w,
                "sink_tokens": sinks,
                **nll_stats(pos.mean(-1)),
                "tail_from": t_tail,
                "nll_tail": tail["nll"] if tail else float("nan"),
                "perplexity_tail": tail["perplexity"] if tail else float("nan"),
                "seconds": time.perf_counter() - t0,
            }
        )
        arrays[name] = pos
    return rows, arrays
