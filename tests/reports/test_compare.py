"""`attnlab compare` on runs of different studies and the index page of a folder of runs; their bad inputs."""

from __future__ import annotations

import json
import os

import pytest

from attnlab.cli import main
from attnlab.compare import CompareConfig, compare, write_index
from attnlab.errors import InputError


def _snapshot(folder):
    return {p: (p.stat().st_mtime_ns, p.read_bytes()) for p in sorted(folder.rglob("*")) if p.is_file()}


def test_compare_two_studies_in_the_browser(runs, browse, tmp_path, capsys):
    out = tmp_path / "cmp"
    assert main(["compare", str(runs["bb"]), str(runs["sim3"]), str(runs["solve"]), "--out", str(out)]) == 0
    assert f"run folder: {out}" in capsys.readouterr().out
    page_text = (out / "report.html").read_text()
    assert str(tmp_path.parent) not in page_text  # runs named relative to the page
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["command"] == "compare"
    with browse(out / "report.html", tmp_path / "compare.png") as (page, errors):
        tables = page.locator("table.sortable")
        assert tables.count() == 3  # one per command
        captions = [c.inner_text() for c in page.locator("table.sortable caption").all()]
        assert captions == [
            "attnlab bb train (1 run)",
            "attnlab consensus simulate (1 run)",
            "attnlab paths solve (1 run)",
        ]
        links = [a.get_attribute("href") for a in page.locator("table.sortable a").all()]
        assert all((out / href).resolve().is_file() for href in links) and len(links) == 3
        # the bb row shows the final attn_sink of its metrics.jsonl
        last = json.loads((runs["bb"] / "metrics.jsonl").read_text().splitlines()[-1])
        heads = [h.inner_text().rstrip(" ↕") for h in tables.nth(0).locator("th").all()]
        cell = tables.nth(0).locator("tbody td").nth(heads.index("attn_sink")).inner_text()
        assert float(cell) == pytest.approx(last["attn_sink"], rel=1e-3)
        page.wait_for_selector("#" + page.evaluate("document.querySelector('.plot').id") + " .main-svg")
        assert errors == []


def test_compare_python_api_table(runs, tmp_path):
    res = compare(CompareConfig(run_dirs=(str(runs["bb"]), str(runs["sweep"]))), tmp_path / "c")
    t = res.tables["runs"]
    assert list(t["command"]) == ["bb train", "paths sweep"]
    assert list(t["run"]) == [os.path.relpath(runs["bb"], res.path), os.path.relpath(runs["sweep"], res.path)]
    assert t.loc[1, "accuracy"] == json.loads((runs["sweep"] / "points.jsonl").read_text().splitlines()[-1])["accuracy"]


def test_index_page_lists_every_run(runs, browse, tmp_path):
    root = runs["bb"].parent
    page_path = write_index(root)
    assert page_path == root / "index.html"
    with browse(page_path, tmp_path / "index.png") as (page, errors):
        links = [a.get_attribute("href") for a in page.locator("table.sortable a").all()]
        assert sorted(links) == sorted(f"{p.name}/report.html" for p in runs.values())
        # sort the consensus table by n (ascending then descending)
        table = page.locator("table.sortable", has_text="consensus simulate")
        heads = [h.inner_text().rstrip(" ↕") for h in table.locator("th").all()]
        col = heads.index("record_every") + 1
        table.locator("th").nth(col - 1).click()
        first = table.locator(f"tbody tr td:nth-child({col})").all_inner_texts()
        assert first == sorted(first, key=float)
        table.locator("th").nth(col - 1).click()
        assert table.locator(f"tbody tr td:nth-child({col})").all_inner_texts() == sorted(first, key=float)[::-1]
        assert errors == []
    (root / "index.html").unlink()


@pytest.mark.parametrize(
    "argv, message",
    [
        (["RUN"], "run_dirs: compare needs two or more run folders, got 1"),
        (["RUN", "RUN"], "run_dirs: a run folder is listed twice"),
        (["RUN", "NOTRUN"], "is not an attnlab run folder (no manifest.json and config.json)"),
        (["RUN", "MISSING"], "{MISSING}: no such folder"),
        ([], "run_dirs: compare needs two or more run folders, got 0"),
        (["--index", "MISSING"], "--index {MISSING}: no such folder"),
        (["--index", "NOTRUN"], "no attnlab run folder (with manifest.json and config.json) below it"),
        (["--index", "NOTRUN", "RUN"], "--index FOLDER takes no RUN_DIR and no --out"),
    ],
)
def test_compare_bad_inputs(runs, tmp_path, capsys, argv, message):
    notrun = tmp_path / "notrun"
    notrun.mkdir()
    (notrun / "data.txt").write_text("x")
    names = {"RUN": str(runs["bb"]), "NOTRUN": str(notrun), "MISSING": str(tmp_path / "missing")}
    before = _snapshot(runs["bb"].parent), _snapshot(tmp_path)
    rc = main(["compare", *[names.get(a, a) for a in argv], "--out", str(tmp_path / "out")] if "--index" not in argv
              else ["compare", *[names.get(a, a) for a in argv]])  # fmt: skip
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 1 and len(err) == 1, err
    assert err[0].startswith("attnlab: error: ") and message.format(MISSING=names["MISSING"]) in err[0]
    assert (_snapshot(runs["bb"].parent), _snapshot(tmp_path)) == before
    assert not (tmp_path / "out").exists()


def test_compare_config_refuses_one_run():
    with pytest.raises(InputError, match="^run_dirs: compare needs two or more run folders, got 1$"):
        CompareConfig(run_dirs=("a",))
