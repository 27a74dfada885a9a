"""The Python API of `scan` and `ablate` (issue 8): a config in, a `RunResult` with DataFrames out; `rerun` and
the sink scores reused from a scan give the same numbers."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
import torch

import attnlab.ablate
import attnlab.scan
from attnlab.ablate import AblateConfig
from attnlab.errors import InputError
from attnlab.runs import RunResult
from attnlab.scan import ScanConfig
from tests.real.conftest import save_tiny_hf_folder


@pytest.fixture(scope="module")
def llama_dir(tmp_path_factory):
    return save_tiny_hf_folder(tmp_path_factory.mktemp("tiny-llama"), "llama")


def test_scan_run_returns_dataframes(llama_dir, tmp_path):
    from transformers import AutoModelForCausalLM

    cfg = ScanConfig(model=str(llama_dir), domains=("prose", "code"), tokens=16, samples=2, n_auto_pattern_heads=1)
    result = attnlab.scan.scan(cfg, out=tmp_path / "scan")
    assert isinstance(result, RunResult) and result.path == tmp_path / "scan" and result.config == cfg
    heads = result.tables["heads"]
    assert isinstance(heads, pd.DataFrame) and len(heads) == 2 * 2 * 4  # domains × layers × heads
    assert set(result.tables) == {
        "heads", "layers", "massive", "classes", "sink_candidates", "sink_layers", "sink_heads_authors"
    }  # fmt: skip
    # the sink scores equal those of eager output_attentions on the saved windows
    ids = torch.tensor(
        [
            json.loads(x)["token_ids"]
            for x in (result.path / "samples.jsonl").read_text().split("\n")
            if x and json.loads(x)["domain"] == "code"
        ]
    )
    model = AutoModelForCausalLM.from_pretrained(str(llama_dir), attn_implementation="eager").eval()
    with torch.no_grad():
        att = model(input_ids=ids, output_attentions=True).attentions
    want = torch.stack([a[..., 1:, 0].mean(-1).mean(0) for a in att]).numpy()  # [L,H]
    got = heads[heads.domain == "code"].sort_values(["layer", "head"]).sink_score.to_numpy().reshape(want.shape)
    np.testing.assert_allclose(got, want, atol=1e-5)
    assert result.summary["pattern_heads"] and (result.path / "report.html").is_file()
    assert list((result.path / "patterns" / "prose").glob("*.npy"))


def test_config_is_validated_and_frozen():
    with pytest.raises(InputError, match="batch_size must be an integer >= 1, got 0"):
        AblateConfig(heads=((0, 0),), batch_size=0)
    with pytest.raises(InputError, match="nothing to ablate"):
        AblateConfig()
    with pytest.raises(InputError, match="unknown domain 'poetry'"):
        ScanConfig(domains=("poetry",))
    with pytest.raises(InputError, match="the domain 'text' goes with a text file"):
        ScanConfig(domains=("prose", "text"))
    cfg = ScanConfig(pattern_heads=[[1, 2]])
    assert cfg.pattern_heads == ((1, 2),)
    with pytest.raises(AttributeError):
        cfg.tokens = 3  # type: ignore[misc]


def test_ablate_reusing_scan_sink_scores_and_rerun(llama_dir, tmp_path, capsys):
    from attnlab.cli import main

    scan = attnlab.scan.scan(
        ScanConfig(model=str(llama_dir), domains=("prose", "code"), tokens=16, samples=3), out=tmp_path / "scan"
    )
    base = dict(model=str(llama_dir), tokens=16, samples=3, heads=((1, 0),), mlps=(1,), batch_size=2)
    traced = attnlab.ablate.ablate(AblateConfig(**base), out=tmp_path / "a1").tables["ablation"]
    reused = attnlab.ablate.ablate(AblateConfig(**base, sink_from=str(scan.path)), out=tmp_path / "a2")
    table = reused.tables["ablation"]
    assert list(table.condition) == ["head 1.0", "mlp 1"] * 2
    np.testing.assert_allclose(table.dnll_mean, traced.dnll_mean, atol=1e-5)
    assert table.sink_score[0] == traced.sink_score[0]  # same float64 trace sums
    assert main(["rerun", str(reused.path), "--out", str(tmp_path / "again")]) == 0
    again = pd.read_csv(tmp_path / "again" / "ablation.csv", keep_default_na=False)
    assert again.to_dict("records") == pd.read_csv(reused.path / "ablation.csv", keep_default_na=False).to_dict(
        "records"
    )


def test_scan_rerun_gives_the_same_tables(llama_dir, tmp_path):
    from attnlab.cli import main

    first = attnlab.scan.scan(
        ScanConfig(model=str(llama_dir), domains=("random",), tokens=12, samples=2, pattern_heads=((0, 1),)),
        out=tmp_path / "one",
    )
    assert main(["rerun", str(first.path), "--out", str(tmp_path / "two")]) == 0
    for name in ("heads.csv", "layers.csv", "classes.csv", "samples.jsonl", "summary.json"):
        a, b = (first.path / name).read_text(), (tmp_path / "two" / name).read_text()
        assert a.replace(str(first.path), "") == b.replace(str(tmp_path / "two"), ""), name


# The scan's numbers on the default fused path against the exact chunked path: every statistic both compute agrees
# to this tolerance (float32 kernels summing in a different order; observed ~1e-7), the row entropy is NaN.
FUSED_TOLERANCE = 1e-6


def _numbers(x):
    """Every number in a JSON-like value, in order (strings and keys dropped)."""
    if isinstance(x, dict):
        return [n for k in sorted(x) for n in _numbers(x[k])]
    if isinstance(x, list):
        return [n for v in x for n in _numbers(v)]
    return [float(x)] if isinstance(x, (int, float)) and not isinstance(x, bool) else []


@pytest.mark.parametrize("rows", [None, 5])  # 5: the O(T·d) statistics in blocks of five rows (STAT_ROWS, LOGIT_ROWS)
def test_fused_scan_numbers_move_only_in_the_last_digits(llama_dir, tmp_path, monkeypatch, rows):
    """Issue 23: every number of heads.csv, layers.csv and summary.json of the default scan (stats="fast") equals
    that of stats="chunked" to FUSED_TOLERANCE, except the row entropy (NaN on the fast path; "full" has it)."""
    from attnlab.tracing.adapters import hf_attention

    if rows is not None:
        monkeypatch.setattr(hf_attention, "STAT_ROWS", rows)
        monkeypatch.setattr(hf_attention, "LOGIT_ROWS", rows)
    tokens, runs = 24, {}
    for stats in ("chunked", "fast", "full"):
        cfg = ScanConfig(model=str(llama_dir), domains=("prose", "code"), tokens=tokens, samples=2, stats=stats,
                         n_auto_pattern_heads=1)  # fmt: skip
        runs[stats] = attnlab.scan.scan(cfg, out=tmp_path / stats)
    ref = runs["chunked"]
    assert pd.to_numeric(runs["fast"].tables["heads"]["row_entropy"], errors="coerce").isna().all()  # "" in the CSV
    for stats in ("fast", "full"):
        for table in ("heads", "layers"):
            got, want = runs[stats].tables[table], ref.tables[table]
            assert list(got.columns) == list(want.columns)
            for col in want.select_dtypes("number").columns:
                if stats == "fast" and col == "row_entropy":
                    continue
                np.testing.assert_allclose(got[col], want[col], atol=FUSED_TOLERANCE, rtol=FUSED_TOLERANCE,
                                           err_msg=f"{stats} {table}.{col}")  # fmt: skip
        got_s = {k: v for k, v in runs[stats].summary.items() if k not in ("model_path", "stats")}
        want_s = {k: v for k, v in ref.summary.items() if k not in ("model_path", "stats")}
        np.testing.assert_allclose(_numbers(got_s), _numbers(want_s), atol=FUSED_TOLERANCE, rtol=FUSED_TOLERANCE)
