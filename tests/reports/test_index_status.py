"""The run index (issue 21): a status column (finished, interrupted, failed) and no two columns with one title.
Runs are written through `open_run` with a toy config; the page is read as HTML (no browser needed)."""

from __future__ import annotations

import dataclasses
import json
import re

import pytest

from attnlab.compare import write_index
from attnlab.compare.collect import read_run
from attnlab.runs import open_run, run_status


@dataclasses.dataclass(frozen=True)
class Toy:
    N: int = 10
    P: int = 60
    seed: int = 0


def _run(path, body, **config):
    with open_run(path, "toy run", Toy(**config)) as run:
        body(run)


def _finished(run):
    run.write_json("metrics.json", {"N": 10, "P": 59, "loss": 0.5})


def _interrupted(run):
    _finished(run)
    raise KeyboardInterrupt


def _failed(run):
    _finished(run)
    raise RuntimeError("boom")


def _table(page):
    head = re.findall(r"<th>(.*?)</th>", page)
    rows = [re.findall(r"<td[^>]*>(.*?)</td>", row) for row in re.findall(r"<tr>(<td.*?)</tr>", page)]
    return head, rows


def test_index_shows_how_each_run_ended(tmp_path):
    _run(tmp_path / "a-done", _finished)
    with pytest.raises(KeyboardInterrupt):
        _run(tmp_path / "b-stopped", _interrupted, seed=1)
    with pytest.raises(RuntimeError):
        _run(tmp_path / "c-broken", _failed, seed=2)
    _run(tmp_path / "d-killed", _finished, seed=3)
    (tmp_path / "d-killed" / ".attnlab.lock").write_text("999999999")  # a kill -9 leaves its lock: pid is dead
    statuses = {p.name: run_status(p) for p in sorted(tmp_path.iterdir())}
    assert statuses == {
        "a-done": "finished",
        "b-stopped": "interrupted",
        "c-broken": "failed",
        "d-killed": "interrupted",
    }
    assert json.loads((tmp_path / "a-done" / "manifest.json").read_text())["status"] == "finished"
    head, rows = _table(write_index(tmp_path).read_text())
    assert head[:2] == ["run", "status"]
    by_run = {re.sub(r"<.*?>", "", r[0]): r[1] for r in rows}
    assert by_run == statuses


def test_index_columns_are_distinct(tmp_path):
    """Metric N equals the setting N in every run: left out; metric P differs from setting P: "final P"."""
    _run(tmp_path / "one", _finished)
    _run(tmp_path / "two", _finished, P=61, seed=1)
    head, rows = _table(write_index(tmp_path).read_text())
    assert len(head) == len(set(head)), head
    assert "final P" in head and "final N" not in head and head.count("P") == head.count("N") == 1
    assert [r[head.index("final P")] for r in rows] == ["59", "59"]
    assert read_run(tmp_path / "one").status == "finished"
