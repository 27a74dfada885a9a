"""A sweep grows (issue 21): adding a seed or a value to the spec and running it into the same folder runs only the
new trials, with no --overwrite; the finished trials' files are not touched. Ray is stood in for by running each
trial in this process (`run_trial`, what a Ray worker calls), so the test takes seconds; tests/sweep/test_ray.py
covers the real Ray path."""

from __future__ import annotations

import json

import pytest

from attnlab.errors import InputError
from attnlab.runs import to_jsonable
from attnlab.sweep import SweepConfig, load_spec, sweep
from attnlab.sweep import run as sweep_run
from attnlab.sweep.engine import run_trial

SPEC = """command = "consensus simulate"
[base]
n = 6
d = 3
batch = 2
t_max = 0.5
record_every = 5
[grid]
beta = [0.5, 2.0]
seed = {seeds}
"""


@pytest.fixture
def ran(monkeypatch):
    """The ids of the trials each sweep call ran, in order (one list per call)."""
    calls: list[list[str]] = []

    def in_process(trials, config, root, on_done):
        trials = list(trials)
        calls.append([t.id for t in trials])
        for t in trials:
            folder = root / "trials" / t.id
            on_done(t, run_trial(config.spec.command, to_jsonable(t.config), str(folder), 1))

    monkeypatch.setattr(sweep_run, "execute", in_process)
    monkeypatch.setattr(sweep_run, "preflight", lambda config: None)
    return calls


def _config(tmp_path, seeds, command="consensus simulate"):
    path = tmp_path / "spec.toml"
    path.write_text(SPEC.format(seeds=seeds).replace("consensus simulate", command))
    return SweepConfig(spec=load_spec(path), cpus=1)


def _stamps(folder):
    return {p: p.stat().st_mtime_ns for p in folder.rglob("*") if p.is_file()}


def test_a_grown_spec_runs_only_the_new_trials(tmp_path, ran):
    out = tmp_path / "sweep"
    first = sweep(_config(tmp_path, "[0]"), out)
    assert first.summary["ran"] == 2 and first.summary["done"] == 2
    old = set(first.tables["trials"]["trial"])
    before = {t: _stamps(out / "trials" / t) for t in old}
    grown = sweep(_config(tmp_path, "[0, 1]"), out)  # one more seed: two more trials, no --overwrite
    table = grown.tables["trials"]
    new = set(table["trial"]) - old
    assert len(table) == 4 and (table["status"] == "done").all() and len(new) == 2
    assert grown.summary["ran"] == 2 and set(ran[1]) == new  # only the new trials ran
    assert {t: _stamps(out / "trials" / t) for t in old} == before  # the finished ones were not touched
    assert sorted(table.loc[table["trial"].isin(new), "seed"]) == [1, 1]
    saved = json.loads((out / "config.json").read_text())
    assert saved["spec"]["grid"]["seed"] == [0, 1]  # the folder holds the grown spec
    again = sweep(_config(tmp_path, "[0, 1]"), out)
    assert again.summary["ran"] == 0 and ran[2] == []
    shrunk = sweep(_config(tmp_path, "[1]"), out)  # a smaller spec runs nothing and keeps the other trials
    assert shrunk.summary["ran"] == 0 and len(shrunk.tables["trials"]) == 2
    kept = json.loads((out / "trials.json").read_text())["other_ids"]
    assert len(kept) == 2 and all((out / "trials" / t / "trial.json").is_file() for t in kept)


def test_a_spec_of_another_command_is_still_refused(tmp_path, ran):
    out = tmp_path / "sweep"
    sweep(_config(tmp_path, "[0]"), out)
    other = tmp_path / "other.toml"
    other.write_text('command = "paths solve"\n[grid]\nN = [10.0]\n')
    with pytest.raises(InputError, match="not empty|--overwrite"):
        sweep(SweepConfig(spec=load_spec(other), cpus=1), out)


def test_the_sweep_page_links_each_trials_report(tmp_path, ran):
    out = tmp_path / "sweep"
    result = sweep(_config(tmp_path, "[0, 1]"), out)
    page = (out / "report.html").read_text()
    assert "mean over seeds with its 95 % interval" in page  # seed averaged over, beta the only axis
    assert "against beta (mean over seeds, bars: 95 % interval)" in page and "Plotly.newPlot" in page
    for trial in result.tables["trials"]["trial"]:
        assert f'<a href="trials/{trial}/report.html">' in page and (out / "trials" / trial / "report.html").is_file()
    assert [p.relative_to(out).as_posix() for p in out.rglob("plotly.min.js")] == ["plotly.min.js"]  # once per tree


def test_two_swept_fields_give_an_interactive_heat_map(tmp_path, ran):
    path = tmp_path / "spec.toml"
    path.write_text(SPEC.format(seeds="[0]").replace("[grid]", "[grid]\nn = [5, 6]").replace("n = 6\n", "", 1))
    result = sweep(SweepConfig(spec=load_spec(path), cpus=1), tmp_path / "sweep")
    page = (result.path / "report.html").read_text()
    assert len(result.tables["trials"]) == 4 and '"type": "heatmap"' in page and "mean over the other fields" in page
