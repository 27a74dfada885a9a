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
