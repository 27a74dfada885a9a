"""Verdicts of the authors' claims R10, R19–R22 (spec extreme-tokens §11, §14) from folders of `bb train` runs,
and of R25 from the scan of a checkpoint series trained on the same task.

Each `verdict_<id>(run_dir) -> (number, met, why)` reads a folder that holds `bb train` runs (a sweep folder of
docs/specs/bb-layer-variants.toml or docs/specs/bb-softmax-relu-stability.toml, or any folder whose subfolders
are `bb train` runs) and says whether the claim holds at the scale of those runs. They load final models
where a claim needs an intervention or a subspace measure (seconds on a CPU), and never train.

Residual peak ratio of a layer l: ρ_l = ‖Res⟨s⟩‖_l / mean_{b,i≥1}‖x^{l+1}_{b,i}‖ (after block l, final snapshot);
a model "has a peak" when max_l ρ_l > PEAK_RATIO (the one peak bar, defined in repro/__init__.py: R9's Adam/SGD bar of
1.5×; at 2,000 steps Adam reaches 2.7).

R19's chance level (issue 39): a uniformly random k-dimensional subspace of R^d holds k/d of any fixed energy on
average; `r19_chance` draws `R19_DRAWS` such subspaces (k = k_mlp) for the run's own attention outputs and gives
the 95 % range of the energy they hold, the baseline the row judges the attention energy against.

R25 — mutual reinforcement along a checkpoint series (sink_dynamics.csv of a series scan): the onset of a metric
is the first checkpoint where it has made half of its change from the first checkpoint to its extreme
(`attnlab.core.curves.onset`). Met when Attn⟨s⟩ of the sink heads rises by at least `R25_MIN_SINK_RISE`, the
value-norm ratio of token 0 falls, the residual-norm ratio of token 0 grows, and
onset(sink) ≤ onset(value drain) ≤ onset(residual peak). The number is onset(residual) − onset(sink) in steps.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import torch

from attnlab.bb.config import TrainConfig
from attnlab.bb.experiment import read_train_config
from attnlab.bb.metrics import metric
from attnlab.bb.repro import PEAK_RATIO  # the one peak bar (docs/extreme-tokens.md)
from attnlab.errors import InputError
from attnlab.runs import STEPPED, RunDir, read_json

R19_DRAWS = 200
Verdict = tuple[float, bool, str]
VARIANTS = (  # label, (n_layers, no_attn, no_mlp, block)
    ("1 layer", (1, (), (), "sequential")),
    ("1 layer, parallel block", (1, (), (), "parallel")),
    ("attn + attn (no MLP)", (2, (), (0, 1), "sequential")),
    ("MLP + attn + MLP", (2, (0,), (), "sequential")),
    ("attn + attn + MLP", (2, (), (0,), "sequential")),
    ("3 layers", (3, (), (), "sequential")),
)


def train_runs(root: str | Path) -> list[tuple[Path, TrainConfig]]:
    """(folder, config) of every `bb train` run in `root`, its subfolders or `root/trials/*` (sorted by path)."""
    root = Path(root)
    if not root.is_dir():
        raise InputError(f"{root} is not a folder; expected a folder of `bb train` runs or a sweep folder")
    found = []
    for cfg_path in sorted([*root.glob("*/config.json"), *root.glob("trials/*/config.json")]):
        try:
            found.append((cfg_path.parent, read_train_config(cfg_path.parent)))
        except InputError:
            continue
    return found


def variant_of(cfg: TrainConfig) -> str | None:
    """The R20 label of a softmax/Adam run's layer layout, or None."""
    if cfg.attention != "softmax" or cfg.optimizer != "adam" or cfg.linear_mlp:
        return None
    key = (cfg.n_layers, tuple(cfg.no_attn), tuple(cfg.no_mlp), cfg.block)
    return next((label for label, k in VARIANTS if k == key), None)


def variants(root: str | Path) -> dict[str, Path]:
    """{variant label: run folder} of the finished runs in `root` (the first of each label)."""
    out: dict[str, Path] = {}
    for path, cfg in train_runs(root):
        label = variant_of(cfg)
        if label is not None and label not in out and (path / "train_summary.json").exists():
            out[label] = path
    return out


def final_record(path: Path) -> dict:
    records = RunDir(path).metrics(STEPPED)
    if not records:
        raise InputError(f"{path} has no metrics")
    return records[-1]


def peak_ratios(record: dict, n_layers: int) -> list[float]:
    """ρ_l for each layer of one metrics record."""
    return [metric(record, "resid_norm_bos", l) / metric(record, "resid_norm_others", l) for l in range(n_layers)]  # type: ignore[operator]


def sink_layer(record: dict, cfg: TrainConfig) -> int:
    """The attention layer with the largest Attn⟨s⟩ (head 0)."""
    layers = [l for l in range(cfg.n_layers) if l not in cfg.no_attn]
    return max(layers, key=lambda l: metric(record, "attn_sink", l) or -1.0)


def variant_row(label: str, path: Path) -> dict:
    """One R20 table row: peak ratios per layer, the sink layer's Attn⟨s⟩ and value ratio, final risks."""
    cfg, rec = read_train_config(path), final_record(path)
    if any(metric(rec, "attn_sink", l) is None for l in range(cfg.n_layers) if l not in cfg.no_attn):
        rec = ablated_record(path, None)  # stored before the fix of Attn⟨s⟩ when layer 0 lacks attention
    ratios = peak_ratios(rec, cfg.n_layers)
    row = {"variant": label, "step": rec["step"], "peak_ratio_max": max(ratios)}
    row["peak_ratio_by_layer"] = [round(r, 3) for r in ratios]
    row["resid_norm_bos_by_layer"] = [round(metric(rec, "resid_norm_bos", l) or 0.0, 2) for l in range(cfg.n_layers)]
    if len(cfg.no_attn) < cfg.n_layers:
        s = sink_layer(rec, cfg)
        row.update(sink_layer=s, attn_sink=metric(rec, "attn_sink", s), value_ratio=_value_ratio(rec, s))
    row.update({k: metric(rec, k) for k in ("excess_risk_backcopy", "excess_risk_bigram")})
    row["has_peak"] = row["peak_ratio_max"] > PEAK_RATIO
    return row


def _value_ratio(rec: dict, layer: int) -> float:
    return metric(rec, "value_norm_bos", layer) / metric(rec, "value_norm_others", layer)  # type: ignore[operator]


def variant_table(root: str | Path) -> list[dict]:
    """The R20 table: one row per layer variant found in `root`, in the order of `VARIANTS`."""
    found = variants(root)
    return [variant_row(label, found[label]) for label, _ in VARIANTS if label in found]


def _need(found: dict, labels: tuple[str, ...], root: str | Path) -> str | None:
    missing = [label for label in labels if label not in found]
    return f"missing finished runs in {root}: {', '.join(missing)}" if missing else None


def subspace_of_run(path: Path, layer: int = 0) -> dict:
    """The R19 subspace measure of the final model in `path` on its evaluation batch."""
    from attnlab.bb.experiment import load_run
    from attnlab.bb.principal_subspaces import block_outputs, subspace_measure

    cfg, task, model, _ = load_run(path)
    seqs = task.eval_batch(cfg.eval_batch, cfg.seq_len, cfg.eval_seed)
    return subspace_measure(*block_outputs(model, torch.as_tensor(seqs[:, :-1]), layer))


def random_subspace_energies(x: np.ndarray, k: int, rng: np.random.Generator, draws: int = R19_DRAWS) -> np.ndarray:
    """The share of the energy of the rows of x [N,D] inside each of `draws` uniformly random k-dimensional
    subspaces of R^D (the Q factor of a Gaussian [D,k] matrix is Haar-distributed); their mean is k/D."""
    x = np.asarray(x, dtype=np.float64)
    total = float((x**2).sum())
    out = np.empty(draws)
    for i in range(draws):
        q, _ = np.linalg.qr(rng.standard_normal((x.shape[1], k)))
        out[i] = float(((x @ q) ** 2).sum()) / total
    return out


def r19_chance(path: Path, layer: int = 0, seed: int = 0) -> dict:
    """R19's chance level for the final model in `path`: k/d and the 95 % range of the attention outputs' energy
    in `R19_DRAWS` random k_mlp-dimensional subspaces (seeded by `seed`)."""
    from attnlab.bb.experiment import load_run
    from attnlab.bb.principal_subspaces import block_outputs, top_subspace

    cfg, task, model, _ = load_run(path)
    seqs = task.eval_batch(cfg.eval_batch, cfg.seq_len, cfg.eval_seed)
    attn, mlp = block_outputs(model, torch.as_tensor(seqs[:, :-1]), layer)
    k, d = top_subspace(mlp).shape[1], attn.shape[1]
    draws = random_subspace_energies(attn, k, np.random.default_rng(seed))
    low, high = np.quantile(draws, [0.025, 0.975])
    return {"chance_k_over_d": k / d, "chance_draw_low": float(low), "chance_draw_high": float(high),
            "chance_draws": R19_DRAWS}  # fmt: skip


def verdict_R19(run_dir: str | Path) -> Verdict:
    """Sequential ≈ parallel: attention energy inside the MLP subspace < 0.1 (sequential 1-layer run), and the
    parallel run's excess risks within 0.02 and Attn⟨s⟩ within 0.05 of the sequential run's. Number: the energy."""
    found = variants(run_dir)
    missing = _need(found, ("1 layer", "1 layer, parallel block"), run_dir)
    if missing:
        return math.nan, False, missing
    sub = subspace_of_run(found["1 layer"])
    seq, par = final_record(found["1 layer"]), final_record(found["1 layer, parallel block"])
    keys = ("excess_risk_backcopy", "excess_risk_bigram", "attn_sink")
    diffs = {k: abs(metric(par, k) - metric(seq, k)) for k in keys}  # type: ignore[operator]
    energy = sub["energy_attn_in_mlp"]
    ok_energy = energy < 0.1
    ok_match = max(diffs["excess_risk_backcopy"], diffs["excess_risk_bigram"]) <= 0.02 and diffs["attn_sink"] <= 0.05
    why = (
        f"attention energy in the MLP subspace {energy:.3f} (k_attn {sub['k_attn']}, k_mlp {sub['k_mlp']} of "
        f"{sub['d_model']}; random {sub['random_baseline_attn_in_mlp']:.3f}; smallest angle "
        f"{sub['min_angle_deg']:.1f} deg) {'<' if ok_energy else '>='} 0.1; parallel vs sequential at step "
        f"{seq['step']}: |d excess backcopy| {diffs['excess_risk_backcopy']:.4f}, |d excess bigram| "
        f"{diffs['excess_risk_bigram']:.4f}, |d Attn<s>| {diffs['attn_sink']:.3f} "
        f"({'within' if ok_match else 'outside'} 0.02 / 0.02 / 0.05)"
    )
    return energy, ok_energy and ok_match, why


def verdict_R20(run_dir: str | Path) -> Verdict:
    """No residual peak (max_l ρ_l ≤ 1.5) in the 1-layer, attn+attn, MLP+attn+MLP and attn+attn+MLP models; a peak
    in the 3-layer model. Number: the 3-layer model's max ρ_l."""
    labels = ("1 layer", "attn + attn (no MLP)", "MLP + attn + MLP", "attn + attn + MLP", "3 layers")
    found = variants(run_dir)
    missing = _need(found, labels, run_dir)
    if missing:
        return math.nan, False, missing
    rows = {r["variant"]: r for r in variant_table(run_dir)}
    wrong = [label for label in labels[:-1] if rows[label]["has_peak"]]
    three = rows["3 layers"]["peak_ratio_max"]
    parts = ", ".join(f"{label} {rows[label]['peak_ratio_max']:.2f}" for label in labels)
    why = f"max residual peak ratio: {parts} (peak when > {PEAK_RATIO})"
    if wrong:
        why += f"; unexpected peak in {', '.join(wrong)}"
    if three <= PEAK_RATIO:
        why += "; no peak in the 3-layer model"
    return three, not wrong and three > PEAK_RATIO, why


def ablated_record(path: Path, layer: int | None = 0, sublayer: str = "mlp") -> dict:
    """The §6 metrics of the final model in `path` on its evaluation batch with layer `layer`'s MLP output zeroed
    (sublayer "mlp": R21) or the whole layer removed ("layer": `ZeroLayer`, the spec's R10; None: no intervention)."""
    from attnlab.bb.experiment import Evaluator, load_run
    from attnlab.bb.metrics import bb_metrics
    from attnlab.tracing.interventions import ZeroLayer, ZeroMLP

    cfg, task, model, state = load_run(path)
    seqs = task.eval_batch(cfg.eval_batch, cfg.seq_len, cfg.eval_seed)
    ev = Evaluator(model, task, seqs)
    with torch.no_grad():
        ivs = () if layer is None else ((ZeroLayer if sublayer == "layer" else ZeroMLP)(layer),)
        trace, logits = ev.trace(ivs, chunk=ev.inputs.shape[0])
    return {"step": int(state["step"]), **bb_metrics(trace, logits, seqs, task, ev.attn_layers)}


def r21_numbers(run_dir: str | Path) -> dict:
    """1-layer vs 3-layer (full, and with layer 0's MLP zeroed): sink Attn⟨s⟩, value ratio ‖W_O v⟨s⟩‖/others at
    the sink layer, layer-0 peak ratio and peak statistic ‖Res⟨s⟩‖ − others, layer-1 Δlogit and ‖W_O v⟨s⟩‖."""
    found = variants(run_dir)
    one, three = final_record(found["1 layer"]), final_record(found["3 layers"])
    cfg3 = read_train_config(found["3 layers"])
    abl = ablated_record(found["3 layers"])
    s = sink_layer(three, cfg3)
    out: dict = {"step": three["step"], "sink_layer": s}
    for name, rec in (("1 layer", one), ("3 layers", three), ("3 layers, MLP 0 zeroed", abl)):
        layer = 0 if name == "1 layer" else s
        out[name] = {
            "attn_sink": metric(rec, "attn_sink", layer),
            "value_ratio": _value_ratio(rec, layer),
            "value_norm_bos": metric(rec, "value_norm_bos", layer),
            "delta_logit": metric(rec, "delta_logit", layer),
            "peak_ratio_0": peak_ratios(rec, 1)[0],
            "peak_stat_0": metric(rec, "resid_norm_bos", 0) - metric(rec, "resid_norm_others", 0),  # type: ignore[operator]
        }
    return out


def verdict_R21(run_dir: str | Path) -> Verdict:
    """The 3-layer sink layer reaches Attn⟨s⟩ ≥ the 1-layer model's and a smaller value ratio; with layer 0's MLP
    zeroed the peak (ρ_0 ≤ 1.5) and the strengthening (either advantage) disappear. Number: ΔAttn⟨s⟩ (3 − 1)."""
    found = variants(run_dir)
    missing = _need(found, ("1 layer", "3 layers"), run_dir)
    if missing:
        return math.nan, False, missing
    n = r21_numbers(run_dir)
    one, three, abl = n["1 layer"], n["3 layers"], n["3 layers, MLP 0 zeroed"]
    stronger = three["attn_sink"] >= one["attn_sink"] and three["value_ratio"] < one["value_ratio"]
    gone = abl["peak_ratio_0"] <= PEAK_RATIO and (
        abl["attn_sink"] < one["attn_sink"] or abl["value_ratio"] >= one["value_ratio"]
    )
    why = (
        f"step {n['step']}, sink layer {n['sink_layer']}: Attn<s> 1 layer {one['attn_sink']:.3f} / 3 layers "
        f"{three['attn_sink']:.3f} / MLP 0 zeroed {abl['attn_sink']:.3f}; value ratio {one['value_ratio']:.3f} / "
        f"{three['value_ratio']:.3f} / {abl['value_ratio']:.3f}; layer-0 peak ratio {three['peak_ratio_0']:.2f} -> "
        f"{abl['peak_ratio_0']:.2f} with MLP 0 zeroed; strengthening {'seen' if stronger else 'not seen'}, "
        f"{'gone' if gone else 'not gone'} without MLP 0"
    )
    return three["attn_sink"] - one["attn_sink"], stronger and gone, why


def verdict_R10(run_dir: str | Path) -> Verdict:
    """Layer-0 MLP zeroed in the 3-layer model: the peak statistic ‖Res⟨s⟩‖ − others after block 0 falls ≥ 10×,
    the sink layer's Δlogit falls ≥ 3× and its ‖W_O v⟨s⟩‖ rises ≥ 3×. Number: the peak's fall factor.
    (The spec's R10 retrains with `no_attn=[2]`; here the ablation is applied to the trained 3-layer model.)"""
    found = variants(run_dir)
    missing = _need(found, ("1 layer", "3 layers"), run_dir)
    if missing:
        return math.nan, False, missing
    n = r21_numbers(run_dir)
    full, abl = n["3 layers"], n["3 layers, MLP 0 zeroed"]
    peak_fall = full["peak_stat_0"] / abl["peak_stat_0"] if abl["peak_stat_0"] > 0 else math.inf
    logit_fall = full["delta_logit"] / abl["delta_logit"] if abl["delta_logit"] > 0 else math.inf
    value_rise = abl["value_norm_bos"] / full["value_norm_bos"]
    why = (
        f"peak statistic {full['peak_stat_0']:.2f} -> {abl['peak_stat_0']:.2f} (fall {peak_fall:.3g}x, need 10x); "
        f"layer-{n['sink_layer']} delta logit {full['delta_logit']:.2f} -> {abl['delta_logit']:.2f} (fall "
        f"{logit_fall:.3g}x, need 3x); its value norm {full['value_norm_bos']:.2f} -> {abl['value_norm_bos']:.2f} "
        f"(rise {value_rise:.3g}x, need 3x)"
    )
    return peak_fall, peak_fall >= 10 and logit_fall >= 3 and value_rise >= 3, why


def stability_trials(run_dir: str | Path) -> list[dict]:
    """One row per trial of an R22 sweep: attention, lr, seed, diverged, final loss and excess risks.
    Diverged: the trial failed with a non-finite value (NumericalError), or its final loss is not below its step-0
    loss (training went nowhere or blew up)."""
    rows = []
    for path, cfg in train_runs(run_dir):
        state = read_json(path / "trial.json", "trial state") if (path / "trial.json").exists() else {}
        records = RunDir(path).metrics(STEPPED)
        error = str(state.get("error", ""))
        if state.get("status") not in ("done", "failed") and not (path / "train_summary.json").exists():
            continue  # not finished
        final = records[-1] if records else {}
        loss0, loss = (records[0].get("loss") if records else None), final.get("loss")
        nonfinite = "NumericalError" in error or "non-finite" in error
        bad = nonfinite or loss is None or loss0 is None or not math.isfinite(loss) or loss >= loss0
        rows.append(
            {
                "attention": cfg.attention,
                "lr": cfg.resolved_lr(),
                "seed": cfg.seed,
                "diverged": bool(bad),
                "non_finite": nonfinite,
                "step": final.get("step"),
                "loss": loss,
                "loss_rise": _loss_rise(records),
                "excess_risk_backcopy": final.get("excess_risk_backcopy"),
                "excess_risk_bigram": final.get("excess_risk_bigram"),
            }
        )
    return rows


def _loss_rise(records: list[dict]) -> float:
    """Final loss minus the lowest snapshot loss (> 0: training lost ground, a milder instability than NaN)."""
    losses = [r.get("loss") for r in records]
    finite = [x for x in losses if x is not None and math.isfinite(x)]
    if not finite or losses[-1] is None or not math.isfinite(losses[-1]):
        return math.nan
    return float(losses[-1] - min(finite))


def stability_table(run_dir: str | Path) -> list[dict]:
    """Per (attention, lr): runs, diverged runs, and over the runs that did not diverge the mean final excess risks
    and loss rise (final − lowest snapshot loss)."""
    trials = stability_trials(run_dir)
    out = []
    for key in sorted({(t["attention"], t["lr"]) for t in trials}):
        group = [t for t in trials if (t["attention"], t["lr"]) == key]
        ok = [t for t in group if not t["diverged"]]
        row = {"attention": key[0], "lr": key[1], "runs": len(group), "diverged": len(group) - len(ok)}
        for k in ("excess_risk_backcopy", "excess_risk_bigram", "loss_rise"):
            row[f"mean_{k}"] = float(np.mean([t[k] for t in ok])) if ok else math.nan
        out.append(row)
    return out


def verdict_R22(run_dir: str | Path) -> Verdict:
    """Softmax vs ReLU over seeds × lrs (≥ 3 × 4 per form). The spec presumes neither form; `met` only says the
    sweep is complete and ReLU diverged no more often than softmax (`why` names the stabler form, or neither).
    Number: diverged ReLU runs − diverged softmax runs."""
    table = stability_table(run_dir)
    count = {a: sum(r["runs"] for r in table if r["attention"] == a) for a in ("softmax", "relu")}
    div = {a: sum(r["diverged"] for r in table if r["attention"] == a) for a in ("softmax", "relu")}
    lrs = {a: len({r["lr"] for r in table if r["attention"] == a}) for a in ("softmax", "relu")}
    complete = all(count[a] >= 12 and lrs[a] >= 4 for a in count)
    if not complete:
        return math.nan, False, f"incomplete sweep in {run_dir}: runs {count}, learning rates {lrs} (need 12 and 4)"
    stabler = "ReLU" if div["relu"] < div["softmax"] else "softmax" if div["softmax"] < div["relu"] else "neither"
    why = (
        f"diverged: softmax {div['softmax']}/{count['softmax']}, ReLU {div['relu']}/{count['relu']} over "
        f"{lrs['softmax']} learning rates; stabler: {stabler}"
    )
    return float(div["relu"] - div["softmax"]), div["relu"] <= div["softmax"], why


VERDICTS = {
    "R10": verdict_R10,
    "R19": verdict_R19,
    "R20": verdict_R20,
    "R21": verdict_R21,
    "R22": verdict_R22,
}


# --- R25: a checkpoint series scan (`verdict_R25` reads a scan folder, not `bb train` runs) ----------------------
R25_MIN_SINK_RISE = 0.2  # Attn⟨s⟩ must rise by at least this much for "the sink rises"


def verdict_R25(run_dir: str | Path, domain: str | None = None) -> Verdict:
    """(onset(residual) − onset(sink) in steps, met, why) from a series scan folder (its first domain, or
    `domain`)."""
    from attnlab.core.curves import onset

    s = read_json(Path(run_dir) / "summary.json", "scan summary")
    rows = s.get("sink_dynamics")
    if not rows:
        raise InputError(f"{run_dir} has no sink_dynamics (not a checkpoint-series scan, or one from before R25)")
    domain = domain or rows[0]["domain"]
    rows = [r for r in rows if r["domain"] == domain]
    if len(rows) < 2:
        raise InputError(f"{run_dir}: domain {domain!r} has fewer than two checkpoints")
    steps = [int(r["step"]) for r in rows]
    sink, value, resid = ([float(r[k]) for r in rows] for k in ("attn_sink", "value_norm_ratio", "resid_norm_ratio"))
    on = {
        "sink": onset(steps, sink, rising=True),
        "value drain": onset(steps, value, rising=False),
        "residual peak": onset(steps, resid, rising=True),
    }
    early = [onset(steps, v, rising=up, fraction=0.2) for v, up in ((sink, True), (value, False), (resid, True))]
    rise = max(sink) - sink[0]
    moved = rise >= R25_MIN_SINK_RISE and all(v is not None for v in on.values())
    ordered = moved and on["sink"] <= on["value drain"] <= on["residual peak"]  # type: ignore[operator]
    why = (
        f"{domain}, sink heads {rows[-1]['sink_heads']}: Attn⟨s⟩ {sink[0]:.2f} → max {max(sink):.2f}, value-norm "
        f"ratio {value[0]:.2f} → min {min(value):.2f}, residual-norm ratio {resid[0]:.2f} → max {max(resid):.2f}; "
        "onsets (half of the change): "
        + ", ".join(f"{k} {v if v is not None else 'none'}" for k, v in on.items())
        + " (a fifth of it: "
        + ", ".join(f"{k} {v if v is not None else 'none'}" for k, v in zip(on, early))
        + ")"
    )
    gap = (
        float(on["residual peak"] - on["sink"])
        if on["sink"] is not None and on["residual peak"] is not None
        else float("nan")
    )
    return gap, bool(ordered), why
