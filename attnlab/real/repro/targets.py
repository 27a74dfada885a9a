"""The reproduction targets of the extreme-tokens spec's real models (§11, §14 and the seed claims).

One `Target` row each: the spec's threshold in words and as `Check`s, the study runs it needs (experiment names
of `runs.py`) and its measure (`measures.py`, or a direct computation of `checks*.py`). `attnlab reproduce`
collects these rows (`attnlab.reproduce.targets.TARGETS`), runs, judges and writes them."""

from __future__ import annotations

from attnlab.core.targets import CLAIMS_NOTE, SEED, Target, computed, grouped, with_reading
from attnlab.core.targets import Check as C
from attnlab.core.targets import recorded as _rec
from attnlab.core.targets import target as _t
from attnlab.real.repro import checks_models as units
from attnlab.real.repro import measures as r

_ET, _ET14, _ET1314 = "extreme-tokens §11", "extreme-tokens §14", "extreme-tokens §13.14 (issue 41)"
# fmt: off
REAL = [
    _t("R15", "real", _ET, "tiny HF models: attention function, pre-o_proj ablation, move-to-sink", "§10.2",
       checks=[*(C(f"R15_{f}_{k}", "<=", 1e-5) for f in units.R15_FAMILIES for k in units.R15_DIFFS),
               *(C(f"R15_{f}_move_to_sink_other_head_sink", "<", 1) for f in units.R15_FAMILIES)],
       needs=["real_units"], measure=computed("real_units", "R15_"),
       note="the library functions tests/real/test_tracing.py checks, on tiny random models built from configs "
            "(Llama with GQA, MHA and MQA, Qwen2, GPT-2; d 32, 2 layers, 3 sequences of 12 tokens): the 'attnlab' "
            "attention function streamed in query chunks against transformers' eager attention (logits; every "
            "head's recorded weights against output_attentions; the reducers against the same recorder fed those "
            "weights; residual norms against output_hidden_states); ZeroHead(1, H−1) before o_proj: the attention "
            "output changes by exactly W_O^h z^h and block 0 not at all; MoveToSink(0, H−1): its rows one-hot on "
            "key 0 while head 0's are not. Each max |Δ| ≤ 1e-5 (§10.2's tolerance for the logits, used for all)"),
    _t("R16", "real", _ET, "SmolLM2 load",
       "greedy \" Paris\"; cached reload < 3 s; code perplexity below prose perplexity over ≥ 8 windows each",
       checks=[C("greedy_is_paris", ">=", 1), C("cached_reload_s", "<", 3.0), C("code_minus_prose_perplexity", "<", 0),
               C("windows_per_domain", ">=", 8)], needs=["real_scan", "real_probe"], measure=r.r16,
       figure="figures/residual_norms.png"),
    _t("R17", "real", _ET, "SmolLM2 facts",
       "layer-11 max at (0, 507) in [15k, 30k] and ≥ 10× layer 10's max; residual ratio > 100 at layer 11; median "
       "value ratio over layers 12–29 in [0.1, 0.35]; ≥ 80% of heads in layers 12–29 with s_h > 0.3 on both domains, "
       "none in layers 0–1; zeroing dim 507 changes the top-1 token",
       checks=[C("layer11_max_at_0_507", ">=", 1), C("layer11_max_abs_min", ">=", 15000),
               C("layer11_max_abs_max", "<=", 30000), C("layer11_over_layer10_max", ">=", 10),
               C("layer11_residual_ratio", ">", 100), C("median_value_ratio_min", ">=", 0.1),
               C("median_value_ratio_max", "<=", 0.35), C("sink_heads_share_layers12_29", ">=", 0.8),
               C("sink_heads_layers0_1", "<=", 0), C("dim507_changes_top1", ">=", 1)],
       needs=["real_scan", "real_probe"], measure=r.r17,
       note="s_h = mean attention on key 0 over queries ≥ 1 (attnlab's definition); the scan's windows, 128 tokens",
       figure="figures/sink_heatmaps.png"),
    _t("R18", "real", _ET, "large local models (optional)",
       "Llama-3.1-8B layer 24 ‖Res⟨s⟩‖ ≈ 496 (others ≤ 37), 34 / 27 with L0 / L1 MLP zeroed; Llama-2-7B L16H25 "
       "dormant on prose, active on code",
       not_run="no 7–8B weights on this machine; plan: `attnlab scan --model <local Llama folder>` and `attnlab "
               "ablate --mlp 0` on a GPU machine with the weights (CPU fp32 needs ~32 GB)"),
    _t("R23", "real", _ET14, "why extreme tokens matter in practice (SmolLM2)",
       "int8 fake quantisation with / without dim 507; sliding-window KV with / without token 0: perplexity",
       checks=[C("quant_ratio_min", ">=", 1.1), C("window_ratio_min", ">=", 1.1)],
       needs=["real_quant", "real_window"], measure=r.r_r23,
       note=CLAIMS_NOTE.format("real", "R23") + "; int8 at the inputs of the Linear layers, outlier channels "
            "(peak > 10× the median channel peak, ≤ 4 per tensor) excluded from the scale; window at the smallest "
            "W of the run (quick: 2 windows per domain, T = 256 / 512, W = 128; full: 8, T = 512 / 1024, W = 256)",
       figure="figures/perplexity.png"),
    _t("R24", "real", _ET14, "the authors' sink-head procedure",
       "candidate sink tokens (residual norm > 10× median), sink sets per head, compared with key-0 classes",
       checks=[C("windows_beyond0_max", ">=", 0.25)], needs=["real_scan"], measure=r.r_r24,
       note=CLAIMS_NOTE.format("real", "R24") + "; a head has a sink on candidate i when (1/(n−i))·Σ_{j≥i} A_ji "
            "≥ 0.3; the number is the largest share over domains of windows with such a sink beyond token 0",
       figure="figures/sink_procedure.png"),
    _t("R26", "real", _ET1314, "secondary sinks exist in SmolLM2",
       "over ≥ 16 windows of ≥ 512 tokens per domain (prose, code), the share of windows with a sink at some j ≥ 1 "
       "(M_j ≥ 0.3 in some head of layers ≥ 2), with a bootstrap interval, and which tokens; > 0.25 is a match",
       checks=[C("R26_share", ">", 0.25)], needs=["real_sinks"], measure=r.r_r26,
       note="Wong et al., arXiv 2512.22213; M_j = Σ_{i≥j} A_ij / (T−j) per window, from `scan --stats full`'s "
            "column sums, over keys seen by ≥ 32 queries (the last keys' means are one or two queries' weights); "
            "the share pools both domains' windows (each domain's is reported), percentile bootstrap over windows; "
            "the tokens are in the scan's sinks.csv and summary (docs/real-models.md §13.14)"),
    _t("R27", "real", _ET1314, "the forming MLP's output norm sets a secondary sink's score and lifetime",
       "Spearman ρ between the forming MLP's output norm and (a) the sink's score, (b) its lifetime in layers, each "
       "with a bootstrap interval; > 0.3 is a match on each",
       checks=[C("R27_rho_score", ">", 0.3), C("R27_rho_lifetime", ">", 0.3)], needs=["real_sinks"],
       measure=r.r_r27,
       note="SmolLM2-135M is smaller than any model of Wong et al.'s study (11 families): whatever comes out is a "
            "finding either way. Sinks first seen in layers ≥ 2; forming MLP = block first − 1 (the last MLP to "
            "write the token before that layer's attention reads it); score = peak M_j over heads and layers; "
            "lifetime = consecutive sink layers from the first; bootstrap over windows, a window's sinks together"),
    _t("SC-dormant", "real", f"extreme-tokens §10.4 ({SEED})", "zeroing a dormant sink head has minimal impact",
       "dormant heads (s_h ≥ 0.5) have |ΔNLL| ≤ 0.01 nats when zeroed",
       checks=[C("max_abs_dnll_dormant", "<=", 0.01)], needs=["real_scan", "real_ablate"], measure=r.r_dormant,
       note="every head of layers 19 and 29 zeroed before o_proj in turn, on the scan's windows (its sink scores "
            "reused); the largest |ΔNLL| over the head × domain cases where the head is dormant",
       figure="figures/ablation_vs_sink.png",
       recorded=_rec("docs/real-models.md (Ablations): layers 19 and 29, 6 windows per domain of 128 tokens; 15 "
                     "dormant cases, mean |ΔNLL| 0.0084, 10 of 15 within 0.01",
                     "attnlab ablate --sweep-layer 19 --sweep-layer 29 --dim 11:0:507 --samples 6 --batch-size 6",
                     max_abs_dnll_dormant=0.025)),
]
# fmt: on


# R15 (the attention function on tiny random models) and R16 (loading SmolLM2, a cached reload) check the library
# R26 / R27 are judged by their bootstrap intervals over windows (`measures.r26_intervals`, `r27_intervals`)
REAL = [with_reading(t, intervals=r.r26_intervals if t.id == "R26" else r.r27_intervals) if t.id in ("R26", "R27")
        else t for t in REAL]  # fmt: skip
TARGETS: tuple[Target, ...] = tuple(grouped(REAL, checks=("R15", "R16")))
