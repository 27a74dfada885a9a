"""Our number for each measured reproduction target of consensus.

Measures are computed from the study runs of `runs.py`, read back from their folders: each takes `runs`
(experiment name -> `attnlab.reproduce.execute.Outcome`) and returns named numbers, the keys its target's
`Check`s compare. The direct computations (`compute(seed, size)`: library functions with no study command) are in
`checks_theory.py` and `checks_llama.py`; the rows are in `targets.py`, the claims' verdicts in `verdicts.py`."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np

from attnlab.core.targets import claim_numbers, folder_of, model_groups, quiet_timing, run_of, runs_of


def _states(res: Any) -> np.ndarray:
    return np.load(Path(res.path) / "states.npy")  # [batch, records, token, dim]


def c_r1a(runs: dict) -> dict:
    drifts = []
    for res in runs_of(runs, "cons_causal").values():
        st = _states(res)
        drifts.append(float(np.abs(st[:, :, 0, :] - st[:, :1, 0, :]).max()))
    return {"first_token_drift": max(drifts)}  # no run: ValueError, so never a vacuous "met"


def c_r1b(runs: dict) -> dict:
    """R1b: the share of starts with E_first < 1e-6 at t = 60 in each run (schedule, P scale, d), the smallest of
    them, the starts per run and the number of schedules and dimensions the profile ran."""
    causal = list(runs_of(runs, "cons_causal").values())
    rows = [(r.config.schedule, r.config.scale, r.config.d, r.summary["share_E_first_below_1e-6"]) for r in causal]
    out = {"min_share_converged": min(x for *_, x in rows), "starts": causal[0].config.batch,
           "schedules": len({s for s, *_ in rows}), "dims": len({d for _, _, d, _ in rows})}  # fmt: skip
    for s, scale, d, x in rows:  # the smallest share per schedule and P scale (over d) and per d (over the rest)
        out[f"share {s} scale {scale:g}"] = min(x, out.get(f"share {s} scale {scale:g}", 1.0))
        out[f"share d={d}"] = min(x, out.get(f"share d={d}", 1.0))
    return out


def c_r2b(runs: dict) -> dict:
    return dict(runs["cons_late"].numbers)


def c_r2c(runs: dict) -> dict:
    """R2c: each case's worst relative error of the tail slope, the worst of them, and per start the worst over the
    cases (`worst_rel_err start<i>`, absent in a run made before they were saved)."""
    numbers = runs["cons_tails"].numbers
    out = {k: v for k, v in numbers.items() if k.endswith("_rel_err")}
    return out | {"worst_rel_err": max(out.values())} | {k: v for k, v in numbers.items() if " start" in k}


def c_r3(runs: dict) -> dict:
    full = runs_of(runs, "cons_full")
    shares = {k: float((np.load(Path(r.path) / "E_pair.npy")[:, -1] < 1e-6).mean()) for k, r in full.items()}
    return {"min_share_E_pair_below_1e-6": min(shares.values()), "starts": full["constant"].config.batch}


def _counts_at(res: Any, times: tuple[float, ...]) -> list[float]:
    import torch

    from attnlab.consensus.measures import cluster_count

    st, ts = _states(res), np.load(Path(res.path) / "t_states.npy")
    out = []
    for t in times:
        i = int(np.argmin(np.abs(ts - t)))
        out.append(float(cluster_count(torch.as_tensor(st[:, i])).double().mean()))
    return out


def c_r7a(runs: dict) -> dict:
    import torch

    from attnlab.consensus.measures import cluster_count

    shares = []
    for key in ("beta0.5", "beta1"):
        st = _states(run_of(runs, "cons_cluster", key))
        shares.append(float((cluster_count(torch.as_tensor(st[:, -1])) == 1).double().mean()))
    return {"min_share_one_cluster": min(shares)}


def c_r7b(runs: dict) -> dict:
    c9 = _counts_at(run_of(runs, "cons_cluster", "beta9"), (30.0, 100.0, 200.0))
    c4 = _counts_at(run_of(runs, "cons_cluster", "beta4"), (30.0,))
    return {
        "count_beta9_t30": c9[0],
        "count_beta9_t100": c9[1],
        "count_beta9_t200": c9[2],
        "min_count_beta9": min(c9),
        "max_increase_beta9": max(c9[1] - c9[0], c9[2] - c9[1]),
        "count_beta4_t30": c4[0],
    }


def c_r5a(runs: dict) -> dict:
    return dict(runs["cons_rho"].numbers)


def c_r6a(runs: dict) -> dict:
    m = run_of(runs, "cons_phase").summary
    gaps = np.abs(np.asarray(m["relative_gap_t50_vs_t_eq"], dtype=float))
    return {
        "max_abs_rel_gap": float(np.nanmax(gaps)) if np.isfinite(gaps).any() else math.nan,
        "median_abs_rel_gap": m["median_abs_relative_gap"],
        "betas_never_half": m["betas_never_half_clustered"],
    }


def c_r12(runs: dict) -> dict:
    """R12: share of starts reaching consensus with Q = K = 0, V = I and V = J."""
    from attnlab.consensus.repro.verdicts import verdict_R12

    folder = folder_of(runs["cons_counter"])
    out = claim_numbers(verdict_R12, folder, "share_rotation")
    ident = json.loads((folder / "identity" / "metrics.json").read_text())["share_E_first_below_1e-6"]
    return out | {"share_identity": float(ident)}


def c_r13(runs: dict) -> dict:
    """R13: largest per-layer relative error of the sphere idealisation; whether the consensus conclusion holds."""
    from attnlab.consensus.repro.verdicts import verdict_R13

    folder = folder_of(runs["cons_norm"])
    out = claim_numbers(verdict_R13, folder, "max_layer_rel_error")
    m = json.loads((folder / "metrics.json").read_text())
    return out | {"same_conclusion": float(bool(m["same_conclusion"])), "passes": m["passes"]}


def c_r14(runs: dict) -> dict:
    """R14: after the last pass, the smallest over groups of the mean share of positions decoding to the prompt's
    most common top-1 token, and each group's share."""
    from attnlab.consensus.repro.verdicts import verdict_R14

    folder = folder_of(runs["cons_decode"])
    out = claim_numbers(verdict_R14, folder, "min_share_final")
    groups = json.loads((folder / "decode.json").read_text())["groups"]
    out |= {f"share {g}": v["final"]["share_mean"] for g, v in groups.items()}
    return out | {"passes": max(v["passes"][-1] for v in groups.values())}


def c_r9(runs: dict) -> dict:
    """R9: per MLP setting, the fall of mean log10 E_first from pass 1 to the last periodic pass, its CI low end and
    Spearman; the smallest fall and CI end and the largest Spearman over MLP on and off; where the run saved its
    curves, their 95 % percentile bootstrap over prompts (`_r9_bootstrap`: `_low`, `_high`, `R9_prompts`)."""
    g = model_groups(runs, "cons_rst")
    rows = {mlp: g[f"periodic, MLP {mlp}"] for mlp in ("on", "off")}
    out = {f"fall MLP {k}": r["fall_pass1_to_last"] for k, r in rows.items()}
    out |= {f"spearman MLP {k}": r["spearman_pass_vs_mean_log10_E"] for k, r in rows.items()}
    out |= {
        "min_fall_decades": min(r["fall_pass1_to_last"] for r in rows.values()),
        "min_fall_ci_low": min(r["fall_ci95"][0] for r in rows.values()),
        "max_spearman": max(r["spearman_pass_vs_mean_log10_E"] for r in rows.values()),
    }
    curves = Path(run_of(runs, "cons_rst").path) / "curves.npz"
    if not curves.is_file():
        return out
    with np.load(curves) as z:
        E = {mlp: z[f"periodic, MLP {mlp}|E_first"] for mlp in ("on", "off")}
    passes = len(rows["on"]["mean_log10_E_pass_end"])
    return out | _r9_bootstrap(E, (E["on"].shape[1] - 1) // passes)


def _r9_bootstrap(E: dict[str, np.ndarray], L: int, resamples: int = 2000, seed: int = 0) -> dict:
    """R9's intervals: from E_first `[prompt, steps+1]` per MLP setting (the same prompts in each), resample the
    prompts (one draw of indices for both settings, kept paired) and take, per resample, the smallest fall of mean
    log10 E_first (pass 1 to the last pass, as `modelrun.fall_stats`) and the largest Spearman(pass, mean log10
    E_first) over the settings; the 2.5/97.5 percentiles of each. Keys `<number>_low`, `<number>_high`."""
    from attnlab.consensus.stats import spearman

    logE = {k: np.log10(np.maximum(e[:, np.arange(L, e.shape[1], L)], 1e-17)) for k, e in E.items()}  # [prompt, pass]
    n = next(iter(logE.values())).shape[0]
    idx = np.random.default_rng(seed).integers(0, n, size=(resamples, n))
    falls = np.stack([(v[:, 0] - v[:, -1])[idx].mean(1) for v in logE.values()]).min(0)  # [resamples]
    passes = np.arange(next(iter(logE.values())).shape[1])
    rho = np.array([max(spearman(passes, v[i].mean(0)) for v in logE.values()) for i in idx])
    (f_lo, f_hi), (r_lo, r_hi) = np.percentile(falls, [2.5, 97.5]), np.percentile(rho, [2.5, 97.5])
    return {"min_fall_decades_low": float(f_lo), "min_fall_decades_high": float(f_hi),
            "max_spearman_low": float(r_lo), "max_spearman_high": float(r_hi), "R9_prompts": float(n)}  # fmt: skip


def c_r10(runs: dict) -> dict:
    """R10: at the final depth, mean log10 E_first per schedule with its bootstrap CI; per MLP setting the gap of
    the means of consecutive schedules, the gap between their CIs (lower end of the later minus upper end of the
    earlier: disjoint and ordered when > 0, the spec's reading) and the span (upper end of the later minus lower
    end of the earlier: disjoint in the reverse order when < 0); and, where the run saved its curves, the mean gap's
    paired percentile bootstrap over the prompts (`_paired_low`, `_paired_high`; every schedule runs the same
    prompts), shown beside the spec's reading."""
    g = model_groups(runs, "cons_rst")
    out: dict[str, float] = {}
    for mlp in ("off", "on"):
        band = {s: g[f"{s}, MLP {mlp}"]["final_band_log10"] for s in ("constant", "periodic", "random")}
        for a, b in (("constant", "periodic"), ("periodic", "random")):
            out[f"ci_gap_{mlp}_{a}_{b}"] = band[b]["lo_log10"] - band[a]["hi_log10"]
            out[f"ci_span_{mlp}_{a}_{b}"] = band[b]["hi_log10"] - band[a]["lo_log10"]
            out[f"mean_gap_{mlp}_{a}_{b}"] = band[b]["mean_log10"] - band[a]["mean_log10"]
    curves = Path(run_of(runs, "cons_rst").path) / "curves.npz"
    return out | (_r10_gap_intervals(curves) if curves.is_file() else {}) | _roughness_slopes(runs, g)


def _r10_gap_intervals(curves: Path) -> dict:
    """The paired bootstrap (4000 resamples, seed 0) over prompts of each mean gap of the final log10 E_first
    (floored at 1e-17, as the CIs): per prompt, the later schedule's minus the earlier's."""
    from attnlab.core.intervals import bootstrap_interval

    out: dict[str, float] = {}
    with np.load(curves) as z:
        for mlp in ("off", "on"):
            y = {s: np.log10(np.maximum(z[f"{s}, MLP {mlp}|E_first"][:, -1], 1e-17)) for s in
                 ("constant", "periodic", "random")}  # fmt: skip
            for a, b in (("constant", "periodic"), ("periodic", "random")):
                iv = bootstrap_interval(y[b] - y[a], np.random.default_rng(0), over="prompts")
                out |= {f"mean_gap_{mlp}_{a}_{b}_paired_low": iv.low, f"mean_gap_{mlp}_{a}_{b}_paired_high": iv.high,
                        "R10_prompts": float(iv.replicates)}  # fmt: skip
    return out


def _roughness_slopes(runs: dict, groups: dict) -> dict:
    """R10's "slope vs roughness reported": per MLP setting, the slope of the final log10 E_first (per prompt,
    floored at 1e-17 as the CIs) on the schedules' attention roughness (`realmodel.stack_roughness`), in decades per
    unit of roughness, with its 95 % bootstrap interval over prompts (`stats.roughness_slope`); nothing for a run
    made before the runs recorded roughness."""
    from attnlab.consensus.stats import roughness_slope

    schedules = ("constant", "periodic", "random")
    if any("roughness_attn" not in groups[f"{s}, MLP off"] for s in schedules):
        return {}
    curves = np.load(Path(run_of(runs, "cons_rst").path) / "curves.npz")
    rough = np.array([groups[f"{s}, MLP off"]["roughness_attn"] for s in schedules])
    out = {f"roughness {s}": float(x) for s, x in zip(schedules, rough)}
    for mlp in ("off", "on"):
        y = np.stack([np.log10(np.maximum(curves[f"{s}, MLP {mlp}|E_first"][:, -1], 1e-17)) for s in schedules])
        slope, low, high = roughness_slope(y, rough)
        out |= {f"slope_vs_roughness_{mlp}": slope, f"slope_vs_roughness_{mlp}_low": low,
                f"slope_vs_roughness_{mlp}_high": high}  # fmt: skip
    return out


def c_r11(runs: dict) -> dict:
    """R11 (the model version): the context influence C(k) of the periodic, MLP-on group: C(0), whether the peak is
    interior, C(final) over C(peak); and KL_model after one pass (30 layer steps), our layer-by-layer pass against
    the model's own forward (`StackRunner.model_logprobs`, an independent reference: None if the run predates it)."""
    group = model_groups(runs, "cons_depth")["periodic, MLP on"]
    ci = group["context_influence"]
    return {"C0": ci["C0"], "KL_model_30_independent": group.get("KL_model_at_one_pass"),
            "interior_peak": float(ci["interior_peak"]), "C_final_over_peak": ci["C_final"] / ci["C_peak"],
            "k_star_passes": ci["k_star_passes"]}  # fmt: skip


def c_b1(runs: dict) -> dict:
    return dict(runs["cons_bench"].numbers)


def c_b2(runs: dict) -> dict:
    """B2: the phase diagram's compute seconds on two threads (`checks_theory.cons_b2`), the threads and the
    1-minute load average at its start. On a machine that was not quiet (load ≥ 1.5) or on fewer than two threads
    the row is not judged: `NotQuiet` says so with the numbers (the row is then 'not run' with that reason)."""
    n = runs["cons_b2"].numbers
    return quiet_timing({k: n[k] for k in ("phase_seconds", "threads", "load_at_start")}, "phase_seconds")


def c_b4(runs: dict) -> dict:
    """B4: SmolLM2 (full stack) seconds per pass, from the decode run's seconds per group, and the peak RSS of the
    process that ran it."""
    res = run_of(runs, "cons_decode")
    secs = res.summary["seconds_per_group"]
    return {"seconds_per_pass": max(secs.values()) / res.config.passes, "peak_rss_mb": runs["cons_decode"].peak_rss_mb}


def c_r6b(runs: dict) -> dict:
    """R6b: t50 per beta of the Euler and RK4 sweeps (same starts, h = 0.1) and the largest |t50_Euler / t50_RK4 - 1|
    (nan, so missed, when a sweep never reaches half clustering at some beta)."""
    res = {m: run_of(runs, "cons_sweep_integrator", m) for m in ("euler", "rk4")}
    t50 = {m: np.asarray(r.summary["t50"], dtype=float) for m, r in res.items()}
    cfg = res["euler"].config
    betas = np.linspace(cfg.beta_min, cfg.beta_max, cfg.num_betas)
    rel = np.abs(t50["euler"] / t50["rk4"] - 1)
    out = {f"t50 {m} beta={b:g}": float(x) for m in t50 for b, x in zip(betas, t50[m])}
    return out | {"max_rel_diff_t50": float(rel.max()), "starts": cfg.starts}


def c_b3(runs: dict) -> dict:
    """B3 (reported only): the larger sweep's compute seconds (its metrics' wall_seconds) and the whole run's, its
    size, the nominal score work steps x betas x starts x n^2 x d (converged starts retire early, so an upper
    bound), whether every clustered fraction is finite, and t50 against t_eq at this d."""
    res = run_of(runs, "cons_b3")
    cfg, m = res.config, res.summary
    work = round(cfg.t_max / cfg.h) * cfg.num_betas * cfg.starts * cfg.n**2 * cfg.d
    frac = np.load(Path(res.path) / "frac.npy")
    return {"phase_seconds": m["wall_seconds"], "run_seconds": runs["cons_b3"].seconds[""], "d": cfg.d, "n": cfg.n,
            "starts": cfg.starts, "num_betas": cfg.num_betas, "nominal_score_gmac": work / 1e9,
            "frac_finite": float(np.isfinite(frac).all()), "median_abs_rel_gap_t50_t_eq": m["median_abs_relative_gap"],
            "betas_never_half": m["betas_never_half_clustered"]}  # fmt: skip
