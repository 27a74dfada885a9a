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
from tests.numerics import assert_close
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
        "heads", "layers", "massive", "classes", "sink_candidates", "sink_layers", "sink_heads_authors", "sinks",
        "sink_levels",
    }  # fmt: skip
    # a fast scan has no secondary sinks (no column sums beyond key 0): its summary says so, its tables are empty
    assert not result.tables["sinks"].size and not result.summary["secondary_sinks"][0]["computed"]
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
    # observed worst case at default and AVX2 kernels, 1 thread (2026-12-05): 1.8e-8 (560x inside).
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
    # The same ablation through the table and the trace: observed worst case at default and AVX2 kernels, 1 thread
    # (2026-12-05) 0.
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


# The scan's numbers on the default fused path against the exact chunked path. Both are float32 and differ in the
# order each statistic's terms are summed (fused kernel, blocked reductions), so they are compared at the float32
# bound of that sum (Higham's gamma_n, both orders): |fl(sum x) - fl'(sum x)| <= 2·n·u·sum|x|, u = 2^-24, n the
# positions a statistic sums over (at most tokens·samples). Terms that are nonnegative (weights, norms) make sum|x|
# n times the statistic (rtol = 2·n·u); signed ones (dlogit_mean) are bounded by the column's largest magnitude
# (atol = 2·n·u·max|column|). The sink-score correlation carries that through Pearson's r (_correlation_bound).
# FUSED_TOLERANCE was 1e-6 ("observed ~1e-7") and failed on an Intel Xeon with AMX: the correlation moved 1.46e-6.
UNIT_ROUNDOFF_F32 = 2.0**-24


def _sum_bound(n_terms: int) -> float:
    """2·n·u: the relative float32 bound between two summation orders over n terms."""
    return 2 * n_terms * UNIT_ROUNDOFF_F32


def _correlation_bound(dx: np.ndarray, x: np.ndarray, dy: np.ndarray, y: np.ndarray) -> float:
    """|corr(x+dx, y+dy) - corr(x, y)| <= (pi/2)(|dx|/|x~| + |dy|/|y~|), x~ the centred x: Pearson's r is the cosine
    of the angle between the centred vectors, the cosine is 1-Lipschitz in the angle, a perturbation e turns v by at
    most arcsin(|e|/|v|) <= (pi/2)|e|/|v|, and centring (a projection) does not lengthen dx. Plus float64 roundoff."""
    turn = np.linalg.norm(dx) / np.linalg.norm(x - x.mean()) + np.linalg.norm(dy) / np.linalg.norm(y - y.mean())
    return float(np.pi / 2 * turn + 8 * x.size * 2.0**-53)


def _numbers(x):
    """Every number in a JSON-like value, in order (strings and keys dropped)."""
    if isinstance(x, dict):
        return [n for k in sorted(x) for n in _numbers(x[k])]
    if isinstance(x, list):
        return [n for v in x for n in _numbers(v)]
    return [float(x)] if isinstance(x, (int, float)) and not isinstance(x, bool) else []


def _compare_tables(got: RunResult, want: RunResult, stats: str, bound: float) -> None:
    """Every number of heads.csv and layers.csv within the float32 summation bound of the chunked scan's."""
    for table in ("heads", "layers"):
        g_tab, w_tab = got.tables[table], want.tables[table]
        assert list(g_tab.columns) == list(w_tab.columns)
        for col in w_tab.select_dtypes("number").columns:
            if stats == "fast" and col == "row_entropy":
                continue
            w = w_tab[col].to_numpy(float)
            scale = float(np.nanmax(np.abs(w))) if np.isfinite(w).any() else 0.0
            assert_close(g_tab[col], w, rtol=bound, atol=bound * scale, label=f"{stats} {table}.{col}", kind="bound")


def _sink_scores(run: RunResult, domain: str) -> np.ndarray:
    """[L·H] the heads table's sink scores of one domain, in (layer, head) order."""
    heads = run.tables["heads"]
    return heads[heads["domain"] == domain].sort_values(["layer", "head"])["sink_score"].to_numpy(float)


def _compare_summary(got: RunResult, want: RunResult, stats: str, bound: float) -> None:
    """summary.json's numbers at the summation bound; the correlation at that bound carried through Pearson's r."""
    skip = ("model_given", "stats", "sink_score_correlation", "secondary_sinks")  # the fast scan has no sinks
    want_n = np.array(_numbers({k: v for k, v in want.summary.items() if k not in skip}))
    got_n = _numbers({k: v for k, v in got.summary.items() if k not in skip})
    assert_close(got_n, want_n, rtol=bound, atol=bound, label=f"{stats} summary", kind="bound")
    x, y = _sink_scores(want, "prose"), _sink_scores(want, "code")
    dx, dy = _sink_scores(got, "prose") - x, _sink_scores(got, "code") - y
    r_bound = _correlation_bound(dx, x, dy, y)
    assert_close(got.summary["sink_score_correlation"], want.summary["sink_score_correlation"], atol=r_bound,
                 label=f"{stats} summary.sink_score_correlation", kind="bound")  # fmt: skip


@pytest.mark.numerics
@pytest.mark.parametrize("rows", [None, 5])  # 5: the O(T·d) statistics in blocks of five rows (STAT_ROWS, LOGIT_ROWS)
def test_fused_scan_numbers_move_only_in_the_last_digits(llama_dir, tmp_path, monkeypatch, rows):
    """Issue 23: every number of heads.csv, layers.csv and summary.json of the default scan (stats="fast") equals
    that of stats="chunked" within the float32 bound of summing in another order, except the row entropy (NaN on
    the fast path; "full" has it)."""
    from attnlab.tracing.fast import statistics

    if rows is not None:
        monkeypatch.setattr(statistics, "STAT_ROWS", rows)
        monkeypatch.setattr(statistics, "LOGIT_ROWS", rows)
    tokens, samples, runs = 24, 2, {}
    for stats in ("chunked", "fast", "full"):
        cfg = ScanConfig(model=str(llama_dir), domains=("prose", "code"), tokens=tokens, samples=samples, stats=stats,
                         n_auto_pattern_heads=1)  # fmt: skip
        runs[stats] = attnlab.scan.scan(cfg, out=tmp_path / stats)
    assert pd.to_numeric(runs["fast"].tables["heads"]["row_entropy"], errors="coerce").isna().all()  # "" in the CSV
    for stats in ("fast", "full"):
        _compare_tables(runs[stats], runs["chunked"], stats, _sum_bound(tokens * samples))
        _compare_summary(runs[stats], runs["chunked"], stats, _sum_bound(tokens * samples))
