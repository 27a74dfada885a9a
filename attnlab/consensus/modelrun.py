"""The computation of `attnlab consensus model`: prompts, one `iterate_stack` per (schedule, MLP) group, the
per-group statistics and the saved arrays (spec section 8).

Per group, E `[prompt, passes*L+1]` is summarised at pass ends: mean log10 E, its fall from pass 1 to the last
pass with a 2,000-resample bootstrap CI, Spearman(pass, mean log10 E); with the depth view, KL to the one-pass
output and the context influence C(k) (its peak k* and whether it is interior).
Per group, R14: every position decoded through the final norm and head at every pass end (`decode.npz`, `[prompt,
passes+1, T]` token ids) and, in `decode.json`, per pass the fraction of a prompt's positions whose top-1 token is
its most common one (mean, min over prompts; also over positions >= 1, without the sink) and the distinct tokens.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np
import torch
from torch import nn

from attnlab.consensus.arrays import save_npz
from attnlab.consensus.config import ModelConfig
from attnlab.consensus.realmodel import (
    StackRun,
    StackRunner,
    control_prompts,
    iterate_stack,
    norm_gain_cv,
    stack_roughness,
    top1_stats,
)
from attnlab.consensus.stats import log_band, spearman, timeseries_rows
from attnlab.errors import InputError
from attnlab.runs import RunDir

CAVEAT = (
    "SmolLM2 differs from RST's GPT-2/GPT-Neo: RMSNorm instead of LayerNorm, RoPE, grouped KV heads "
    "(9 query / 3 KV), SwiGLU MLPs, and a massive activation at position 0 that makes it an attention sink."
)
MEASURES_NOTE = "float64; E_first on the final-normed state (primary), position 0 as reference"


@dataclass
class GroupResults:
    """Per group name ("periodic, MLP on" ...): curves and depth series (`[prompt, *]`), summary and seconds."""

    curves: dict[str, dict[str, np.ndarray]] = field(default_factory=dict)
    depth: dict[str, dict[str, np.ndarray]] = field(default_factory=dict)
    summary: dict[str, dict] = field(default_factory=dict)
    timings: dict[str, float] = field(default_factory=dict)
    top1: dict[str, np.ndarray] = field(default_factory=dict)  # decoded ids [prompt, passes+1, T] per group
    grid: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=int))


def runner_for(model: nn.Module, cfg: ModelConfig) -> StackRunner:
    """Handles on the loaded model's stack; refuses a constant-schedule layer outside the stack."""
    runner = StackRunner(model)
    if "constant" in cfg.schedules and not 0 <= cfg.layer < runner.n_layers:
        raise InputError(f"layer {cfg.layer} outside 0..{runner.n_layers - 1}")
    return runner


def load_prompts(tokenizer, cfg: ModelConfig) -> tuple[torch.Tensor, list[int]]:
    """`[domains*prompts, seq_len]` ids from the shared text module, and the group sizes."""
    from attnlab.hf.texts import domain_windows

    blocks: list[torch.Tensor] = [
        domain_windows(tokenizer, dom, cfg.prompts, cfg.seq_len, cfg.seed) for dom in cfg.domains
    ]
    return torch.cat(blocks), [b.shape[0] for b in blocks]


def fall_stats(E: np.ndarray, L: int) -> dict:
    """From E `[prompt, steps+1]`: mean log10 E at pass ends, its fall from pass 1 to the last pass with a
    bootstrap CI, and Spearman(pass, mean log10 E)."""
    ends = np.arange(L, E.shape[1], L)
    logE = np.log10(np.maximum(E[:, ends], 1e-17))
    means = logE.mean(0)
    fall = logE[:, 0] - logE[:, -1]
    rng = np.random.default_rng(0)
    boots = [fall[rng.integers(0, len(fall), len(fall))].mean() for _ in range(2000)]
    return {
        "mean_log10_E_pass_end": means,
        "fall_pass1_to_last": float(fall.mean()),
        "fall_ci95": [float(np.percentile(boots, 2.5)), float(np.percentile(boots, 97.5))],
        "spearman_pass_vs_mean_log10_E": spearman(np.arange(len(means)), means) if len(means) > 2 else None,
        "final_band_log10": {k: float(v[0]) for k, v in log_band(E[:, -1:]).items() if k != "median"},
    }


def group_summary(res: StackRun, L: int) -> dict:
    """`fall_stats` of E_first plus the falls of E_first_raw and E_pair, the final residual norm and, with the
    depth view, KL at one pass and the context-influence peak."""
    st = fall_stats(res.curves["E_first"], L)
    for key in ("E_first_raw", "E_pair"):
        st[f"{key}_fall_pass1_to_last"] = fall_stats(res.curves[key], L)["fall_pass1_to_last"]
    st["res_norm_final_mean"] = float(res.curves["res_norm"][:, -1].mean())
    if res.depth:
        grid = list(res.grid)
        st["KL_model_at_one_pass"] = float(res.depth["KL_model"][:, grid.index(L)].mean()) if L in grid else None
        if "C(k)" in res.depth:
            C = res.depth["C(k)"].mean(0)
            kp = int(np.argmax(C))
            st["context_influence"] = {
                "C0": float(C[0]),
                "k_star_layers": int(res.grid[kp]),
                "k_star_passes": float(res.grid[kp] / L),
                "C_peak": float(C[kp]),
                "C_final": float(C[-1]),
                "interior_peak": bool(0 < kp < len(C) - 1 and C[-1] <= 0.5 * C[kp]),
            }
    return st


def iterate_groups(
    runner: StackRunner, ids: torch.Tensor, groups: list[int], cfg: ModelConfig, progress: bool = True
) -> GroupResults:
    """Run every (schedule, MLP) group on `ids` `[prompt, T]`; controls (C(k)) only for periodic with MLPs."""
    out = GroupResults()
    for variant in cfg.schedules:
        rough = stack_roughness(runner, variant, cfg.layer, cfg.seed)  # R10's slope against roughness
        for mlp in cfg.mlp:
            name = f"{variant}, MLP {'on' if mlp else 'off'}"
            ctrl = control_prompts(ids, groups) if (cfg.depth_view and variant == "periodic" and mlp) else None
            t0 = time.perf_counter()
            res = iterate_stack(
                runner,
                ids,
                variant,
                cfg.passes,
                mlp,
                cfg.layer,
                cfg.seed,
                cfg.feedback_final_norm,
                cfg.depth_view,
                ctrl,
                progress,
                decode=True,
            )
            out.timings[name] = round(time.perf_counter() - t0, 2)
            out.curves[name], out.depth[name] = res.curves, res.depth
            out.summary[name] = group_summary(res, runner.n_layers) | rough
            if res.top1 is not None:
                out.top1[name] = res.top1
            out.grid = res.grid
    return out


def model_metrics(runner: StackRunner, res: GroupResults) -> dict:
    """`metrics.json` of a model run: group summaries, timings, norm-gain CV per layer, float32-floor counts."""
    eps = float(np.finfo(np.float32).eps)
    return {
        "groups": res.summary,
        "seconds_per_group": res.timings,
        "norm_gain_cv_per_layer": norm_gain_cv(runner),
        "E_floor_float32": eps,
        "below_float32_floor": {g: int((c["E_first"] < eps).sum()) for g, c in res.curves.items()},
        "caveat": CAVEAT,
    }


def save_model(run: RunDir, cfg: ModelConfig, L: int, res: GroupResults, metrics: dict) -> list[dict]:
    """Write `curves.npz`, `depth.npz`, `metrics.json` and `timeseries.csv`; returns the time-series rows."""
    save_npz(run.file("curves.npz"), **{f"{g}|{k}": v for g, c in res.curves.items() for k, v in c.items()})
    if cfg.depth_view:
        save_npz(
            run.file("depth.npz"), grid=res.grid, **{f"{g}|{k}": v for g, c in res.depth.items() for k, v in c.items()}
        )
    run.write_json("metrics.json", metrics)
    steps = np.arange(cfg.passes * L + 1)
    rows = timeseries_rows(
        steps, {g: c["E_first"] for g, c in res.curves.items()}, "E_first", every=max(1, len(steps) // 300)
    )
    run.write_csv("timeseries.csv", rows)
    return rows


def decode_summary(top1: np.ndarray, token_text: dict[int, str]) -> dict:
    """R14 summary of one group's decoded ids `[prompt, passes+1, T]`: per pass (0 = embeddings) the mean and
    minimum over prompts of the share of positions holding the prompt's most common top-1 token, the same over
    positions >= 1, the mean number of distinct tokens; at the last pass the most common of the prompts' modes."""
    st, no_sink = top1_stats(top1), top1_stats(top1[..., 1:])
    modes = st["mode"][:, -1]
    vals, counts = np.unique(modes, return_counts=True)
    top = int(vals[int(np.argmax(counts))])
    return {
        "passes": list(range(top1.shape[1])),
        "share_mean": st["share"].mean(0).tolist(),
        "share_min": st["share"].min(0).tolist(),
        "share_no_sink_mean": no_sink["share"].mean(0).tolist(),
        "distinct_mean": st["distinct"].mean(0).tolist(),
        "final": {
            "share_mean": float(st["share"][:, -1].mean()),
            "share_min": float(st["share"][:, -1].min()),
            "share_no_sink_mean": float(no_sink["share"][:, -1].mean()),
            "distinct_mean": float(st["distinct"][:, -1].mean()),
            "mode_token_id": top,
            "mode_token_text": token_text.get(top, str(top)),
            "prompts_with_that_mode": int(counts.max()),
            "prompt_modes": [token_text.get(int(m), str(int(m))) for m in modes],
        },
        "positions": int(top1.shape[2]),
        "prompts": int(top1.shape[0]),
    }


def save_decode(run: RunDir, res: GroupResults, tokenizer) -> dict:
    """Write `decode.npz` (`"<group>"`: ids `[prompt, passes+1, T]`) and `decode.json` ({group: `decode_summary`})
    for R14; `tokenizer` turns the modes into text. Returns the summaries."""
    if not res.top1:
        return {}
    save_npz(run.file("decode.npz"), **res.top1)
    ids = sorted({int(i) for t in res.top1.values() for i in np.unique(t[:, -1])})
    text = {i: tokenizer.decode([i]) for i in ids} if tokenizer is not None else {}
    summary = {g: decode_summary(t, text) for g, t in res.top1.items()}
    run.write_json("decode.json", {"groups": summary, "note": DECODE_NOTE})
    return summary


DECODE_NOTE = (
    "R14: top-1 token of every position, argmax of the LM head on the final-normed state, at every pass end (pass 0: "
    "the embeddings); share = fraction of a prompt's positions holding its most common top-1 token"
)
