"""The scan's attention view (issue 21, first steps): the layer × head grid coloured by any per-head statistic of
heads.csv (menu), and the pattern's axes labelled with the window's tokens."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from attnlab.reports.attention import ATTENTION_SCALE, WEIGHT_STEPS, token_label
from attnlab.reports.page import element_id


def test_grid_switches_statistic_and_patterns_show_tokens(runs, browse, tmp_path):
    run = runs["scan"]
    grid, view = element_id(run, "grid"), element_id(run, "pattern")
    heads = pd.read_csv(run / "heads.csv")
    with browse(run / "report.html", tmp_path / "viewer.png") as (page, errors):
        page.wait_for_selector(f"#{grid} .main-svg")
        page.locator(f"#{grid} .updatemenu-header-group").click()
        labels = page.evaluate(f"document.getElementById('{grid}').layout.updatemenus[0].buttons.map(b => b.label)")
        page.locator(f"#{grid} .updatemenu-dropdown-button").nth(labels.index("row entropy: code")).click()
        page.wait_for_function(f"document.getElementById('{grid}')._fullLayout.title.text === 'row entropy: code'")
        z = np.array(page.evaluate(f"document.getElementById('{grid}').data[0].z"), dtype=float)
        code = heads[heads["domain"] == "code"]
        want = np.zeros_like(z)
        want[code["layer"], code["head"]] = code["row_entropy"]
        assert np.allclose(z, want, rtol=1e-3, atol=1e-6)  # the grid shows heads.csv's entropy of that domain
        tokens = json.loads((run / "patterns" / "prose" / "tokens.json").read_text())
        page.wait_for_selector(f"#{view}-0 .main-svg")
        data = page.evaluate(f"document.getElementById('{view}-0').data[0]")
        labels = [f"{i} {json.dumps(token_label(t), ensure_ascii=False)}" for i, t in enumerate(tokens)]
        assert data["x"] == data["y"] == labels  # single-line labels (a newline token: "↵")
        # the enlarged view's colour scale is the one of every attention view; the causal triangle is masked
        assert {k: data[k] for k in ("colorscale", "zmin", "zmax")} == ATTENTION_SCALE.plotly()
        z = np.array(data["z"], dtype=float)
        assert np.array_equal(np.isnan(z), np.triu(np.ones(z.shape, bool), 1))
        assert page.locator(f"#{view}-0 .xtick").count() > 0
        assert errors == []


def test_served_view_computes_any_window(runs):
    """`attnlab view` computes a head on any saved window: window 1's tokens are the second window of
    samples.jsonl, its pattern is causal with rows summing to one and differs from window 0's; a window the scan
    did not save is one line naming the range."""
    import threading
    import urllib.error
    import urllib.request

    from attnlab.view.server import make_server

    run = runs["scan"]
    server = make_server(run, 0)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    base = f"http://127.0.0.1:{server.server_address[1]}/api/pattern?layer=0&head=1&domain=prose"
    try:
        with urllib.request.urlopen(base + "&window=1", timeout=60) as r:
            res = json.loads(r.read())
        with urllib.request.urlopen(base, timeout=60) as r:
            first = json.loads(r.read())
        with pytest.raises(urllib.error.HTTPError) as exc:
            urllib.request.urlopen(base + "&window=2", timeout=60)
        assert json.loads(exc.value.read())["error"] == "window must be in [0, 1] (the scan saved 2), got 2"
    finally:
        server.shutdown()
        server.server_close()
    samples = [json.loads(line) for line in (run / "samples.jsonl").read_text().splitlines()]
    prose = [s["token_ids"] for s in samples if s["domain"] == "prose"]
    A, A0 = (np.array(r["patterns"]["prose"], dtype=float) for r in (res, first))  # masked cells: null -> NaN
    assert res["window"] == 1 and len(res["tokens"]["prose"]) == len(prose[1]) == A.shape[0]
    upper = np.triu(np.ones(A.shape, bool), 1)
    assert np.array_equal(np.isnan(A), upper)  # the causal triangle is masked (null), not weight 0
    assert np.allclose(np.nansum(A, 1), 1, atol=1e-4)
    assert prose[0] != prose[1] and not np.allclose(A[~upper], A0[~upper])


def test_layer_view_draws_every_head_and_enlarges_one(runs, browse, tmp_path):
    """Offline: the layer's heads as canvases (the saved ones drawn), a click enlarges one; a later window says
    it needs `attnlab view`."""
    run = runs["scan"]
    view = element_id(run, "pattern")
    kept = json.loads((run / "summary.json").read_text())["pattern_heads"]
    layer = int(kept[0].split(".")[0])
    with browse(run / "report.html", tmp_path / "layer.png") as (page, errors):
        page.wait_for_function(f"document.getElementById('{view}').dataset.head === '{kept[0]}'")
        page.locator(f"#{view}-layer").click()
        canvases = page.locator(f"#{view}-layer-view canvas")
        assert canvases.count() == 4  # every head of the layer
        drawn = [c.get_attribute("data-drawn") == "1" for c in canvases.all()]
        assert drawn == [f"{layer}.{h}" in kept for h in range(4)]
        lit = page.evaluate(
            f"""() => {{ var c = document.querySelector('#{view}-layer-view canvas[data-head="{kept[0]}"]');
                 var d = c.getContext('2d').getImageData(0, 0, c.width, c.height).data, s = 0;
                 for (var i = 0; i < d.length; i += 4) s += d[i]; return [c.width, s]; }}"""
        )
        assert lit[0] == 16 and lit[1] > 0  # one pixel per (query, key) of the 16-token window, not blank
        other = next(f"{layer}.{h}" for h in range(4) if f"{layer}.{h}" not in kept)
        page.locator(f'#{view}-layer-view canvas[data-head="{other}"]').click()
        page.wait_for_function(f"document.getElementById('{view}').dataset.head === '{other}'")
        page.locator(f"#{view}-window").fill("1")
        page.locator(f"#{view}-window").dispatch_event("change")
        page.wait_for_function(f"document.getElementById('{view}').dataset.window === '1'")
        assert "attnlab view RUN_DIR" in page.locator(f"#{view}").inner_text()
        assert errors == []
        page.locator(f"#{view}-layer-view").evaluate("e => e.scrollIntoView({block: 'start'})")  # for the shot


def test_served_window_selector_shows_a_later_window(runs, browser):
    import threading

    from attnlab.view.server import make_server

    run = runs["scan"]
    view = element_id(run, "pattern")
    kept = json.loads((run / "summary.json").read_text())["pattern_heads"]
    server = make_server(run, 0)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    try:
        page.goto(f"http://127.0.0.1:{server.server_address[1]}/")
        page.wait_for_function(f"document.getElementById('{view}').dataset.head === '{kept[0]}'")
        page.locator(f"#{view}-window").fill("1")
        page.locator(f"#{view}-window").dispatch_event("change")
        page.wait_for_selector(f"#{view}-0 .heatmaplayer", timeout=60_000)
        page.wait_for_function(f"document.getElementById('{view}-0').layout.title.text.indexOf('(window 1)') > 0")
        samples = [json.loads(line) for line in (run / "samples.jsonl").read_text().splitlines()]
        second = [s["token_ids"] for s in samples if s["domain"] == "prose"][1]
        labels = page.evaluate(f"document.getElementById('{view}-0').data[0].x")
        assert len(labels) == len(second) and "(window 1)" in page.locator(f"#{view}-title").inner_text()
        assert errors == []
    finally:
        page.close()
        server.shutdown()
        server.server_close()


def _rewritten_scan(runs, tmp_path, monkeypatch, **figure_settings):
    """A copy of the scan with its report written again under other `attnlab.scan.figures` settings (the report
    reads the folder only)."""
    import shutil

    from attnlab.runs import RunDir
    from attnlab.scan import figures as scan_figures
    from attnlab.scan.report import write_report

    run = tmp_path / "scan"
    shutil.copytree(runs["scan"], run)
    for name, value in figure_settings.items():
        monkeypatch.setattr(scan_figures, name, value)
    write_report(RunDir(run))
    return run


def test_long_windows_are_drawn_on_a_canvas_with_token_hover(runs, browse, tmp_path, monkeypatch):
    """Past CANVAS_FROM tokens the pattern is a canvas (one pixel per query and key), its hover line naming both
    tokens and the weight: the 16-token scan is redrawn with the threshold at 8 (the report reads the folder)."""
    run = _rewritten_scan(runs, tmp_path, monkeypatch, CANVAS_FROM=8)
    view = element_id(run, "pattern")
    kept = json.loads((run / "summary.json").read_text())["pattern_heads"][0]
    A = np.load(run / "patterns" / "prose" / f"{kept}.npy")
    tokens = json.loads((run / "patterns" / "prose" / "tokens.json").read_text())
    with browse(run / "report.html", tmp_path / "canvas.png") as (page, errors):
        page.wait_for_function(f"document.getElementById('{view}').dataset.head === '{kept}'")
        canvas = page.locator(f"#{view}-0 canvas")
        assert canvas.get_attribute("width") == "16" and page.locator(f"#{view} .heatmaplayer").count() == 0
        canvas.scroll_into_view_if_needed()
        box = canvas.bounding_box()
        i, j = 9, 4
        page.mouse.move(box["x"] + (j + 0.5) * box["width"] / 16, box["y"] + (i + 0.5) * box["height"] / 16)
        tip = page.locator(f"#{view}-0 .tip").inner_text()
        # the page holds the long pattern as 16-bit codes (step 1/65534): the weight shown is that value
        weight = np.round(A[i, j] * WEIGHT_STEPS) / WEIGHT_STEPS
        lab = [json.dumps(token_label(tokens[k]), ensure_ascii=False) for k in (i, j)]
        assert tip == f"query {i} {lab[0]}, key {j} {lab[1]}: weight {weight:.4f}"
        assert abs(weight - A[i, j]) <= 0.5 / WEIGHT_STEPS + 1e-9
        page.mouse.move(box["x"] + (i + 0.5) * box["width"] / 16, box["y"] + (j + 0.5) * box["height"] / 16)
        assert page.locator(f"#{view}-0 .tip").inner_text().endswith(": masked")  # above the diagonal
        assert '"u16": "' in (run / "report.html").read_text()
        assert errors == []


def test_compare_two_scans_side_by_side(runs, browse, tmp_path):
    """`attnlab compare` of two scans draws both grids and second − first (from each folder's heads.csv); the
    menu switches statistic and domain. The second scan is the first with its sink scores halved."""
    import shutil

    from attnlab.compare import CompareConfig, compare

    first, second = runs["scan"], tmp_path / "scan-b"
    shutil.copytree(first, second)
    heads = pd.read_csv(second / "heads.csv")
    heads["sink_score"] = heads["sink_score"] * 0.5
    heads.to_csv(second / "heads.csv", index=False)
    out = compare(CompareConfig(run_dirs=(str(first), str(second))), tmp_path / "cmp").path
    div = element_id(out, "scan-pair")
    a = pd.read_csv(first / "heads.csv")
    with browse(out / "report.html", tmp_path / "compare-scans.png") as (page, errors):
        page.wait_for_selector(f"#{div} .main-svg")
        data = page.evaluate(f"document.getElementById('{div}').data")
        assert len(data) == 3
        prose = a[a["domain"] == "prose"]
        want = np.zeros((2, 4))
        want[prose["layer"], prose["head"]] = prose["sink_score"]
        assert np.allclose(data[0]["z"], want, rtol=1e-3) and np.allclose(data[1]["z"], want / 2, rtol=1e-3)
        assert np.allclose(data[2]["z"], -want / 2, rtol=1e-3, atol=1e-6)  # second − first
        labels = page.evaluate(f"document.getElementById('{div}').layout.updatemenus[0].buttons.map(b => b.label)")
        page.locator(f"#{div} .updatemenu-header-group").click()
        page.locator(f"#{div} .updatemenu-dropdown-button").nth(labels.index("row entropy: code")).click()
        page.wait_for_function(f"document.getElementById('{div}')._fullLayout.title.text === 'row entropy: code'")
        diff = np.array(page.evaluate(f"document.getElementById('{div}').data[2].z"), dtype=float)
        assert np.allclose(diff, 0, atol=1e-9)  # the entropies were left as they were
        assert errors == []


def test_layer_view_thumbnails_are_max_pooled(runs, browse, tmp_path, monkeypatch):
    """Past THUMB_SIDE tokens a small multiple is max-pooled: with the side at 8, the 16-token head is 8 x 8 pixels,
    each the colour of its 2 x 2 block's largest visible weight on the one attention scale (the 16-bit step); a
    block wholly above the diagonal is masked grey."""
    run = _rewritten_scan(runs, tmp_path, monkeypatch, THUMB_SIDE=8)
    view = element_id(run, "pattern")
    kept = json.loads((run / "summary.json").read_text())["pattern_heads"][0]
    A = np.load(run / "patterns" / "prose" / f"{kept}.npy")
    shown = np.where(np.triu(np.ones((16, 16), bool), 1), np.nan, A)  # the causal triangle masked
    with np.errstate(all="ignore"):
        pooled = np.fmax.reduce(np.fmax.reduce(shown.reshape(8, 2, 8, 2), axis=3), axis=1)
    steps = np.round(np.clip(np.round(pooled, 4), 0, 1) * WEIGHT_STEPS)  # 4 significant digits below 256 tokens
    want = ATTENTION_SCALE.rgb(np.where(np.isnan(pooled), np.nan, steps / WEIGHT_STEPS))
    with browse(run / "report.html", tmp_path / "thumbs.png") as (page, errors):
        page.wait_for_function(f"document.getElementById('{view}').dataset.head === '{kept}'")
        page.locator(f"#{view}-layer").click()
        rgb = page.evaluate(
            f"""() => {{ var c = document.querySelector('#{view}-layer-view canvas[data-head="{kept}"]');
                 var d = c.getContext('2d').getImageData(0, 0, c.width, c.height).data, r = [];
                 for (var i = 0; i < d.length; i += 4) r.push([d[i], d[i + 1], d[i + 2]]); return [c.width, r]; }}"""
        )
        assert rgb[0] == 8
        assert np.abs(np.array(rgb[1]).reshape(8, 8, 3) - want).max() <= 1
        assert errors == []
