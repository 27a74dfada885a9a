"""The notebook views (issue 40 item 6) and `Trace.massive` as a DataFrame (item 10).

`pattern_view` and `heads_view` label both axes with single-line tokens, draw masked cells as masked (NaN in the
data, the masked grey on the canvas, never weight 0's colour) on the one colour scale every attention drawing
shares (the scan report's too), and `heads_view` draws every head of a layer from the cache or the kept patterns.
"""

from __future__ import annotations

import copy
import html
import json
import re
import shutil
import subprocess

import numpy as np
import pandas as pd
import pytest
import torch

import attnlab
from attnlab.errors import InputError
from attnlab.reports.attention import (
    ATTENTION_JS,
    ATTENTION_SCALE,
    MAGMA,
    WEIGHT_STEPS,
    masked_pattern,
    pack_pattern,
    token_label,
    unpack_pattern,
)
from attnlab.tracing import Trace, TraceRecorder
from tests.browser import launch_browser
from tests.real.conftest import tiny_llama

TOKENS = ["<s>", " the", "\n", " cat", "\t", "x\r\n", "\x0b", " sat", "\u2028", "é", "on", "."]
HALF_STEP = 0.5 / WEIGHT_STEPS  # a weight goes through the page as round(w · 65534) / 65534


@pytest.fixture(scope="module")
def traced():
    """A tiny float64 Llama (4 heads, 2 layers) on 2 sequences of 12 tokens: every head of layer 1 kept and cached
    (two sources of the same patterns), and 0.1 kept."""
    model = tiny_llama().double()
    ids = torch.randint(3, 64, (2, 12), generator=torch.Generator().manual_seed(0))
    kept = [(0, 1), *((1, h) for h in range(4))]
    return attnlab.trace(model, ids, keep_patterns=kept, cache="blocks.1.attn.hook_pattern")


@pytest.fixture(scope="module")
def cached():
    """A toy transformer (4 heads, 2 layers) on 2 sequences of 12 tokens: layer 1's hook_pattern cached, head 1.3
    also kept."""
    from attnlab.toy.model import ToyConfig, ToyTransformer

    with torch.random.fork_rng():
        torch.manual_seed(0)
        toy = ToyTransformer(ToyConfig(vocab=16, d_model=16, n_heads=4, n_layers=2, max_len=16).validate())
    ids = torch.randint(0, 16, (2, 12), generator=torch.Generator().manual_seed(3))
    return attnlab.trace(toy, ids, keep_patterns=[(1, 3)], cache="blocks.1.attn.hook_pattern")


@pytest.fixture(scope="module")
def browser():
    with launch_browser() as b:
        yield b


def _axis_labels(view_html: str, axis: str) -> list[str]:
    block = re.search(rf'<div class="{axis}"[^>]*>(.*?)</div>', view_html).group(1)
    return [html.unescape(t) for t in re.findall(r"<span [^>]*>(.*?)</span>", block)]


# ---- labels ---------------------------------------------------------------------------------------------------
def test_token_labels_are_single_line_and_the_page_script_agrees(tmp_path):
    """Python's token_label and the pages' script (for labels that arrive at view time) give the same text."""
    labels = [token_label(t) for t in TOKENS]
    assert labels[2] == "↵" and labels[4] == "⇥" and labels[5] == "x\\r↵" and labels[6] == "\\x0b"
    assert labels[8] == "\\u2028" and labels[9] == "é" and labels[1] == " the"
    assert all(len(s.splitlines()) == 1 for s in labels)
    if shutil.which("node") is None:
        pytest.skip("node is not installed")
    script = tmp_path / "label.js"
    script.write_text(
        ATTENTION_JS + f"\nconsole.log(JSON.stringify({json.dumps(TOKENS)}.map(attnlabAttention.label)));"
    )
    out = subprocess.run(["node", str(script)], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout) == labels


@pytest.mark.parametrize("which", ["pattern_view", "heads_view"])
def test_both_axes_carry_the_tokens(traced, which):
    view = (
        attnlab.pattern_view(traced, TOKENS) if which == "pattern_view" else attnlab.heads_view(traced, 1, None, TOKENS)
    )
    want = [token_label(t) for t in TOKENS]  # 12 tokens: every one labelled (cells are wider than the label gap)
    assert _axis_labels(view.html, "ylab") == want and _axis_labels(view.html, "xlab") == want
    assert view.data["labels"] == want and "↵" in want and not any("\n" in s for s in want)
    assert 'class="colourbar"' in view.html and ATTENTION_SCALE.css_gradient() in view.html


# ---- masked cells ---------------------------------------------------------------------------------------------
def test_masked_pattern_masks_the_causal_triangle_and_padded_keys_only():
    a = np.tril(np.full((4, 4), 0.25))
    a[3, 1] = 0.0  # a visible weight of exactly 0 stays 0
    m = masked_pattern(a)
    assert np.array_equal(np.isnan(m), np.triu(np.ones((4, 4), bool), 1)) and m[3, 1] == 0.0
    full = np.full((4, 4), 0.25)  # not causal (weights above the diagonal): nothing masked
    assert not np.isnan(masked_pattern(full)).any()
    padded = masked_pattern(a, valid=[0, 1, 1, 1])  # left padding: key 0 and query 0 masked
    assert np.isnan(padded[:, 0]).all() and np.isnan(padded[0]).all() and padded[2, 1] == 0.25
    back = unpack_pattern(pack_pattern(padded))
    assert np.array_equal(np.isnan(back), np.isnan(padded))
    assert np.nanmax(np.abs(back - padded)) <= HALF_STEP


@pytest.mark.parametrize("which", ["pattern_view", "heads_view"])
def test_masked_cells_are_nan_in_the_view_data_not_zero(traced, which):
    view = attnlab.pattern_view(traced) if which == "pattern_view" else attnlab.heads_view(traced, 1)
    upper = np.triu(np.ones((12, 12), bool), 1)
    for key, packed in view.data["patterns"].items():
        A = unpack_pattern(packed)
        want = np.asarray(traced.patterns[key][0]) if key in traced.patterns else None
        assert np.array_equal(np.isnan(A), upper), key  # exactly the causal triangle, nothing else
        if want is not None:
            assert np.abs(A[~upper] - want[~upper]).max() <= HALF_STEP + 1e-12


def test_padded_keys_are_masked_when_the_trace_has_an_attention_mask(traced):
    padded = copy.copy(traced)
    padded.attention_mask = np.ones((2, 12), dtype=int)
    padded.attention_mask[1, :3] = 0  # sequence 1 left-padded by 3
    A = unpack_pattern(attnlab.heads_view(padded, 1, sample=1).data["patterns"]["1.0"])
    want = np.triu(np.ones((12, 12), bool), 1)
    want[:, :3] = want[:3, :] = True
    assert np.array_equal(np.isnan(A), want)
    assert not np.isnan(unpack_pattern(attnlab.heads_view(padded, 1, sample=0).data["patterns"]["1.0"])[:, 0]).any()


def test_a_padded_batchs_cache_of_one_pattern_per_sequence(cached):
    """A padded batch caches a list of [H, T_n, T_n] (lengths differ): each is drawn in its corner, NaN around."""
    full = cached.cache["blocks.1.attn.hook_pattern"]
    ragged = copy.copy(cached)
    ragged.cache = {"blocks.1.attn.hook_pattern": [full[0], full[1, :, :7, :7]]}
    A = unpack_pattern(attnlab.heads_view(ragged, 1, sample=1).data["patterns"]["1.2"])
    want = np.triu(np.ones((12, 12), bool), 1)
    want[7:, :] = want[:, 7:] = True
    assert np.array_equal(np.isnan(A), want)
    assert np.abs(A[:7, :7][~want[:7, :7]] - full[1, 2, :7, :7].numpy()[~want[:7, :7]]).max() <= HALF_STEP + 1e-7


def test_a_transformers_models_cache_and_kept_patterns_agree(traced):
    """heads_view draws layer 1 from the cache (hook_pattern), pattern_view from keep_patterns: the same codes, to
    one 16-bit step (float64 forwards by two attention paths: a few ulps apart)."""
    assert "blocks.1.attn.hook_pattern" in traced.cache
    for sample in (0, 1):
        cached = attnlab.heads_view(traced, 1, sample=sample).data["patterns"]
        kept = attnlab.pattern_view(traced, sample=sample).data["patterns"]
        for h in range(4):
            a, b = unpack_pattern(cached[f"1.{h}"]), unpack_pattern(kept[f"1.{h}"])
            assert np.array_equal(np.isnan(a), np.isnan(b)) and np.nanmax(np.abs(a - b)) <= 1 / WEIGHT_STEPS


def test_the_cache_and_the_kept_patterns_give_the_same_head(cached):
    """Two sources of one head: the cached hook_pattern (heads_view: every head) and keep_patterns (pattern_view)."""
    view = attnlab.heads_view(cached, -1, sample=1)
    assert list(view.data["patterns"]) == [f"1.{h}" for h in range(4)] and "not kept" not in view.html
    from_cache = unpack_pattern(view.data["patterns"]["1.3"])
    kept = unpack_pattern(attnlab.pattern_view(cached, sample=1).data["patterns"]["1.3"])
    assert np.array_equal(from_cache, kept, equal_nan=True)
    assert np.array_equal(np.isnan(kept), np.triu(np.ones((12, 12), bool), 1))


# ---- one colour scale -----------------------------------------------------------------------------------------
def test_one_colour_scale_everywhere(traced):
    """pattern_view, heads_view and the scan report's views carry the same scale object: same zmin, zmax, stops."""
    from attnlab.scan import figures

    want = ATTENTION_SCALE.as_dict()
    assert attnlab.pattern_view(traced).data["scale"] == want == attnlab.heads_view(traced, -1).data["scale"]
    assert want["zmin"] == 0.0 and want["zmax"] == 1.0 and [c for _, c in want["stops"]] == list(MAGMA)
    script = figures.pattern_js()
    assert script.startswith(ATTENTION_JS)  # the report draws with the views' code ...
    assert "colorscale: scale.stops" in script and "zmin: scale.zmin, zmax: scale.zmax" in script  # ... and scale
    assert not re.search(r"Magma|Viridis|Math\.sqrt\(q", script)  # no second scale left in the report's script
    assert ATTENTION_SCALE.plotly() == {"colorscale": want["stops"], "zmin": 0.0, "zmax": 1.0}
    cmap = ATTENTION_SCALE.cmap()  # the report's PNG: the same stops, NaN in the masked grey
    w = np.linspace(0, 1, 2001)
    # matplotlib looks colours up in N = 65535 steps: off by at most the steepest segment's slope over N, plus
    # rounding to 1/255 (the steepest: 0 to 1/81 of weight, 61 colour units)
    bound = max(np.abs(np.diff(ATTENTION_SCALE.rgb([p for p, _ in ATTENTION_SCALE.stops]), axis=0)).max(1)
                / np.diff([p for p, _ in ATTENTION_SCALE.stops])) / (WEIGHT_STEPS + 1) + 1  # fmt: skip
    assert np.abs(cmap(w)[:, :3] * 255 - ATTENTION_SCALE.rgb(w)).max() <= bound
    assert np.allclose(np.array(cmap(np.nan)[:3]) * 255, ATTENTION_SCALE.rgb(np.nan))


# ---- heads_view -----------------------------------------------------------------------------------------------
def test_heads_view_draws_every_head_and_enlarges_the_one_clicked(cached, browser, tmp_path):
    view = attnlab.heads_view(cached, 1, head=2, tokens=TOKENS)  # from the cache
    assert view.html.count('class="thumb pick"') == cached.n_heads == 4
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.goto(view.save(tmp_path / "heads.html").resolve().as_uri())
    main = page.locator(".attnlab-view canvas.main")
    assert main.get_attribute("data-head") == "1.2" and main.get_attribute("width") == "12"
    assert page.locator(".attnlab-view canvas.thumb[data-drawn='1']").count() == 4
    page.locator('.attnlab-view canvas.thumb[data-head="1.0"]').click()
    assert main.get_attribute("data-head") == "1.0"
    A = unpack_pattern(view.data["patterns"]["1.0"])
    px = np.array(
        page.evaluate("""() => { var c = document.querySelector('.attnlab-view canvas.main');
        return Array.from(c.getContext('2d').getImageData(0, 0, c.width, c.height).data); }""")
    ).reshape(12, 12, 4)
    masked = np.isnan(A)
    assert masked.sum() == 66  # the causal triangle of 12 tokens
    assert np.abs(px[..., :3] - ATTENTION_SCALE.rgb(A)).max() <= 1  # every cell on the scale, masked ones grey
    assert (px[masked][:, :3] == ATTENTION_SCALE.rgb(np.nan)).all()
    assert (np.abs(px[masked][:, :3] - ATTENTION_SCALE.rgb(0.0)).sum(-1) > 100).all()  # not weight 0's colour
    box = main.bounding_box()
    for (i, j), want in {(7, 2): f"weight {A[7, 2]:.4f}", (2, 7): "masked"}.items():
        page.mouse.move(box["x"] + (j + 0.5) * box["width"] / 12, box["y"] + (i + 0.5) * box["height"] / 12)
        lab = [f"{k} {json.dumps(token_label(TOKENS[k]), ensure_ascii=False)}" for k in (i, j)]
        assert page.locator(".attnlab-view .tip").inner_text() == f"query {lab[0]}, key {lab[1]}: {want}"
    lines = page.evaluate("""() => Array.from(document.querySelectorAll('.attnlab-view .ylab span')).map(s => {
        var r = document.createRange(); r.selectNodeContents(s); return r.getClientRects().length; })""")
    assert lines == [1] * 12  # every label on one line (the newline token's too)
    page.close()
    assert errors == []


def test_heads_view_from_kept_patterns_and_its_refusals(traced):
    view = attnlab.heads_view(traced, 0)  # layer 0: its one kept head, 0.1
    assert list(view.data["patterns"]) == ["0.1"] and view.html.count("not kept") == 3
    assert attnlab.heads_view(traced, -1).data["patterns"].keys() == {f"1.{h}" for h in range(4)}
    bare = attnlab.trace(tiny_llama(), torch.randint(3, 64, (1, 8), generator=torch.Generator().manual_seed(1)))
    with pytest.raises(InputError) as err:
        attnlab.heads_view(bare, 1)
    assert "\n" not in str(err.value)
    assert 'cache="blocks.1.attn.hook_pattern"' in str(err.value) and "keep_patterns=" in str(err.value)
    with pytest.raises(InputError, match=r"layer must be an integer in \[-2, 1\]"):
        attnlab.heads_view(traced, 2)
    with pytest.raises(InputError, match=r"head 2 of layer 0 is not in the trace .*keep_patterns=\[\(0, 2\)\]"):
        attnlab.heads_view(traced, 0, head=2)
    with pytest.raises(InputError, match=r"^sample must be in \[0, 1\]"):
        attnlab.heads_view(traced, 1, sample=2)
    with pytest.raises(InputError, match="tokens: 3 given for a sequence of 12"):
        attnlab.heads_view(traced, 1, tokens=TOKENS[:3])


# ---- Trace.massive --------------------------------------------------------------------------------------------
def test_massive_is_the_recorders_list_as_a_dataframe():
    """The DataFrame holds exactly the records the recorder kept (the old list of dicts), with named columns."""
    rec = TraceRecorder(1, 1, 3, vocab_size=0)
    rec.begin_batch(None, batch_size=2)
    rec.attention(0, torch.tril(torch.ones(2, 1, 3, 3, dtype=torch.float64)) / torch.arange(1, 4).view(1, 1, 3, 1))
    rec.value_norms(0, torch.ones(2, 3, 1, dtype=torch.float64))
    h = torch.ones(2, 3, 4, dtype=torch.float64)
    h[1, 0, 2], h[0, 2, 1] = 5000.0, -3000.0
    rec.residual(0, h)
    rec.residual(1, h)
    old = [dict(r) for rows in rec.massive for r in rows]
    tr = rec.result()
    assert list(tr.massive.columns) == ["layer", "sample", "pos", "dim", "value", "median_abs"]
    assert tr.massive.to_dict("records") == old and len(old) == 4
    assert tr.massive["sample"].dtype == np.int64 and tr.massive["value"].dtype == np.float64


def test_massive_on_a_tiny_model_and_through_save_and_load(tmp_path):
    """A planted entry of the embedding output is found with its value, saved traces round-trip, and a trace saved
    with the old list (or none) still loads."""
    model = tiny_llama().double()
    ids = torch.randint(3, 64, (2, 10), generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        model.model.embed_tokens.weight[int(ids[1, 4]), 7] = -2.0e4
    tr = attnlab.trace(model, ids, cache="blocks.0.hook_resid_pre")
    x = tr.cache["blocks.0.hook_resid_pre"]  # [batch, pos, d_model], the embedding output (residual stream 0)
    first = tr.massive[tr.massive["layer"] == 0]
    hits = (ids == ids[1, 4]).nonzero().tolist()  # every place the planted token sits
    assert sorted(zip(first["sample"], first["pos"], first["dim"])) == sorted((b, p, 7) for b, p in hits)
    assert (first["value"] == [float(x[b, p, 7]) for b, p in zip(first["sample"], first["pos"])]).all()
    tr.save(tmp_path / "t")
    back = attnlab.load_trace(tmp_path / "t")
    pd.testing.assert_frame_equal(back.massive, tr.massive)
    meta = json.loads((tmp_path / "t.json").read_text())
    assert meta["massive"] == tr.massive.to_dict("records")  # still the list of records on disk
    meta["massive"] = [dict(r, extra=1) for r in meta["massive"]][:1]  # an older / other writer's list
    (tmp_path / "t.json").write_text(json.dumps(meta))
    old = Trace.load(tmp_path / "t")
    assert list(old.massive.columns)[:6] == list(tr.massive.columns) and len(old.massive) == 1
    (tmp_path / "t.json").write_text(json.dumps({}))  # the oldest files: no massive key at all
    assert Trace.load(tmp_path / "t").massive.empty
