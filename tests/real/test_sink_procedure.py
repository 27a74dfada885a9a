"""The authors' sink-head procedure (R24, attnlab.scan.sinkproc): streamed column sums against a full attention
matrix, candidate detection on a constructed residual, and the scan's outputs on a tiny model."""

from __future__ import annotations

import csv

import numpy as np
import pytest
import torch

from attnlab.cli import main
from attnlab.scan import sinkproc
from tests.real.conftest import save_tiny_hf_folder, tiny_llama

T = 12


@pytest.mark.parametrize("stats", ["fast", "full", "chunked"])
@pytest.mark.parametrize("length", [T, 200])  # 200: several query chunks, each over its visible keys
def test_mean_attention_score_equals_the_full_matrix(length, stats):
    """Every column (full, chunked) or key 0 and every candidate (fast: the fused path's key set, the rest NaN)."""
    model = tiny_llama(n_heads=4, n_kv=2, max_positions=256)
    ids = torch.randint(0, 64, (3, length), generator=torch.Generator().manual_seed(1))
    ratio = 1.02  # low, so that the tiny random model has candidates beyond key 0
    _, _, cols, norms = sinkproc.trace_windows_columns(model, ids, batch_size=2, stats=stats, ratio=ratio)
    L = cols.shape[1]
    cand = sinkproc.candidates(norms[:, :L], ratio)  # [N,L,T]
    if stats == "fast":
        assert np.all(np.isfinite(cols[:, :, :, 0])) and np.all(np.isfinite(cols.transpose(0, 1, 3, 2)[cand]))
        assert cand[..., 1:].any() and np.isnan(cols).any()
    else:
        assert np.all(np.isfinite(cols))
    model.set_attn_implementation("eager")
    with torch.no_grad():
        out = model(input_ids=ids, output_attentions=True, output_hidden_states=True, use_cache=False)
    A = torch.stack(out.attentions, 1).double().numpy()  # [N,L,H,T(query j),T(key i)]
    direct = np.zeros(A.shape[:-1])
    for i in range(length):  # (1/(T−i)) Σ_{j≥i} A[h,j,i], written out
        direct[..., i] = A[:, :, :, i:, i].sum(-1) / (length - i)
    got = sinkproc.mean_attention_score(cols)
    seen = np.isfinite(got)
    # float32 procedure vs a direct float64 mean of the same weights: observed worst case at default and AVX2 kernels, 1
    # thread (2026-12-05) 3.9e-8 (256x inside).
    np.testing.assert_allclose(got[seen], direct[seen], atol=1e-5)
    assert direct[..., 0] == pytest.approx(A[..., 0].mean(-1))  # key 0 is seen by every query
    hidden = torch.stack(out.hidden_states[:-1], 1).norm(dim=-1).numpy()  # [N,L,T] the layers' inputs
    # observed worst case at default and AVX2 kernels, 1 thread (2026-12-05): 1.5e-2 of the tolerance (66x inside).
    np.testing.assert_allclose(norms[:, : hidden.shape[1]], hidden, rtol=1e-5)


def test_candidates_and_sinks_on_a_constructed_residual():
    N, L, H = 2, 3, 2
    norms = np.ones((N, L + 1, T))
    norms[:, 1:, 0] = 50.0  # token 0 from layer 1 on
    norms[1, 2, 5] = 10.5  # just above 10 × the median (1)
    norms[0, 2, 5] = 9.5  # just below
    cols = np.zeros((N, L, H, T))
    cols[..., 0] = 0.8 * T  # every head puts 0.8 on token 0 ...
    cols[1, 2, 1, 5] = 0.4 * (T - 5)  # ... and head 1 of layer 2 puts 0.4 on token 5 in window 1
    proc = sinkproc.sink_procedure(cols, norms, ratio=10.0, threshold=0.3)
    assert proc.cand[:, 0].sum() == 0  # the embedding has no outlier
    assert np.argwhere(proc.cand).tolist() == [[0, 1, 0], [0, 2, 0], [1, 1, 0], [1, 2, 0], [1, 2, 5]]
    assert proc.has_sink[1, 2, 1, 5] and not proc.has_sink[1, 2, 0, 5]
    assert proc.sink_heads().tolist() == [[False, False], [True, True], [True, True]]
    assert proc.beyond0_fraction[2].tolist() == [0.0, 0.5]
    key0 = np.full((L, H), 0.8)
    ag = sinkproc.agreement(proc.sink_heads(), key0 >= 0.5)
    assert (ag["both"], ag["key0_only"], ag["authors_only"], ag["jaccard"]) == (4, 2, 0, pytest.approx(4 / 6))
    rows = sinkproc.layer_rows("d", proc, np.arange(N * T).reshape(N, T))
    assert rows[2]["beyond0_tokens"] == "'17'×1" and rows[2]["sink_heads_beyond0"] == 1


def test_scan_writes_the_procedure(tmp_path, capsys):
    src = save_tiny_hf_folder(tmp_path / "m")
    out = tmp_path / "scan"
    args = ["scan", "--model", str(src), "--domain", "prose", "--samples", "2", "--tokens", "16", "--out", str(out)]
    assert main(args + ["--sink-ratio", "1.5", "--sink-threshold", "0.2"]) == 0
    with open(out / "sink_heads_authors.csv") as f:
        heads = list(csv.DictReader(f))
    assert len(heads) == 2 * 4
    assert (out / "figures" / "sink_procedure.png").stat().st_size > 1000
    assert "Jaccard" in capsys.readouterr().out


@pytest.mark.parametrize(
    "flag, value, words",
    [("--sink-ratio", "0.5", "sink_ratio must be a number above 1"), ("--sink-threshold", "1.5", "sink_threshold")],
)
def test_bad_procedure_options_are_one_line(tmp_path, capsys, flag, value, words):
    assert main(["scan", "--model", "smollm2", flag, value, "--out", str(tmp_path / "x")]) == 1
    err = capsys.readouterr().err.strip()
    assert words in err and len(err.splitlines()) == 1
    assert not (tmp_path / "x").exists()


def test_r24_verdict_reads_the_scan(tmp_path):
    from attnlab.real.repro.verdicts import R24_MIN_WINDOWS, verdict_R24
    from attnlab.runs import write_json

    row = {"domain": "prose", "ratio": 10.0, "threshold": 0.3, "windows_with_beyond0_sink": 0.25,
           "beyond0_sink_layers": [3], "beyond0_sunk_tokens": "' '×2", "authors_sink_heads_beyond0": 0,
           "authors_sink_heads": 5, "key0_sink_heads": 4, "jaccard": 0.8}  # fmt: skip
    write_json(
        tmp_path / "summary.json",
        {"sink_procedure": [row, {**row, "domain": "code", "windows_with_beyond0_sink": 0.0}]},
    )
    share, met, why = verdict_R24(tmp_path)
    assert share == 0.25 and met == (0.25 >= R24_MIN_WINDOWS) and "prose: a sink beyond token 0 in 25%" in why


def test_scan_config_without_model_is_smollm2():
    from attnlab.cli import build_parser

    args = build_parser().parse_args(["scan", "--domain", "prose"])
    assert args.make_config(args).model == "smollm2"


def test_too_many_columns_are_refused_before_any_work(tmp_path, capsys, monkeypatch):
    import attnlab.scan.run as scan_run

    monkeypatch.setattr(scan_run, "MAX_COLUMN_BYTES", 1000)
    src = save_tiny_hf_folder(tmp_path / "m")
    out = tmp_path / "scan"
    assert (
        main(["scan", "--model", str(src), "--domain", "prose", "--samples", "2", "--tokens", "16", "--out", str(out)])
        == 1
    )
    err = capsys.readouterr().err.strip().splitlines()[-1]  # (the fixture's save_pretrained bar comes first)
    assert err.startswith("attnlab: error:") and "sink-head procedure" in err and not out.exists()
