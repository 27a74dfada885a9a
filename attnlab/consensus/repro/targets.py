"""The reproduction targets of the consensus spec (§7, §11 and its last section).

One `Target` row each: the spec's threshold in words and as `Check`s, the study runs it needs (experiment names
of `runs.py`) and its measure (`measures.py`, or a direct computation of `checks*.py`). `attnlab reproduce`
collects these rows (`attnlab.reproduce.targets.TARGETS`), runs, judges and writes them."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import replace

from attnlab.consensus.repro import measures as r
from attnlab.core.targets import CLAIMS_NOTE, Target, computed, grouped, with_reading
from attnlab.core.targets import Check as C
from attnlab.core.targets import recorded as _rec
from attnlab.core.targets import target as _t

_CS = "consensus §7"
_SMOL = "attnlab consensus model --model smollm2 --prompts 3 --seq-len 32"
_UNITS = "tests/consensus/test_invariants.py"
_CS_TAIL = "consensus, last section"
_WORST_NOTE = ("; 95 % interval: percentile bootstrap over the starts of the worst case (each start's worst over the "
               "cases, saved as '<number> start<i>'). A bootstrap of a maximum never exceeds the observed one, so the "
               "upper end is the observed worst case and a met verdict is the point estimate's; the lower end shows "
               "the spread over the starts")  # fmt: skip
# fmt: off
CONSENSUS = [
    _t("R1a", "consensus", _CS, "causal, V = I: the first token never moves",
       "‖x_1(t) − x_1(0)‖_∞ ≤ 1e-14 at every step", checks=[C("first_token_drift", "<=", 1e-14)],
       needs=["cons_causal"], measure=r.c_r1a,
       note="at the recorded states (every 10 steps) of the R1b runs (RK4); every integrator and map: "
            "tests/consensus/test_invariants.py",
       figure="random-scale1/figures/E_vs_time.png"),
    _t("R1b", "consensus", _CS, "causal, V = I, n = 10, Gaussian P at scale 1 and 4, all schedules",
       "E_first < 1e-6 by t = 60 for ≥ 95% of starts (64 starts at d = 3 in CI; 256 at d = 3, 16, 64 slow)",
       checks=[C("min_share_converged", ">=", 0.95)], needs=["cons_causal"], measure=r.c_r1b,
       note="the smallest share over the runs (shown per schedule and P scale, and per d); full profile: the spec's "
            "slow run, every schedule (constant, periodic, cycle, random) × P scale 1 and 4 × d = 3, 16, 64, 256 "
            "starts each; quick: schedules constant and random at d = 3 and 16, 64 starts (the CI size)",
       figure="constant-scale4/figures/E_vs_time.png"),
    _t("R2a", "consensus", _CS, "hemisphere invariance",
       "per-step drop of min_i⟨w,x_i⟩ ≤ 1e-14 (projected Euler, maps); ≤ 1e-12 (RK4, exp-Euler)",
       checks=[C("R2a_max_drop_euler_postnorm", "<=", 1e-14), C("R2a_max_drop_rk4_exp_euler", "<=", 1e-12)],
       needs=["cons_units"], measure=computed("cons_units", "R2a_"),
       note="V = I, random P (2 heads), 8 starts of 8 tokens in d = 4 near the boundary of ⟨e_0, x⟩ > 0, h = 0.05 to "
            "t = 4, SA and USA, both masks (" + _UNITS + "::test_hemisphere_invariance)"),
    _t("R2b", "consensus", _CS, "late entry (starts outside every open hemisphere)",
       "after entry the margin at the entry-time w never drops by more than 1e-12 per step; ≥ 95% of starts reach "
       "E_pair < 1e-8 by t = 60",
       checks=[C("start_lp_margin_max", "<=", 1e-12), C("max_margin_drop_after_entry", "<=", 1e-12),
               C("share_E_pair_below_1e-8", ">=", 0.95)], needs=["cons_late"], measure=r.c_r2b,
       note="n = 6, d = 3, P = V = I, β = 1, RK4 h = 0.1; starts: 5 random tokens and minus their normalised sum "
            "(LP margin 0); entry = first step with LP margin > 1e-9 (bisection), w = the LP's there"),
    _t("R2c", "consensus", _CS, "tail rates of §4.6, n = 8, d = 5",
       "fitted slope of log E over E ∈ [1e-11, 1e-3] within 5% of the prediction",
       checks=[C("worst_rel_err", "<=", 0.05)], needs=["cons_tails"], measure=r.c_r2c,
       note="every case of §4.6 (full/causal × SA/USA), the spec's window for all; worst case and start (the same "
            "starts in every case: 2, tiny 1)" + _WORST_NOTE),
    _t("R3", "consensus", _CS, "full attention, V = I, generic starts (d = 3, n = 32, 256 starts)",
       "≥ 99% reach E_pair < 1e-6 by t = 100; failures saved", checks=[C("min_share_E_pair_below_1e-6", ">=", 0.99)],
       needs=["cons_full"], measure=r.c_r3, note="constant and random P; quick: 64 starts each",
       figure="random/figures/E_vs_time.png"),
    _t("R4a", "consensus", _CS, "gradient case V = P symmetric", "relative per-step drop of F_{β,P} ≤ 1e-12",
       checks=[C("R4a_max_rel_energy_drop", "<=", 1e-12)], needs=["cons_units"],
       measure=computed("cons_units", "R4a_"),
       note="P = I and a random symmetric P, SA and USA, β = 1.5, RK4 h = 0.05 to t = 8 (" + _UNITS
            + "::test_energy_monotone_gradient_case)"),
    _t("R4b", "consensus", _CS, "constant symmetric V with gap ≥ 0.3", "1 − |⟨x_i, v_1⟩| < 1e-10 for every i by t = 60",
       checks=[C("R4b_max_misalignment", "<", 1e-10)], needs=["cons_units"], measure=computed("cons_units", "R4b_"),
       note="V with eigenvalues 1, 0.6, 0.2, −0.3, random P, RK4 h = 0.1 to t = 60, both masks, the worst token of 8 "
            "starts (" + _UNITS + "::test_symmetric_value_consensus_at_top_eigenvector)" + _WORST_NOTE),
    _t("R4c", "consensus", _CS, "slowly rotating V, ω 0.005–0.04", "lag after the transient within 5% of ω/(λ_1 − λ_2)",
       checks=[C("R4c_max_rel_err_lag", "<=", 0.05)], needs=["cons_lag"], measure=computed("cons_lag", "R4c_"),
       note="SA, n = 6, d = 4, V(t) = R(ωt) diag(1, 0.6, 0.2, −0.3) R(ωt)ᵀ turning in its top eigenplane, random "
            "constant P (as R4b), RK4 h = 0.1 to t = 60; lag = angle of the normalised token mean behind v_1(t) at "
            "every start and record with t ≥ 30 (after the transient), against theory.predicted_lag; ω ∈ {0.005, "
            "0.01, 0.02, 0.04}, both masks, 8 starts (tiny: full mask, ω 0.005 and 0.04, 2 starts). The exact steady "
            "lag ½ arcsin(2ω/(λ_1 − λ_2)) is 0.7% above the linearised one at ω = 0.04" + _WORST_NOTE),
    _t("R5a", "consensus", _CS, "ρ-ODE functions",
        "ρ = 1 is fixed; near-1 slopes of −2 (SA) and −2e^β (USA) within 1e-4",
       checks=[C("rho_rhs_at_1", "<=", 0), C("sa_slope_abs_err", "<=", 1e-4), C("usa_slope_rel_err", "<=", 1e-4)],
       needs=["cons_rho"], measure=r.c_r5a, note="n = 16, β ∈ {0.5, 1, 2, 4}, one-sided difference at 1 − 1e-7"),
    _t("R5b", "consensus", _CS, "simulation vs ρ-ODE, d = 512", "sup_t |mean off-diagonal cosine − ρ(t)| ≤ 0.06",
       checks=[C("R5b_max_gap", "<=", 0.06)], needs=["cons_rho_sim"], measure=computed("cons_rho_sim", "R5b_"),
       note="n = 32, Gaussian starts, SA at β = 1 and 4, USA at β = 1, RK4 h = 0.05 to t = 12, states every 4 steps; "
            "the sup over starts, times and cases (tests/consensus/test_slow_theory.py::"
            "test_high_dimensional_random_start_follows_rho_ode); 8 starts (tiny: 1)" + _WORST_NOTE),
    _t("R6a", "consensus", _CS, "phase diagram vs the equiangular curve (d = 128, n = 32, β ∈ [0.5, 5], 64 starts)",
       "t₅₀(β) within 10% of t_eq(β)", checks=[C("max_abs_rel_gap", "<=", 0.10), C("betas_never_half", "<=", 0)],
       needs=["cons_phase"], measure=r.c_r6a, note="every β of the grid (quick: 10 betas, 16 starts; full: 46, 64)",
       figure="figures/phase_diagram.png"),
    _t("R6b", "consensus", _CS, "sweep integrator, d = 8, β ∈ {1, 3, 5}", "t₅₀ from Euler at h = 0.1 within 5% of RK4",
       checks=[C("max_rel_diff_t50", "<=", 0.05)], needs=["cons_sweep_integrator"], measure=r.c_r6b,
       note="`consensus phase` (n = 32, t ≤ 30, 256 starts; tiny: 32) with `--integrator euler` and `--integrator "
            "rk4` from the same starts, both at h = 0.1 (the spec names no RK4 step; RK4 is the flag's reference); "
            "the largest |t₅₀(Euler)/t₅₀(RK4) − 1| over the three β",
       figure="euler/figures/phase_diagram.png"),
    _t("R7a", "consensus", _CS, "global clustering, Q = K = V = I, d = 3, n = 32, β ≤ 1",
       "≥ 99% of starts have cluster_count = 1 at t = 30", checks=[C("min_share_one_cluster", ">=", 0.99)],
       needs=["cons_cluster"], measure=r.c_r7a, note="β ∈ {0.5, 1}, Euler h = 0.1",
       figure="beta1/figures/E_vs_time.png"),
    _t("R7b", "consensus", _CS, "metastability, d = 3, n = 32, β ∈ {4, 9}",
       "at β = 9 the mean count is ≥ 2 at t = 30, 100 and 200, and non-increasing over those times",
       checks=[C("min_count_beta9", ">=", 2), C("max_increase_beta9", "<=", 0)], needs=["cons_cluster"],
       measure=r.c_r7b,
       figure="beta9/figures/E_vs_time.png"),
    _t("R8", "consensus", _CS, "random Llama-shaped stack, 50 passes",
       "pre-registered: Spearman(pass, mean log10 E_first) ≤ −0.8 and a ≥ 3× drop",
       checks=[C("R8_max_spearman", "<=", -0.8), C("R8_min_drop", ">=", 3)], needs=["cons_llama_stack"],
       measure=computed("cons_llama_stack", "R8_"),
       note="4 layers, d = 128, 4 heads, 2 KV heads, Linear std 0.02, 4 prompts of T = 32 random ids, causal; mean "
            "log10 E_first over prompts at each pass end, drop = 10^(pass 1 − last pass); the largest Spearman and "
            "smallest drop of the four cases (stack fixed or redrawn per pass × MLP on/off) "
            "(tests/consensus/test_realmodel.py::test_random_llama_stack_collapses); 50 passes (tiny: 10, not the "
            "protocol). 95 % intervals: percentile bootstrap over the 4 prompts (the same resampled prompts in every "
            "case) of the largest Spearman and the smallest drop of the resampled prompts' mean curves; with 4 prompts "
            "there are only 35 distinct resamples, so the interval is coarse. Shown per prompt: the worst case of "
            "each prompt's own curve"),
    _t("R9", "consensus", _CS, "trained SmolLM2 cycled (periodic), MLP on and off",
       "pre-registered: mean log10 E_first falls by ≥ 1 from pass 1 to 100, 95% CI excluding 0; Spearman ≤ −0.9",
       checks=[C("min_fall_decades", ">=", 1), C("min_fall_decades", ">", 0), C("max_spearman", "<=", -0.9)],
       needs=["cons_rst"], measure=r.c_r9,
       note="smallest fall and largest Spearman over MLP on and off, 100 periodic passes, 3 prompts per domain (full "
            "profile); the spec's '95% CI excluding 0' is min_fall_decades > 0 judged by its interval (issue 39); "
            "intervals: the percentile bootstrap over the 9 prompts of the smallest fall and of the largest "
            "Spearman (one resample of prompts for both settings; a run before issue 39 saved only the fall's low "
            "end, mirrored about the estimate); the recorded hand run had 30 passes (MLP off: fall 1.14 [1.03, "
            "1.25], Spearman −1.00, met early)",
       figure="figures/E_vs_pass.png",
       recorded=_rec("docs/consensus.md (30 passes, `periodic`, runs/consensus-smollm2-p30): MLP on fall −0.05 "
                     "[−0.11, −0.00], Spearman −0.75",
                     _SMOL + " --schedule periodic --both-mlp --passes 30 --no-depth-view "
                     "--out runs/consensus-smollm2-p30",
                     min_fall_decades=-0.05, min_fall_ci_low=-0.11, max_spearman=-0.75)),
    _t("R10", "consensus", _CS, "RST ordering: constant < periodic < random",
       "pre-registered: at the final depth, mean log10 E ordered with disjoint 95% CIs",
       checks=[C(f"mean_gap_{m}_{a}", ">", 0) for m in ("off", "on") for a in ("constant_periodic", "periodic_random")],
       needs=["cons_rst"], measure=r.c_r10,
       note="mean_gap = the later schedule's mean log10 E_first minus the earlier's, MLP off and on, after 100 "
            "passes (full profile), judged by the spec's rule as an interval (issue 39): [ci_gap, ci_span], the "
            "lower CI end of the later minus the upper of the earlier (> 0: disjoint and ordered, met) to the upper "
            "end of the later minus the lower of the earlier (< 0: disjoint in the reverse order, missed), "
            "overlapping CIs inconclusive; each CI the percentile bootstrap over the 9 prompts. Ours, shown in the "
            "numbers, not judged: the paired bootstrap of the mean gap over the prompts (_paired_low/_paired_high; "
            "every schedule runs the same prompts, so it is narrower). Slope vs roughness reported, not judged: "
            "slope_vs_roughness_off/on = decades of final log10 E_first per unit of the attention projections' "
            "roughness r (spec §3, `realmodel.stack_roughness`: mean ‖W_{k+1} − W_k‖_F/‖W_k‖_F over one cycle; "
            "0 constant, about √2 random), least squares over the three schedules, _low/_high its 95 % percentile "
            "bootstrap over the 9 prompts",
       recorded=_rec("docs/consensus.md (10 passes, runs/consensus-smollm2-p10-v2): MLP off constant −2.78 "
                     "[−3.19, −2.36], periodic −2.17 [−2.41, −1.95], random −1.28 [−1.36, −1.21]; MLP on "
                     "constant −1.99, random −0.86, periodic −0.22",
                     _SMOL + " --passes 10 --schedule constant --schedule periodic --schedule random --both-mlp "
                     "--out runs/consensus-smollm2-p10-v2",
                     ci_gap_off_constant_periodic=-0.05, ci_gap_off_periodic_random=0.59,
                     mean_gap_off_constant_periodic=0.61, mean_gap_off_periodic_random=0.89,
                     mean_gap_on_constant_periodic=1.77, mean_gap_on_periodic_random=-0.64)),
    _t("R11", "consensus", _CS, "optimal depth",
        "C(0) = 0; KL_model(30) ≤ 1e-5; interior peak with C(final) ≤ 0.5·C(peak)",
       checks=[C("C0", "abs<=", 0), C("KL_model_30_independent", "<=", 1e-5), C("interior_peak", ">=", 1),
               C("C_final_over_peak", "<=", 0.5)],
       needs=["cons_depth"], measure=r.c_r11,
       note="SmolLM2 periodic, MLP on, 30 passes with the depth view (full profile). KL_model(30): our "
            "layer-by-layer pass after one pass against the model's own forward (transformers' logits), the "
            "reference since issue 18 (it was the pass against itself before); toy version: "
            "tests/consensus/test_invariants.py::test_toy_optimal_depth_context_influence",
       figure="figures/context_influence.png"),
    _t("C-llama", "consensus", "consensus §7, further CI-fast checks",
       "tiny random LlamaConfig (2 layers, d = 64, 4 heads, 2 KV heads)",
       "one layer-by-layer pass = the model's own state to 1e-5 (float32) / 1e-10 (float64); MLP off = x + "
       "o_proj(attn(norm(x))) by hand; position 0 ignores tokens 2..T, bitwise in float64; random redraws repeat "
       "for the same seed and differ between passes",
       checks=[C("C-llama_fp32_max_abs_err", "<=", 1e-5), C("C-llama_fp64_max_abs_err", "<=", 1e-10),
               C("C-llama_mlp_off_by_hand_max_abs_err", "<=", 1e-12), C("C-llama_pos0_max_abs_diff", "<=", 0),
               C("C-llama_later_positions_differ", ">=", 1), C("C-llama_same_seed_max_abs_diff", "<=", 0),
               C("C-llama_next_pass_max_abs_diff", ">", 0), C("C-llama_next_pass_new_stack", ">=", 1)],
       needs=["cons_llama_units"], measure=computed("cons_llama_units", "C-llama_"),
       note="against the model's own forward (transformers' hidden_states after each layer and last_hidden_state "
            "after the final norm, 3 prompts of 12 random ids) and a computation by hand (the model's norm, "
            "projections and rotary tables; our RoPE, grouped KV heads and causal softmax), never the runner with "
            "itself; the spec says 'equals' for the MLP-off clause, read to 1e-12 in float64 (the tolerance of "
            "tests/consensus/test_realmodel.py); position 1 must differ (the context reaches it); redraws: q_proj "
            "of layer 1 from two runners with seed 5, and seeds 5 and 6 (consecutive passes)"),
    _t("C-order", "consensus", "consensus §7, further CI-fast checks", "convergence order",
       "RK4 in [3.7, 4.3]; Euler, exp-Euler [0.9, 1.1]; post-norm [0.8, 1.2]",
       checks=[C("C-order_rk4", "in", (3.7, 4.3)), C("C-order_euler", "in", (0.9, 1.1)),
               C("C-order_exp_euler", "in", (0.9, 1.1)), C("C-order_postnorm", "in", (0.8, 1.2))],
       needs=["cons_units"], measure=computed("cons_units", "C-order_"),
       note="log2 of the error ratio from h = 0.1 to 0.05 against RK4 at h = 0.2/64, t = 1, two random SA heads "
            "(tests/consensus/test_solvers.py::test_convergence_order)"),
    _t("C-ref", "consensus", "consensus §7, further CI-fast checks", "agreement with reference solvers",
       "RK4 h = 0.01 vs DOP853 to 1e-7; USA on S¹ vs the angle ODE to 1e-7",
       checks=[C("C-ref_rk4_vs_dop853", "<=", 1e-7), C("C-ref_usa_circle_vs_angle_ode", "<=", 1e-7)],
       needs=["cons_units"], measure=computed("cons_units", "C-ref_"),
       note="SciPy's DOP853 at rtol = atol = 1e-13; both masks for the ambient ODE, t = 5; the circle to t = 3 "
            "(tests/consensus/test_solvers.py)"),
    _t("C-meas", "consensus", "consensus §7, further CI-fast checks", "measure identities",
       "consensus, orthonormal, planted clusters, antipodal pair, rotation",
       checks=[C("C-meas_max_identity_err", "<=", 1e-12), C("C-meas_cluster_counts_right", ">=", 1)],
       needs=["cons_units"], measure=computed("cons_units", "C-meas_"),
       note="the largest deviation from the exact values of the §6 identities, to 1e-12 (the tolerance of "
            "tests/consensus/test_measures.py; the spec states the identities, not a tolerance)"),
    _t("C-norm", "consensus", "consensus §7, further CI-fast checks", "norms stay at 1", "within 1e-12",
       checks=[C("C-norm_max_abs_norm_minus_1", "<=", 1e-12)], needs=["cons_units"],
       measure=computed("cons_units", "C-norm_"),
       note="every integrator × schedule, 2 heads, random V, h = 0.05 to t = 3 (" + _UNITS + "::test_norms_stay_one)"),
    _t("B1", "consensus", "consensus §11", "batched simulation speed: 256 starts, n = 32, d = 8, SA, t = 30, h = 0.1",
       "RK4 ≤ 5 s; Euler ≤ 2 s; ≥ 100× faster than the per-token-loop baseline",
       checks=[C("rk4_seconds", "<=", 5), C("euler_seconds", "<=", 2), C("speedup_rk4", ">=", 100),
               C("speedup_euler", ">=", 100)], needs=["cons_bench"], measure=r.c_b1,
       note="wall seconds of `consensus.integrators.integrate` on this machine with the reproduce run's threads "
            "(the spec's 2 threads: `--threads 2`); the baseline loops over queries and keys in Python on 1 start × "
            "10 steps, extrapolated per start-step (as benchmarks/bench_consensus.py does)"),
    _t("B2", "consensus", "consensus §11", "phase diagram: n = 32, d = 8, 90 β in [0.1, 9], 256 starts, t ≤ 30, Euler",
       "≤ 60 s on 2 cores", checks=[C("phase_seconds", "<=", 60)], needs=["cons_b2"], measure=r.c_b2,
       note="the sweep of `consensus phase` at its defaults (B2's settings, float64) in its own experiment "
            "(`checks_theory.cons_b2`) on 2 torch threads, its compute seconds; load_at_start is the 1-minute load "
            "average when it began: judged only below 1.5 on 2 threads, else not judged (the row gives the time "
            "and the load)"),
    _t("B3", "consensus", "consensus §11", "larger sweeps", "reported only",
       checks=[C("phase_seconds", ">", 0), C("frac_finite", ">=", 1)], needs=["cons_b3"], measure=r.c_b3,
       note="reported only (the spec sets no bound; the checks say the sweep completed and its fractions are "
            "finite): `consensus phase --d 128` at B2's other settings (n = 32, 256 starts, 90 β in [0.1, 9], t ≤ 30, "
            "h = 0.1, projected Euler, float64), its compute seconds with the reproduce run's threads, size and "
            "nominal score work; full profile only (671 s measured on one thread of the loaded 2-core machine). "
            "The spec's optional GPU preset (2048 starts, d = 128 and 1024) is not run",
       figure="figures/phase_diagram.png"),
    _t("B4", "consensus", "consensus §11", "SmolLM2 full", "seconds per pass and peak RSS",
       checks=[C("seconds_per_pass", ">", 0), C("peak_rss_mb", ">", 0)], needs=["cons_decode"], measure=r.c_b4,
       note="reported only (the spec sets no bound; the checks say both numbers exist): seconds per pass of the "
            "slowest group of R14's run; peak RSS of the process that ran it (run sequentially: the largest so far "
            "in the reproduce process; `--workers` isolates it)"),
    _t("R12", "consensus", _CS_TAIL, "the counterexample (P = 0; rotating V)",
       "consensus for V = I; not for a rotating V",
       checks=[C("share_identity", ">=", 1), C("share_rotation", "<=", 0)], needs=["cons_counter"],
       measure=r.c_r12, note=CLAIMS_NOTE.format("consensus", "R12") + "; consensus: E_first < 1e-6 at t = 30; "
                              "n = 16, d = 4, RK4",
       figure="R12.png"),
    _t("R13", "consensus", _CS_TAIL, "normalisation as projection (SmolLM2)",
       "relative error of the idealised RMSNorm per layer",
       checks=[C("max_layer_rel_error", "<", 0.1), C("same_conclusion", ">=", 1)], needs=["cons_norm"],
       measure=r.c_r13, note=CLAIMS_NOTE.format("consensus", "R13") + "; same conclusion: E_first falls by "
                              "the same mark with the real and the idealised norms (MLPs off)",
       figure="R13.png"),
    _t("R14", "consensus", _CS_TAIL, "\"all tokens become one token\"",
       "fraction of positions with the most common top-1 token vs passes",
       checks=[C("min_share_final", ">=", 0.9)], needs=["cons_decode"], measure=r.c_r14,
       note=CLAIMS_NOTE.format("consensus", "R14") + "; per prompt, the share of positions whose top-1 token "
            "(final norm + head) is its most common one, mean over prompts, smallest over MLP on/off, after the "
            "last pass (quick: 10 passes, full: 30)",
       figure="figures/decode_share.png"),
]
# fmt: on


def worst_over_starts(key: str) -> Callable[[dict], dict]:
    """The intervals of a row judged on `key`, the largest over starts of a per-start number saved as
    "<key> start<i>" (i = 0, 1, ...; `checks_theory.per_start_numbers`): {key: the percentile bootstrap over the
    starts of their maximum} (`intervals.bootstrap_interval`, a fixed generator so the table repeats). Its upper end
    is the observed maximum (no resample exceeds it, and more than 2.5 % of them hold it). ValueError when fewer than
    2 starts were saved or their maximum is not `key`'s number (a record without them: the point is judged)."""

    def intervals(numbers: dict) -> dict:
        import numpy as np

        from attnlab.core.intervals import bootstrap_interval

        found = {int(m[1]): v for k, v in numbers.items() if (m := re.fullmatch(re.escape(key) + r" start(\d+)", k))}
        values = [float(found[i]) for i in range(len(found))]  # KeyError on a gap in the starts
        iv = bootstrap_interval(values, np.random.default_rng(0), over="starts", statistic=lambda a: a.max(-1))
        if iv.estimate != float(numbers[key]):
            raise ValueError(f"{key}: the largest of the {len(values)} starts is {iv.estimate}, not {numbers[key]}")
        return {key: iv}

    intervals.__name__ = f"worst_over_starts_{key}"
    return intervals


def r8_intervals(numbers: dict) -> dict:
    """R8's largest Spearman and smallest drop with the percentile bootstrap over its prompts that the computation
    saved (`checks_llama.worst_case_bootstrap`: `_low`, `_high`, `R8_prompts`)."""
    from attnlab.core.intervals import BOOTSTRAP, Interval

    n = int(numbers["R8_prompts"])
    return {k: Interval(float(numbers[k]), float(numbers[f"{k}_low"]), float(numbers[f"{k}_high"]), n,
                        BOOTSTRAP.format("prompts")) for k in ("R8_max_spearman", "R8_min_drop")}  # fmt: skip


def r9_intervals(numbers: dict) -> dict:
    """R9's smallest fall and largest Spearman with the percentile bootstrap over its 9 prompts (3 per domain)
    that the measure saved (`measures._r9_bootstrap`: `_low`, `_high`, `R9_prompts`). A record from before issue 39
    keeps only the fall's low end (`min_fall_ci_low`): the high end is mirrored about the estimate (a bootstrap of
    a mean of 9 is near symmetric) and the Spearman is judged as a point."""
    from attnlab.core.intervals import BOOTSTRAP, Interval

    method = BOOTSTRAP.format("prompts")
    if "min_fall_decades_low" not in numbers:
        est, low = float(numbers["min_fall_decades"]), float(numbers["min_fall_ci_low"])
        return {"min_fall_decades": Interval(est, low, 2 * est - low, 9, method)}
    n = int(numbers["R9_prompts"])
    return {k: Interval(float(numbers[k]), float(numbers[f"{k}_low"]), float(numbers[f"{k}_high"]), n, method)
            for k in ("min_fall_decades", "max_spearman")}  # fmt: skip


def r10_intervals(numbers: dict) -> dict:
    """R10's mean gaps judged by the spec's rule, as intervals: [ci_gap, ci_span] from the two schedules' 95 %
    bootstrap CIs over the prompts (`measures.c_r10`): met when they are disjoint and ordered, missed when disjoint
    in the reverse order, inconclusive when they overlap. A record without the spans (before issue 39) has none."""
    from attnlab.core.intervals import Interval

    n = int(numbers.get("R10_prompts", 9))
    return {f"mean_gap_{g}": Interval(float(numbers[f"mean_gap_{g}"]), float(numbers[f"ci_gap_{g}"]),
                                      float(numbers[f"ci_span_{g}"]), n,
                                      "the two schedules' 95 % CIs (percentile bootstrap over prompts), differenced")
            for m in ("off", "on") for g in (f"{m}_constant_periodic", f"{m}_periodic_random")}  # fmt: skip


# the library checks (the spec's CI tier: invariants to round-off, solver orders, reference agreement, measure
# identities on constructed states) and the timings (§11); the rest are claims of the papers
_CHECKS = ("R1a", "R2a", "R2b", "R4a", "R5a", "R6b", "C-llama", "C-order", "C-ref", "C-meas", "C-norm")
_REPORTED = (("B3", (C("phase_seconds", ">", 0), C("frac_finite", ">=", 1))),
             ("B4", (C("seconds_per_pass", ">", 0), C("peak_rss_mb", ">", 0))))  # fmt: skip


# the rows with their own 95 % intervals: a fixed model resamples what varies (issue 39; docs/consensus.md,
# "Intervals of the sphere-dynamics rows")
_INTERVALS: tuple[tuple[str, Callable[[dict], dict]], ...] = (
    ("R2c", worst_over_starts("worst_rel_err")), ("R4b", worst_over_starts("R4b_max_misalignment")),
    ("R4c", worst_over_starts("R4c_max_rel_err_lag")), ("R5b", worst_over_starts("R5b_max_gap")),
    ("R8", r8_intervals), ("R9", r9_intervals), ("R10", r10_intervals),
)  # fmt: skip


def _fold(rows: list[Target]) -> list[Target]:
    """B3 and B4 have no bar (reported: their old checks, which cannot fail, shown); R8, R9 and the worst cases over
    starts carry their bootstraps (`_INTERVALS`)."""
    out, reported, own = [], dict(_REPORTED), dict(_INTERVALS)
    for t in rows:
        if t.id in reported:
            t = with_reading(replace(t, checks=()), shown=reported[t.id])
        elif t.id in own:
            t = with_reading(t, intervals=own[t.id])
        out.append(t)
    return out


TARGETS: tuple[Target, ...] = tuple(_fold(grouped(CONSENSUS, checks=_CHECKS, timings=("B1", "B2", "B3", "B4"))))
