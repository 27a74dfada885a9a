"""Figures of the BB study: dynamics of the three phenomena, attention map, value-norm bars, comparisons."""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

import numpy as np

from attnlab.plotting import new_figure, save_figure


def _series(metrics: list[dict], key: str, layer: int = 0) -> tuple[np.ndarray, np.ndarray]:
    steps, vals = [], []
    for r in metrics:
        v = r.get(key)
        if isinstance(v, list):
            v = v[layer] if layer < len(v) else None
        if isinstance(v, list):   # several heads: head 0
            v = v[0]
        if v is None:
            continue
        steps.append(r["step"])
        vals.append(float(v))
    return np.asarray(steps), np.asarray(vals)


def _step_axis(ax, lin_until: int) -> None:
    """Linear up to `lin_until`, log beyond (spec §4), with ticks placed in both parts."""
    lin_until = max(int(lin_until), 1)
    last = max((max(line.get_xdata(), default=0) for line in ax.get_lines()), default=lin_until)
    if last <= 4 * lin_until:          # a short run: the log part would be a sliver, stay linear
        ax.set_xlim(0, max(last, 1) * 1.02)
        ax.set_xlabel("step")
        ax.grid(alpha=0.3)
        return
    ax.set_xscale("symlog", linthresh=lin_until, linscale=2.0)
    ticks = [0, lin_until // 2, lin_until]
    ticks += [v * 10 ** k for k in range(2, 7) for v in (1, 2, 5) if lin_until < v * 10 ** k <= max(last, 1)]
    ax.set_xticks(ticks, [f"{t:g}" for t in ticks])
    ax.set_xlim(0, max(last, lin_until) * 1.02)
    ax.set_xlabel(f"step (linear ≤ {lin_until}, log beyond)")
    ax.grid(alpha=0.3)


def dynamics(metrics: list[dict], path: Path, lin_until: int = 500, layer: int = 0, title: str = "") -> Path:
    """2×3 panels over training: Attn⟨s⟩, Δlogit, ‖W_O v‖, ‖Res‖, excess risks, losses."""
    fig, ax = new_figure(3, 2, width=4.3, height=3.2)
    s, v = _series(metrics, "attn_sink", layer)
    ax[0, 0].plot(s, v, color="C0", label="Attn⟨s⟩ (non-trigger queries i ≥ 1)")
    s2, v2 = _series(metrics, "attn_sink_with0", layer)
    ax[0, 0].plot(s2, v2, color="C0", ls="--", alpha=0.6, label="including query 0")
    ax[0, 0].set_ylabel("attention to <s>")
    ax[0, 0].set_ylim(-0.02, 1.02)
    ax[0, 0].legend(fontsize=7)
    s, v = _series(metrics, "delta_logit", layer)
    _, lo = _series(metrics, "delta_logit_q10", layer)
    _, hi = _series(metrics, "delta_logit_q90", layer)
    _, vt = _series(metrics, "delta_logit_trigger", layer)
    ax[0, 1].plot(s, v, color="C1", label="non-trigger tokens (mean)")
    if len(lo) == len(s):
        ax[0, 1].fill_between(s, lo, hi, color="C1", alpha=0.2, label="10–90% of token types")
    if len(vt) == len(s):
        ax[0, 1].plot(s, vt, color="C3", label="trigger tokens")
    ax[0, 1].axhline(0, color="k", lw=0.5)
    ax[0, 1].set_ylabel("Δlogit = s_i0 − mean_j s_ij")
    ax[0, 1].legend(fontsize=7)
    s, v = _series(metrics, "value_norm_bos", layer)
    _, vo = _series(metrics, "value_norm_others", layer)
    ax[0, 2].plot(s, v, color="C2", label="‖W_O v⟨s⟩‖")
    ax[0, 2].plot(s, vo, color="C2", ls="--", label="mean of other positions")
    ax[0, 2].set_ylabel("value-state norm")
    ax[0, 2].legend(fontsize=7)
    s, v = _series(metrics, "resid_norm_bos", layer)
    _, vo = _series(metrics, "resid_norm_others", layer)
    ax[1, 0].plot(s, v, color="C4", label=f"‖Res⟨s⟩‖ after block {layer}")
    ax[1, 0].plot(s, vo, color="C4", ls="--", label="mean of other positions")
    ax[1, 0].set_ylabel("residual norm")
    ax[1, 0].legend(fontsize=7)
    for key, c in (("excess_risk_backcopy", "C5"), ("excess_risk_bigram", "C6")):
        s, v = _series(metrics, key)
        ax[1, 1].plot(s, np.maximum(v, 1e-6), color=c, label=key.replace("_", " "))
    ax[1, 1].set_yscale("log")
    ax[1, 1].set_ylabel("excess risk (nats)")
    ax[1, 1].legend(fontsize=7)
    for key, c in (("loss_backcopy", "C5"), ("loss_bigram", "C6"), ("loss", "k")):
        s, v = _series(metrics, key)
        ax[1, 2].plot(s, v, color=c, label=key.replace("_", " "))
    ax[1, 2].set_ylabel("cross-entropy (nats)")
    ax[1, 2].legend(fontsize=7)
    for a in ax.flat:
        _step_axis(a, lin_until)
    if title:
        fig.suptitle(title)
    return save_figure(fig, path)


def attention_map(pattern: np.ndarray, tokens: Sequence[int], names: Sequence[str], triggers: Sequence[int],
                  path: Path, title: str = "") -> Path:
    """Heatmap [query, key] of one sequence; trigger tokens are marked in red on both axes."""
    T = pattern.shape[0]
    fig, ax = new_figure(1, 1, width=6.0, height=5.4)
    a = ax[0, 0]
    im = a.imshow(pattern, cmap="viridis", vmin=0, vmax=max(float(pattern.max()), 1e-9))
    labels = [names[t] for t in tokens[:T]]
    a.set_xticks(range(T), labels, fontsize=7, family="monospace")
    a.set_yticks(range(T), labels, fontsize=7, family="monospace")
    for ticks in (a.get_xticklabels(), a.get_yticklabels()):
        for tick, tok in zip(ticks, tokens[:T]):
            if tok in triggers:
                tick.set_color("red")
                tick.set_fontweight("bold")
    a.set_xlabel("key")
    a.set_ylabel("query (triggers in red)")
    fig.colorbar(im, ax=a, fraction=0.046)
    a.set_title(title or "attention pattern")
    return save_figure(fig, path)


def value_norm_bars(norms: Sequence[float], labels: Sequence[str], path: Path, title: str = "") -> Path:
    """Bars of ‖W_O v_i‖ for the first positions (the value-state drain at <s>)."""
    fig, ax = new_figure(1, 1, width=5.0, height=3.2)
    a = ax[0, 0]
    a.bar(range(len(norms)), norms, color=["C3"] + ["C0"] * (len(norms) - 1))
    a.set_xticks(range(len(norms)), labels, family="monospace")
    a.set_ylabel("‖W_O v_i‖")
    a.set_title(title or "value-state norms of the first positions")
    return save_figure(fig, path)


def compare_runs(runs: dict[str, list[dict]], path: Path, keys: Sequence[str], lin_until: int = 500,
                 layer: int = 0, title: str = "") -> Path:
    """One panel per metric key, one line per run (e.g. softmax vs ReLU, Adam vs SGD)."""
    fig, ax = new_figure(len(keys), 1, width=4.2, height=3.2)
    for i, key in enumerate(keys):
        a = ax[0, i]
        for j, (label, metrics) in enumerate(runs.items()):
            s, v = _series(metrics, key, layer)
            a.plot(s, v, color=f"C{j}", label=label)
        a.set_ylabel(key.replace("_", " "))
        if key.startswith("excess_risk"):
            a.set_yscale("log")
        _step_axis(a, lin_until)
        a.legend(fontsize=7)
    if title:
        fig.suptitle(title)
    return save_figure(fig, path)
