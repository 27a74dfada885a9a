"""The issue-18 rows R2 (reducers and hook equivalence), R15 (tiny HF models) and R12 (the paper-scale mitigations
of extreme-tokens §8): their direct computations return the numbers the rows judge, and would catch wrong code."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from attnlab.bb.repro import checks_reducers as bb_units
from attnlab.bb.repro import measures as bb_rows
from attnlab.reproduce.config import ReproduceConfig
from attnlab.reproduce.execute import Outcome
from attnlab.reproduce.experiments import EXPERIMENTS, GPU, PAPER_SCALE, SIZES, runs_at
from attnlab.reproduce.run import evaluate, plan
from attnlab.reproduce.targets import TARGETS
from attnlab.reproduce.verdict import MET, MISSED, NOT_RUN
from attnlab.runs import RunResult
from tests.numerics import assert_close

ROWS = {(t.study, t.id): t for t in TARGETS}


# --- R12 ----------------------------------------------------------------------------------------------------------
def _spec_records() -> dict[str, list[dict]]:
    """Metrics records of the four paper-scale runs that hold exactly §8's values (a range: its middle; 'over x':
    x), step-wise constant between the steps §8 names; attnlab's Attn⟨s⟩ beside the spec's."""
    named: dict[tuple[str, str], dict[int, float]] = {}
    for _, run, metric, step, lo, hi in bb_rows.PAPER_8:
        named.setdefault((run, metric), {})[step] = lo if math.isinf(hi) else (lo + hi) / 2
    out: dict[str, list[dict]] = {}
    for run in bb_rows.PAPER_8_RUNS:
        rows = []
        for step in (0, 100, 200, 1000, 5000, 10000):
            rec: dict = {"step": step, "attn_sink": 0.5}
            for (r, metric), by_step in named.items():
                if r == run:
                    at = [s for s in by_step if s <= step] or [min(by_step)]
                    rec[metric] = by_step[max(at)]
            rows.append(rec)
        out[run] = rows
    return out


def _outcomes(tmp_path: Path, records: dict[str, list[dict]]) -> dict[str, Outcome]:
    """Outcomes whose one run folder holds `records` as metrics.jsonl (what `r12` reads)."""
    done = {}
    for run, rows in records.items():
        folder = tmp_path / run
        folder.mkdir(parents=True)
        (folder / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
        done[run] = Outcome(runs={"": RunResult(folder, None, {}, {})})
    return done


def test_r12_meets_on_the_spec_values_and_misses_off_them(tmp_path: Path) -> None:
    row = ROWS[("bb", "R12")]
    assert row.measure is bb_rows.r12 and not row.not_run and len(row.checks) == len(bb_rows.PAPER_8) == 21
    records = _spec_records()
    good = evaluate(row, _outcomes(tmp_path / "good", records), {}, "full", "cuda")
    assert good["verdict"] == MET, good["why"]
    assert good["numbers"]["resid_adam_step10000"] == pytest.approx(140.7)
    assert good["numbers"]["relu_value_norm_step1000"] == pytest.approx(48.0)
    for run, metric, step, factor in (
        ("bb_paper_adam3", "resid_norm_bos", 10000, 1.3),  # 30 % above 140.7
        ("bb_paper_relu", "value_norm_bos", 1000, 1.5),  # 72 > 1.25 × 56 (the top of the range 40–56)
        ("bb_paper_relu", "attn_sink_with0", 200, 3.0),  # 9.75e-4 > 1.25 × 6.5e-4 at a step ≥ 100
    ):
        bad = json.loads(json.dumps(records))
        rec = next(r for r in bad[run] if r["step"] == step)
        rec[metric] *= factor
        sub = tmp_path / f"bad-{run}-{metric}"
        missed = evaluate(row, _outcomes(sub, bad), {}, "full", "cuda")
        assert missed["verdict"] == MISSED, (run, metric)


def test_off_by_is_within_25_percent_of_a_point_or_a_range() -> None:
    off = bb_rows.off_by
    assert off(140.7, 140.7, 140.7) == 0 and off(1.25 * 20.4, 20.4, 20.4) == pytest.approx(0.25)
    assert off(0.7 * 20.4, 20.4, 20.4) == pytest.approx(-0.3)
    assert off(30.0, 40.0, 56.0) == pytest.approx(-0.25) and off(50.0, 40.0, 56.0) == 0
    assert off(0.0, 0.0, 6.5e-4) == 0 and off(451.0, 600.0, math.inf) > -0.25 > off(449.0, 600.0, math.inf)
    assert math.isnan(off(math.nan, 1.0, 1.0))


def test_step_5000_is_read_in_log_step_between_the_snapshots() -> None:
    recs = [{"step": 4870, "resid_norm_bos": 10.0}, {"step": 5623, "resid_norm_bos": 20.0}]
    w = (math.log(5000) - math.log(4870)) / (math.log(5623) - math.log(4870))
    assert bb_rows.at_step(recs, "resid_norm_bos", 5000) == pytest.approx(10 + 10 * w)
    assert bb_rows.at_step(recs, "resid_norm_bos", 4870) == 10.0
    assert math.isnan(bb_rows.at_step(recs, "resid_norm_bos", 10000))


def test_the_paper_scale_mitigations_run_only_on_a_gpu() -> None:
    runs = bb_rows.PAPER_8_RUNS
    assert set(runs) <= set(PAPER_SCALE) & set(GPU) & set(SIZES["full"]) & set(EXPERIMENTS)
    assert not set(runs) & (set(SIZES["quick"]) | set(SIZES["tiny"]))
    assert set(runs) <= set(runs_at("full", "cuda")) and not set(runs) & set(runs_at("full", "cpu"))
    _, names = plan(ReproduceConfig(studies=("bb",), profile="full"))
    assert not set(runs) & set(names)
    _, names = plan(ReproduceConfig(studies=("bb",), profile="full", device="cuda", targets=("R12",)))
    assert list(names) == list(runs)
    row = evaluate(ROWS[("bb", "R12")], {}, {}, "full")
    assert row["verdict"] == NOT_RUN and row["why"].startswith("not run: paper scale, GPU")
    assert "--profile full --device cuda --targets R12" in row["why"]


def test_the_paper_runs_have_the_specs_settings() -> None:
    from attnlab.core.registry import resolve
    from attnlab.runs.configs import config_from_dict

    cls, _ = resolve("bb train")
    got = {}
    for name in bb_rows.PAPER_8_RUNS:
        (run,) = EXPERIMENTS[name].runs(0, SIZES["full"][name], Path("."))  # type: ignore[misc]
        got[name] = config_from_dict(cls, dict(run.config))  # type: ignore[arg-type]
    assert all(
        (c.preset, c.steps, c.d_model, c.seq_len, c.batch) == ("paper", 10000, 256, 256, 512) for c in got.values()
    )
    relu, adam, sgd, relu3 = (got[n] for n in runs_order())
    assert (relu.attention, relu.n_layers, relu.lr) == ("relu", 1, 3e-3)
    assert (adam.attention, adam.optimizer, adam.n_layers, adam.lr) == ("softmax", "adam", 3, 3e-4)
    assert (sgd.optimizer, sgd.n_layers, sgd.lr, sgd.momentum) == ("sgd", 3, 0.03, 0.9)
    assert (relu3.attention, relu3.n_layers, relu3.lr) == ("relu", 3, 3e-3)


def runs_order() -> tuple[str, ...]:
    return ("bb_paper_relu", "bb_paper_adam3", "bb_paper_sgd3", "bb_paper_relu3")


# --- R2 -----------------------------------------------------------------------------------------------------------
@pytest.mark.numerics
def test_r2_numbers_pass_the_spec_tolerances() -> None:
    numbers = bb_units.bb_units(0, {})
    assert set(bb_units.r2_diff_keys()) <= set(numbers)
    for k in bb_units.r2_diff_keys():  # the spec's 1e-6 on float32 statistics (matrix worst 2.7e-15, 3.8e+08x inside)
        assert_close(numbers[k], 0.0, atol=1e-6, label=k, kind="observed")
    # the fused kernel really ran without hooks (other rounding), so the equivalence is not trivially exact
    assert numbers["R2_softmax_traced_logits_max_abs_diff"] > 0 == numbers["R2_relu_traced_logits_max_abs_diff"]
    row = evaluate(ROWS[("bb", "R2")], {"bb_units": Outcome(numbers=numbers)}, {}, "tiny")
    assert row["verdict"] == MET and not ROWS[("bb", "R2")].not_run
    assert "bb_units" in SIZES["tiny"] and "bb_units" in SIZES["quick"]


@pytest.mark.numerics
def test_r2_gaps_catch_a_reducer_fed_other_inputs() -> None:
    import torch

    from attnlab.tracing.adapters.toy import trace_toy

    model = bb_units._toy_model("softmax", 0, 8)
    tokens = torch.randint(0, 12, (4, 8), generator=torch.Generator().manual_seed(1))
    other = torch.randint(0, 12, (4, 8), generator=torch.Generator().manual_seed(2))
    trace, _ = trace_toy(model, tokens, chunk=2)
    dense = bb_units.dense_statistics(model, bb_units.dense_capture(model, tokens))
    gaps = bb_units.reducer_gaps(trace, dense)
    for k, gap in gaps.items():  # the spec's 1e-6 (matrix worst 1.8e-15, 5.6e+08x inside)
        assert_close(gap, 0.0, atol=1e-6, label=f"R2 reducer gap {k}", kind="observed")
    wrong = bb_units.dense_statistics(model, bb_units.dense_capture(model, other))
    gaps = bb_units.reducer_gaps(trace, wrong)
    assert set(gaps) == set(bb_units.R2_FIELDS) and min(gaps.values()) > 1e-4, gaps


# --- R15 ----------------------------------------------------------------------------------------------------------
@pytest.mark.numerics
def test_r15_one_family_passes_and_a_wrong_hand_computation_is_caught() -> None:
    import torch

    from attnlab.real.repro import checks_models as real_rows

    model = real_rows.tiny_hf_model("llama", 4, 2, 0)
    ids = torch.randint(0, 64, (3, real_rows.R15_T), generator=torch.Generator().manual_seed(0))
    got = {**real_rows._recorded_vs_eager(model, ids), **real_rows._ablation_vs_hand(model, ids),
           **real_rows._move_to_sink(model, ids)}  # fmt: skip
    assert set(real_rows.R15_DIFFS) <= set(got)
    for k in real_rows.R15_DIFFS:  # the spec's 1e-5 on float32 (matrix worst 8.9e-08, 1.1e+02x inside)
        assert_close(got[k], 0.0, atol=1e-5, label=f"R15 {k}", kind="observed")
    assert got["move_to_sink_other_head_sink"] < 0.9
    assert real_rows._ablation_vs_hand(model, ids, hand_head=0)["ablation_vs_hand"] > 1e-3


def test_r15_row_is_met_on_every_family() -> None:  # under a second once transformers has built one model
    from attnlab.real.repro import checks_models as real_rows

    numbers = real_rows.real_units(0, {})
    row = evaluate(ROWS[("real", "R15")], {"real_units": Outcome(numbers=numbers)}, {}, "quick")
    assert row["verdict"] == MET, row["why"]
    assert len(row["checks"]) == len(real_rows.R15_FAMILIES) * (len(real_rows.R15_DIFFS) + 1)
    assert "real_units" in SIZES["quick"] and not ROWS[("real", "R15")].not_run


def test_r9_and_r10_read_a_trained_three_layer_run(tmp_path) -> None:
    """R9 (‖Res⟨s⟩‖ growth after block 0) and R10 (ZeroLayer(0) on the trained model) from a real 3-layer
    `bb train` folder, whose per-layer metrics are lists: finite numbers, and R10's falls are full / zeroed."""
    import math

    from attnlab.bb.repro import measures as bb_rows
    from attnlab.cli import main
    from attnlab.reproduce.execute import Outcome
    from attnlab.runs.results import load_run

    out = tmp_path / "three"
    args = ["bb", "train", "--layers", "3", "--no-attn", "2", "--steps", "20", "--d-model", "16", "--d-mlp", "32",
            "--seq-len", "16", "--batch", "4", "--eval-batch", "8", "--threads", "1", "--out", str(out)]  # fmt: skip
    assert main(args) == 0
    run = Outcome(runs={"": load_run(out)})
    r9 = bb_rows.r9({"bb_adam3": run, "bb_sgd3": run})
    assert r9["adam_growth"] == r9["sgd_growth"] and math.isfinite(r9["adam_growth"]) and r9["adam_growth"] > 0
    r10 = bb_rows.r10({"bb_ablate3": run})
    assert r10["layer1_value_norm_rise"] == r10["layer1_value_norm_zeroed"] / r10["layer1_value_norm_full"]
    assert all(math.isfinite(r10[k]) for k in ("peak_stat_full", "peak_stat_zeroed", "layer1_value_norm_rise"))
