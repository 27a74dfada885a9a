"""Every study's report in a real headless Chromium: no console errors, the scan grid drives the pattern view,
tables sort, plotly views draw; and no page holds a path of this machine."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np


def _plot_ready(page, div_id: str) -> None:
    page.wait_for_selector(f"#{div_id} .main-svg")


def _grid_cell_xy(page, grid: str, layer: int, head: int) -> tuple[float, float]:
    """Page coordinates of a heat map cell (plotly's own axis conversion), the grid scrolled into view first (the
    contents list and section headings above it can push it below the first screen)."""
    return page.evaluate(
        """([id, l, h]) => { var gd = document.getElementById(id); gd.scrollIntoView({block: 'center'});
           var fl = gd._fullLayout, r = gd.getBoundingClientRect();
           return [r.left + window.scrollX + fl._size.l + fl.xaxis.l2p(h),
                   r.top + window.scrollY + fl._size.t + fl.yaxis.l2p(l)]; }""",
        [grid, layer, head],
    )


def test_scan_grid_click_shows_that_heads_pattern(runs, browse, tmp_path):
    from attnlab.reports.page import element_id

    run = runs["scan"]
    grid, view = element_id(run, "grid"), element_id(run, "pattern")
    kept = json.loads((run / "summary.json").read_text())["pattern_heads"]
    assert kept[0] == "1.3" and len(kept) == 2
    with browse(run / "report.html", tmp_path / "scan.png") as (page, errors):
        _plot_ready(page, grid)
        title = page.locator(f"#{view}-title")
        assert title.inner_text().startswith("Layer 1, head 3")  # the first kept head is shown at first
        other = [int(x) for x in kept[1].split(".")]
        page.evaluate("window.scrollTo(0, 0)")
        x, y = _grid_cell_xy(page, grid, *other)
        page.mouse.click(x - page.evaluate("window.scrollX"), y - page.evaluate("window.scrollY"))
        page.wait_for_function(f"document.getElementById('{view}').dataset.head === '{kept[1]}'")
        assert title.inner_text().startswith(f"Layer {other[0]}, head {other[1]}")
        assert page.locator(f"#{view} .heatmaplayer").count() == 2  # one pattern per domain
        tokens = json.loads((run / "patterns" / "prose" / "tokens.json").read_text())
        assert page.locator(f"#{view} .tokens").first.locator("span").count() == len(tokens) == 16
        # a head whose pattern was not kept says how to keep it
        unsaved = next((l, h) for l in range(2) for h in range(4) if f"{l}.{h}" not in kept)
        x, y = _grid_cell_xy(page, grid, *unsaved)
        page.mouse.click(x - page.evaluate("window.scrollX"), y - page.evaluate("window.scrollY"))
        page.wait_for_function(f"document.getElementById('{view}').dataset.head === '{unsaved[0]}.{unsaved[1]}'")
        assert f"--pattern-head {unsaved[0]}.{unsaved[1]}" in page.locator(f"#{view}").inner_text()
        # the hover text of a saved pattern names the query and key tokens and the weight
        page.locator("button.head", has_text="L1H3").click()
        data = page.evaluate(f"document.getElementById('{view}-0').data[0]")
        A = np.load(run / "patterns" / "prose" / "1.3.npy")
        assert abs(data["z"][5][2] - A[5, 2]) < 1e-3 * max(A[5, 2], 1e-3) + 1e-6
        esc = lambda t: json.dumps(t).replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")  # noqa: E731
        assert data["text"][5][2] == f"query 5 {esc(tokens[5])}<br>key 2 {esc(tokens[2])}"
        assert errors == []
    assert (tmp_path / "scan.png").stat().st_size > 10_000


def test_bb_report_curves_snapshots_and_sorting(runs, browse, tmp_path):
    from attnlab.reports.page import element_id

    run = runs["bb"]
    with browse(run / "report.html", tmp_path / "bb.png") as (page, errors):
        curves, snaps = element_id(run, "curves"), element_id(run, "snapshots")
        _plot_ready(page, curves)
        _plot_ready(page, snaps)
        steps = [json.loads(line)["step"] for line in (run / "metrics.jsonl").read_text().splitlines()]
        assert page.evaluate(f"document.getElementById('{snaps}')._transitionData._frames.length") == len(steps)
        last = json.loads((run / "metrics.jsonl").read_text().splitlines()[-1])
        names = page.evaluate(f"document.getElementById('{curves}').data.map(t => t.name)")
        assert sorted(names) == sorted(k for k in last if k != "step")  # every metric (1 layer, 1 head), one trace
        table = page.locator("table.sortable").first
        col = 1  # attn_sink
        assert table.locator("th").nth(col).inner_text().startswith("attn_sink")
        table.locator("th").nth(col).click()
        values = [float(c.inner_text()) for c in table.locator(f"tbody tr td:nth-child({col + 1})").all()]
        assert values == sorted(values) and len(values) >= 2
        table.locator("th").nth(col).click()
        values = [float(c.inner_text()) for c in table.locator(f"tbody tr td:nth-child({col + 1})").all()]
        assert values == sorted(values, reverse=True)
        assert errors == []


def test_consensus_and_paths_reports_draw(runs, browse, tmp_path):
    from attnlab.reports.page import element_id

    views = {
        "sim3": ["sphere"],
        "sim4": ["sphere"],
        "phase": ["phase"],
        "solve": ["U", "kernels"],
        "sweep": ["accuracy", "U"],
    }
    for name, ids in views.items():
        run = runs[name]
        with browse(run / "report.html", tmp_path / f"{name}.png") as (page, errors):
            for i in ids:
                div = element_id(run, i)
                page.wait_for_selector(f"#{div} .main-svg")
                assert page.evaluate(f"document.getElementById('{div}').data.length") >= 1
            if name == "sim3":  # 3-D on the sphere, one frame per recorded time
                div = element_id(run, "sphere")
                assert page.evaluate(f"document.getElementById('{div}').data[1].type") == "scatter3d"
                n_t = len(np.load(run / "t_states.npy"))
                assert page.evaluate(f"document.getElementById('{div}')._transitionData._frames.length") == n_t
            if name == "sim4":
                assert (
                    page.evaluate(f"document.getElementById('{element_id(run, 'sphere')}').data[1].type") == "scatter"
                )
            assert errors == [], name


def test_no_machine_paths_in_any_page(runs, tmp_path_factory):
    base = str(tmp_path_factory.getbasetemp())
    home = str(Path.home())
    for run in runs.values():
        text = (run / "report.html").read_text()
        assert base not in text and f"{home}/" not in text, run


def test_served_scan_report_computes_an_unsaved_head(runs, browser, tmp_path):
    """Through `attnlab view`, clicking a head whose pattern was not kept shows it, computed by the server."""
    import threading

    from attnlab.reports.page import element_id
    from attnlab.view.server import make_server

    run = runs["scan"]
    grid, view = element_id(run, "grid"), element_id(run, "pattern")
    kept = json.loads((run / "summary.json").read_text())["pattern_heads"]
    unsaved = next((l, h) for l in range(2) for h in range(4) if f"{l}.{h}" not in kept)
    server = make_server(run, 0)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    try:
        page.goto(f"http://127.0.0.1:{server.server_address[1]}/")
        _plot_ready(page, grid)
        x, y = _grid_cell_xy(page, grid, *unsaved)
        page.mouse.click(x - page.evaluate("window.scrollX"), y - page.evaluate("window.scrollY"))
        page.wait_for_selector(f"#{view}-1 .heatmaplayer", timeout=60_000)
        assert page.locator(f"#{view}-title").inner_text().startswith(f"Layer {unsaved[0]}, head {unsaved[1]}")
        page.screenshot(path=str(tmp_path / "served.png"), full_page=True)
        assert errors == []
    finally:
        page.close()
        server.shutdown()
        server.server_close()
