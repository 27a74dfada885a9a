"""The report builder in a real browser: no console errors, tables sort, plotly views draw offline."""

from __future__ import annotations

import plotly.graph_objects as go

from attnlab.reports.page import PLOTLY_ASSET, Report
from tests.browser import open_page


def _page(tmp_path):
    rep = Report("test page")
    rep.table(
        [{"name": "b", "value": 10.0}, {"name": "a", "value": 2.5}, {"name": "c", "value": -1.0}],
        caption="numbers",
        table_id="t",
    )
    rep.plotly(go.Figure(go.Heatmap(z=[[1, 2], [3, 4]])), "heat", "a heat map")
    return rep.write(tmp_path / "run" / "report.html")


def test_plotly_asset_is_written_once_and_found_from_below(tmp_path):
    top = Report("top")
    top.plotly({"data": [], "layout": {}}, "p")
    top.write(tmp_path / "report.html")
    inner = Report("inner")
    inner.plotly({"data": [], "layout": {}}, "p")
    page = inner.write(tmp_path / "a" / "b" / "report.html")
    assert 'src="../../plotly.min.js"' in page.read_text()
    assert not (tmp_path / "a" / "b" / PLOTLY_ASSET).exists()


def test_report_sorts_and_draws_without_errors(tmp_path):
    path = _page(tmp_path)
    with open_page(path, tmp_path / "page.png") as (page, errors):
        first = lambda: page.locator("#t tbody tr td").first.inner_text()  # noqa: E731
        assert first() == "b"
        page.locator("#t th", has_text="value").click()
        assert first() == "c"  # ascending by number: -1 < 2.5 < 10
        page.locator("#t th", has_text="value").click()
        assert first() == "b"
        page.wait_for_selector("#heat .main-svg")
        assert page.locator("#heat .heatmaplayer").count() == 1
        assert errors == []
    assert (tmp_path / "page.png").stat().st_size > 1000
