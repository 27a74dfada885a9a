"""Our number for each measured reproduction target of the extreme-tokens toy model (bb).

Measures are computed from the study runs of `runs.py`, read back from their folders: each takes `runs`
(experiment name -> `attnlab.reproduce.execute.Outcome`) and returns named numbers, the keys its target's
`Check`s compare. The direct computation R2 is in `checks_reducers.py`; the rows are in `targets.py`, the
claims' verdicts in `verdicts.py`."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np

from attnlab.core.targets import claim_numbers, folder_of, last_record, records_of, run_of


def r1(runs: dict) -> dict:
    res = run_of(runs, "bb_sample")
    meta = json.loads((Path(res.path) / "meta.json").read_text())
    chars = sorted(meta["trigger_chars"])
    return {
        "trigger_fraction": res.summary["trigger_fraction"],
        "oracle_entropy": res.summary["oracle_bigram_entropy"],
        "triggers_are_space_e_t": float(chars == sorted([" ", "e", "t"])),
    }


def r3(runs: dict) -> dict:
    m = records_of(runs, "bb_smoke")
    return {"loss_fall": 1 - m[-1]["loss"] / m[0]["loss"]}


def r4(runs: dict) -> dict:
    last = last_record(runs, "bb_softmax")
    return {
        "attn_sink": last["attn_sink"],
        "attn_sink_with_query0": last["attn_sink_with0"],
        "backcopy_excess_risk": last["excess_risk_backcopy"],
        "delta_logit": last["delta_logit"],
        "delta_logit_trigger": last["delta_logit_trigger"],
    }


def r5(runs: dict) -> dict:
    """Final ‖W_O v⟨s⟩‖ over its peak; over the smallest of positions 1–9 in final/value_norms.npy (the spec's
    "smallest of the first 10 positions", layer 0 head 0); and over the mean of the others (our earlier reading)."""
    m = records_of(runs, "bb_softmax")
    last = m[-1]
    peak = max(r["value_norm_bos"] for r in m)
    return {
        "final_over_peak": last["value_norm_bos"] / peak,
        "bos_over_min_positions1_9": bos_over_next_min(
            np.load(Path(run_of(runs, "bb_softmax").path) / "final" / "value_norms.npy")
        ),
        "bos_over_others_mean": last["value_norm_bos"] / last["value_norm_others"],
    }


def bos_over_next_min(norms: np.ndarray, first: int = 10) -> float:
    """Position 0's norm over the smallest of positions 1..first-1, from value norms [layer, head, position] (layer
    0, head 0): at most 1 exactly when position 0 is the smallest of the first `first` positions."""
    row = np.asarray(norms, dtype=float)[0, 0, :first]
    return float(row[0] / row[1:].min())


def r6(runs: dict) -> dict:
    """Rise of mean Δlogit from the first snapshot with Attn⟨s⟩ >= 0.6 to the end, and the R² of Δlogit against
    log(step) over that stretch ("about linearly in log t" read as R² >= 0.9)."""
    m = records_of(runs, "bb_softmax")
    start = next((i for i, r in enumerate(m) if r["attn_sink"] >= 0.6), None)
    if start is None or start >= len(m) - 2:
        return {"rise": math.nan, "r2_vs_log_step": math.nan}
    steps = np.log([r["step"] for r in m[start:]])
    dl = np.array([r["delta_logit"] for r in m[start:]])
    fit = np.polyval(np.polyfit(steps, dl, 1), steps)
    r2 = 1 - ((dl - fit) ** 2).sum() / max(((dl - dl.mean()) ** 2).sum(), 1e-300)
    return {"rise": float(dl[-1] - dl[0]), "r2_vs_log_step": float(r2)}


def r7(runs: dict) -> dict:
    saved = json.loads((Path(run_of(runs, "bb_intervene").path) / "interventions.json").read_text())
    rows = {r["intervention"]: r for r in saved}
    full = rows["none (full model)"]
    return {
        "zero_head_backcopy_risk": rows["zero head 0.0"]["risk_backcopy"],
        "zero_head_bigram_change": abs(rows["zero head 0.0"]["risk_bigram"] - full["risk_bigram"]),
        "zero_mlp_bigram_risk": rows["zero MLP 0"]["risk_bigram"],
    }


def r8(runs: dict) -> dict:
    m = records_of(runs, "bb_relu")
    return {
        "max_attn_sink": max(r["attn_sink"] for r in m),
        "max_attn_sink_with_query0": max(r["attn_sink_with0"] for r in m),
        "final_backcopy_excess_risk": m[-1]["excess_risk_backcopy"],
        "value_norm_end_over_start": m[-1]["value_norm_bos"] / m[0]["value_norm_bos"],
    }


def _res_growth(runs: dict, name: str) -> float:
    """‖Res⟨s⟩‖ after block 0 at the end over its value at the first snapshot (the residual peak of §9.5)."""
    from attnlab.bb.metrics import metric

    m = records_of(runs, name)
    first, last = metric(m[0], "resid_norm_bos", 0), metric(m[-1], "resid_norm_bos", 0)
    return math.nan if first is None or last is None else last / first


def r9(runs: dict) -> dict:
    return {"sgd_growth": _res_growth(runs, "bb_sgd3"), "adam_growth": _res_growth(runs, "bb_adam3")}


def _fall(full: float, zeroed: float) -> float:
    """full / zeroed of a positive statistic; inf when it falls to ≤ 0, NaN (a miss) when it was not positive."""
    if full <= 0:
        return math.nan
    return full / zeroed if zeroed > 0 else math.inf


def r10(runs: dict) -> dict:
    """R10 by the spec's protocol (§7's table): the trained 3-layer `no_attn=[2]` model, evaluated as it is and with
    layer 0 zeroed (`ZeroLayer(0)`). Peak statistic ‖Res⟨s⟩‖ − others after block 0 (a difference, as the spec's
    106.1 → 0.71), the layer-1 Δlogit and ‖W_O v⟨s⟩‖; the falls and the rise are ratios of full to zeroed."""
    from attnlab.bb.metrics import metric
    from attnlab.bb.repro import verdicts

    path = Path(run_of(runs, "bb_ablate3").path)
    full, zeroed = verdicts.ablated_record(path, None), verdicts.ablated_record(path, 0, "layer")
    both = (("full", full), ("zeroed", zeroed))

    def num(record: dict, name: str, layer: int) -> float:
        value = metric(record, name, layer)
        return math.nan if value is None else float(value)

    peak = {k: num(r, "resid_norm_bos", 0) - num(r, "resid_norm_others", 0) for k, r in both}
    logit = {k: num(r, "delta_logit", 1) for k, r in both}
    value = {k: num(r, "value_norm_bos", 1) for k, r in both}
    return {
        "peak_fall": _fall(peak["full"], peak["zeroed"]),
        "layer1_delta_logit_fall": _fall(logit["full"], logit["zeroed"]),
        "layer1_value_norm_rise": value["zeroed"] / value["full"],
        **{f"peak_stat_{k}": v for k, v in peak.items()},
        **{f"layer1_delta_logit_{k}": v for k, v in logit.items()},
        **{f"layer1_value_norm_{k}": v for k, v in value.items()},
        "step": full["step"],
    }


def r11(runs: dict) -> dict:
    m = {r["step"]: r for r in records_of(runs, "bb_paper")}
    out = {f"attn_sink_step{s}": m[s]["attn_sink"] for s in (200, 400, 1000, 10000) if s in m}
    return out | {"delta_logit_step10000": m[max(m)]["delta_logit"]}


def r13(runs: dict) -> dict:
    s = json.loads((Path(run_of(runs, "bb_theory").path) / "metrics.json").read_text())["late_slopes"]
    return {
        "alpha_slope_min": min(s["alpha"]),
        "alpha_slope_max": max(s["alpha"]),
        "log_beta_spread_slope": s["log_beta_spread"],
        "log_loss_slope": s["log_loss"],
    }


def r14(runs: dict) -> dict:
    s = json.loads((Path(run_of(runs, "bb_theory").path) / "metrics.json").read_text())
    rr, tp = s["reduced_recursion"], s["two_param"]
    return {
        "adam_m": rr["m_adam"],
        "sgd_m": rr["m_sgd"],
        "two_param_adam_min_ratio": min(tp["m_ratio_adam"]),
        "two_param_sgd_max_ratio": max(tp["m_ratio_sgd"]),
    }


def _scale(path: str | Path) -> dict:
    """The scale a trained toy model ran at, shown in its row (issue 39: a row run smaller than the spec's cpu
    preset, 2,000 steps at d 128 and T 64, says so): its steps, width d_model and sequence length T."""
    from attnlab.bb.config import read_train_config

    cfg = read_train_config(Path(path))
    return {"steps": cfg.steps, "d_model": cfg.d_model, "seq_len": cfg.seq_len}


def _variants_scale(runs: dict) -> dict:
    """`_scale` of the 3-layer run of the layer variants (every variant runs the same steps and sizes)."""
    return _scale(run_of(runs, "bb_variants", "3-layers").path)


def b_r19(runs: dict) -> dict:
    """R19: attention energy in the MLP subspace (1-layer run) and the parallel-vs-sequential differences."""
    from attnlab.bb.metrics import metric
    from attnlab.bb.repro import verdicts

    folder = folder_of(runs["bb_variants"])
    out = claim_numbers(verdicts.verdict_R19, folder, "attn_energy_in_mlp_subspace")
    found = verdicts.variants(folder)
    seq, par = (verdicts.final_record(found[k]) for k in ("1 layer", "1 layer, parallel block"))
    for key, name in (("excess_risk_backcopy", "d_excess_backcopy"), ("excess_risk_bigram", "d_excess_bigram"),
                      ("attn_sink", "d_attn_sink")):  # fmt: skip
        out[name] = abs(metric(par, key) - metric(seq, key))  # type: ignore[operator]
    return out | _scale(found["1 layer"])


def b_r20(runs: dict) -> dict:
    """R20: the 3-layer model's largest residual peak ratio and the largest of the four shallow layouts."""
    from attnlab.bb.repro import verdicts

    folder = folder_of(runs["bb_variants"])
    out = claim_numbers(verdicts.verdict_R20, folder, "peak_ratio_3_layers")
    rows = {r["variant"]: r["peak_ratio_max"] for r in verdicts.variant_table(folder)}
    shallow = ("1 layer", "attn + attn (no MLP)", "MLP + attn + MLP", "attn + attn + MLP")
    return out | {"max_peak_ratio_shallow": max(rows[k] for k in shallow)} | _variants_scale(runs)


def b_r21(runs: dict) -> dict:
    """R21: 3-layer minus 1-layer sink Attn⟨s⟩ and value ratio; with layer 0's MLP zeroed, the layer-0 peak ratio
    and whether an advantage is gone (Attn⟨s⟩ below the 1-layer model's or value ratio not below it)."""
    from attnlab.bb.repro import verdicts

    folder = folder_of(runs["bb_variants"])
    out = claim_numbers(verdicts.verdict_R21, folder, "attn_sink_3_minus_1")
    n = verdicts.r21_numbers(folder)
    one, three, abl = n["1 layer"], n["3 layers"], n["3 layers, MLP 0 zeroed"]
    gone = abl["attn_sink"] < one["attn_sink"] or abl["value_ratio"] >= one["value_ratio"]
    out |= {
        "value_ratio_3_minus_1": three["value_ratio"] - one["value_ratio"],
        "peak_ratio_0_mlp0_zeroed": abl["peak_ratio_0"],
        "strengthening_gone_mlp0_zeroed": float(gone),
    }
    return out | _variants_scale(runs)


R22_RISKS = ("excess_risk_backcopy", "excess_risk_bigram")


def risk_differences(trials: list[dict]) -> dict[str, dict[int, float]]:
    """R22's comparison of final risks: for each excess risk, per seed, the mean over learning rates of ReLU's
    final excess risk minus softmax's at the same (lr, seed), over the pairs where neither run diverged
    (`verdicts.stability_trials` rows). Returns {risk: {seed: mean difference}} (a seed with no such pair is left
    out)."""
    by = {(t["attention"], t["lr"], t["seed"]): t for t in trials}
    out: dict[str, dict[int, float]] = {k: {} for k in R22_RISKS}
    for seed in sorted({t["seed"] for t in trials}):
        pairs = [(by[("relu", lr, seed)], by[("softmax", lr, seed)]) for lr in sorted({t["lr"] for t in trials})
                 if ("relu", lr, seed) in by and ("softmax", lr, seed) in by]  # fmt: skip
        pairs = [(a, b) for a, b in pairs if not a["diverged"] and not b["diverged"]]
        for k in R22_RISKS:
            if pairs:
                out[k][seed] = float(np.mean([a[k] - b[k] for a, b in pairs]))
    return out


def b_r22(runs: dict) -> dict:
    """R22: the final risks compared (issue 39) — per excess risk, ReLU minus softmax, the mean over seeds of the
    per-seed mean over learning rates of the paired difference (`risk_differences`), with its t-interval over the
    sweep's seeds (`_low`, `_high`; `r22_intervals`) — the diverged runs per form and their difference, the
    sweep's size per form (runs, learning rates) and its scale (`_scale`)."""
    from attnlab.bb.repro import verdicts
    from attnlab.core.intervals import t_interval

    folder = folder_of(runs["bb_stability"])
    table = verdicts.stability_table(folder)
    out: dict[str, Any] = {}
    for a in ("softmax", "relu"):
        rows = [r for r in table if r["attention"] == a]
        out |= {f"runs_{a}": sum(r["runs"] for r in rows), f"lrs_{a}": len(rows)}
        out[f"diverged_{a}"] = sum(r["diverged"] for r in rows)
    out = {"diverged_relu_minus_softmax": float(out["diverged_relu"] - out["diverged_softmax"])} | out
    for k, per_seed in risk_differences(verdicts.stability_trials(folder)).items():
        name = f"d_{k.removeprefix('excess_risk_')}_relu_minus_softmax"
        values = list(per_seed.values())
        out[name] = float(np.mean(values)) if values else math.nan
        if len(values) >= 2:
            iv = t_interval(values)
            out |= {f"{name}_low": iv.low, f"{name}_high": iv.high, "seeds_compared": len(values)}
    return out | _scale(verdicts.train_runs(folder)[0][0])


def r22_intervals(numbers: dict) -> dict:
    """R22's final-risk differences with their t-intervals over the sweep's seeds (as `b_r22` saved them)."""
    from attnlab.core.intervals import T_OVER_SEEDS, Interval

    out = {}
    for k in ("d_backcopy_relu_minus_softmax", "d_bigram_relu_minus_softmax"):
        if f"{k}_low" in numbers:
            n = int(numbers["seeds_compared"])
            out[k] = Interval(float(numbers[k]), float(numbers[f"{k}_low"]), float(numbers[f"{k}_high"]), n,
                              T_OVER_SEEDS)  # fmt: skip
    return out


def r_r25(runs: dict) -> dict:
    """R25: along the trained series (first domain), the rise of Attn⟨s⟩ and the onsets (half of each change) of
    the sink, the value drain and the residual peak of token 0, as the differences the ordering is checked on."""
    from attnlab.bb.repro.verdicts import verdict_R25
    from attnlab.core.curves import onset

    folder = Path(run_of(runs, "series_scan", "scan").path)
    out = claim_numbers(verdict_R25, folder, "onset_gap_steps")
    rows = json.loads((folder / "summary.json").read_text())["sink_dynamics"]
    rows = [r for r in rows if r["domain"] == rows[0]["domain"]]
    steps = [int(r["step"]) for r in rows]
    sink, value, resid = ([float(r[k]) for r in rows] for k in ("attn_sink", "value_norm_ratio", "resid_norm_ratio"))
    on = [onset(steps, sink, rising=True), onset(steps, value, rising=False), onset(steps, resid, rising=True)]
    out["sink_rise"] = max(sink) - sink[0]
    if None not in on:
        out["value_minus_sink_onset"] = float(on[1] - on[0])  # type: ignore[operator]
        out["resid_minus_value_onset"] = float(on[2] - on[1])  # type: ignore[operator]
    return out


def b_relu_risks(runs: dict) -> dict:
    """Seed claim: ReLU attention (no sink) against softmax at the same scale: final excess risks, ReLU minus
    softmax."""
    soft, relu = last_record(runs, "bb_softmax"), last_record(runs, "bb_relu")
    return {
        "d_excess_backcopy": relu["excess_risk_backcopy"] - soft["excess_risk_backcopy"],
        "d_excess_bigram": relu["excess_risk_bigram"] - soft["excess_risk_bigram"],
        "relu_attn_sink": relu["attn_sink"],
    }


def b_three_layer(runs: dict) -> dict:
    """Seed claim (the three-layer intuitions): ρ_l = ‖Res⟨s⟩‖/others after each block of the trained 3-layer model,
    and ρ_2 with the last MLP zeroed (ZeroMLP(2), `verdicts.ablated_record`)."""
    from attnlab.bb.repro import verdicts

    path = Path(run_of(runs, "bb_variants", "3-layers").path)
    rho = verdicts.peak_ratios(verdicts.final_record(path), 3)
    zeroed = verdicts.peak_ratios(verdicts.ablated_record(path, 2), 3)
    return {"rho_0": rho[0], "rho_1": rho[1], "rho_2": rho[2], "rho_2_mlp2_zeroed": zeroed[2]} | _scale(path)


# --- R12: the paper-scale mitigations of spec §8, each number within 25 % ---------------------------------------------
INF = math.inf
# (name, run, metric, step, lo, hi): §8's value as [lo, hi] (a point: lo = hi; "≤ x": [0, x]; "over x": [x, inf])
PAPER_8 = (
    ("relu_attn_sink_max_from_step100", "bb_paper_relu", "attn_sink_with0", 100, 0.0, 6.5e-4),
    ("relu_backcopy_risk_step200", "bb_paper_relu", "risk_backcopy", 200, 3e-3, 3e-3),
    ("relu_backcopy_risk_step10000", "bb_paper_relu", "risk_backcopy", 10000, 3.9e-6, 3.9e-6),
    ("relu_bigram_risk_step10000", "bb_paper_relu", "risk_bigram", 10000, 2.2284, 2.2284),
    ("relu_value_norm_step0", "bb_paper_relu", "value_norm_bos", 0, 5.2, 5.2),
    ("relu_value_norm_step1000", "bb_paper_relu", "value_norm_bos", 1000, 40.0, 56.0),
    ("relu_value_norm_step10000", "bb_paper_relu", "value_norm_bos", 10000, 600.0, INF),
    *(
        (f"resid_{form}_step{step}", f"bb_paper_{form}3", "resid_norm_bos", step, v, v)
        for form, values in (
            ("adam", (24.3, 34.4, 70.9, 140.7)),
            ("sgd", (24.3, 29.1, 23.1, 20.4)),
            ("relu", (23.4, 23.6, 24.2, 24.5)),
        )
        for step, v in zip((0, 1000, 5000, 10000), values, strict=True)
    ),
    ("adam3_backcopy_risk_step10000", "bb_paper_adam3", "risk_backcopy", 10000, 5e-5, 5e-5),
    ("sgd3_backcopy_risk_step10000", "bb_paper_sgd3", "risk_backcopy", 10000, 0.056, 0.056),
)
PAPER_8_RUNS = tuple(dict.fromkeys(run for _, run, *_ in PAPER_8))


def off_by(x: float, lo: float, hi: float) -> float:
    """How far `x` lies outside [lo, hi], relative to the bound it passes: 0 inside, (x − hi)/hi above, (x − lo)/lo
    below (no lower bound when lo ≤ 0). |off_by| ≤ 0.25 is "within 25 %" of a point (lo = hi) or of a range."""
    if x > hi:
        return (x - hi) / hi
    if lo > 0 and x < lo:
        return (x - lo) / lo
    return 0.0 if math.isfinite(x) else math.nan


def at_step(records: list[dict], name: str, step: int, layer: int = 0) -> float:
    """Metric `name` (layer `layer`) at `step`: the snapshot's value, or linear in log(step) between the two
    snapshots around it (the paper preset snapshots 4,870 and 5,623, not 5,000); NaN outside the run."""
    from attnlab.bb.metrics import metric

    raw = [(int(r["step"]), metric(r, name, layer)) for r in records]
    points = [(s, float(v)) for s, v in raw if v is not None]
    exact = [v for s, v in points if s == step]
    if exact or step <= 0:
        return exact[0] if exact else math.nan
    below = [(s, v) for s, v in points if 0 < s < step]
    above = [(s, v) for s, v in points if s > step]
    if not below or not above:
        return math.nan
    (s0, v0), (s1, v1) = below[-1], above[0]
    w = (math.log(step) - math.log(s0)) / (math.log(s1) - math.log(s0))
    return v0 + w * (v1 - v0)


def _paper_value(records: list[dict], name: str, metric_name: str, step: int) -> float:
    """Our value of one §8 number: the largest from `step` on for "…_max_from_step…", else the value at `step`."""
    from attnlab.bb.metrics import metric

    if "_max_from_step" in name:
        vals = [metric(r, metric_name) for r in records if int(r["step"]) >= step]
        return max((float(v) for v in vals if v is not None), default=math.nan)
    return at_step(records, metric_name, step)


def paper_mitigations(records: dict[str, list[dict]]) -> dict:
    """R12 from the metrics records of the paper-scale runs (run name -> records): for each §8 number our value
    `<name>` and `<name>_off` (`off_by` its §8 value or range; the check is |off| ≤ 0.25)."""
    out: dict[str, float] = {}
    for name, run, metric_name, step, lo, hi in PAPER_8:
        value = _paper_value(records[run], name, metric_name, step)
        out[name], out[f"{name}_off"] = value, off_by(value, lo, hi)
    relu = records["bb_paper_relu"]
    out["relu_attn_sink_ours_max_from_step100"] = max(float(r["attn_sink"]) for r in relu if int(r["step"]) >= 100)
    return out


def r12(runs: dict) -> dict:
    """R12: `paper_mitigations` of the four paper-scale runs (`bb_paper_relu`, `bb_paper_{adam,sgd,relu}3`)."""
    from attnlab.runs import STEPPED, RunDir

    return paper_mitigations({n: RunDir(run_of(runs, n).path).metrics(STEPPED) for n in PAPER_8_RUNS})
