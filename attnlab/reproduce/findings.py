"""The "Findings" section that opens docs/reproduction.md (issue 39 item 6): the results a researcher can rely on,
each a paragraph with the claim, our estimate and its interval, the protocol, the mechanism where we have one and
what would overturn it. The estimates are read from the record's rows, so the section and the table cannot
diverge; the protocol, mechanism and overturn texts are ours, from the study docs. Any other claim row that ends
`missed` with an interval (not a single run) clear of its bar gets a paragraph of its own from its row."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from attnlab.reproduce.verdict import MISSED, SINGLE, fmt


@dataclass(frozen=True)
class Finding:
    """One paragraph: `estimate(row)` writes the estimate from the row's numbers and intervals."""

    study: str
    tid: str
    title: str
    claim: str
    estimate: Callable[[dict], str]
    protocol: str
    mechanism: str
    overturn: str


def _n(row: dict, key: str) -> str:
    return fmt((row.get("numbers") or {}).get(key))


def interval_words(row: dict, key: str) -> str:
    """The words "x, 95 % interval [lo, hi] (method, n = k)" where the row has an interval for `key` (x: the mean
    over its seeds where it has them), else "x (single run: no interval)"."""
    iv = (row.get("intervals") or {}).get(key)
    if iv is None or iv[0] == iv[1]:  # none, or a point (one replicate against a fixed baseline)
        return f"{_n(row, key)} (single run: no interval)"
    return (f"{_seeds_mean(row, key)}, 95 % interval [{fmt(iv[0])}, {fmt(iv[1])}] ({row.get('interval_method')}, "
            f"n = {row.get('replicates')})")  # fmt: skip


def _seeds_mean(row: dict, key: str) -> str:
    """The estimate the interval is about: the mean over the row's seeds where it has them (its numbers are the
    first seed's), else its number."""
    seeds = row.get("seeds_numbers") or {}
    values = [(row.get("numbers") or {}).get(key), *(n.get(key) for n in seeds.values())]
    if not seeds or not all(isinstance(v, int | float | str) for v in values):
        return _n(row, key)
    try:
        return fmt(sum(float(v) for v in values) / len(values))  # type: ignore[arg-type]
    except ValueError:  # a saved string that is no number
        return _n(row, key)


def seeds_note(row: dict) -> str:
    """Whether the row's numbers come from one seed (the committed run before the seeded one)."""
    if row.get("interval_method", SINGLE) == SINGLE or row.get("replicates", 1) <= 1:
        return " These numbers are from a single seed of the committed run."
    return ""


def r19_estimate(row: dict) -> str:
    """R19's estimate: the energy, the chance level (the energy minus its excess over chance) and their ratio."""
    nums = row.get("numbers") or {}
    energy, excess = nums.get("attn_energy_in_mlp_subspace"), nums.get("attn_energy_minus_chance")
    if not isinstance(energy, float | int) or not isinstance(excess, float | int):
        return f"{_n(row, 'attn_energy_in_mlp_subspace')} of the attention output's energy lies in the MLP subspace."
    chance = energy - excess
    return (f"{fmt(energy)} of the attention output's energy lies in the MLP subspace; a random subspace of the "
            f"same dimension holds {fmt(chance)} on average (k/d), so the excess over chance is "
            f"{interval_words(row, 'attn_energy_minus_chance')} ({energy / chance:.1f}× chance); the parallel block "
            f"matches the sequential one (|Δ excess backcopy| {_n(row, 'd_excess_backcopy')}).")  # fmt: skip


FINDINGS = (
    Finding(
        "consensus",
        "R9",
        "Trained SmolLM2 with its MLPs does not collapse",
        "cycling a trained model's layers drives its tokens to consensus (pre-registered: mean log10 E_first falls "
        "by ≥ 1 decade from pass 1 to pass 100, 95 % CI excluding 0, Spearman ≤ −0.9, MLPs on and off).",
        lambda r: (
            f"with MLPs on, the fall is {interval_words(r, 'min_fall_decades')} decades (Spearman "
            f"{_n(r, 'spearman MLP on')}); with MLPs off it is {_n(r, 'fall MLP off')} decades."
        ),
        "SmolLM2 (fixed weights) cycled 100 times through its layers (`periodic`), 3 prompts in each of 3 domains; "
        "the interval is the percentile bootstrap over the 9 prompts.",
        "attention alone contracts (MLP off: a power law, slope −0.89, a decade by pass 30); the MLPs undo it, "
        "while E_pair over positions ≥ 1 still falls: the tokens other than the sink gather, the sink stays apart "
        "(docs/consensus.md).",
        "an interval above 1 decade with MLPs on, at more passes or on other prompts or another trained model.",
    ),
    Finding(
        "paths",
        "S7",
        "Gradient-descent ensembles do not give the posterior's U",
        "an ensemble of networks trained by gradient descent (attention frozen) gives the theory's order parameter "
        "U (bar: ‖U_GD − U‖/‖U‖ ≤ 0.3).",
        lambda r: (
            f"‖U_GD − U‖/‖U‖ = {interval_words(r, 'rel_frob_err_gd')}; in the hand runs of "
            "docs/attention-paths.md its run-to-run standard error is 0.006 (16 runs), and it is 0.58 at "
            "3,000 steps, before the runs converge."
        ),
        "16 runs of full-batch Adam from prior draws on the negative log posterior, 10,000 steps, at N = 10 "
        "(`paths ensemble`); U_GD = mean over runs of V_eff V_effᵀ/N_1.",
        "the converged runs agree with each other but spread weight over every path with large cross terms, where "
        "the theory (and the sampled Û, within 0.084 of U) keeps the good>uniform path dominant: GD finds the "
        "posterior's modes, not its average (docs/attention-paths.md).",
        "an ensemble whose error falls below 0.3 as it converges (more runs, noise in the updates as in Langevin "
        "dynamics), which would show the gap is the ensemble's size and not its kind.",
    ),
    Finding(
        "paths",
        "SC-H1",
        "The authors' H = 1 entropy is rejected at L = 2",
        "the authors' entropy σ^(−2(L+1))U − ln U for one head is supported by sampling (|a| ≤ 3 SE on every "
        "diagonal entry, e(64) ≤ 0.05).",
        lambda r: (
            f"in C2 (H = 1, L = 2) the simple form's largest |a|/SE is {_n(r, 'simple_max_a_over_se_H1')} "
            f"and e(64) = {_n(r, 'simple_e_N64_max_H1')}; the §7.3 gates passed at every point (points "
            f"failing R̂ 1.01: {_n(r, 'points_failing_rhat_1.01')}, failing ESS 400: "
            f"{_n(r, 'points_failing_ess_400')})."
        ),
        "the §10 adjudication: collapsed HMC, 4 chains of 1000 warmup + 2000 draws (doubled until the gates pass), "
        "C1–C3 × α ∈ {1, 4} × N ∈ {8, 16, 32, 64}; an intercept a of the finite-N fit in standard errors of the "
        "sampler's MCSE.",
        "the chain form (our derivation) is supported in C1 and C2 (|a|/SE 2.38 and 0.16): at L = 2 the simple "
        "form's entropy misses the second layer's contribution (docs/attention-paths.md).",
        "an error in the chain derivation or the sampler that moves C2's intercept below 3 SE for the simple form; "
        "gate 1 (full against collapsed) and the sampler checks T12–T14, T17 guard the second.",
    ),
    Finding(
        "bb",
        "R25",
        "The value drain comes before the sink",
        "along training, the sink forms (Attn⟨s⟩ rises) while the value state drains and the residual grows, in "
        "that order (mutual reinforcement).",
        lambda r: (
            f"Attn⟨s⟩ rises by {interval_words(r, 'sink_rise')}; the value drain's onset minus the sink's is "
            f"{interval_words(r, 'value_minus_sink_onset')} steps (negative: the drain first), and the "
            f"residual's onset after the drain {interval_words(r, 'resid_minus_value_onset')} steps (its order "
            "undecided); the hand run of docs/real-models.md gives the same order (drain 125, sink 250, residual "
            "1325)."
        ),
        "a 3-layer GPT-2 (d 64) trained 1,500 steps on Bigram-Backcopy with `<s>` at position 0 (`attnlab series "
        "train`), its 61 checkpoints scanned; onset = the first checkpoint with half of the metric's change.",
        "token 0's value norm drains by step 100–250, before any head attends to it: a small value state makes "
        "`<s>` a cheap no-op target, so the drain can prepare the sink rather than follow it.",
        "the order reversed on more seeds or at another width or architecture (the Llama series forms no strong "
        "sink, so it cannot tell).",
    ),
    Finding(
        "consensus",
        "R10",
        "The ordering of the schedules reverses with MLPs on",
        "RST's ordering: at the final depth, mean log10 E is ordered constant < periodic < random with disjoint "
        "95 % CIs (pre-registered).",
        lambda r: (
            f"MLPs off, the order holds in the means (periodic − constant "
            f"{_n(r, 'mean_gap_off_constant_periodic')}, "
            f"random − periodic {_n(r, 'mean_gap_off_periodic_random')} decades) but the constant and "
            f"periodic CIs overlap (gap {_n(r, 'ci_gap_off_constant_periodic')}); MLPs on, periodic comes "
            f"last: random − periodic = {interval_words(r, 'mean_gap_on_periodic_random')} decades (CI gap "
            f"{_n(r, 'ci_gap_on_periodic_random')}; paired bootstrap over prompts "
            f"[{_n(r, 'mean_gap_on_periodic_random_paired_low')}, "
            f"{_n(r, 'mean_gap_on_periodic_random_paired_high')}], shown)."
        ),
        "SmolLM2 cycled 100 passes under each schedule, MLPs on and off, 3 prompts × 3 domains; bootstrap CIs "
        "over prompts.",
        "with MLPs on, the periodic stack keeps the sink apart from the other tokens (R9's mechanism), so E_first "
        "measured from position 0 stays high; the random stack is a different regime (updates of norm ~1 against "
        "residual norms of 10⁴–10⁵, open point 7).",
        "the periodic/random gap changing sign at other prompts or more passes, or a random stack scaled to the "
        "trained model's update norms.",
    ),
    Finding(
        "bb",
        "R19",
        "Attention and MLP subspaces overlap more than chance",
        "in the toy model, attention and MLP write into different subspaces (spec: attention energy inside the MLP "
        "subspace < 0.1).",
        lambda r: r19_estimate(r),
        "the sequential 1-layer cpu-preset model, layer 0, its evaluation batch; subspaces by 95 % energy "
        "(`attnlab bb subspace`); the random-subspace draws (issue 39) give the chance level's interval.",
        "the smallest principal angle is 28°: the two blocks share directions (docs/extreme-tokens.md); the spec's "
        "bar of 0.1 lies below what a random subspace holds, so it could not be met by chance either.",
        "an energy below the random draws' range at the spec's scale (2,000 steps) or on more seeds.",
    ),
)


def paragraph(f: Finding, row: dict) -> str:
    """One finding as a Markdown paragraph."""
    return (f"**{f.title}** ({f.study} {f.tid}, verdict **{row['verdict']}**). *Claim:* {f.claim} *Estimate:* "
            f"{f.estimate(row)}{seeds_note(row)} *Protocol:* {f.protocol} *Mechanism:* {f.mechanism} *What would "
            f"overturn it:* {f.overturn}")  # fmt: skip


def other_clear_misses(record: dict) -> list[dict]:
    """Claim rows missed with a real interval (more than one replicate) clear of the bar, not already a finding."""
    named = {(f.study, f.tid) for f in FINDINGS}
    return [r for r in record["rows"] if r.get("group") == "claim" and r["verdict"] == MISSED
            and r.get("replicates", 1) > 1 and (r["study"], r["id"]) not in named]  # fmt: skip


def findings(record: dict) -> list[str]:
    """The section's Markdown lines (a row missing from the record is skipped)."""
    rows = {(r["study"], r["id"]): r for r in record["rows"]}
    lines = ["## Findings", "",
             "The results below are stated as results: each with the claim, our estimate and interval, the "
             "protocol, the mechanism where we have one and what would overturn it. The estimates are read from "
             "this table's rows."]  # fmt: skip
    for f in FINDINGS:
        row = rows.get((f.study, f.tid))
        if row is not None and row.get("numbers"):
            lines += ["", paragraph(f, row)]
    for r in other_clear_misses(record):
        lines += [
            "",
            f"**{r['study']} {r['id']}: {r['claim']}** (missed, interval clear of the bar). *Claim:* "
            f"{r['threshold']}. *Estimate:* {r['why']}. *Protocol:* {r['note'] or 'see its row'}.",
        ]
    return lines
