"""Scan figures, drawn from saved traces and patterns (matplotlib Figure objects, no pyplot)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from attnlab.plotting import new_figure, save_figure


def sink_heatmaps(sink: dict[str, np.ndarray], path: Path) -> Path:
    """Layer × head sink score per domain, plus the difference of the second domain minus the first."""
    ds = list(sink)
    n = len(ds) + (1 if len(ds) >= 2 else 0)
    L, H = next(iter(sink.values())).shape
    fig, axes = new_figure(n, 1, width=2.2 + 0.25 * H, height=1.2 + 0.16 * L)
    for ax, d in zip(axes[0], ds):
        im = ax.imshow(sink[d], aspect="auto", cmap="viridis", vmin=0, vmax=1, origin="lower")
        ax.set_title(f"sink score: {d}")
        ax.set_xlabel("head")
        ax.set_ylabel("layer")
        fig.colorbar(im, ax=ax, fraction=0.08)
    if len(ds) >= 2:
        ax = axes[0][-1]
        diff = sink[ds[1]] - sink[ds[0]]
        im = ax.imshow(diff, aspect="auto", cmap="RdBu_r", vmin=-1, vmax=1, origin="lower")
        ax.set_title(f"{ds[1]} − {ds[0]}")
        ax.set_xlabel("head")
        ax.set_ylabel("layer")
        fig.colorbar(im, ax=ax, fraction=0.08)
    return save_figure(fig, path)


def residual_norms(traces: dict, path: Path) -> Path:
    """‖h_0‖ and the median ‖h_t‖ (t ≥ 1) per residual stream, log scale; −1 = embedding output."""
    fig, axes = new_figure(2, 1, width=5.0, height=3.4)
    for d, tr in traces.items():
        x = np.arange(tr.resid_norm.shape[0]) - 1
        (line,) = axes[0][0].plot(x, tr.resid_norm[:, 0], marker=".", label=f"{d}: token 0")
        axes[0][0].plot(
            x, np.median(tr.resid_norm[:, 1:], axis=1), ls="--", color=line.get_color(), label=f"{d}: median other"
        )
        axes[0][1].plot(x, tr.resid_norm_ratio(), marker=".", label=d)
    axes[0][0].set_yscale("log")
    axes[0][0].set_xlabel("after block (−1 = embedding)")
    axes[0][0].set_ylabel("residual norm")
    axes[0][0].legend(fontsize=7)
    axes[0][1].set_yscale("log")
    axes[0][1].set_xlabel("after block (−1 = embedding)")
    axes[0][1].set_ylabel("‖h_0‖ / median ‖h_t‖")
    axes[0][1].legend(fontsize=7)
    return save_figure(fig, path)


def value_ratios(traces: dict, path: Path) -> Path:
    """Per layer: median over heads of ‖W_O^h v_0‖ / median_t ‖W_O^h v_t‖, with the min-max band over heads."""
    fig, axes = new_figure(1, 1, width=6.0, height=3.4)
    ax = axes[0][0]
    for d, tr in traces.items():
        r = tr.value_norm_ratio()
        x = np.arange(r.shape[0])
        (line,) = ax.plot(x, np.median(r, axis=1), marker=".", label=d)
        ax.fill_between(x, r.min(1), r.max(1), color=line.get_color(), alpha=0.15)
    ax.axhline(1.0, color="gray", lw=0.7)
    ax.set_yscale("log")
    ax.set_xlabel("layer")
    ax.set_ylabel("value-norm ratio of token 0")
    ax.legend(fontsize=7)
    return save_figure(fig, path)


def attention_maps(
    patterns: dict[str, dict[str, np.ndarray]], sink: dict[str, np.ndarray], path: Path, max_tokens: int = 64
) -> Path | None:
    """Attention patterns (first `max_tokens` positions, first sample) of chosen heads, one row per head."""
    ds = list(patterns)
    if not ds or not patterns[ds[0]]:
        return None
    heads = list(patterns[ds[0]])
    fig, axes = new_figure(len(ds), len(heads), width=2.8, height=2.6)
    for r, key in enumerate(heads):
        l, h = (int(x) for x in key.split("."))
        for c, d in enumerate(ds):
            A = patterns[d][key][:max_tokens, :max_tokens]
            ax = axes[r][c]
            ax.imshow(A**0.5, cmap="magma", vmin=0, vmax=1)
            ax.set_title(f"L{l}H{h} {d} (s={sink[d][l, h]:.2f})", fontsize=8)
            ax.set_xticks([])
            ax.set_yticks([])
    return save_figure(fig, path)


def checkpoint_series(rows: list[dict], path: Path) -> Path:
    """Against training step, one line per domain: mean sink score, largest residual |x| (massive activation,
    log scale) and the median value-norm ratio of token 0 (rows: series.csv as dicts)."""
    panels = (
        ("mean_sink_score", "mean sink score", False),
        ("max_abs", "max |x| in the residual stream", True),
        ("value_norm_ratio_median", "value-norm ratio of token 0", True),
    )
    fig, axes = new_figure(len(panels), 1, width=4.2, height=3.2)
    domains = list(dict.fromkeys(r["domain"] for r in rows))
    for ax, (key, label, log) in zip(axes[0], panels):
        for d in domains:
            pts = sorted((r["step"], r[key]) for r in rows if r["domain"] == d)
            ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=d)
        if log:
            ax.set_yscale("log")
        ax.set_xlabel("training step")
        ax.set_ylabel(label)
    axes[0][0].legend(fontsize=7)
    return save_figure(fig, path)


def sink_procedure(heads: Any, layers: Any, path: Path) -> Path:
    """The authors' sink-head procedure (R24): per layer, how often token 0 is a candidate and how many candidates
    beyond token 0 a window holds; per head (first domain), the share of windows with a sink on any candidate and
    on one beyond token 0, with × on the heads the key-0 score calls sinks (≥ 0.5)."""
    fig, axes = new_figure(3, 1, width=4.2, height=3.4)
    for d, g in layers.groupby("domain", sort=False):
        (line,) = axes[0][0].plot(g["layer"], g["token0_candidate_share"], marker=".", label=f"{d}: token 0")
        axes[0][0].plot(g["layer"], g["beyond0_candidates_per_window"], ls="--", color=line.get_color(),
                        label=f"{d}: others / window")  # fmt: skip
    axes[0][0].set_xlabel("layer (input residual stream)")
    axes[0][0].set_title("candidate sink tokens (‖x‖ > ratio × median)")
    axes[0][0].legend(fontsize=7)
    d0 = heads["domain"].iloc[0]
    h = heads[heads["domain"] == d0]
    L, H = int(h["layer"].max()) + 1, int(h["head"].max()) + 1
    key0 = h["key0_sink"].astype(str).str.lower().eq("true").to_numpy().reshape(L, H)
    for ax, col, title in (
        (axes[0][1], "sink_share", "any candidate"),
        (axes[0][2], "sink_share_beyond0", "beyond token 0"),
    ):
        im = ax.imshow(
            h[col].to_numpy(float).reshape(L, H), aspect="auto", cmap="viridis", vmin=0, vmax=1, origin="lower"
        )
        yy, xx = np.nonzero(key0)
        ax.scatter(xx, yy, marker="x", s=14, color="red", linewidths=0.8)
        ax.set_title(f"{d0}: windows with a sink, {title}", fontsize=9)
        ax.set_xlabel("head (× = key-0 sink head)")
        ax.set_ylabel("layer")
        fig.colorbar(im, ax=ax, fraction=0.08)
    return save_figure(fig, path)


DYNAMICS = (
    ("attn_sink", "Attn⟨s⟩ of the sink heads", True),
    ("value_norm_ratio", "value norm of token 0 / median", False),
    ("resid_norm_ratio", "residual norm of token 0 / median", True),
)


def sink_dynamics(rows: list[dict], path: Path) -> Path:
    """R25: the sink heads' attention to token 0, the value-norm ratio of token 0 and its residual-norm ratio
    against the training step (first domain), raw and as progress toward their extremes (0 = first checkpoint,
    1 = extreme), with each curve's onset (half of its change) dashed."""
    from attnlab.scan.series import onset

    d0 = rows[0]["domain"]
    rs = [r for r in rows if r["domain"] == d0]
    steps = [int(r["step"]) for r in rs]
    fig, axes = new_figure(4, 1, width=3.4, height=3.0)
    for k, (key, label, rising) in enumerate(DYNAMICS):
        v = np.asarray([float(r[key]) for r in rs])
        (line,) = axes[0][k].plot(steps, v, marker=".", color=f"C{k}")
        axes[0][k].set_title(label, fontsize=9)
        axes[0][k].set_xlabel("step")
        total = (v.max() if rising else v.min()) - v[0]
        axes[0][3].plot(steps, (v - v[0]) / total if total else 0 * v, color=line.get_color(), label=key)
        on = onset(steps, list(v), rising)
        if on is not None:
            for ax in (axes[0][k], axes[0][3]):
                ax.axvline(on, ls="--", lw=0.8, color=line.get_color())
    axes[0][3].set_title(f"{d0}: progress to the extreme", fontsize=9)
    axes[0][3].set_xlabel("step")
    axes[0][3].legend(fontsize=7)
    return save_figure(fig, path)
