"""Reports that read well (issue 21): contents list, tables (sticky first column, sorted by value, no raw dicts),
captions in words, plotly.min.js once per tree of runs, and a copied folder that opens without it."""

from __future__ import annotations

import json
import re
import shutil

import numpy as np

from attnlab.reports.page import PLOTLY_ASSET, Report, cell, flat_rows, fmt, words


def test_contents_list_links_every_section_once():
    rep = Report("page").heading("Heads").paragraph("x").heading("Figures", 3).heading("Heads")
    page = rep.html()
    ids = re.findall(r'<h[23] id="([^"]+)">', page)
    assert ids == ["sec-heads", "sec-figures", "sec-heads-2"]
    assert re.findall(r'<a href="#([^"]+)">', page) == ids
    assert "<nav" not in Report("one").heading("Only").html()  # one section needs no contents list


def test_cells_never_show_a_raw_dict_and_sort_by_value():
    assert fmt({"a": 0.123456, "b": [1, 2.5e-7]}) == "a: 0.1235, b: [1, 2.500e-07]"
    assert "{" not in fmt({"x": {"y": 1}})
    assert cell(np.float32(123456.0)) == '<td data-v="123456.0">1.235e+05</td>'
    assert cell("text") == '<td class="t">text</td>'
    assert flat_rows({"t50": 1.5, "rates": {"R2": 0.1, "R3": {}}}) == [
        {"measure": "t50", "value": 1.5},
        {"measure": "rates.R2", "value": 0.1},
        {"measure": "rates.R3", "value": {}},
    ]
    assert words("solver_trace") == "solver trace"


def _run(folder, name="x"):
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "manifest.json").write_text(json.dumps({"command": name}))
    return folder


def _plot_report(folder):
    rep = Report("r")
    rep.plotly({"data": [{"type": "scatter", "x": [0, 1], "y": [1, 0]}], "layout": {}}, "p")
    return rep.write(folder / "report.html")


def test_plotly_is_stored_once_per_tree_of_runs(tmp_path):
    """A trial written inside a sweep before the sweep's own report puts the one copy at the sweep's top."""
    sweep = _run(tmp_path / "sweep")
    trials = [_run(sweep / "trials" / f"t{i}") for i in range(3)]
    for t in trials:
        assert 'src="../../plotly.min.js"' in _plot_report(t).read_text()
    _plot_report(sweep)
    assert sorted(p.relative_to(tmp_path) for p in tmp_path.rglob(PLOTLY_ASSET)) == [
        sweep.relative_to(tmp_path) / PLOTLY_ASSET
    ]
    alone = _plot_report(_run(tmp_path / "single"))  # a run of its own keeps its copy: it opens when copied alone
    assert (alone.parent / PLOTLY_ASSET).is_file()


def test_wide_table_scrolls_with_a_sticky_first_column(browse, tmp_path):
    rows = [{"name": f"row{i}", **{f"column {j}": i * j + 0.5 for j in range(40)}} for i in range(3)]
    rep = Report("wide").table(rows, caption="wide", table_id="w")
    with browse(rep.write(tmp_path / "run" / "report.html"), tmp_path / "wide.png") as (page, errors):
        box = page.locator(".scroll")
        assert page.evaluate(
            "document.querySelector('.scroll').scrollWidth > document.querySelector('.scroll').clientWidth"
        )
        box.evaluate("b => b.scrollLeft = b.scrollWidth")
        last = page.locator("#w th").last
        assert last.inner_text().startswith("column 39") and last.is_visible()
        first_x = page.locator("#w tbody td").first.bounding_box()["x"]
        assert abs(first_x - box.bounding_box()["x"]) < 2  # the first column stays in view
        page.locator("#w th").nth(1).click()
        assert errors == []


def test_a_folder_copied_out_of_its_tree_opens_and_says_how_to_see_the_figures(browse, tmp_path):
    sweep = _run(tmp_path / "sweep")
    page_path = _plot_report(_run(sweep / "trials" / "t0"))
    rep = Report("copied").table([{"a": 1}], table_id="t")
    rep.raw("", "Plotly.newPlot('p', [], {});", plotly=True)
    rep.write(page_path)
    copy = tmp_path / "elsewhere" / "t0"
    shutil.copytree(page_path.parent, copy)
    with browse(copy / "report.html", tmp_path / "copied.png") as (page, errors):
        note = page.locator("#plotly-missing")
        assert note.is_visible() and "attnlab view" in note.inner_text()
        assert page.locator("#t td").first.inner_text() == "1"
        assert [e for e in errors if "ERR_FILE_NOT_FOUND" not in e and "Failed to load resource" not in e] == []


def test_a_plotly_file_that_defines_no_plotly_gets_the_note(browse, tmp_path):
    """A stand-in plotly.min.js (written where plotly was not installed) loads but defines nothing: same note."""
    folder = _run(tmp_path / "run")
    (folder / PLOTLY_ASSET).write_text("/* no plotly here */\n")
    page_path = _plot_report(folder)
    with browse(page_path, tmp_path / "stub.png") as (page, errors):
        assert page.locator("#plotly-missing").count() == 1 and errors == []
