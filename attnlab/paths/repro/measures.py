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

from attnlab.core.targets import claim_numbers, folder_of, run_of, runs_of
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


def p_b2(runs: dict) -> dict:
    """B2: the solver's numbers of `checks_full_profile.paths_b2`; its time is judged only when it ran on two
    threads with a 1-minute load below 1.5 at its start (issue 39), else `NotQuiet` says so with the time and the
    load (a record from before issue 39, without them, is judged as it was: one thread, said in the row's note)."""
    from attnlab.core.targets import quiet_timing

    n = {k: v for k, v in runs["paths_b2"].numbers.items() if k.startswith("B2_")}
    if "B2_load_at_start" in n:
        quiet_timing({"threads": n["B2_threads"], "load_at_start": n["B2_load_at_start"],
                      "B2_point_seconds": n["B2_point_seconds"]}, "B2_point_seconds")  # fmt: skip
    return n


def p_b1(runs: dict) -> dict:
    rows = _points(runs)
    return {
        "max_grad": max(r["max_grad"] for r in rows),
        "max_point_seconds": max(r["wall_s"] for r in rows),
        "sweep_seconds": runs["paths_sweep"].seconds[""],
        "widths": len(rows),
    }


RHAT_BAR = 1.01  # spec §7.3's gate: chains with a larger R-hat have not converged


def converged_seconds(seconds: float, rhat_max: float | None) -> float:
    """A sampler's time as B3 judges it: its seconds when its chains converged (R-hat <= `RHAT_BAR`), else NaN, so
    the time goal is not met by chains that had not converged (the seconds run are shown beside it)."""
    ok = rhat_max is not None and math.isfinite(float(rhat_max)) and float(rhat_max) <= RHAT_BAR
    return float(seconds) if ok else math.nan


def p_b3(runs: dict) -> dict:
    """B3: the collapsed sampler's run (its seconds, agreement with the theory) and, where the profile runs it, the
    full-weight sampler's seconds and agreement; ESS per second of both (the spec reports them). A time is judged
    (`collapsed_seconds`, `full_seconds`) only when that run's chains converged (`converged_seconds`); the seconds
    run are `*_seconds_run` and the R-hat `*rhat_max`, whatever the R-hat."""
    s = run_of(runs, "paths_sample").summary
    took = runs["paths_sample"].seconds[""]
    out = {
        "collapsed_seconds": converged_seconds(took, s["rhat_max"]),
        "collapsed_seconds_run": took,
        "rel_frob_err": s["rel_frob_err"],
        "accuracy_gap_points": 100 * abs(s["sampled_accuracy"] - s["theory"]["accuracy"]),  # metrics.json's
        "rhat_max": s["rhat_max"],
        "collapsed_ess_per_s": s.get("ess_per_s", math.nan),
    }
    if "paths_sample_full" in runs:
        f = run_of(runs, "paths_sample_full").summary
        took = runs["paths_sample_full"].seconds[""]
        out |= {"full_seconds": converged_seconds(took, f["rhat_max"]), "full_seconds_run": took,
                "full_rel_frob_err": f["rel_frob_err"], "full_rhat_max": f["rhat_max"],
                "full_ess_per_s": f.get("ess_per_s", math.nan)}  # fmt: skip
    return out


def _prune_runs(runs: dict) -> list[dict]:
    """The metrics.json of every `paths prune` run of the B5 experiment (one network per seed), by sub-folder."""
    subs = runs_of(runs, "paths_prune")
    return [json.loads((Path(subs[k].path) / "metrics.json").read_text()) for k in sorted(subs)]


def per_seed(rows: list[dict]) -> dict:
    """The mean over networks of each number in `rows` (one dict per seed), each seed's value as `<key>_s<i>` and
    the count as `networks`: the t-intervals over seeds are made from these (`prune_intervals`)."""
    out: dict[str, float] = {"networks": float(len(rows))}
    for k in rows[0]:
        values = [float(r[k]) for r in rows]
        out[k] = float(np.mean(values))
        out |= {f"{k}_s{i}": v for i, v in enumerate(values)}
    return out


def seed_values(numbers: dict, key: str) -> list[float]:
    """The per-seed values `<key>_s0`, `<key>_s1`, ... that `per_seed` wrote."""
    return [float(numbers[f"{key}_s{i}"]) for i in range(int(numbers["networks"]))]


def _b5_one(m: dict) -> dict:
    """B5's numbers for one network's prune run."""
    best = max(m["grid"], key=lambda g: g["val_accuracy"])
    return {
        "gd_test_accuracy": m["gd_test_accuracy"],
        "gd_train_seconds": m.get("gd_train_seconds", math.nan),
        "grid_points": len(m["grid"]),
        "chosen_on_validation": float(best["N"] == m["chosen_N"] and best["T"] == m["chosen_T"]),
        "spearman_score_vs_drop": m["spearman_rho"],
        "heads_pruned_progressively": len(m["progressive"]["ascending score"]) - 1,
        "heads": len(m["score"]) if "score" in m else math.nan,
    }


def p_b5(runs: dict) -> dict:
    """B5, each clause of the spec's digits pipeline over the experiment's networks (one `paths prune` run per
    seed): GD test accuracy (mean; each seed's as `_s<i>`), training seconds (the slowest network's), whether every
    chosen (N, T) is its grid's best on validation episodes, the rank correlation of head scores with single-head
    drops (mean), and how many heads the progressive (ascending-score) pruning removed."""
    out = per_seed([_b5_one(m) for m in _prune_runs(runs)])
    out["gd_train_seconds"] = max(seed_values(out, "gd_train_seconds"))
    out["chosen_on_validation"] = min(seed_values(out, "chosen_on_validation"))
    out["pipeline_seconds"] = float(sum(runs["paths_prune"].seconds.values()))
    return out


def p_s6(runs: dict) -> dict:
    """S6: sampled-vs-theory error at N = 10 with its MCSE (`_s6_mcse`), off-diagonal fraction of U at the smallest
    alpha and its growth, and the sampler's gates after its doublings (draws per chain of the last try, how many
    tries, and the kept draws of all chains)."""
    from attnlab.paths.repro.verdicts import offdiag_fraction, verdict_S6
    from attnlab.runs import read_jsonl

    folder = folder_of(runs["paths_layers"])
    out = claim_numbers(verdict_S6, folder, "sampled_vs_theory_err")
    recs = sorted(read_jsonl(folder / "sweep" / "points.jsonl"), key=lambda r: r["alpha"])
    fr = [offdiag_fraction(np.asarray(r["U"])) for r in recs]
    m = json.loads((folder / "sample" / "metrics.json").read_text())
    draws = float(m.get("draws_used", m["draws"]))
    return out | {"offdiag_small_alpha": fr[0], "offdiag_growth": max(fr) / max(fr[0], 1e-300),
                  "sampler_converged": float(bool(m["converged"])), "sampler_tries": float(m.get("tries", 1)),
                  "draws_used": draws, "sampled_draws": draws * float(m.get("chains", math.nan)),
                  "sampled_vs_theory_mcse": _s6_mcse(folder / "sample", m)}  # fmt: skip


def _s6_mcse(sample: Path, m: dict) -> float:
    """The MCSE of S6's sampled-vs-theory error from what `paths sample` saves (metrics.json's U_hat and U_mcse,
    U.npy the theory's U): `sampling.diagnostics.rel_frob_err_mcse`; NaN for a folder without them."""
    from attnlab.paths.sampling.diagnostics import rel_frob_err_mcse

    if "U_hat" not in m or "U_mcse" not in m or not (sample / "U.npy").is_file():
        return math.nan
    mcse = np.asarray(m["U_mcse"], dtype=float)  # JSON null (a NaN MCSE) -> nan
    return rel_frob_err_mcse(np.asarray(m["U_hat"], dtype=float), mcse, np.load(sample / "U.npy"))


def sampler_interval(numbers: dict, key: str, mcse_key: str, draws_key: str, fallback_draws: float) -> dict:
    """{key: the MCSE interval of numbers[key]} (`intervals.mcse_interval`: estimate ± 1.96 MCSE, the kept draws
    of all chains as its replicates), or {} when the number or its MCSE is missing or not finite (then the point
    is judged, and the row says so)."""
    from attnlab.core.intervals import mcse_interval

    x, se = float(numbers.get(key, math.nan)), float(numbers.get(mcse_key, math.nan))
    if not (math.isfinite(x) and math.isfinite(se) and se >= 0):
        return {}
    draws = float(numbers.get(draws_key, math.nan))
    return {key: mcse_interval(x, se, int(draws if math.isfinite(draws) else fallback_draws))}


S6_KEPT_DRAWS = 4 * 1000  # S6's sampler at least: 4 chains x 1000 draws (runs.FULL["paths_layers"], before doublings)


def s6_intervals(numbers: dict) -> dict:
    """S6's judged estimate, the sampled-vs-theory error: ± 1.96 of its MCSE (`sampled_vs_theory_mcse`, the delta
    method on the saved per-entry MCSEs). The off-diagonal fractions come from the deterministic theory sweep and
    `sampler_converged` is a gate, not an estimate: they are judged as they are."""
    return sampler_interval(numbers, "sampled_vs_theory_err", "sampled_vs_theory_mcse", "sampled_draws",
                            S6_KEPT_DRAWS)  # fmt: skip


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


def _s10_one(folder: Path) -> dict:
    """S10's numbers for one network's plug-in solve."""
    from attnlab.paths.repro.verdicts import verdict_S10

    m = json.loads((folder / "metrics.json").read_text())
    out = claim_numbers(verdict_S10, folder, "theory_minus_gp_accuracy")
    return out | {"theory_accuracy": m["accuracy"], "gp_accuracy": m["accuracy_gp"],
                  "network_accuracy": m["network_accuracy"]}  # fmt: skip


def p_s10(runs: dict) -> dict:
    """S10: theory minus GP test accuracy on each B5 network's attention maps (and the network's own), the mean
    over networks with each network's as `_s<i>` (`per_seed`); an experiment of one run (older folders) is one
    network. claims_met: the theory beats the GP on average."""
    subs = runs_of(runs, "paths_plugin")
    out = per_seed([_s10_one(Path(subs[k].path)) for k in sorted(subs)])
    out["claims_met"] = float(out["theory_minus_gp_accuracy"] > 0)
    return out


def s10_intervals(numbers: dict) -> dict:
    """S10's judged number over the networks: the t-interval of theory minus GP accuracy (needs >= 2 networks)."""
    from attnlab.core.intervals import t_interval

    if numbers.get("networks", 0) < 2:
        return {}
    return {"theory_minus_gp_accuracy": t_interval(seed_values(numbers, "theory_minus_gp_accuracy"))}


def p_s3(runs: dict) -> dict:
    """S3: the 2-path variant converges; renormalised minus GP(g+d) test accuracy in points; the two ablations of
    U (spec §9.1: off-diagonal zeroed, diagonal equalised to U^{gg}) with their accuracy drops in points, and the
    g-d entry of U (open point 9: its sign). ablations_run = 1 when both ablations have a finite accuracy."""
    s = run_of(runs, "paths_2path").summary  # read back: the solve's metrics.json
    ab = [float(s.get(f"accuracy_{k}", math.nan)) for k in ("diagonal_only", "equalised_diagonal")]
    U = np.asarray(s.get("U", [[math.nan]]), dtype=float)
    return {"converged": float(s["converged"]), "gap_points": 100 * (s["accuracy"] - s["accuracy_gp"]),
            "ablations_run": float(all(math.isfinite(a) for a in ab)),
            "diagonal_only_drop_points": 100 * (s["accuracy"] - ab[0]),
            "equalised_diagonal_drop_points": 100 * (s["accuracy"] - ab[1]),
            "U_gd": float(U[0, 1]) if U.shape[0] > 1 else math.nan}  # fmt: skip


def _prune_one(m: dict) -> dict:
    """SC-prune's numbers for one network: the drop after pruning its lowest-scored head, and its ascending-score
    curve's mean minus the mean of its random orders' curves."""
    curves, full = m["progressive"], m["gd_test_accuracy"]
    random_means = [float(np.mean(v)) for k, v in curves.items() if k.startswith("random")]
    asc = curves["ascending score"]
    return {"drop_first_pruned": full - asc[1] if len(asc) > 1 else math.nan,
            "ascending_minus_random_mean": float(np.mean(asc)) - float(np.mean(random_means)),
            "heads_pruned": len(asc) - 1}  # fmt: skip


def p_prune(runs: dict) -> dict:
    """Seed claim ("pruning with minimal performance loss") over the B5 experiment's networks (mean; each seed's as
    `_s<i>`): test-accuracy drop after pruning the lowest-scored head, and the ascending-score curve against the
    mean of the random orders (the random-ordering baseline)."""
    return per_seed([_prune_one(m) for m in _prune_runs(runs)])


CHANCE_DRAWS = 20_000  # random rankings drawn for the chance level of a mean Spearman rho


def chance_spearman(n_heads: int, networks: int, seed: int = 0) -> tuple[float, float]:
    """The 95 % range (2.5 % and 97.5 % quantiles) of the mean over `networks` independent networks of Spearman's
    rho between a fixed ranking of `n_heads` heads and a uniformly random one: what a random head ranking reaches
    (`CHANCE_DRAWS` draws from a fixed generator, so the range is reproducible)."""
    rng = np.random.default_rng(seed)
    base = np.arange(n_heads)
    perms = np.argsort(rng.random((CHANCE_DRAWS, networks, n_heads)), axis=-1)
    rho = 1 - 6 * ((perms - base) ** 2).sum(-1) / (n_heads * (n_heads**2 - 1))  # no ties: the exact formula
    low, high = np.quantile(rho.mean(-1), [0.025, 0.975])
    return float(low), float(high)


def prune_intervals(numbers: dict) -> dict:
    """95 % intervals of B5's and SC-prune's judged numbers over the networks (t-interval over seeds; needs >= 2):
    gd_test_accuracy, drop_first_pruned, ascending_minus_random_mean, chosen_on_validation (1 per network that
    chose its grid point on validation), heads_pruned_progressively, and spearman_minus_chance: the mean rho's
    t-interval minus the random-ranking range of `chance_spearman` ([rho_low - chance_high, rho_high -
    chance_low]: clear of 0 only when the heads' ranking beats every random ranking's 95 % range; one network: its
    rho against one random ranking's range, a permutation test)."""
    from attnlab.core.intervals import Interval, t_interval

    out = {}
    keys = ("gd_test_accuracy", "drop_first_pruned", "ascending_minus_random_mean", "spearman_score_vs_drop",
            "chosen_on_validation", "heads_pruned_progressively")  # fmt: skip
    for key in keys:
        if f"{key}_s0" in numbers and numbers.get("networks", 0) >= 2:
            out[key] = t_interval(seed_values(numbers, key))
    rho = out.get("spearman_score_vs_drop")
    if rho is None and numbers.get("networks", 1) == 1 and "spearman_score_vs_drop" in numbers:  # one network
        r = float(numbers["spearman_score_vs_drop"])
        rho = Interval(r, r, r, 1, "one network")
    if rho is not None and math.isfinite(numbers.get("heads", math.nan)):
        lo, hi = chance_spearman(int(numbers["heads"]), rho.replicates)
        method = f"{rho.method} minus a random ranking's 95 % range"
        out["spearman_minus_chance"] = Interval(rho.estimate - (lo + hi) / 2, rho.low - hi, rho.high - lo,
                                                rho.replicates, method)  # fmt: skip
    return out


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
    worst = [c for c in h1 if out[f"simple_e_N64_{c}"] == out["simple_e_N64_max_H1"]]  # none when it is NaN
    out["simple_e_N64_mcse_H1"] = float(out.get(f"simple_e_N64_mcse_{worst[0]}", math.nan)) if worst else math.nan
    kept = [float(p["kept_draws_min"]) for p in points if "kept_draws_min" in p]
    out["kept_draws_min"] = min(kept) if kept else math.nan
    return out


def p_b4(runs: dict) -> dict:
    """B4: the adjudication's gates and verdict, over its four experiments, and their cost against §10.10's budget
    of 1 h on 2 cores: hours_on_2_cores is the four experiments' wall seconds, each measured on two threads
    (`checks_full_profile.B4_THREADS`), summed: the protocol's time on two cores when they run one after another
    (`max_load_at_start` shows whether something else ran beside them). Experiments run on fewer threads (an
    older run) give NaN: a one-thread time divided by two is a projection, not a measurement."""
    parts = [runs[n].numbers for n in ADJUDICATION]
    out = combine_adjudication(parts)
    work = sum(float(runs[n].seconds.get("", math.nan)) for n in ADJUDICATION)
    n_threads = min(float(p.get("threads", 1.0)) for p in parts)
    return out | {"protocol_seconds": work, "threads": n_threads,
                  "max_load_at_start": _max_or_nan([float(p.get("load_at_start", math.nan)) for p in parts]),
                  "hours_on_2_cores": work / 3600 if n_threads >= 2 else math.nan}  # fmt: skip


def p_sc_h1(runs: dict) -> dict:
    """SC-H1: the simple form's numbers in C1 and C2 from the same runs, with the MCSE of e(64) and the fewest kept
    draws of a point where the experiments saved them (`sc_h1_intervals`)."""
    n = combine_adjudication([runs[n].numbers for n in ADJUDICATION])
    out = {k: n[k] for k in ("simple_max_a_over_se_H1", "simple_e_N64_max_H1", "simple_rejected_C1",
                             "simple_rejected_C2", "points_failing_rhat_1.01", "points_failing_ess_400")}  # fmt: skip
    return out | {k: n[k] for k in ("simple_e_N64_mcse_H1", "kept_draws_min") if math.isfinite(n[k])}


A_OVER_SE = "|a|/SE ± 1.96 (the entry attaining the max, in units of its SE from the sampler's MCSE)"
ADJ_KEPT_DRAWS = 4 * 2000  # the §10 protocol at least: 4 chains x 2000 draws (runs.FULL, before doublings)


def sc_h1_intervals(numbers: dict) -> dict:
    """SC-H1's 95 % intervals. The largest |a|/SE over the diagonal entries, alphas and C1, C2: an intercept a
    known to ± 1.96 SE gives |a|/SE ± 1.96 (at least 0) for the entry attaining the max; every other entry's
    interval has the same width and lies lower, so this one decides the check (met: all below the bar; missed:
    this entry above it). e at N = 64: ± 1.96 of its MCSE (`simple_e_N64_mcse_H1`, the delta method at the point
    attaining the max) where the experiments saved it, else judged as its point estimate."""
    from attnlab.core.intervals import Interval, mcse_interval

    out = sampler_interval(numbers, "simple_e_N64_max_H1", "simple_e_N64_mcse_H1", "kept_draws_min", ADJ_KEPT_DRAWS)
    z = float(numbers.get("simple_max_a_over_se_H1", math.nan))
    if math.isfinite(z):
        draws = float(numbers.get("kept_draws_min", math.nan))
        n = int(draws if math.isfinite(draws) else ADJ_KEPT_DRAWS)
        iv = mcse_interval(z, 1.0, n)  # a ± 1.96 SE, in units of SE
        out["simple_max_a_over_se_H1"] = Interval(z, max(iv.low, 0.0), iv.high, n, A_OVER_SE)
    return out
