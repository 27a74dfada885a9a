"""The reproduction targets of the attention-paths spec (§13, §16 and the seed claims).

One `Target` row each: the spec's threshold in words and as `Check`s, the study runs it needs (experiment names
of `runs.py`) and its measure (`measures.py`, or a direct computation of `checks*.py`). `attnlab reproduce`
collects these rows (`attnlab.reproduce.targets.TARGETS`), runs, judges and writes them."""

from __future__ import annotations

from attnlab.core.targets import CLAIMS_NOTE, SEED, Target, computed, grouped, with_reading
from attnlab.core.targets import Check as C
from attnlab.core.targets import recorded as _rec
from attnlab.core.targets import target as _t
from attnlab.paths.repro import measures as r
from attnlab.paths.repro.checks_full_profile import ADJUDICATION

_PT, _PT16 = "attention-paths §13", "attention-paths §16"
# Check.exact: why a judged number of a claim row has no sampling error (its interval is the point; issue 39)
_THEORY = "the deterministic theory sweep at the task's draw"
_GATE = "the sampler's §7.3 gate"
_BUDGET = "the slowest network's measured training time, a budget"


# fmt: off
UNIT_CHECKS = {  # CI fast-tier checks that unit tests cover (id, check, tolerance, test file)
    "T1": ("[N1–N4] equals the path form [N7]", "1e-10", "tests/paths/test_network.py"),
    "T2": ("attention columns sum to 1; attention depends only on x", "1e-12", "tests/paths/test_network.py"),
    "T3": ("Gram mode = factor mode = direct contraction", "1e-12", "tests/paths/test_network.py"),
    "T4": ("chain entropy gradient zero at the GP point; solver at N = 1e12 returns Σ²I", "1e-10; 1e-8",
           "tests/paths/test_theory.py"),
    "T7": ("analytic gradient vs autograd; vs central finite differences", "1e-10; 1e-6 rel.",
           "tests/paths/test_theory.py"),
    "T8": ("H = 1, L ∈ {1, 2}: each form's solver = scalar_reference; U → Σ² as α → 0", "1e-8",
           "tests/paths/test_theory.py"),
    "T9": ("U = Σ²I reproduces GP regression; full U = direct solve; σ_f² ≥ 0", "1e-10", "tests/paths/test_theory.py"),
    "T12": ("AR(1) chains: ESS within 15% of n(1−ρ)/(1+ρ); R̂ > 1.1 for shifted chains", "—",
            "tests/paths/test_sampling.py"),
    "T13": ("HMC and MALA on a correlated 20-d Gaussian: mean and covariance", "5 MCSE",
        "tests/paths/test_sampling.py"),
    "T14": ("prior-only sampling gives E[Û] = Σ²I", "5 MCSE", "tests/paths/test_sampling.py"),
    "T15": ("Markov shapes 31×231, balance, stay rates 0.7/0.3; digits: disjoint classes, balance, determinism",
            "±0.02", "tests/paths/test_tasks.py"),
    "T16": ("each bad input of §12 raises its error; memory refusal before allocation", "exact",
            "tests/paths/test_errors.py, tests/paths/test_bad_inputs.py"),
    "T17": ("collapsed log density = explicit Gaussian marginal over V^(0)", "1e-10", "tests/paths/test_sampling.py"),
}
MEASURED_UNITS = {  # id -> its checks on the numbers of checks_theory.paths_units (the functions the tests call)
    "T1": [C("T1_max_abs_diff", "<=", 1e-10)],
    "T2": [C("T2_max_abs_diff", "<=", 1e-12)],
    "T3": [C("T3_max_abs_diff", "<=", 1e-12)],
    "T4": [C("T4_gp_entropy_gradient", "<=", 1e-10), C("T4_huge_N_max_abs_U_minus_I", "<=", 1e-8)],
    "T7": [C("T7_grad_vs_autograd", "<=", 1e-10), C("T7_grad_vs_fd_rel", "<=", 1e-6)],
    "T8": [C("T8_solver_vs_root_finder", "<=", 1e-8), C("T8_small_alpha_U_minus_1", "<=", 1e-8)],
    "T9": [C("T9_mean_vs_gp", "<=", 1e-10), C("T9_var_vs_gp", "<=", 1e-10), C("T9_min_var", ">=", 0)],
    # checks_sampling.paths_sampling_units
    "T12": [C("T12_ess_max_rel_err", "<=", 0.15), C("T12_rhat_shifted", ">", 1.1)],
    "T14": [C("T14_max_z", "<=", 5)],
    "T17": [C("T17_max_abs_diff", "<=", 1e-10)],
    # checks_sampling.paths_samplers (T13 and S4) and checks_theory.paths_more_units (T6, T11, T15, T16): issue 18
    "T13": [C("T13_hmc_max_z", "<=", 5), C("T13_mala_max_z", "<=", 5)],
    "T15": [C("T15_markov_shapes_ok", ">=", 1), C("T15_markov_label_sum", "<=", 0),
            C("T15_stay_plus_minus_0.7", "abs<=", 0.02), C("T15_stay_minus_minus_0.3", "abs<=", 0.02),
            C("T15_digits_disjoint", ">=", 1), C("T15_digits_label_sum", "<=", 0), C("T15_digits_ok", ">=", 1)],
    "T16": [C("T16_not_refused", "<=", 0), C("T16_bad_inputs_tried", ">=", 1)],
}
UNIT_EXPERIMENTS = {  # id -> (experiment, what it runs on); the others: paths_units on a tiny bilinear network
    **{i: ("paths_sampling_units", "AR(1) chains and tiny networks (P = 6, 8)") for i in ("T12", "T14", "T17")},
    "T13": ("paths_samplers", "a correlated 20-d Gaussian (4 chains; HMC 400 + 800 draws, MALA 400 + 2000)"),
    "T15": ("paths_more_units", "400 Markov sequences (seed 5) and 40 test-class digit episodes"),
    "T16": ("paths_more_units", "29 bad inputs of §12 (shapes, values, NaN, labels, conditioning, user kernels, "
            "configs, the n_π cap) and the memory refusal (allocation during it: T16_refusal_peak_bytes, tracemalloc)"),
}
_TINY_NET = "a tiny random bilinear network (P = 10, N0 = 6, n_tok = 4)"


def _unit(tid: str, claim: str, tol: str, test: str) -> Target:
    """A CI-fast row of attention-paths §13, measured by the direct computation that calls the functions `test`
    calls (`UNIT_EXPERIMENTS`, else `checks_theory.paths_units`)."""
    exp, on = UNIT_EXPERIMENTS.get(tid, ("paths_units", _TINY_NET))
    note = f"the library functions {test} checks, on {on}"
    if tid == "T16":
        note += ("; T16_not_refused_names lists the inputs that were not refused in one line ('none' once all "
                 "are); the two it first found, a NaN in y reaching the solver (§12: 'no NaN or Inf anywhere') and "
                 "labels outside {±1} taken by the classification metrics (§12: 'classification metrics need y ∈ "
                 "{±1}'), are now refused; the spec's three error classes are one InputError here (docs/design.md)")
    return _t(tid, "paths", _PT, claim, tol, checks=MEASURED_UNITS[tid], needs=[exp], measure=computed(exp, f"{tid}_"),
              note=note)


PATHS = [
    *[_unit(i, c, tol, f) for i, (c, tol, f) in UNIT_CHECKS.items()],
    _t("T5", "paths", _PT, "U_a closed form = 1-D bounded minimiser", "1e-10",
       checks=[C("closed_form_vs_minimiser", "<=", 1e-10)], needs=["paths_ua"], measure=r.p_t5,
       note="the minimiser as tests/paths/test_theory.py computes it: a bounded 1-D minimiser (good to about "
            "sqrt(machine eps) only: closed_form_vs_bounded_minimiser, shown) refined by a root-finder on the "
            "action's derivative within 1e-4 of it (closed_form_vs_minimiser, judged)"),
    _t("T6", "paths", _PT, "[T8] satisfies [T7]", "1e-10",
       checks=[C("T6_T8_vs_T7_residual", "<=", 1e-10), C("T6_b_signs_tried", ">=", 1)], needs=["paths_more_units"],
       measure=computed("paths_more_units", "T6_"),
       note="one [T8] sweep (the fixed-point method's block update, solver._chain_blocks) from random PD blocks, "
            "L = 2 and 3, b ≥ 0 and b < 0; the residual is max|LHS of [T7]|/N_max (a U-space gradient entry, "
            "§5.4) with the neighbours the sweep used; tests/reproduce/test_rows_paths.py"),
    _t("T10", "paths", _PT, "newton = lbfgs = fixed_point; max|grad| < 1e-8; Hessian PD", "1e-7",
       checks=[C("max_grad", "<", 1e-8), C("converged", ">=", 1)], needs=["paths_solve"], measure=r.p_t10,
       note="only the Newton solve at N = 10 is measured here; method agreement: tests/paths/test_theory.py",
       figure="figures/solver_trace.png"),
    _t("T11", "paths", _PT, "head scores on hand-computed U; invariant under head relabelling", "exact",
       checks=[C("T11_hand_max_abs_diff", "<=", 0), C("T11_relabel_mismatches", "<=", 0)],
       needs=["paths_more_units"], measure=computed("paths_more_units", "T11_"),
       note="pruning.pipeline.head_scores on a 4 × 4 U scored by hand (checks_theory.T11_SCORES), and on a random "
            "integer U (H = [2, 3]) under all 12 relabellings of the heads within each layer; integer entries keep "
            "the sums exact, so 'exact' is equality; tests/reproduce/test_rows_paths.py"),
    _t("S1", "paths", _PT, "Markov sweep (P = 100, 7 widths, T = 0.01)",
       "every point converges to 1e-8 with a PD Hessian; ‖U − I‖_F decreases monotonically in N; renormalised "
       "accuracy ≥ GP accuracy − 0.5 points at every N; the largest gap occurs at N ≤ 30",
       checks=[C("max_grad", "<", 1e-8), C("min_hessian_eig", ">", 0), C("max_increase_U_minus_I", "<", 0),
               C("min_gap_points", ">=", -0.5), C("N_of_largest_gap", "<=", 30)],
       needs=["paths_sweep"], measure=r.p_s1, note="‖U − I‖_F along increasing N must fall at every step",
       figure="figures/accuracy_vs_alpha.png"),
    _t("S2", "paths", _PT, "alignment at N = 10", "c_k of the renormalised kernel > c_k of the GP kernel for k = 1…5",
       checks=[C("min_c_k_difference_k1_5", ">", 0)], needs=["paths_solve"], measure=r.p_s2,
       figure="figures/kernel_alignment.png"),
    _t("S3", "paths", _PT, "2-path variant", "converges; renormalised accuracy ≥ GP(g+d) − 0.5 points; ablations",
       checks=[C("converged", ">=", 1), C("gap_points", ">=", -0.5), C("ablations_run", ">=", 1)],
       needs=["paths_2path"], measure=r.p_s3,
       note="`paths solve --variant 2path` at N = 10; the GP baseline is the solve's GP on the same 2 paths (g+d); "
            "the two ablations of U (spec §9.1: off-diagonal zeroed; diagonal set to U^{gg}, off-diagonal kept) "
            "are the solve's accuracy_diagonal_only and accuracy_equalised_diagonal (theory.points.ablated_U); "
            "ablations_run = 1 when both are finite; their drops in points and U^{gd} (open point 9) are shown",
       figure="figures/kernel_alignment.png"),
    _t("S4", "paths", _PT, "full and collapsed Û agree (N = 4, N0 = 6, P = 8)", "within 4 combined MCSE",
       checks=[C("S4_max_diff_over_mcse", "<", 4)], needs=["paths_samplers"], measure=computed("paths_samplers", "S4_"),
       note="what tests/paths/test_slow.py::test_full_and_collapsed_samplers_agree runs: 4 chains of 200 warmup + "
            "400 draws each, T = 0.5, the largest |Û_full − Û_collapsed| / combined MCSE over U's upper triangle"),
    _t("S5", "paths", _PT, "digits smoke test", "200 GD steps → hand-off (1e-6) → theory → finite head scores",
       checks=[C("gd_steps", ">=", 200), C("handoff_attention_err", "<=", 1e-6), C("head_scores_finite", ">=", 1)],
       needs=["paths_smoke"], measure=r.p_s5,
       note="`paths prune` on a small digits problem (pool 200, P = 40, 2 heads, width 16, one (N, T) point), as "
            "tests/paths/test_slow.py::test_prune_pipeline_smoke runs it; the tiny profile runs 10 steps (so misses)"),
    _t("B1", "paths", _PT, "solver on the Markov task (P = 100, H = 2, L = 2)",
       "max|grad| < 1e-8 in < 1 s per (N, T) point on 2 cores; the 7-width sweep, GP baselines and 1000-point "
       "predictions in < 10 s",
       checks=[C("max_grad", "<", 1e-8), C("max_point_seconds", "<", 1.0), C("sweep_seconds", "<", 10.0),
               C("widths", ">=", 7)], needs=["paths_sweep"], measure=r.p_b1,
       note="times on this machine, shared with other jobs when the committed run was made; the ratio against "
            "the Adam baseline is in benchmarks/, not here",
       figure="figures/accuracy_vs_alpha.png"),
    _t("B2", "paths", _PT, "image-like synthetic problem (P = 600, N0 = 192, n_tok = 48, H = 4, L = 2)",
       "1e-8 in < 30 s per point",
       checks=[C("B2_max_grad", "<", 1e-8), C("B2_converged", ">=", 1), C("B2_point_seconds", "<", 30)],
       needs=["paths_b2"], measure=r.p_b2,
       note="attnlab/paths/tasks/images.py (oriented gratings in 8 × 8 RGB patches, seeds 27/59), 2 layers of 4 "
            "random qk heads (d_qk = 128, entries N(0, 1/N0)); one point N = 100, T = 0.1 (α = 6) by the Newton "
            "solver with its Hessian check; B2_point_seconds is the solve alone, on 2 torch threads (the spec's 2 "
            "cores) in its own experiment, judged only when the 1-minute load at its start (B2_load_at_start) was "
            "below 1.5 (issue 39), else not run with the time and the load; earlier runs on one thread of the "
            "shared, loaded machine took 165 s and 349 s",
       recorded=_rec("a direct run of checks_full_profile.paths_b2 (the full profile's B2 experiment) on one thread "
                     "of the loaded 2-core machine, 2026-12-02: 61 iterations, theory accuracy 0.898, GP 0.946",
                     "attnlab reproduce paths --profile full --targets B2",
                     B2_max_grad=7.33e-10, B2_converged=1.0, B2_point_seconds=349.3)),
    _t("B3", "paths", _PT, "theory against sampling on the Markov task at N = 10",
       "collapsed < 3 min, full < 20 min (4 chains); suggested: relative Frobenius error < 20%, "
       "accuracy within 2 points",
       checks=[C("collapsed_seconds", "<", 180), C("full_seconds", "<", 1200), C("rel_frob_err", "<", 0.2),
               C("accuracy_gap_points", "<=", 2), C("rhat_max", "<=", 1.01), C("full_rhat_max", "<=", 1.01)],
       needs=["paths_sample", "paths_sample_full"], measure=r.p_b3,
       note="collapsed and full-weight HMC, 4 chains of 1000 warmup + 2000 draws each (the full one at the full "
            "profile only); the agreement clauses are judged on the collapsed run (the full run's are shown); "
            "a time goal is judged only when that sampler's chains converged (R̂ ≤ 1.01, §7.3): otherwise its "
            "*_seconds is NaN, the goal is not met, and its R̂ check says why (the time run: *_seconds_run); "
            "times on this machine depend on its load",
       figure="figures/U_heatmap_N10.png"),
    _t("B4", "paths", _PT, "the §10 adjudication",
       "§10's protocol run to its §10.8 verdict (chain, simple or undecided) with the R̂/ESS gates, gate 1 and the "
       "s ≥ 0.10 filter, within §10.10's budget of 1 h on 2 cores",
       checks=[C("points_failing_rhat_1.01", "<=", 0), C("points_failing_ess_400", "<=", 0),
               C("gate1_full_vs_collapsed_run", ">=", 1), C("gate1_max_diff_over_mcse", "<", 3),
               C("hours_on_2_cores", "<=", 1)],
       needs=list(ADJUDICATION), measure=r.p_b4,
       recorded=_rec("docs/attention-paths.md (§10 adjudication): 25 points, 300 warmup + 600 draws (shorter than "
                     "§10 asks); R̂ 1.012–1.034 at the failing points, bulk ESS 337–390",
                     "python benchmarks/bench_paths_entropy.py --out runs/paths-entropy --paper-point; then "
                     "`... --out runs/paths-entropy --Ns 64 --configs C3 C2 C1 --alphas 4 1`",
                     **{"points_failing_rhat_1.01": 8, "points_failing_ess_400": 7,
                        "gate1_full_vs_collapsed_run": 0}),
       note="the §10 protocol (attnlab/paths/sampling/protocol.py): C1–C3 × α ∈ {1, 4} × N ∈ {8, 16, 32, 64} at "
            "T = 0.1 and C3 at P = 100, T = 0.01, N ∈ {10, 30} (26 points); collapsed HMC, 4 chains of 1000 warmup + "
            "2000 draws, 16 leapfrog steps, draws doubled up to twice until R̂ ≤ 1.01, bulk ESS ≥ 400, E-BFMI and "
            "divergences pass; gate 1: full against collapsed Û at C1, N = 8, α = 4 within 3 combined MCSE (gate "
            "1's tests T13, T14, T17 are their own rows); §10.8 counts only points with s ≥ 0.10; decided: a "
            "winner supported in C1–C3 with the other form rejected in one (winner says which); full profile only. "
            "Cost: the committed one-thread run took 1,257 s (C1), 1,787 s (C2), 2,385 s (C3) and 213 s (gate 1). "
            "One experiment per configuration and one for gate 1, each on two torch threads (checks_full_profile."
            "B4_THREADS); hours_on_2_cores = their wall seconds summed / 3600, a measured two-core time when they run "
            "one after another (max_load_at_start shows what ran beside them; a run on one thread gives NaN, since "
            "one-thread time / 2 is a projection). The §10.8 result itself ('winner') is shown; our "
            "stricter reading, that §10.8 names a winner (decided ≥ 1; the spec allows 'undecided', §10.9), is "
            "shown beside it, not judged"),
    _t("B5", "paths", _PT, "digits pipeline",
       "GD training < 5 min, (N, T) grid chosen on validation, head scores vs single-head drops, pruning; "
       "GD test accuracy ≥ 70% (§15.4)",
       checks=[C("gd_test_accuracy", ">=", 0.70), C("gd_train_seconds", "<", 300, _BUDGET),
               C("chosen_on_validation", ">=", 1),
               C("spearman_minus_chance", ">", 0), C("heads_pruned_progressively", ">=", 1)],
       needs=["paths_prune"], measure=r.p_b5,
       note="full profile, five networks (seeds 42-46; runs.B5_SEEDS), each 5,000 GD steps with §15.4's "
            "retuned settings (runs.B5_PRUNE: width 32, lr 3e-3, weight decay 1e-3, a 20,000-episode pool, each "
            "training episode turned by one random symmetry of the square, its three images alike (--augment "
            "dihedral; validation and test episodes never); the provisional settings gave 0.61, the retuned ones "
            "without augmentation 0.675 over five hand-run networks, some of which learned the six training "
            "classes instead of comparing; docs/attention-paths.md, §15.4's retuning); numbers are means over the "
            "networks with t-intervals over them (measures.prune_intervals; gd_train_seconds is the slowest "
            "network's); 'head scores against single-head drops' has no number in the spec: our reading is a "
            "Spearman ρ (a lower score, a smaller drop) above what a random ranking of the heads reaches "
            "(spearman_minus_chance > 0: the mean ρ's t-interval minus the 95 % range of the mean ρ of random "
            "rankings of the heads on as many networks, measures.chance_spearman; issue 39); "
            "pipeline_seconds (training, grid, scores, pruning) is shown, not judged",
       recorded=_rec("docs/attention-paths.md (head scores and pruning, short-training run): 300 GD steps, the "
                     "steps reproduce uses; no time recorded",
                     "attnlab paths prune --steps 300 --pool 4000 --P 200 --n-test 500",
                     gd_test_accuracy=0.586)),
    _t("S6", "paths", _PT16, "deeper networks (L = 3, H = 2)",
       "U near diagonal at small α, cross-path structure at large α",
       checks=[C("sampled_vs_theory_err", "<=", 0.1), C("offdiag_small_alpha", "<", 0.1, _THEORY),
               C("offdiag_growth", ">", 3, _THEORY), C("sampler_converged", ">=", 1, _GATE)],
       needs=["paths_layers"], measure=r.p_s6,
       note=CLAIMS_NOTE.format("paths", "S6") + "; off-diagonal fraction ‖U − diag U‖/‖U‖, growth = its largest "
            "over its smallest-α value; digits, P = 100, T = 0.1; HMC at N = 10, P = 40, 4 chains of 500 warmup "
            "+ 1000 draws, the draws doubled up to twice until the §7.3 gates pass, as B4 (`paths sample "
            "--doublings 2`; budget: at most 3 tries, 7000 draws per chain in all; draws_used and sampler_tries "
            "shown); sampled_vs_theory_err is judged by its interval ± 1.96 MCSE (sampled_vs_theory_mcse: the "
            "delta method on the run's per-entry MCSEs of Û; measures.s6_intervals; replicates = the kept draws of "
            "all chains); the off-diagonal fractions come from the deterministic theory sweep and "
            "sampler_converged is a gate, so they are judged as they are",
       figure="S6.png"),
    _t("S7", "paths", _PT16, "U from gradient-descent ensembles", "U_GD vs theory and sampled U",
       checks=[C("rel_frob_err_gd", "<=", 0.3)], needs=["paths_ensemble"], measure=r.p_s7,
       note=CLAIMS_NOTE.format("paths", "S7") + "; 16 runs of 10,000 full-batch Adam steps",
       figure="figures/U_theory_vs_gd.png",
       recorded=_rec("docs/attention-paths.md (S7): 16 GD runs of 10,000 steps, run-to-run s.e. 0.006",
                     "attnlab paths ensemble --N 10 --runs 16 --steps 10000 --sampled SAMPLE_RUN",
                     rel_frob_err_gd=1.00)),
    _t("S8", "paths", _PT16, "multiple outputs", "theory vs sampling at one point with Y ∈ R^{P×M}",
       checks=[C("rel_frob_err", "<=", 0.2), C("sampler_converged", ">=", 1)], needs=["paths_outputs"],
       measure=r.p_s8, note=CLAIMS_NOTE.format("paths", "S8") + "; M = 2 Markov targets, collapsed HMC"),
    _t("S9", "paths", _PT16, "scalar vs matrix renormalisation", "scalar: predictions equal the GP's to 1e-8",
       checks=[C("scalar_vs_gp_same_T", "<", 1e-8), C("matrix_minus_gp_accuracy", ">", 0)],
       needs=["paths_renorm"], measure=r.p_s9,
       note="spec note: the spec compares at its own temperature T, where the scalar predictor is the GP's at T/u₁, "
            "not at T, so it cannot meet 1e-8 (the gap shrinks linearly in T; docs/attention-paths.md); "
            "scalar_vs_gp_matched_T checks the identity at T/u₁, which holds by construction, shown, not judged "
            "(claims_met, from verdict_S9, still judges that identity)",
       figure="figures/kernel_alignment.png"),
    _t("S10", "paths", _PT16, "plug in a trained transformer's attention", "accuracy against the GP and the network",
       checks=[C("theory_minus_gp_accuracy", ">", 0)], needs=["paths_prune", "paths_plugin"],
       measure=r.p_s10,
       note=CLAIMS_NOTE.format("paths", "S10") + "; B5's networks (runs.B5_SEEDS, §15.4's retuned settings, 5,000 "
            "steps, --augment dihedral), each network's maps plugged in at (N, T) = (20, 0.1); the mean over "
            "networks with its t-interval (issue 39: the row once used one 2,000-step network on the provisional "
            "settings)"),
    _t("SC-prune", "paths", f"attention-paths §8, B5 ({SEED})", "pruning with minimal performance loss",
       "pruning the lowest-scored head costs little test accuracy",
       checks=[C("drop_first_pruned", "<=", 0.02), C("ascending_minus_random_mean", ">=", 0)],
       needs=["paths_prune"], measure=r.p_prune,
       note="our reading: the GD network's test-accuracy drop after pruning its lowest-scored head ≤ 0.02 (B3's "
            "'within 2 points'), and pruning in ascending score keeps more accuracy on average than random orders "
            "(the random-ordering baseline; `paths prune`, full profile); B5's five networks, means with "
            "t-intervals over them (measures.prune_intervals)"),
    _t("SC-H1", "paths", f"attention-paths §5.3, §10 ({SEED})",
       "the authors' H = 1 entropy σ^(−2(L+1))U − ln U",
       "supported by sampling in the H = 1 configurations: |a| ≤ 3 SE on every diagonal entry and e ≤ 0.05 at "
       "N = 64 (§10.8)",
       checks=[C("simple_max_a_over_se_H1", "<=", 3), C("simple_e_N64_max_H1", "<=", 0.05)],
       needs=list(ADJUDICATION), measure=r.p_sc_h1,
       note="the simple form at H = 1 is the authors' statement (§5.3); judged by §10.8 in C1 (L = 1) and C2 "
            "(L = 2) from B4's run (the s ≥ 0.10 filter applied; a configuration whose α has fewer than 3 counted "
            "widths has no fit, NaN, and misses); full profile only; intervals (measures.sc_h1_intervals): "
            "|a|/SE ± 1.96 for the entry attaining the max (a known to ± 1.96 SE, the SE from the sampler's MCSE, "
            "inflated where the fit's residuals are larger); e(64) ± 1.96 of its MCSE (the delta method at the "
            "point attaining the max, simple_e_N64_mcse_H1) where the run saved it, else its point estimate is "
            "judged (a run made before the MCSE was saved)",
       recorded=_rec("docs/attention-paths.md (§10 adjudication, reduced protocol: 300 warmup + 600 draws): simple "
                     "form |a|/SE 0.6 and 3.2 in C1, 9.2 and 44.6 in C2; e_simple at N = 64: 0.21, 0.39 (C1), "
                     "1.60, 2.50 (C2)",
                     "python benchmarks/bench_paths_entropy.py --out runs/paths-entropy --Ns 64 --configs C2 C1 "
                     "--alphas 4 1", simple_max_a_over_se_H1=44.6, simple_e_N64_max_H1=2.498)),
]
# fmt: on


def _order(t: Target) -> tuple[int, int, str]:
    """T, S, B in the spec's order, by number."""
    digits = "".join(ch for ch in t.id if ch.isdigit())
    if t.id.startswith("SC-"):
        return (3, 0, t.id)  # the seed claims after the spec's targets
    return ("TSB".index(t.id[0]), int(digits), t.id)


def _fold(rows: list[Target]) -> list[Target]:
    """B4's stricter reading (a winner named) shown beside it; B5, SC-prune and S10 over B5's networks, B5's rank
    correlation against random rankings (`measures.prune_intervals`, `measures.s10_intervals`); the sampler rows
    S6 and SC-H1 by their MCSE (`measures.s6_intervals`, `measures.sc_h1_intervals`)."""
    fold = {
        "B4": ([C("decided", ">=", 1)], None),
        "B5": ((), r.prune_intervals),
        "SC-prune": ((), r.prune_intervals),
        "S10": ((), r.s10_intervals),
        "S6": ((), r.s6_intervals),
        "SC-H1": ((), r.sc_h1_intervals),
    }
    return [with_reading(t, shown=fold[t.id][0], intervals=fold[t.id][1]) if t.id in fold else t for t in rows]


_CHECKS = (*(f"T{i}" for i in range(1, 18)), "S4", "S5")
TARGETS: tuple[Target, ...] = tuple(
    sorted(_fold(grouped(PATHS, checks=_CHECKS, timings=("B1", "B2", "B3", "B4"))), key=_order)
)
