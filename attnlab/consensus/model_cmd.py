"""The `model` command and the demo's SmolLM2 part: iterate a real decoder stack and summarise E per depth.

Outputs: `curves.npz` (per group: E_first etc. `[prompt, layer steps+1]`), `depth.npz`, `prompts.npy`,
`metrics.json` (R9/R10/R11-style summaries), `timeseries.csv`, figures `E_vs_depth.png`, `depth_view.png`,
`report.html`. Differences from RST's models (stated with every result): RMSNorm, RoPE, grouped KV heads, SwiGLU
MLPs and a massive activation at position 0 (an attention sink).
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np
import torch

from attnlab.consensus import plots
from attnlab.consensus.errors import ConsensusInputError, check_name, check_size
from attnlab.consensus.realmodel import VARIANTS, StackRunner, control_prompts, iterate_stack, norm_gain_cv
from attnlab.consensus.stats import log_band, spearman, timeseries_rows
from attnlab.report import Report
from attnlab.runs import RunDir, default_run_dir

DOMAINS = ("prose", "code", "random")
CAVEAT = ("SmolLM2 differs from RST's GPT-2/GPT-Neo: RMSNorm instead of LayerNorm, RoPE, grouped KV heads "
          "(9 query / 3 KV), SwiGLU MLPs, and a massive activation at position 0 that makes it an attention sink.")


def load_prompts(tokenizer, domains: list[str], per_domain: int, seq_len: int, seed: int) -> tuple[torch.Tensor, list[int]]:
    """`[domains*per_domain, seq_len]` ids from the shared text module, and the group sizes."""
    from attnlab.hf.texts import domain_windows

    blocks = [domain_windows(tokenizer, dom, per_domain, seq_len, seed) for dom in domains]
    return torch.cat(blocks), [b.shape[0] for b in blocks]


def _fall_stats(E: np.ndarray, L: int) -> dict:
    """From E `[prompt, steps+1]`: mean log10 E at pass ends, its fall from pass 1 to the last pass with a
    bootstrap CI, and Spearman(pass, mean log10 E)."""
    ends = np.arange(L, E.shape[1], L)
    logE = np.log10(np.maximum(E[:, ends], 1e-17))
    means = logE.mean(0)
    fall = logE[:, 0] - logE[:, -1]
    rng = np.random.default_rng(0)
    boots = [fall[rng.integers(0, len(fall), len(fall))].mean() for _ in range(2000)]
    return {"mean_log10_E_pass_end": means, "fall_pass1_to_last": float(fall.mean()),
            "fall_ci95": [float(np.percentile(boots, 2.5)), float(np.percentile(boots, 97.5))],
            "spearman_pass_vs_mean_log10_E": spearman(np.arange(len(means)), means) if len(means) > 2 else None,
            "final_band_log10": {k: float(v[0]) for k, v in log_band(E[:, -1:]).items() if k != "median"}}


def run_model(loaded, out: Path, variants: list[str], mlp_settings: list[bool], passes: int, domains: list[str],
              per_domain: int, seq_len: int, seed: int, layer: int = 20, feedback: bool = False,
              depth_view: bool = True, progress: bool = True) -> tuple[RunDir, dict, Report]:
    """Run every (variant, MLP) group on the same prompts and write the run folder."""
    for v in variants:
        check_name(v, VARIANTS, "model variant")
    for dom in domains:
        check_name(dom, DOMAINS, "domain")
    check_size(passes, 1, "passes")
    check_size(seq_len, 2, "seq_len (T)")
    check_size(per_domain, 1, "prompts per domain")
    runner = StackRunner(loaded.model)
    if "constant" in variants and not 0 <= layer < runner.n_layers:
        raise ConsensusInputError(f"layer {layer} outside 0..{runner.n_layers - 1}")
    run = RunDir(out, "consensus")
    cfg = {"model": loaded.name, "path": loaded.path, "variants": variants, "mlp": mlp_settings, "passes": passes,
           "domains": domains, "prompts_per_domain": per_domain, "seq_len": seq_len, "layer": layer,
           "feedback_final_norm": feedback, "depth_view": depth_view, "seed": seed, "dtype": "float32",
           "measures": "float64; E_first on the final-normed state (primary), position 0 as reference"}
    run.write_config(cfg)
    ids, groups = load_prompts(loaded.tokenizer, domains, per_domain, seq_len, seed)
    np.save(run.path / "prompts.npy", ids.numpy())
    L = runner.n_layers
    curves, depth, summary, timings = {}, {}, {}, {}
    for variant in variants:
        for mlp in mlp_settings:
            name = f"{variant}, MLP {'on' if mlp else 'off'}"
            ctrl = control_prompts(ids, groups) if (depth_view and variant == "periodic" and mlp) else None
            t0 = time.perf_counter()
            res = iterate_stack(runner, ids, variant, passes, mlp, layer, seed, feedback, depth_view, ctrl, progress)
            timings[name] = round(time.perf_counter() - t0, 2)
            curves[name] = res.curves
            depth[name] = res.depth
            st = _fall_stats(res.curves["E_first"], L)
            for key in ("E_first_raw", "E_pair"):
                st[f"{key}_fall_pass1_to_last"] = _fall_stats(res.curves[key], L)["fall_pass1_to_last"]
            st["res_norm_final_mean"] = float(res.curves["res_norm"][:, -1].mean())
            if res.depth:
                st["KL_model_at_one_pass"] = float(res.depth["KL_model"][:, list(res.grid).index(L)].mean()) \
                    if L in res.grid else None
                if "C(k)" in res.depth:
                    C = res.depth["C(k)"].mean(0)
                    kp = int(np.argmax(C))
                    st["context_influence"] = {"C0": float(C[0]), "k_star_layers": int(res.grid[kp]),
                                               "k_star_passes": float(res.grid[kp] / L), "C_peak": float(C[kp]),
                                               "C_final": float(C[-1]),
                                               "interior_peak": bool(0 < kp < len(C) - 1 and C[-1] <= 0.5 * C[kp])}
            summary[name] = st
    grid = res.grid
    np.savez(run.path / "curves.npz", **{f"{g}|{k}": v for g, c in curves.items() for k, v in c.items()})
    if depth_view:
        np.savez(run.path / "depth.npz", grid=grid, **{f"{g}|{k}": v for g, c in depth.items() for k, v in c.items()})
    steps = np.arange(passes * L + 1)
    metrics = {"groups": summary, "seconds_per_group": timings, "norm_gain_cv_per_layer": norm_gain_cv(runner),
               "E_floor_float32": float(np.finfo(np.float32).eps),
               "below_float32_floor": {g: int((c["E_first"] < np.finfo(np.float32).eps).sum())
                                       for g, c in curves.items()},
               "caveat": CAVEAT}
    run.write_json("metrics.json", metrics)
    run.write_csv("timeseries.csv", timeseries_rows(steps, {g: c["E_first"] for g, c in curves.items()}, "E_first",
                                                    every=max(1, len(steps) // 300)))
    run.write_manifest(seed, command="consensus model")
    marks = np.arange(L, passes * L + 1, L) / L
    title = f"{loaded.name}: {per_domain} prompts x {', '.join(domains)}, T={seq_len}, {passes} passes"
    fig1 = plots.plot_E_curves(run.figure_path("E_vs_depth"), steps / L, {g: c["E_first"] for g, c in curves.items()},
                               ylabel="E_first (final-normed)", xlabel="depth (passes of 30 layers)", title=title,
                               loglog=True, marks=marks if passes <= 30 else None, floor=1e-9)
    rep = Report(f"Consensus: iterated {loaded.name}")
    rep.paragraph(CAVEAT)
    rep.figure(fig1, "E_first of the final-normed state per layer step (median over prompts; band: 95% bootstrap "
                     "CI of mean log10 E); right: log-log")
    fig2 = None
    if depth_view:
        key = next((g for g in depth if "C(k)" in depth[g]), next(iter(depth)))
        dv = depth[key]
        fig2 = plots.plot_depth_view(run.figure_path("depth_view"), grid / L, dv,
                                     k_star=summary[key].get("context_influence", {}).get("k_star_passes"),
                                     title=key)
        rep.figure(fig2, f"Depth view ({key}): KL(p_ref || p_k), top-1 agreement, entropy and context influence C(k)")
    rep.table([{"group": g, "fall of mean log10 E_first (pass 1 -> last)": s["fall_pass1_to_last"],
                "CI95": str([round(x, 3) for x in s["fall_ci95"]]),
                "Spearman": s["spearman_pass_vs_mean_log10_E"], "seconds": timings[g]} for g, s in summary.items()],
              caption="E_first falls with depth")
    rep.paragraph(f"run folder: {run.path}")
    rep.write(run.path / "report.html")
    return run, metrics, rep


def run_model_command(args: argparse.Namespace) -> int:
    """CLI entry for `attnlab consensus model`."""
    from attnlab.hf.loader import load_causal_lm

    torch.set_num_threads(args.threads)
    variants = args.schedule or ["periodic"]
    mlp = [True, False] if args.both_mlp else [not args.no_mlp]
    domains = [d.strip() for d in args.domains.split(",") if d.strip()]
    for v in variants:
        check_name(v, VARIANTS, "schedule")
    loaded = load_causal_lm(args.model, cache_dir=args.cache_dir)
    run, metrics, _ = run_model(loaded, args.out or default_run_dir("consensus"), variants, mlp, args.passes,
                                domains, args.prompts, args.seq_len, args.seed, args.layer,
                                args.feedback_final_norm, not args.no_depth_view)
    for g, s in metrics["groups"].items():
        print(f"{g}: mean log10 E_first fell by {s['fall_pass1_to_last']:.2f} (CI {s['fall_ci95'][0]:.2f}.."
              f"{s['fall_ci95'][1]:.2f}) from pass 1 to {args.passes}")
    print(f"run folder: {run.path}")
    return 0


def demo_model(out: Path, seed: int) -> Report:
    """Short SmolLM2 run for the demo: periodic, MLP on and off, 2 prompts per domain, T = 12, 2 passes."""
    from attnlab.hf.loader import load_causal_lm

    loaded = load_causal_lm("smollm2")
    _, _, rep = run_model(loaded, out, ["periodic"], [True, False], 2, list(DOMAINS), 2, 12, seed, progress=False)
    return rep
