"""Verdicts of the real-models study's claims R23 and R24 (spec extreme-tokens §14), from `deploy` and `scan`
run folders (saved files only, never recomputed; no model is loaded).

Each verdict returns (number, met, why) or, for R23, a dict of its parts and `met`.

R24 — sink tokens beyond token 0: the number is the largest share, over the domains, of windows in which the
authors' procedure (`attnlab.scan.sinkproc`) finds a head with a sink on a candidate token other than 0; met when
it is at least `R24_MIN_WINDOWS` (our first guess for "they exist": seen in a quarter of the windows, not once).

R23 — extreme tokens matter in deployment, read from a `deploy quantize` run and a `deploy window` run:

- int8: handling the massive outliers matters. Per domain, ratio_q = PPL(int8 naive) / PPL(int8 with the outlier
  channels excluded from the scale), at the "linear" site (the inputs of the Linear layers, the deployment case;
  the first site of the run if it has no linear site). Met when ratio_q ≥ QUANT_RATIO on every domain.
- sliding window: keeping the sink matters. Per domain, ratio_w = PPL(window W) / PPL(sink+window W) for the
  smallest W of the run. Met when ratio_w ≥ WINDOW_RATIO on every domain.

Both thresholds are our first guesses of "markedly worse" (a 10 % perplexity increase; the authors give no
number). The verdict is met when both parts are. `log_ratio_se` is the standard error of log(ratio) over the windows
(paired: both policies see the same windows).

R25 (a checkpoint series of the toy task) is a bb target: its verdict is in `attnlab/bb/repro/verdicts.py`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from attnlab.errors import InputError
from attnlab.runs import RunDir, read_json

Verdict = tuple[float, bool, str]
R24_MIN_WINDOWS = 0.25


def verdict_R24(run_dir: str | Path) -> Verdict:
    """(largest share of windows with a sink beyond token 0, met, why) from a single-model scan folder."""
    s = read_json(Path(run_dir) / "summary.json", "scan summary")
    procs = s.get("sink_procedure")
    if not procs:
        raise InputError(f"{run_dir} has no sink-procedure results (a scan from before R24, or a series scan)")
    best = max(float(p["windows_with_beyond0_sink"]) for p in procs)
    parts = [
        f"{p['domain']}: a sink beyond token 0 in {p['windows_with_beyond0_sink']:.0%} of windows (layers "
        f"{p['beyond0_sink_layers']}, tokens {p['beyond0_sunk_tokens'] or 'none'}), {p['authors_sink_heads_beyond0']} "
        f"heads do so in half of them; {p['authors_sink_heads']} authors' sink heads vs {p['key0_sink_heads']} "
        f"key-0 sink heads, Jaccard {p['jaccard']:.2f}"
        for p in procs
    ]
    why = f"ratio {procs[0]['ratio']:g}×, threshold {procs[0]['threshold']:g}: " + "; ".join(parts)
    return best, best >= R24_MIN_WINDOWS, why


# --- R23 (deploy runs) --------------------------------------------------------------------------------------------
QUANT_RATIO = 1.1
WINDOW_RATIO = 1.1


def _run_table(run_dir: str | Path, command: str) -> tuple[dict, pd.DataFrame]:
    """(config, perplexity.csv) of a finished `command` run, or a one-line error."""
    from attnlab.deploy.tables import read_table

    run = RunDir(run_dir)
    if run.read_manifest().get("command") != command:
        raise InputError(f"{run_dir} is not a run of `attnlab {command}`")
    if not run.file("perplexity.csv").is_file():
        raise InputError(f"{run_dir} has no perplexity.csv; the run did not finish")
    return run.read_config(), read_table(run.path)


def _ppl(table: pd.DataFrame, domain: str, **where: object) -> float:
    sel = table[table["domain"] == domain]
    for k, v in where.items():
        sel = sel[sel[k].astype(str) == str(v)]
    if sel.empty:
        raise InputError(f"no row for {domain} with {where} in perplexity.csv")
    return float(sel["perplexity"].iloc[0])


def _paired_se(a: np.ndarray, b: np.ndarray) -> float:
    """Standard error of mean(a − b) over windows: of log(PPL_a / PPL_b), paired on the same windows."""
    d = np.asarray(a, dtype=float) - np.asarray(b, dtype=float)
    return float(d.std(ddof=1) / np.sqrt(len(d))) if len(d) > 1 else 0.0


def _quant_windows(run_dir: str | Path, domain: str, site: str, policy: str) -> np.ndarray:
    """[N] per-window NLL of one condition from samples.csv."""
    from attnlab.deploy.tables import read_table

    t = read_table(run_dir, "samples.csv")
    sel = t[(t["domain"] == domain) & (t["site"] == site) & (t["policy"] == policy)].sort_values("window")
    return sel["nll"].to_numpy(dtype=float)


def _window_windows(run_dir: str | Path, domain: str, policy: str) -> np.ndarray:
    """[N] per-window NLL of one window policy from nll/<domain>/<policy>.npy."""
    from attnlab.deploy.tables import slug

    return np.load(Path(run_dir) / "nll" / domain / f"{slug(policy)}.npy").mean(-1)


def quant_part(run_dir: str | Path) -> dict:
    """The int8 half of R23: per-domain perplexities and ratio_q, threshold, met."""
    cfg, t = _run_table(run_dir, "deploy quantize")
    missing = {"naive", "exclude"} - set(cfg["policies"])
    if missing:
        raise InputError(f"{run_dir}: R23 needs the policies naive and exclude; missing {', '.join(sorted(missing))}")
    site = "linear" if "linear" in cfg["sites"] else cfg["sites"][0]
    domains = {}
    for d in cfg["domains"]:
        naive, excl = _ppl(t, d, site=site, policy="naive"), _ppl(t, d, site=site, policy="exclude")
        se = _paired_se(_quant_windows(run_dir, d, site, "naive"), _quant_windows(run_dir, d, site, "exclude"))
        row = {"naive": naive, "exclude": excl, "ratio": naive / excl, "log_ratio_se": se}
        if "none" in cfg["policies"]:
            row["none"] = _ppl(t, d, policy="none")
        if "clip" in cfg["policies"]:
            row["clip"] = _ppl(t, d, site=site, policy="clip")
        domains[d] = row
    met = all(r["ratio"] >= QUANT_RATIO for r in domains.values())
    return {"site": site, "threshold": QUANT_RATIO, "domains": domains, "met": met}


def window_part(run_dir: str | Path) -> dict:
    """The sliding-window half of R23: per-domain perplexities and ratio_w, threshold, met."""
    cfg, t = _run_table(run_dir, "deploy window")
    w = min(cfg["windows"])
    domains = {}
    for d in cfg["domains"]:
        plain, sink = _ppl(t, d, policy=f"window {w}"), _ppl(t, d, policy=f"sink+window {w}")
        se = _paired_se(_window_windows(run_dir, d, f"window {w}"), _window_windows(run_dir, d, f"sink+window {w}"))
        full = _ppl(t, d, policy="full")
        domains[d] = {"full": full, "window": plain, "sink+window": sink, "ratio": plain / sink, "log_ratio_se": se}
    met = all(r["ratio"] >= WINDOW_RATIO for r in domains.values())
    return {"window": w, "tokens": cfg["tokens"], "threshold": WINDOW_RATIO, "domains": domains, "met": met}


def verdict_R23(quant_run_dir: str | Path, window_run_dir: str | Path) -> dict:
    """R23 from a `deploy quantize` and a `deploy window` run: {"quant", "window", "met", "why"} (module
    docstring). "why" is one line with our numbers beside the thresholds."""
    q, w = quant_part(quant_run_dir), window_part(window_run_dir)
    qs = ", ".join(f"{d} {r['naive']:.4g}/{r['exclude']:.4g} = {r['ratio']:.2f}" for d, r in q["domains"].items())
    ws = ", ".join(f"{d} {r['window']:.4g}/{r['sink+window']:.4g} = {r['ratio']:.2f}" for d, r in w["domains"].items())
    why = (
        f"int8 naive/exclude perplexity ({q['site']} site): {qs} "
        f"({'>=' if q['met'] else 'not all >='} {QUANT_RATIO}); window/sink+window perplexity at W = {w['window']}, "
        f"T = {w['tokens']}: {ws} ({'>=' if w['met'] else 'not all >='} {WINDOW_RATIO})"
    )
    return {"quant": q, "window": w, "met": bool(q["met"] and w["met"]), "why": why}


# --- R26 / R27 (secondary sinks, spec extreme-tokens §13.14; issue 41) --------------------------------------------
R26_SHARE = 0.25  # a share of windows above this is a match (the bar)
R27_RHO = 0.3  # a Spearman correlation above this is a match, on each of score and lifetime
SINK_FROM_LAYER = 2  # "M_j ≥ 0.3 in some head of layers ≥ 2"
SEED_R26, SEED_R27 = 26, 27  # the bootstrap generators' seeds (the intervals are reproducible)


def _sink_tables(run_dir: str | Path) -> tuple[dict, pd.DataFrame, pd.DataFrame]:
    """(summary, sinks.csv, sink_levels.csv) of a `scan --stats full` folder, or a one-line error."""
    from attnlab.scan.tables import read_table

    s = read_json(Path(run_dir) / "summary.json", "scan summary")
    sec = s.get("secondary_sinks") or []
    if not any(d.get("computed") for d in sec):
        raise InputError(f"{run_dir} has no secondary sinks (scan it with --stats full)")
    return s, read_table(Path(run_dir) / "sinks.csv"), read_table(Path(run_dir) / "sink_levels.csv")


def _window_flags(summary: dict, levels: pd.DataFrame) -> dict[str, np.ndarray]:
    """domain -> [windows] 1.0 where the window has a sink j ≥ 1 in a head of a layer ≥ SINK_FROM_LAYER."""
    out = {}
    for d in summary["secondary_sinks"]:
        flags = np.zeros(int(d["windows"]))
        if len(levels):
            sel = levels[(levels["domain"] == d["domain"]) & (levels["layer"].astype(int) >= SINK_FROM_LAYER)]
            flags[sel["sample"].astype(int).unique()] = 1.0
        out[d["domain"]] = flags
    return out


def verdict_R26(run_dir: str | Path) -> dict:
    """R26: the share of windows (both domains pooled; each domain too) with a secondary sink, a percentile
    bootstrap interval over windows, the verdict by the interval against R26_SHARE, and the sink tokens."""
    from attnlab.core.intervals import bootstrap_interval, judge
    from attnlab.core.targets import Check

    s, _, levels = _sink_tables(run_dir)
    flags = _window_flags(s, levels)
    rng = np.random.default_rng(SEED_R26)
    pooled = bootstrap_interval(np.concatenate(list(flags.values())).tolist(), rng)
    per = {d: bootstrap_interval(f.tolist(), rng) for d, f in flags.items()}
    verdict = judge([Check("R26_share", ">", R26_SHARE)], {"R26_share": pooled})
    tokens = {d["domain"]: d["top_tokens"] for d in s["secondary_sinks"]}
    why = (
        f"share {pooled.estimate:.2f} [{pooled.low:.2f}, {pooled.high:.2f}] of {pooled.replicates} windows; "
        + "; ".join(f"{d}: {i.estimate:.2f} [{i.low:.2f}, {i.high:.2f}], tokens {tokens[d]}" for d, i in per.items())
    )
    return {"share": pooled, "domains": per, "verdict": verdict, "tokens": tokens, "why": why}


def _cluster_spearman(x: np.ndarray, y: np.ndarray, window: np.ndarray) -> Any:
    """statistic for `bootstrap_interval` over windows: resampled window indices [R, n] -> Spearman ρ of the pooled
    (x, y) pairs of the drawn windows (a window drawn twice counts twice) [R]."""
    from scipy.stats import spearmanr

    members = [np.flatnonzero(window == w) for w in range(int(window.max()) + 1)]

    def statistic(draws: np.ndarray) -> np.ndarray:
        out = np.empty(draws.shape[0])
        for r, row in enumerate(draws):
            idx = np.concatenate([members[int(w)] for w in row])
            xs, ys = x[idx], y[idx]
            # a draw whose norms or values are all equal has no ranking: counted as ρ = 0 (no evidence for the bar)
            out[r] = spearmanr(xs, ys)[0] if np.ptp(xs) > 0 and np.ptp(ys) > 0 else 0.0
        return out

    return statistic


def verdict_R27(run_dir: str | Path, resamples: int = 2000) -> dict:
    """R27: across the secondary sinks (first layer ≥ SINK_FROM_LAYER, so the forming MLP is block first − 1 ≥ 1),
    Spearman ρ between the forming MLP's output norm and (a) the sink's peak score, (b) its lifetime, with
    percentile bootstrap intervals over windows (a window's sinks resampled together), judged against R27_RHO."""
    from attnlab.core.intervals import Interval, bootstrap_interval, judge
    from attnlab.core.targets import Check

    _, sinks, _ = _sink_tables(run_dir)
    sel = sinks[(sinks["first_layer"].astype(int) >= SINK_FROM_LAYER)] if len(sinks) else sinks
    sel = sel[np.isfinite(sel["forming_mlp_norm"].astype(float))] if len(sel) else sel
    checks = [Check("R27_rho_score", ">", R27_RHO), Check("R27_rho_lifetime", ">", R27_RHO)]
    if len(sel) < 3:
        nan = Interval(float("nan"), float("nan"), float("nan"), len(sel), "too few sinks")
        why = f"{len(sel)} secondary sinks in layers ≥ {SINK_FROM_LAYER}: too few for a correlation"
        return {"rho_score": nan, "rho_lifetime": nan, "sinks": len(sel), "verdict": judge(checks, None), "why": why}
    keys = list(zip(sel["domain"], sel["sample"].astype(int)))
    codes = {k: i for i, k in enumerate(dict.fromkeys(keys))}
    window = np.array([codes[k] for k in keys])
    x = sel["forming_mlp_norm"].to_numpy(float)
    out: dict[str, Any] = {"sinks": len(sel), "windows": len(codes)}
    for name, col, seed in (("rho_score", "score", SEED_R27), ("rho_lifetime", "lifetime", SEED_R27 + 1)):
        stat = _cluster_spearman(x, sel[col].to_numpy(float), window)
        ids, rng = np.arange(len(codes), dtype=float).tolist(), np.random.default_rng(seed)
        iv = bootstrap_interval(ids, rng, resamples=resamples, statistic=stat, over="windows (their sinks together)")
        out[name] = iv
    out["verdict"] = judge(checks, {"R27_rho_score": out["rho_score"], "R27_rho_lifetime": out["rho_lifetime"]})
    out["why"] = (f"{len(sel)} sinks in {len(codes)} windows; Spearman(forming MLP norm, score) "
                  f"{out['rho_score'].estimate:.2f} [{out['rho_score'].low:.2f}, {out['rho_score'].high:.2f}], "
                  f"(norm, lifetime) {out['rho_lifetime'].estimate:.2f} [{out['rho_lifetime'].low:.2f}, "
                  f"{out['rho_lifetime'].high:.2f}]")  # fmt: skip
    return out
