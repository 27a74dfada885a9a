"""Our number for each measured target, computed from the study runs of `experiments` (read back from their
folders: `execute.Outcome`) and their saved arrays. Each function takes `runs` (experiment name -> Outcome) and
returns named numbers; the keys are what the target's `Check`s compare."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np


def _one(runs: dict, name: str, sub: str = "") -> Any:
    """The RunResult of experiment `name`'s study run `sub` ("" for an experiment of one run)."""
    return runs[name].runs[sub]


def _group(runs: dict, name: str) -> dict:
    """sub -> RunResult of every study run of experiment `name`."""
    return runs[name].runs


def _last(runs: dict, name: str) -> dict:
    return _one(runs, name).tables["metrics"].to_dict("records")[-1]


def _records(runs: dict, name: str) -> list[dict]:
    return _one(runs, name).tables["metrics"].to_dict("records")


# --- bb ----------------------------------------------------------------------------------------------------------
def r1(runs: dict) -> dict:
    res = _one(runs, "bb_sample")
    meta = json.loads((Path(res.path) / "meta.json").read_text())
    chars = sorted(meta["trigger_chars"])
    return {
        "trigger_fraction": res.summary["trigger_fraction"],
        "oracle_entropy": res.summary["oracle_bigram_entropy"],
        "triggers_are_space_e_t": float(chars == sorted([" ", "e", "t"])),
    }


def r3(runs: dict) -> dict:
    m = _records(runs, "bb_smoke")
    return {"loss_fall": 1 - m[-1]["loss"] / m[0]["loss"]}


def r4(runs: dict) -> dict:
    last = _last(runs, "bb_softmax")
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
    m = _records(runs, "bb_softmax")
    last = m[-1]
    peak = max(r["value_norm_bos"] for r in m)
    return {
        "final_over_peak": last["value_norm_bos"] / peak,
        "bos_over_min_positions1_9": bos_over_next_min(
            np.load(Path(_one(runs, "bb_softmax").path) / "final" / "value_norms.npy")
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
    m = _records(runs, "bb_softmax")
    start = next((i for i, r in enumerate(m) if r["attn_sink"] >= 0.6), None)
    if start is None or start >= len(m) - 2:
        return {"rise": math.nan, "r2_vs_log_step": math.nan}
    steps = np.log([r["step"] for r in m[start:]])
    dl = np.array([r["delta_logit"] for r in m[start:]])
    fit = np.polyval(np.polyfit(steps, dl, 1), steps)
    r2 = 1 - ((dl - fit) ** 2).sum() / max(((dl - dl.mean()) ** 2).sum(), 1e-300)
    return {"rise": float(dl[-1] - dl[0]), "r2_vs_log_step": float(r2)}


def r7(runs: dict) -> dict:
    saved = json.loads((Path(_one(runs, "bb_intervene").path) / "interventions.json").read_text())
    rows = {r["intervention"]: r for r in saved}
    full = rows["none (full model)"]
    return {
        "zero_head_backcopy_risk": rows["zero head 0.0"]["risk_backcopy"],
        "zero_head_bigram_change": abs(rows["zero head 0.0"]["risk_bigram"] - full["risk_bigram"]),
        "zero_mlp_bigram_risk": rows["zero MLP 0"]["risk_bigram"],
    }


def r8(runs: dict) -> dict:
    m = _records(runs, "bb_relu")
    return {
        "max_attn_sink": max(r["attn_sink"] for r in m),
        "max_attn_sink_with_query0": max(r["attn_sink_with0"] for r in m),
        "final_backcopy_excess_risk": m[-1]["excess_risk_backcopy"],
        "value_norm_end_over_start": m[-1]["value_norm_bos"] / m[0]["value_norm_bos"],
    }


def _res_growth(runs: dict, name: str) -> float:
    """‖Res⟨s⟩‖ after block 0 at the end over its value at the first snapshot (the residual peak of §9.5)."""
    m = _records(runs, name)
    return m[-1]["resid_norm_bos[0]"] / m[0]["resid_norm_bos[0]"]


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
    from attnlab.bb import claims
    from attnlab.bb.metrics import metric

    path = Path(_one(runs, "bb_ablate3").path)
    full, zeroed = claims.ablated_record(path, None), claims.ablated_record(path, 0, "layer")
    peak = {k: metric(r, "resid_norm_bos", 0) - metric(r, "resid_norm_others", 0) for k, r in (("full", full), ("zeroed", zeroed))}
    logit = {k: metric(r, "delta_logit", 1) for k, r in (("full", full), ("zeroed", zeroed))}
    value = {k: metric(r, "value_norm_bos", 1) for k, r in (("full", full), ("zeroed", zeroed))}
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
    m = {r["step"]: r for r in _records(runs, "bb_paper")}
    out = {f"attn_sink_step{s}": m[s]["attn_sink"] for s in (200, 400, 1000, 10000) if s in m}
    return out | {"delta_logit_step10000": m[max(m)]["delta_logit"]}


def r13(runs: dict) -> dict:
    s = json.loads((Path(_one(runs, "bb_theory").path) / "metrics.json").read_text())["late_slopes"]
    return {
        "alpha_slope_min": min(s["alpha"]),
        "alpha_slope_max": max(s["alpha"]),
        "log_beta_spread_slope": s["log_beta_spread"],
        "log_loss_slope": s["log_loss"],
    }


def r14(runs: dict) -> dict:
    s = json.loads((Path(_one(runs, "bb_theory").path) / "metrics.json").read_text())
    rr, tp = s["reduced_recursion"], s["two_param"]
    return {
        "adam_m": rr["m_adam"],
        "sgd_m": rr["m_sgd"],
        "two_param_adam_min_ratio": min(tp["m_ratio_adam"]),
        "two_param_sgd_max_ratio": max(tp["m_ratio_sgd"]),
    }


# --- real models -------------------------------------------------------------------------------------------------
def r16(runs: dict) -> dict:
    probe = runs["real_probe"].numbers
    ppl = {d["domain"]: d for d in _one(runs, "real_scan").summary["domains"]}
    windows = _one(runs, "real_scan").config.samples
    return {
        "greedy_is_paris": float(probe["greedy"] == " Paris"),
        "cached_reload_s": probe["reload_seconds"],
        "code_minus_prose_perplexity": ppl["code"]["perplexity"] - ppl["prose"]["perplexity"],
        "windows_per_domain": windows,
    }


def _traces(runs: dict) -> dict:
    from attnlab.tracing.format import Trace

    folder = Path(_one(runs, "real_scan").path) / "traces"
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


# --- consensus ---------------------------------------------------------------------------------------------------
def _states(res: Any) -> np.ndarray:
    return np.load(Path(res.path) / "states.npy")  # [batch, records, token, dim]


def c_r1a(runs: dict) -> dict:
    drifts = []
    for res in _group(runs, "cons_causal").values():
        st = _states(res)
        drifts.append(float(np.abs(st[:, :, 0, :] - st[:, :1, 0, :]).max()))
    return {"first_token_drift": max(drifts)}  # no run: ValueError, so never a vacuous "met"


def c_r1b(runs: dict) -> dict:
    shares = {k: r.summary["share_E_first_below_1e-6"] for k, r in _group(runs, "cons_causal").items()}
    starts = next(iter(_group(runs, "cons_causal").values())).config.batch
    return {"min_share_converged": min(shares.values()), "starts": starts} | {
        f"share {k}": v for k, v in shares.items()
    }


def c_r2b(runs: dict) -> dict:
    return dict(runs["cons_late"].numbers)


def c_r2c(runs: dict) -> dict:
    out = {k: v for k, v in runs["cons_tails"].numbers.items() if k.endswith("_rel_err")}
    return out | {"worst_rel_err": max(out.values())}


def c_r3(runs: dict) -> dict:
    full = _group(runs, "cons_full")
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
        st = _states(_one(runs, "cons_cluster", key))
        shares.append(float((cluster_count(torch.as_tensor(st[:, -1])) == 1).double().mean()))
    return {"min_share_one_cluster": min(shares)}


def c_r7b(runs: dict) -> dict:
    c9 = _counts_at(_one(runs, "cons_cluster", "beta9"), (30.0, 100.0, 200.0))
    c4 = _counts_at(_one(runs, "cons_cluster", "beta4"), (30.0,))
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
    m = _one(runs, "cons_phase").summary
    gaps = np.abs(np.asarray(m["relative_gap_t50_vs_t_eq"], dtype=float))
    return {
        "max_abs_rel_gap": float(np.nanmax(gaps)) if np.isfinite(gaps).any() else math.nan,
        "median_abs_rel_gap": m["median_abs_relative_gap"],
        "betas_never_half": m["betas_never_half_clustered"],
    }


# --- paths -------------------------------------------------------------------------------------------------------
def p_t5(runs: dict) -> dict:
    return dict(runs["paths_ua"].numbers)


def p_t10(runs: dict) -> dict:
    s = _one(runs, "paths_solve").summary
    return {"max_grad": s["max_grad"], "converged": float(s["converged"])}


def _points(runs: dict) -> list[dict]:
    from attnlab.runs import read_jsonl

    rows = read_jsonl(Path(_one(runs, "paths_sweep").path) / "points.jsonl")
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
    a = json.loads((Path(_one(runs, "paths_solve").path) / "alignment.json").read_text())
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
    s = _one(runs, "paths_sample").summary
    return {
        "collapsed_seconds": runs["paths_sample"].seconds[""],
        "rel_frob_err": s["rel_frob_err"],
        "accuracy_gap_points": 100 * abs(s["sampled_accuracy"] - s["theory_accuracy"]),
        "rhat_max": s["rhat_max"],
    }


def p_b5(runs: dict) -> dict:
    s = _one(runs, "paths_prune").summary
    return {"gd_test_accuracy": s["gd_test_accuracy"], "gd_seconds": runs["paths_prune"].seconds[""]}


# --- issue 14: the authors' claims; each measure calls the study's verdict (attnlab/<study>/claims.py) ----------
def _path(outcome: Any) -> Path:
    """The folder of an experiment: its one study run's, or the folder that holds its runs' sub-folders (a folder
    given as a path is itself)."""
    if isinstance(outcome, str | Path):
        return Path(outcome)
    sub, run = next(iter(outcome.runs.items()))
    return Path(run.path).parents[len(Path(sub).parts) - 1] if sub else Path(run.path)


def _claim(verdict_fn: Any, folder: Path, key: str) -> dict:
    """{key: the verdict's number, "claims_met": 1.0 or 0.0} from `verdict_fn(folder) -> (number, met, why)`."""
    number, met, _ = verdict_fn(folder)
    return {key: number, "claims_met": float(met)}


def b_r19(runs: dict) -> dict:
    """R19: attention energy in the MLP subspace (1-layer run) and the parallel-vs-sequential differences."""
    from attnlab.bb import claims
    from attnlab.bb.metrics import metric

    folder = _path(runs["bb_variants"])
    out = _claim(claims.verdict_R19, folder, "attn_energy_in_mlp_subspace")
    found = claims.variants(folder)
    seq, par = (claims.final_record(found[k]) for k in ("1 layer", "1 layer, parallel block"))
    for key, name in (("excess_risk_backcopy", "d_excess_backcopy"), ("excess_risk_bigram", "d_excess_bigram"),
                      ("attn_sink", "d_attn_sink")):  # fmt: skip
        out[name] = abs(metric(par, key) - metric(seq, key))  # type: ignore[operator]
    return out


def b_r20(runs: dict) -> dict:
    """R20: the 3-layer model's largest residual peak ratio and the largest of the four shallow layouts."""
    from attnlab.bb import claims

    folder = _path(runs["bb_variants"])
    out = _claim(claims.verdict_R20, folder, "peak_ratio_3_layers")
    rows = {r["variant"]: r["peak_ratio_max"] for r in claims.variant_table(folder)}
    shallow = ("1 layer", "attn + attn (no MLP)", "MLP + attn + MLP", "attn + attn + MLP")
    return out | {"max_peak_ratio_shallow": max(rows[k] for k in shallow)}


def b_r21(runs: dict) -> dict:
    """R21: 3-layer minus 1-layer sink Attn⟨s⟩ and value ratio; with layer 0's MLP zeroed, the layer-0 peak ratio
    and whether an advantage is gone (Attn⟨s⟩ below the 1-layer model's or value ratio not below it)."""
    from attnlab.bb import claims

    folder = _path(runs["bb_variants"])
    out = _claim(claims.verdict_R21, folder, "attn_sink_3_minus_1")
    n = claims.r21_numbers(folder)
    one, three, abl = n["1 layer"], n["3 layers"], n["3 layers, MLP 0 zeroed"]
    gone = abl["attn_sink"] < one["attn_sink"] or abl["value_ratio"] >= one["value_ratio"]
    return out | {
        "value_ratio_3_minus_1": three["value_ratio"] - one["value_ratio"],
        "peak_ratio_0_mlp0_zeroed": abl["peak_ratio_0"],
        "strengthening_gone_mlp0_zeroed": float(gone),
    }


def b_r22(runs: dict) -> dict:
    """R22: diverged ReLU minus diverged softmax runs, and the sweep's size per form (runs, learning rates)."""
    from attnlab.bb import claims

    folder = _path(runs["bb_stability"])
    table = claims.stability_table(folder)
    out: dict[str, Any] = {}
    for a in ("softmax", "relu"):
        rows = [r for r in table if r["attention"] == a]
        out |= {f"runs_{a}": sum(r["runs"] for r in rows), f"lrs_{a}": len(rows)}
        out[f"diverged_{a}"] = sum(r["diverged"] for r in rows)
    number, met, _ = claims.verdict_R22(folder)
    return {"diverged_relu_minus_softmax": number, "claims_met": float(met)} | out


def c_r12(runs: dict) -> dict:
    """R12: share of starts reaching consensus with Q = K = 0, V = I and V = J."""
    from attnlab.consensus.claims import verdict_R12

    folder = _path(runs["cons_counter"])
    out = _claim(verdict_R12, folder, "share_rotation")
    ident = json.loads((folder / "identity" / "metrics.json").read_text())["share_E_first_below_1e-6"]
    return out | {"share_identity": float(ident)}


def r_r23(runs: dict) -> dict:
    """R23: per domain, int8 naive / outlier-excluded perplexity and window / sink+window perplexity; the smallest
    of each over the domains."""
    from attnlab.deploy.claims import verdict_R23

    v = verdict_R23(_path(runs["real_quant"]), _path(runs["real_window"]))
    q, w = v["quant"]["domains"], v["window"]["domains"]
    out = {f"int8 naive/exclude {d}": r["ratio"] for d, r in q.items()}
    out |= {f"window/sink+window {d}": r["ratio"] for d, r in w.items()}
    out |= {"quant_ratio_min": min(r["ratio"] for r in q.values())}
    return out | {"window_ratio_min": min(r["ratio"] for r in w.values()), "claims_met": float(v["met"])}


def r_r24(runs: dict) -> dict:
    """R24: the largest share over the domains of windows with a sink beyond token 0 (authors' procedure), and per
    domain the Jaccard agreement of the authors' sink heads with the key-0 sink heads."""
    from attnlab.scan.claims import verdict_R24

    folder = _path(runs["real_scan"])
    out = _claim(verdict_R24, folder, "windows_beyond0_max")
    procs = json.loads((folder / "summary.json").read_text())["sink_procedure"]
    return out | {f"jaccard {p['domain']}": p["jaccard"] for p in procs}


def r_r25(runs: dict) -> dict:
    """R25: along the trained series (first domain), the rise of Attn⟨s⟩ and the onsets (half of each change) of
    the sink, the value drain and the residual peak of token 0, as the differences the ordering is checked on."""
    from attnlab.scan.claims import verdict_R25
    from attnlab.scan.series import onset

    folder = Path(_one(runs, "series_scan", "scan").path)
    out = _claim(verdict_R25, folder, "onset_gap_steps")
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


def c_r13(runs: dict) -> dict:
    """R13: largest per-layer relative error of the sphere idealisation; whether the consensus conclusion holds."""
    from attnlab.consensus.claims import verdict_R13

    folder = _path(runs["cons_norm"])
    out = _claim(verdict_R13, folder, "max_layer_rel_error")
    m = json.loads((folder / "metrics.json").read_text())
    return out | {"same_conclusion": float(bool(m["same_conclusion"])), "passes": m["passes"]}


def c_r14(runs: dict) -> dict:
    """R14: after the last pass, the smallest over groups of the mean share of positions decoding to the prompt's
    most common top-1 token, and each group's share."""
    from attnlab.consensus.claims import verdict_R14

    folder = _path(runs["cons_decode"])
    out = _claim(verdict_R14, folder, "min_share_final")
    groups = json.loads((folder / "decode.json").read_text())["groups"]
    out |= {f"share {g}": v["final"]["share_mean"] for g, v in groups.items()}
    return out | {"passes": max(v["passes"][-1] for v in groups.values())}


def p_s6(runs: dict) -> dict:
    """S6: sampled-vs-theory error at N = 10, off-diagonal fraction of U at the smallest alpha and its growth."""
    from attnlab.paths.claims import offdiag_fraction, verdict_S6
    from attnlab.runs import read_jsonl

    folder = _path(runs["paths_layers"])
    out = _claim(verdict_S6, folder, "sampled_vs_theory_err")
    recs = sorted(read_jsonl(folder / "sweep" / "points.jsonl"), key=lambda r: r["alpha"])
    fr = [offdiag_fraction(np.asarray(r["U"])) for r in recs]
    converged = json.loads((folder / "sample" / "metrics.json").read_text())["converged"]
    return out | {"offdiag_small_alpha": fr[0], "offdiag_growth": max(fr) / max(fr[0], 1e-300),
                  "sampler_converged": float(bool(converged))}  # fmt: skip


def p_s7(runs: dict) -> dict:
    from attnlab.paths.claims import verdict_S7

    return _claim(verdict_S7, _path(runs["paths_ensemble"]), "rel_frob_err_gd")


def p_s8(runs: dict) -> dict:
    from attnlab.paths.claims import verdict_S8

    folder = _path(runs["paths_outputs"])
    converged = json.loads((folder / "metrics.json").read_text())["converged"]
    return _claim(verdict_S8, folder, "rel_frob_err") | {"sampler_converged": float(bool(converged))}


def p_s9(runs: dict) -> dict:
    """S9: scalar predictor vs the GP at the same T (the spec's comparison) and at T/u_1 (relative RMS), and matrix
    minus GP test accuracy."""
    from attnlab.paths.claims import verdict_S9

    folder = _path(runs["paths_renorm"])
    c = json.loads((folder / "metrics.json").read_text())["renorm_comparison"]
    out = _claim(verdict_S9, folder, "matrix_minus_gp_accuracy")
    return out | {
        "scalar_vs_gp_same_T": c["rms_pred_scalar_vs_gp"] / c["rms_pred_gp"],
        "scalar_vs_gp_matched_T": c["rms_pred_scalar_vs_gp_matched_T"] / c["rms_pred_gp"],
    }


def p_s10(runs: dict) -> dict:
    """S10: theory minus GP test accuracy on a trained network's attention maps (and the network's own)."""
    from attnlab.paths.claims import verdict_S10

    folder = _path(runs["paths_plugin"])
    m = json.loads((folder / "metrics.json").read_text())
    out = _claim(verdict_S10, folder, "theory_minus_gp_accuracy")
    return out | {"theory_accuracy": m["accuracy"], "gp_accuracy": m["accuracy_gp"],
                  "network_accuracy": m["network_accuracy"]}  # fmt: skip


# --- issue 18: rows that were benchmarks, not wired in, or seed claims without a row ----------------------------
def _groups(runs: dict, name: str) -> dict:
    """{group ("periodic, MLP on"): its summary} of a `consensus model` run."""
    return _one(runs, name).summary["groups"]


def c_r9(runs: dict) -> dict:
    """R9: per MLP setting, the fall of mean log10 E_first from pass 1 to the last periodic pass, its CI low end and
    Spearman; the smallest fall and CI end and the largest Spearman over MLP on and off."""
    g = _groups(runs, "cons_rst")
    rows = {mlp: g[f"periodic, MLP {mlp}"] for mlp in ("on", "off")}
    out = {f"fall MLP {k}": r["fall_pass1_to_last"] for k, r in rows.items()}
    out |= {f"spearman MLP {k}": r["spearman_pass_vs_mean_log10_E"] for k, r in rows.items()}
    return out | {
        "min_fall_decades": min(r["fall_pass1_to_last"] for r in rows.values()),
        "min_fall_ci_low": min(r["fall_ci95"][0] for r in rows.values()),
        "max_spearman": max(r["spearman_pass_vs_mean_log10_E"] for r in rows.values()),
    }


def c_r10(runs: dict) -> dict:
    """R10: at the final depth, mean log10 E_first per schedule with its bootstrap CI; per MLP setting the gap
    between the CIs of consecutive schedules (lower end of the later minus upper end of the earlier: disjoint and
    ordered when > 0) and the gap of the means."""
    g = _groups(runs, "cons_rst")
    out: dict[str, float] = {}
    for mlp in ("off", "on"):
        band = {s: g[f"{s}, MLP {mlp}"]["final_band_log10"] for s in ("constant", "periodic", "random")}
        for a, b in (("constant", "periodic"), ("periodic", "random")):
            out[f"ci_gap_{mlp}_{a}_{b}"] = band[b]["lo_log10"] - band[a]["hi_log10"]
            out[f"mean_gap_{mlp}_{a}_{b}"] = band[b]["mean_log10"] - band[a]["mean_log10"]
    return out


def c_r11(runs: dict) -> dict:
    """R11 (the model version): the context influence C(k) of the periodic, MLP-on group: C(0), whether the peak is
    interior, C(final) over C(peak). The KL clause has no number: the depth view's KL_model compares the
    layer-by-layer pass with itself (0 by construction), so `KL_model_30_independent` stays missing."""
    ci = _groups(runs, "cons_depth")["periodic, MLP on"]["context_influence"]
    return {"C0": ci["C0"], "interior_peak": float(ci["interior_peak"]),
            "C_final_over_peak": ci["C_final"] / ci["C_peak"], "k_star_passes": ci["k_star_passes"]}  # fmt: skip


def c_b1(runs: dict) -> dict:
    return dict(runs["cons_bench"].numbers)


def c_b2(runs: dict) -> dict:
    """B2: the phase diagram's compute seconds (its metrics' wall_seconds) and the whole run's."""
    return {"phase_seconds": _one(runs, "cons_b2").summary["wall_seconds"], "run_seconds": runs["cons_b2"].seconds[""]}


def c_b4(runs: dict) -> dict:
    """B4: SmolLM2 (full stack) seconds per pass, from the decode run's seconds per group, and the peak RSS of the
    process that ran it."""
    res = _one(runs, "cons_decode")
    secs = res.summary["seconds_per_group"]
    return {"seconds_per_pass": max(secs.values()) / res.config.passes, "peak_rss_mb": runs["cons_decode"].peak_rss_mb}


def r_dormant(runs: dict) -> dict:
    """Seed claim (spec §10.4): |ΔNLL| of each zeroed head that is dormant (s_h ≥ 0.5) on the domain; its largest."""
    states = _one(runs, "real_ablate").summary["by_state"]
    return {"max_abs_dnll_dormant": states["dormant"]["max_abs_dnll"], "dormant_cases": states["dormant"]["n"],
            "max_abs_dnll_active": states["active"]["max_abs_dnll"]}  # fmt: skip


def b_relu_risks(runs: dict) -> dict:
    """Seed claim: ReLU attention (no sink) against softmax at the same scale: final excess risks, ReLU minus
    softmax."""
    soft, relu = _last(runs, "bb_softmax"), _last(runs, "bb_relu")
    return {
        "d_excess_backcopy": relu["excess_risk_backcopy"] - soft["excess_risk_backcopy"],
        "d_excess_bigram": relu["excess_risk_bigram"] - soft["excess_risk_bigram"],
        "relu_attn_sink": relu["attn_sink"],
    }


def b_three_layer(runs: dict) -> dict:
    """Seed claim (the three-layer intuitions): ρ_l = ‖Res⟨s⟩‖/others after each block of the trained 3-layer model,
    and ρ_2 with the last MLP zeroed (ZeroMLP(2), `bb.claims.ablated_record`)."""
    from attnlab.bb import claims

    path = Path(_one(runs, "bb_variants", "3-layers").path)
    rho = claims.peak_ratios(claims.final_record(path), 3)
    zeroed = claims.peak_ratios(claims.ablated_record(path, 2), 3)
    return {"rho_0": rho[0], "rho_1": rho[1], "rho_2": rho[2], "rho_2_mlp2_zeroed": zeroed[2]}


def p_s3(runs: dict) -> dict:
    """S3: the 2-path variant converges; renormalised minus GP test accuracy in points. No ablation is run."""
    s = _one(runs, "paths_2path").summary
    return {"converged": float(s["converged"]), "gap_points": 100 * (s["accuracy"] - s["accuracy_gp"])}


def p_prune(runs: dict) -> dict:
    """Seed claim ("pruning with minimal performance loss"): test-accuracy drop after pruning the lowest-scored head
    and after the whole ascending-score curve, against the mean of the random orders."""
    m = json.loads((Path(_one(runs, "paths_prune").path) / "metrics.json").read_text())
    curves, full = m["progressive"], m["gd_test_accuracy"]
    random_means = [float(np.mean(v)) for k, v in curves.items() if k.startswith("random")]
    asc = curves["ascending score"]
    return {"drop_first_pruned": full - asc[1] if len(asc) > 1 else math.nan,
            "ascending_minus_random_mean": float(np.mean(asc)) - float(np.mean(random_means)),
            "heads_pruned": len(asc) - 1}  # fmt: skip


def computed(name: str, prefix: str) -> Any:
    """A measure that reads the numbers of the direct computation `name` whose keys start with `prefix` (the
    attention-paths unit checks: "T1_", "T4_", ...)."""

    def measure(runs: dict) -> dict:
        out = {k: v for k, v in runs[name].numbers.items() if k.startswith(prefix)}
        if not out:
            raise KeyError(f"{name} has no number {prefix}*")
        return out

    measure.__name__ = f"computed_{prefix.rstrip('_')}"
    return measure


def p_s5(runs: dict) -> dict:
    """S5: the digits smoke run's GD steps, its hand-off error (max |GD attention − theory attention|) and whether
    every head score is finite."""
    res = _one(runs, "paths_smoke")
    m = json.loads((Path(res.path) / "metrics.json").read_text())
    return {"gd_steps": res.config.steps, "handoff_attention_err": m["handoff_attention_err"],
            "head_scores_finite": float(bool(np.all(np.isfinite(m["score"]))))}  # fmt: skip
