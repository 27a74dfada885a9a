"""Our number for each measured reproduction target of real models (scan, ablate, deploy).

Measures are computed from the study runs of `runs.py`, read back from their folders: each takes `runs`
(experiment name -> `attnlab.reproduce.execute.Outcome`) and returns named numbers, the keys its target's
`Check`s compare. The direct computations (the SmolLM2 probe, R15) are in `checks_models.py`; the rows are in
`targets.py`, the claims' verdicts in `verdicts.py`."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from attnlab.core.targets import claim_numbers, folder_of, run_of


def r16(runs: dict) -> dict:
    probe = runs["real_probe"].numbers
    ppl = {d["domain"]: d for d in run_of(runs, "real_scan").summary["domains"]}
    windows = run_of(runs, "real_scan").config.samples
    return {
        "greedy_is_paris": float(probe["greedy"] == " Paris"),
        "cached_reload_s": probe["reload_seconds"],
        "code_minus_prose_perplexity": ppl["code"]["perplexity"] - ppl["prose"]["perplexity"],
        "windows_per_domain": windows,
    }


def _traces(runs: dict) -> dict:
    from attnlab.tracing.format import Trace

    folder = Path(run_of(runs, "real_scan").path) / "traces"
    return {d: Trace.load(folder / d) for d in ("prose", "code")}


def r17(runs: dict) -> dict:
    """Spec §10.6 facts from the scan's saved traces (residual index l + 1 = output of block l)."""
    tr, probe = _traces(runs), runs["real_probe"].numbers
    s = {d: t.sink_score() for d, t in tr.items()}
    both = (s["prose"] > 0.3) & (s["code"] > 0.3)
    vr = [float(np.median(np.median(t.value_norm_ratio()[12:], axis=1))) for t in tr.values()]
    at = [(int(t.max_pos[12]), int(t.max_dim[12])) == (0, 507) for t in tr.values()]
    return {
        "layer11_max_at_0_507": float(all(at)),
        "layer11_max_abs_min": min(float(t.max_abs[12]) for t in tr.values()),
        "layer11_max_abs_max": max(float(t.max_abs[12]) for t in tr.values()),
        "layer11_over_layer10_max": min(float(t.max_abs[12] / t.max_abs[11]) for t in tr.values()),
        "layer11_residual_ratio": min(float(t.resid_norm_ratio()[12]) for t in tr.values()),
        "median_value_ratio_min": min(vr),
        "median_value_ratio_max": max(vr),
        "sink_heads_share_layers12_29": float(both[12:].mean()),
        "sink_heads_layers0_1": float(sum(int((s[d][:2] > 0.3).sum()) for d in s)),
        "dim507_changes_top1": float(probe["greedy_dim507_zeroed"] != probe["greedy"]),
    }


def r_r23(runs: dict) -> dict:
    """R23: per domain, int8 naive / outlier-excluded perplexity and window / sink+window perplexity; the smallest
    of each over the domains."""
    from attnlab.real.repro.verdicts import verdict_R23

    v = verdict_R23(folder_of(runs["real_quant"]), folder_of(runs["real_window"]))
    q, w = v["quant"]["domains"], v["window"]["domains"]
    out = {f"int8 naive/exclude {d}": r["ratio"] for d, r in q.items()}
    out |= {f"window/sink+window {d}": r["ratio"] for d, r in w.items()}
    out |= {"quant_ratio_min": min(r["ratio"] for r in q.values())}
    return out | {"window_ratio_min": min(r["ratio"] for r in w.values()), "claims_met": float(v["met"])}


def r_r24(runs: dict) -> dict:
    """R24: the largest share over the domains of windows with a sink beyond token 0 (authors' procedure), and per
    domain the Jaccard agreement of the authors' sink heads with the key-0 sink heads."""
    from attnlab.real.repro.verdicts import verdict_R24

    folder = folder_of(runs["real_scan"])
    out = claim_numbers(verdict_R24, folder, "windows_beyond0_max")
    procs = json.loads((folder / "summary.json").read_text())["sink_procedure"]
    return out | {f"jaccard {p['domain']}": p["jaccard"] for p in procs}


def r_dormant(runs: dict) -> dict:
    """Seed claim (spec §10.4): |ΔNLL| of each zeroed head that is dormant (s_h ≥ 0.5) on the domain; its largest."""
    states = run_of(runs, "real_ablate").summary["by_state"]
    return {"max_abs_dnll_dormant": states["dormant"]["max_abs_dnll"], "dormant_cases": states["dormant"]["n"],
            "max_abs_dnll_active": states["active"]["max_abs_dnll"]}  # fmt: skip


def _interval_numbers(prefix: str, iv: Any) -> dict:
    """`prefix`, `prefix_low`, `prefix_high` and `prefix_replicates` of an `Interval`."""
    return {prefix: iv.estimate, f"{prefix}_low": iv.low, f"{prefix}_high": iv.high,
            f"{prefix}_replicates": float(iv.replicates)}  # fmt: skip


def r_r26(runs: dict) -> dict:
    """R26: the share of windows (prose and code pooled) with a secondary sink in layers ≥ 2, its bootstrap interval
    (`verdicts.verdict_R26`), each domain's share, and whether the interval clears the bar."""
    from attnlab.real.repro.verdicts import verdict_R26

    v = verdict_R26(folder_of(runs["real_sinks"]))
    out = _interval_numbers("R26_share", v["share"])
    for d, iv in v["domains"].items():
        out |= _interval_numbers(f"share {d}", iv)
    return out | {"interval_met": float(v["verdict"] == "met")}


def r_r27(runs: dict) -> dict:
    """R27: Spearman ρ of the forming MLP's output norm with the sinks' score and lifetime, bootstrap intervals over
    windows (`verdicts.verdict_R27`)."""
    from attnlab.real.repro.verdicts import verdict_R27

    v = verdict_R27(folder_of(runs["real_sinks"]))
    out = _interval_numbers("R27_rho_score", v["rho_score"]) | _interval_numbers("R27_rho_lifetime", v["rho_lifetime"])
    return out | {"sinks": float(v["sinks"]), "interval_met": float(v["verdict"] == "met")}


def _intervals(numbers: dict, keys: tuple[str, ...], method: str) -> dict:
    """{key: Interval} from the `key`, `key_low`, `key_high`, `key_replicates` numbers `_interval_numbers` wrote."""
    from attnlab.core.intervals import Interval

    return {k: Interval(float(numbers[k]), float(numbers[f"{k}_low"]), float(numbers[f"{k}_high"]),
                        int(numbers[f"{k}_replicates"]), method) for k in keys}  # fmt: skip


def r26_intervals(numbers: dict) -> dict:
    """R26's judged interval from its measure's numbers (for `Target.intervals`, issue 39)."""
    return _intervals(numbers, ("R26_share",), "percentile bootstrap over windows")


def r27_intervals(numbers: dict) -> dict:
    """R27's judged intervals from its measure's numbers (for `Target.intervals`, issue 39)."""
    return _intervals(numbers, ("R27_rho_score", "R27_rho_lifetime"),
                      "percentile bootstrap over windows (their sinks together)")  # fmt: skip
