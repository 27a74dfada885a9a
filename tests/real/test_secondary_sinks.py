"""Secondary sinks (issue 41): the full path's column sums and entropies against float64 numpy from eager
`output_attentions`; sink detection on a model built so that a chosen token draws the attention; the lifetime and
first-layer logic on constructed arrays; the record saved and loaded with the trace."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import attnlab
from attnlab.tracing.recorder import TraceRecorder
from attnlab.tracing.sinks import SinkCollector, lifetime, sink_hits
from tests.real.conftest import tiny_gpt2, tiny_llama

U32 = 2.0**-24  # float32 unit roundoff: the blocked full path computes in float32
MARK = 7  # the token the constructed model attends to
T = 64


def _eager(model, ids: torch.Tensor) -> tuple[np.ndarray, list[np.ndarray]]:
    """([L,B,H,T,T] float64 attention weights, the MLP outputs [B,T,d] and block inputs per layer) of an eager
    forward, the MLP outputs and block inputs read by hooks of this test (not the adapter's)."""
    from attnlab.tracing.adapters.arch import get_arch

    arch, mlp, pre = get_arch(model), {}, {}
    hs = [a.register_forward_hook(lambda m, a_, o, l=l: mlp.__setitem__(l, o)) for l, a in enumerate(arch.mlp)]
    hs += [
        b.register_forward_pre_hook(
            lambda m, a_, kw, l=l: pre.__setitem__(l, (a_ or (kw["hidden_states"],))[0]), with_kwargs=True
        )  # fmt: skip
        for l, b in enumerate(arch.blocks)
    ]
    model.set_attn_implementation("eager")
    try:
        with torch.no_grad():
            out = model(ids, output_attentions=True, use_cache=False)
    finally:
        for h in hs:
            h.remove()
        model.set_attn_implementation("sdpa")
    att = np.stack([a.double().numpy() for a in out.attentions])
    return att, [(mlp[l].double().numpy(), pre[l].double().numpy()) for l in range(len(arch.blocks))]


def _marked_gpt2() -> torch.nn.Module:
    """A float64 tiny GPT-2 whose layer 0 sends every head's attention to the token MARK: constant queries (the
    c_attn bias) and keys α·(LN(x)·m)·1 with m the direction of MARK's embedding, which LayerNorm maps to √d·m."""
    model = tiny_gpt2(n_heads=2, layers=2, seed=3).double()
    d = model.config.n_embd
    g = torch.Generator().manual_seed(5)
    m = torch.randn(d, generator=g, dtype=torch.float64)
    m = (m - m.mean()) / (m - m.mean()).norm()
    with torch.no_grad():
        model.transformer.wte.weight[MARK] = 3.0 * m
        attn = model.transformer.h[0].attn.c_attn  # Conv1D: x @ W + b, columns [q | k | v]
        attn.weight[:, : 2 * d] = 0.0
        attn.bias[:d] = 1.0
        attn.weight[:, d : 2 * d] = 1.5 * m.unsqueeze(1)
        attn.bias[d : 2 * d] = 0.0
    return model


def _ids(n: int, positions: tuple[int, ...], seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(10, 64, (n, T), generator=g)
    ids[:, list(positions)] = MARK
    return ids


def _reference_hits(att: np.ndarray) -> set[tuple[int, int, int, int]]:
    """(sample, pos, layer, head) with M_j ≥ τ from float64 column sums (numpy; `sink_hits` on the reference)."""
    found = set()
    for layer in range(att.shape[0]):
        for b, h, p, _ in sink_hits(att[layer].sum(2)):
            found.add((int(b), int(p), layer, int(h)))
    return found


@pytest.mark.parametrize("stats", ["full", "chunked"])
def test_constructed_sinks_found_where_placed(stats: str) -> None:
    """The marked tokens at 5 and 20 are sinks of both heads of layer 0 in every window, and the hits (positions,
    layers, heads) are those of float64 eager weights; scores within the float32 path's bound."""
    model, ids = _marked_gpt2(), _ids(3, (5, 20), seed=1)
    tr = attnlab.trace(model, ids, stats=stats)
    att, _ = _eager(model, ids)
    lv = tr.sink_levels
    first = lv[lv["layer"] == 0]
    layer0 = {(int(s), int(p), int(h)) for s, p, heads in zip(first["sample"], first["pos"], first["heads"])
              for h in heads.split()}  # fmt: skip
    assert {(s, p, h) for s in range(3) for p in (5, 20) for h in (0, 1)} <= layer0
    hits = tr.sink_record.hits
    got = {(int(s), int(p), int(l), int(h)) for s, p, l, h, _ in hits}
    assert got == _reference_hits(att)
    for s, p, l, h, score in hits:
        want = att[int(l), int(s), int(h), :, int(p)].sum() / (T - p)
        # float32 scores of O(10) through exp and sums over T terms: (T + 8 + 8·max|s|)·u per weight, relative
        assert abs(score - want) <= (T + 8 + 8 * 30) * U32 * want
    table = tr.secondary_sinks
    assert set(zip(table["sample"], table["pos"])) >= {(s, p) for s in range(3) for p in (5, 20)}
    assert (table.loc[table["pos"].isin([5, 20]), "token"] == MARK).all()


def test_mlp_norms_and_cosines_against_float64() -> None:
    """Each sink token's MLP output norms and cosines with position 0's residual entering the block, against the
    same quantities from this test's own hooks on a float64 eager forward."""
    model, ids = _marked_gpt2(), _ids(2, (5, 20), seed=2)
    tr = attnlab.trace(model, ids, stats="full")
    _, blocks = _eager(model, ids)
    rec = tr.sink_record
    assert len(rec.tokens) >= 4
    for k, (s, p, _) in enumerate(rec.tokens.astype(int)):
        for layer, (out, pre) in enumerate(blocks):
            o, r = out[s, p], pre[s, 0]
            # the same float64 forward through other hooks: equal up to the attention path's float32 rounding
            np.testing.assert_allclose(rec.mlp_norm[k, layer], np.linalg.norm(o), rtol=1e-5)
            cos = o @ r / (np.linalg.norm(o) * np.linalg.norm(r))
            np.testing.assert_allclose(rec.mlp_cos[k, layer], cos, atol=1e-5)
    row = tr.secondary_sinks.iloc[0]
    assert row["forming_layer"] == row["first_layer"] - 1


def test_full_path_column_sums_and_entropies_float64() -> None:
    """stats="full" (blocked cpu path) column means and row entropies against float64 numpy on eager weights of a
    float64 tiny Llama."""
    model = tiny_llama(layers=2, seed=4).double()
    ids = torch.randint(3, 64, (2, 40), generator=torch.Generator().manual_seed(0))
    tr = attnlab.trace(model, ids, stats="full")
    att, _ = _eager(model, ids)
    L, B, H, n, _ = att.shape
    col_mean = att.sum(3).mean(1) / (n - np.arange(n))  # [L,H,T]
    p = att[..., 1:, :]
    ent = -np.where(p > 0, p * np.log(np.where(p > 0, p, 1.0)), 0.0).sum(-1) / np.log(np.arange(2, n + 1))
    row_ent = ent.mean(axis=(1, 3))  # [L,H]
    # weights from float32 scores (|s| ≤ 30 here) through exp, sums over ≤ T terms: (2T + 16 + 8·30)·u relative
    bound = (2 * n + 16 + 8 * 30) * U32
    np.testing.assert_allclose(tr.attn_col_mean, col_mean, rtol=bound, atol=0)
    np.testing.assert_allclose(tr.row_entropy, row_ent, rtol=bound, atol=bound)
    assert tr.attention_paths == ["blocked"] * L


def test_lifetime_and_first_layer_on_constructed_columns() -> None:
    """A synthetic recorder input: column sums placing key 20 over τ in layers 2, 3, 4 and 6 (lifetime 3, first
    layer 2) and key 50 (T − j = 14 < 32 queries) never counted."""
    L, H, n = 8, 2, 64
    col = SinkCollector(L, n)
    col.begin_batch(1, 0, torch.arange(n).view(1, n))
    for layer in range(L):
        c = torch.zeros(1, H, n, dtype=torch.float64)
        if layer in (2, 3, 4, 6):
            c[0, 1, 20] = 0.5 * (n - 20)  # M = 0.5
        c[0, 0, 50] = 1.0 * (n - 50)  # M = 1, but too few queries
        if layer == 3:
            c[0, 0, 20] = 0.31 * (n - 20)
        col.columns(layer, c)
    col.end_batch()
    t = col.result().table()
    assert len(t) == 1
    row = t.iloc[0]
    assert (row["pos"], row["token"], row["first_layer"], row["lifetime"], row["n_layers"]) == (20, 20, 2, 3, 4)
    assert row["heads"] == "2.1 3.0 3.1 4.1 6.1" and row["score"] == pytest.approx(0.5)
    assert lifetime([1]) == 1 and lifetime([0, 2]) == 1 and lifetime([5, 6, 7]) == 3


def test_recorder_patterns_and_save_roundtrip(tmp_path) -> None:
    """Whole patterns through the recorder (the toy path): a key drawing half of every later row is found, with
    its exact score, and the record survives save/load."""
    L, H, n = 2, 1, 48
    rec = TraceRecorder(L, H, n)
    rec.begin_batch(None, batch_size=1)
    for layer in range(L):
        A = torch.tril(torch.ones(n, n, dtype=torch.float64))
        A[8:, :] *= 0.5 / torch.arange(1, n - 7, dtype=torch.float64).add(7).view(-1, 1)
        A[8:, 8] += 0.5
        A = A / A.sum(-1, keepdim=True)
        rec.attention(layer, A.view(1, 1, n, n))
    tr = rec.result()
    want = float(A[8:, 8].sum() / (n - 8))
    lv = tr.sink_levels
    assert list(lv["pos"]) == [8, 8] and list(lv["layer"]) == [0, 1]
    assert lv["score"].iloc[0] == pytest.approx(want, rel=1e-12)
    tr.save(tmp_path / "t")
    back = attnlab.load_trace(tmp_path / "t")
    assert back.attention_paths == ["eager", "eager"]
    assert back.secondary_sinks.equals(tr.secondary_sinks)


def test_fast_stats_has_no_sink_record() -> None:
    model = tiny_llama(layers=2, seed=4)
    tr = attnlab.trace(model, torch.randint(3, 64, (1, 40)), stats="fast")
    assert tr.secondary_sinks is None and tr.attention_paths == ["flash", "flash"]


def test_full_scan_writes_sinks_and_the_kernel_record(tmp_path) -> None:
    """A `--stats full` scan: sinks.csv / sink_levels.csv equal the saved traces' tables, the manifest names each
    layer's kernel, and the report has the sink levels section."""
    import attnlab.scan
    from attnlab.runs import read_json
    from attnlab.scan import ScanConfig
    from attnlab.scan.tables import read_table
    from attnlab.tracing.format import Trace
    from tests.real.conftest import save_tiny_hf_folder

    folder = save_tiny_hf_folder(tmp_path / "m", "llama")
    cfg = ScanConfig(model=str(folder), domains=("prose", "code"), tokens=40, samples=2, stats="full",
                     n_auto_pattern_heads=0)  # fmt: skip
    res = attnlab.scan.scan(cfg, out=tmp_path / "scan")
    manifest = read_json(res.path / "manifest.json", "manifest")
    assert manifest["attention_paths"] == {"prose": ["blocked"] * 2, "code": ["blocked"] * 2}
    levels = read_table(res.path / "sink_levels.csv")
    for d in ("prose", "code"):
        tr = Trace.load(res.path / "traces" / d)
        want = tr.sink_levels
        got = levels[levels["domain"] == d] if len(levels) else levels
        assert len(got) == len(want)
        entry = next(s for s in res.summary["secondary_sinks"] if s["domain"] == d)
        assert entry["computed"] and entry["windows"] == 2
        assert entry["windows_with_sink"] == len({s for s, l in zip(want["sample"], want["layer"]) if l >= 2})
    assert "Secondary sinks" in (res.path / "report.html").read_text()


def _sink_folder(path, flags: dict[str, list[bool]], pairs: list[tuple[int, float, float, int]]):
    """A scan folder with the files R26/R27 read: per domain, windows with (True) or without a sink in layer 3;
    pairs (window, forming MLP norm, score, lifetime) of prose sinks first seen in layer 3."""
    import json

    import pandas as pd

    levels = [{"domain": d, "sample": s, "pos": 5, "token": 9, "text": " the", "layer": 3, "score": 0.5, "n_heads": 1,
               "heads": "0"} for d, f in flags.items() for s, on in enumerate(f) if on]  # fmt: skip
    sinks = [{"domain": "prose", "sample": w, "pos": 5 + k, "token": 9, "text": " the", "first_layer": 3,
              "lifetime": life, "score": score, "forming_mlp_norm": norm}
             for k, (w, norm, score, life) in enumerate(pairs)]  # fmt: skip
    summary = {"secondary_sinks": [{"domain": d, "computed": True, "windows": len(f), "top_tokens": []}
                                   for d, f in flags.items()]}  # fmt: skip
    (path / "summary.json").write_text(json.dumps(summary))
    (path / "sink_levels.csv").write_text(pd.DataFrame(levels).to_csv(index=False) if levels else "")  # as write_csv
    pd.DataFrame(sinks).to_csv(path / "sinks.csv", index=False)
    return path


def test_r26_r27_verdicts_on_constructed_folders(tmp_path) -> None:
    """R26: every window with a sink is met, none missed (the interval is [1, 1] or [0, 0]); R27: norms that rank
    score and lifetime exactly give ρ = 1 in every resample (met), reversed ranks ρ = −1 (missed); the intervals
    rebuilt from the measure's numbers judge alike."""
    from attnlab.core.intervals import judge
    from attnlab.core.targets import Check
    from attnlab.real.repro import measures
    from attnlab.real.repro.verdicts import verdict_R26, verdict_R27

    up = [(w, 100.0 * (w + 1), 0.3 + 0.01 * w, 1 + w) for w in range(8)]
    (tmp_path / "a").mkdir()
    good = _sink_folder(tmp_path / "a", {"prose": [True] * 8, "code": [True] * 8}, up)
    v = verdict_R26(good)
    assert v["verdict"] == "met" and (v["share"].low, v["share"].high) == (1.0, 1.0)
    v27 = verdict_R27(good, resamples=200)
    assert v27["verdict"] == "met" and v27["rho_score"].low == pytest.approx(1.0)
    nums = measures._interval_numbers("R27_rho_score", v27["rho_score"])
    nums |= measures._interval_numbers("R27_rho_lifetime", v27["rho_lifetime"])
    checks = [Check("R27_rho_score", ">", 0.3), Check("R27_rho_lifetime", ">", 0.3)]
    assert judge(checks, measures.r27_intervals(nums)) == "met"
    (tmp_path / "b").mkdir()
    down = [(w, 100.0 * (8 - w), s, life) for w, _, s, life in up]
    bad = _sink_folder(tmp_path / "b", {"prose": [False] * 8, "code": [False] * 8}, down)
    assert verdict_R26(bad)["verdict"] == "missed"
    assert verdict_R27(bad, resamples=200)["verdict"] == "missed"
