"""Our number for each measured reproduction target of attention paths.

Measures are computed from the study runs of `runs.py`, read back from their folders: each takes `runs`
(experiment name -> `attnlab.reproduce.execute.Outcome`) and returns named numbers, the keys its target's
`Check`s compare. The direct computations (`compute(seed, size)`: library functions with no study command) are in
`checks_theory.py`, `checks_sampling.py` and `checks_full_profile.py`; the rows are in `targets.py`, the claims'
verdicts in `verdicts.py`."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np

from attnlab.core.targets import claim_numbers, folder_of, run_of
from attnlab.paths.repro.checks_full_profile import ADJUDICATION


def p_t5(runs: dict) -> dict:
    return dict(runs["paths_ua"].numbers)


def p_t10(runs: dict) -> dict:
    s = run_of(runs, "paths_solve").summary
    return {"max_grad": s["max_grad"], "converged": float(s["converged"])}


def _points(runs: dict) -> list[dict]:
    from attnlab.runs import read_jsonl

    rows = read_jsonl(Path(run_of(runs, "paths_sweep").path) / "points.jsonl")
    return sorted(rows, key=lambda r: float(r["N"]))


def p_s1(runs: dict) -> dict:
    rows = _points(runs)
    dist = [float(np.linalg.norm(np.asarray(r["U"]) - np.eye(np.asarray(r["U"]).shape[0]))) for r in rows]
    gaps = [r["accuracy"] - r["accuracy_gp"] for r in rows]
    return {
        "max_grad": max(r["max_grad"] for r in rows),
        "min_hessian_eig": min(r["hessian_min_eig"] for r in rows),
        "max_increase_U_minus_I": max(np.diff(dist)) if len(dist) > 1 else -math.inf,
        "min_gap_points": 100 * min(gaps),
        "N_of_largest_gap": float(rows[int(np.argmax(gaps))]["N"]),
    }


def p_s2(runs: dict) -> dict:
    a = json.loads((Path(run_of(runs, "paths_solve").path) / "alignment.json").read_text())
    ren, gp = a["renormalised"]["captured"][:5], a["gp"]["captured"][:5]
    return {"min_c_k_difference_k1_5": min(r - g for r, g in zip(ren, gp))}


def p_b1(runs: dict) -> dict:
    rows = _points(runs)
    return {
        "max_grad": max(r["max_grad"] for r in rows),
        "max_point_seconds": max(r["wall_s"] for r in rows),
        "sweep_seconds": runs["paths_sweep"].seconds[""],
        "widths": len(rows),
    }


def p_b3(runs: dict) -> dict:
    """B3: the collapsed sampler's run (its seconds, agreement with the theory) and, where the profile runs it, the
    full-weight sampler's seconds and agreement; ESS per second of both (the spec reports them)."""
    s = run_of(runs, "paths_sample").summary
    out = {
        "collapsed_seconds": runs["paths_sample"].seconds[""],
        "rel_frob_err": s["rel_frob_err"],
        "accuracy_gap_points": 100 * abs(s["sampled_accuracy"] - s["theory"]["accuracy"]),  # metrics.json's
        "rhat_max": s["rhat_max"],
        "collapsed_ess_per_s": s.get("ess_per_s", math.nan),
    }
    if "paths_sample_full" in runs:
        f = run_of(runs, "paths_sample_full").summary
        out |= {"full_seconds": runs["paths_sample_full"].seconds[""], "full_rel_frob_err": f["rel_frob_err"],
                "full_rhat_max": f["rhat_max"], "full_ess_per_s": f.get("ess_per_s", math.nan)}  # fmt: skip
    return out


def p_b5(runs: dict) -> dict:
    """B5, each clause of the spec's digits pipeline: GD test accuracy and training seconds, whether the chosen
    (N, T) is the grid's best on validation episodes, the rank correlation of head scores with single-head drops,
    and how many heads the progressive (ascending-score) pruning removed."""
    m = json.loads((Path(run_of(runs, "paths_prune").path) / "metrics.json").read_text())
    best = max(m["grid"], key=lambda g: g["val_accuracy"])
    return {
        "gd_test_accuracy": m["gd_test_accuracy"],
        "gd_train_seconds": m.get("gd_train_seconds", math.nan),
        "pipeline_seconds": runs["paths_prune"].seconds[""],
        "grid_points": len(m["grid"]),
        "chosen_on_validation": float(best["N"] == m["chosen_N"] and best["T"] == m["chosen_T"]),
        "spearman_score_vs_drop": m["spearman_rho"],
        "heads_pruned_progressively": len(m["progressive"]["ascending score"]) - 1,
    }


def p_s6(runs: dict) -> dict:
    """S6: sampled-vs-theory error at N = 10, off-diagonal fraction of U at the smallest alpha and its growth."""
    from attnlab.paths.repro.verdicts import offdiag_fraction, verdict_S6
    from attnlab.runs import read_jsonl

    folder = folder_of(runs["paths_layers"])
    out = claim_numbers(verdict_S6, folder, "sampled_vs_theory_err")
    recs = sorted(read_jsonl(folder / "sweep" / "points.jsonl"), key=lambda r: r["alpha"])
    fr = [offdiag_fraction(np.asarray(r["U"])) for r in recs]
    converged = json.loads((folder / "sample" / "metrics.json").read_text())["converged"]
    return out | {"offdiag_small_alpha": fr[0], "offdiag_growth": max(fr) / max(fr[0], 1e-300),
                  "sampler_converged": float(bool(converged))}  # fmt: skip


def p_s7(runs: dict) -> dict:
    from attnlab.paths.repro.verdicts import verdict_S7

    return claim_numbers(verdict_S7, folder_of(runs["paths_ensemble"]), "rel_frob_err_gd")


def p_s8(runs: dict) -> dict:
    from attnlab.paths.repro.verdicts import verdict_S8

    folder = folder_of(runs["paths_outputs"])
    converged = json.loads((folder / "metrics.json").read_text())["converged"]
    return claim_numbers(verdict_S8, folder, "rel_frob_err") | {"sampler_converged": float(bool(converged))}


def p_s9(runs: dict) -> dict:
    """S9: scalar predictor vs the GP at the same T (the spec's comparison) and at T/u_1 (relative RMS), and matrix
    minus GP test accuracy."""
    from attnlab.paths.repro.verdicts import verdict_S9

    folder = folder_of(runs["paths_renorm"])
    c = json.loads((folder / "metrics.json").read_text())["renorm_comparison"]
    out = claim_numbers(verdict_S9, folder, "matrix_minus_gp_accuracy")
    return out | {
        "scalar_vs_gp_same_T": c["rms_pred_scalar_vs_gp"] / c["rms_pred_gp"],
        "scalar_vs_gp_matched_T": c["rms_pred_scalar_vs_gp_matched_T"] / c["rms_pred_gp"],
    }


def p_s10(runs: dict) -> dict:
    """S10: theory minus GP test accuracy on a trained network's attention maps (and the network's own)."""
    from attnlab.paths.repro.verdicts import verdict_S10

    folder = folder_of(runs["paths_plugin"])
    m = json.loads((folder / "metrics.json").read_text())
    out = claim_numbers(verdict_S10, folder, "theory_minus_gp_accuracy")
    return out | {"theory_accuracy": m["accuracy"], "gp_accuracy": m["accuracy_gp"],
                  "network_accuracy": m["network_accuracy"]}  # fmt: skip


def p_s3(runs: dict) -> dict:
    """S3: the 2-path variant converges; renormalised minus GP test accuracy in points. No ablation is run."""
    s = run_of(runs, "paths_2path").summary
    return {"converged": float(s["converged"]), "gap_points": 100 * (s["accuracy"] - s["accuracy_gp"])}


def p_prune(runs: dict) -> dict:
    """Seed claim ("pruning with minimal performance loss"): test-accuracy drop after pruning the lowest-scored head
    and after the whole ascending-score curve, against the mean of the random orders."""
    m = json.loads((Path(run_of(runs, "paths_prune").path) / "metrics.json").read_text())
    curves, full = m["progressive"], m["gd_test_accuracy"]
    random_means = [float(np.mean(v)) for k, v in curves.items() if k.startswith("random")]
    asc = curves["ascending score"]
    return {"drop_first_pruned": full - asc[1] if len(asc) > 1 else math.nan,
            "ascending_minus_random_mean": float(np.mean(asc)) - float(np.mean(random_means)),
            "heads_pruned": len(asc) - 1}  # fmt: skip


def p_s5(runs: dict) -> dict:
    """S5: the digits smoke run's GD steps, its hand-off error (max |GD attention − theory attention|) and whether
    every head score is finite."""
    res = run_of(runs, "paths_smoke")
    m = json.loads((Path(res.path) / "metrics.json").read_text())
    return {"gd_steps": res.config.steps, "handoff_attention_err": m["handoff_attention_err"],
            "head_scores_finite": float(bool(np.all(np.isfinite(m["score"]))))}  # fmt: skip


# their overlap block: L1H0 24 - 9, L1H1 30 - 12, L2H0 28 - 9, L2H1 26 - 8; divided by the largest (19)


def _max_or_nan(xs: list[float]) -> float:
    """The largest of `xs`, NaN if any is NaN (or none is given)."""
    return max(xs) if xs and not any(math.isnan(x) for x in xs) else math.nan


def combine_adjudication(parts: list[dict], configs: tuple[str, ...] = ("C1", "C2", "C3")) -> dict:
    """B4's numbers from the experiments' numbers: the gates summed over the points, gate 1, each form's status,
    and §10.8's winner (supported in every configuration, the other form rejected in one)."""
    out: dict[str, Any] = {k: v for p in parts for k, v in p.items() if k != "seconds"}
    points = [p for p in parts if "points" in p]
    for k in ("points", "points_failing_rhat_1.01", "points_failing_ess_400", "points_counted_s_0.10",
              "draws_doubled_points"):  # fmt: skip
        out[k] = float(sum(p[k] for p in points))
    out["rhat_max"], out["ess_bulk_min"] = max(p["rhat_max"] for p in points), min(p["ess_bulk_min"] for p in points)
    out["winner"] = "undecided"
    for f, other in (("chain", "simple"), ("simple", "chain")):
        if all(out[f"{f}_supported_{c}"] for c in configs) and any(out[f"{other}_rejected_{c}"] for c in configs):
            out["winner"] = f
    out |= {"decided": float(out["winner"] != "undecided"), "winner_chain": float(out["winner"] == "chain"),
            "seconds": float(sum(p.get("seconds", 0.0) for p in parts))}  # fmt: skip
    h1 = [c for c in ("C1", "C2") if c in configs]
    out["simple_max_a_over_se_H1"] = _max_or_nan([out[f"simple_max_a_over_se_{c}"] for c in h1])
    out["simple_e_N64_max_H1"] = _max_or_nan([out[f"simple_e_N64_{c}"] for c in h1])
    return out


def p_b4(runs: dict) -> dict:
    """B4: the adjudication's gates and verdict, over its four experiments, and their cost against §10.10's budget
    (hours_on_2_cores: the experiments' one-thread seconds, the gate's included, split over two cores)."""
    out = combine_adjudication([runs[n].numbers for n in ADJUDICATION])
    work = sum(float(runs[n].seconds.get("", math.nan)) for n in ADJUDICATION)
    return out | {"protocol_seconds": work, "hours_on_2_cores": work / 2 / 3600}


def p_sc_h1(runs: dict) -> dict:
    """SC-H1: the simple form's numbers in C1 and C2 from the same runs."""
    n = combine_adjudication([runs[n].numbers for n in ADJUDICATION])
    return {k: n[k] for k in ("simple_max_a_over_se_H1", "simple_e_N64_max_H1", "simple_rejected_C1",
                              "simple_rejected_C2", "points_failing_rhat_1.01", "points_failing_ess_400")}  # fmt: skip
