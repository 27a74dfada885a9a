"""`attnlab demo --resume` keeps the study parts that finished and runs the others; the combined report links the
reports the runs wrote (never renders them again); a failed `--overwrite` leaves the earlier demo in place. The
studies are stand-ins that write one tiny run each, so these tests take well under a second."""

from __future__ import annotations

import re
import sys
import types
from pathlib import Path

import pytest

from attnlab import demo
from attnlab.cli import main
from attnlab.errors import AttnlabError, InputError
from attnlab.reports.page import Report
from attnlab.runs import open_run, run_status
from tests.probes import refused, snapshot


class Studies:
    """Stand-in study parts `one`, `two`, `three`: each writes a run folder with its own report.html under its
    part's folder; `fail` names a part that raises after writing its run; `calls` counts each part's runs."""

    def __init__(self, monkeypatch) -> None:
        self.fail: dict[str, BaseException] = {}
        self.calls: dict[str, int] = {}
        monkeypatch.setattr(demo, "DEMOS", {})
        for name in ("one", "two", "three"):
            module = types.ModuleType(f"tests_demo_resume_{name}")
            module.run_demo = self._part(name)  # type: ignore[attr-defined]
            monkeypatch.setitem(sys.modules, module.__name__, module)
            monkeypatch.setitem(demo.DEMOS, name, module.__name__)

    def _part(self, name: str):
        def run_demo(out: Path, seed: int) -> Report:
            self.calls[name] = self.calls.get(name, 0) + 1
            with open_run(Path(out) / "run", "paths sweep", {"seed": seed, "part": name}) as run:
                run.write_json("metrics.json", {"seed": seed})
                Report(f"report of {name}").write(run.file("report.html"))
            if name in self.fail:
                raise self.fail[name]
            return Report(f"Part {name}").paragraph(f"{name} finished with seed {seed}")

        return run_demo


@pytest.fixture
def studies(monkeypatch) -> Studies:
    return Studies(monkeypatch)


def test_resume_skips_the_finished_parts_and_runs_the_rest(studies, tmp_path, capsys):
    out = tmp_path / "demo"
    studies.fail["two"] = AttnlabError("diverged at step 3; checkpoint saved; continue with --resume", 2)
    assert main(["demo", "--seed", "5", "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "diverged at step 3" in err[0] and err[0].count("--resume") == 1, err
    assert err[0].endswith(f"continue with `attnlab demo --resume --out {out}`"), err
    kept = snapshot(out / "one")
    assert run_status(out) == "failed" and studies.calls == {"one": 1, "two": 1}

    del studies.fail["two"]
    assert main(["demo", "--resume", "--out", str(out)]) == 0  # the saved seed (5) is used
    lines = capsys.readouterr().out.splitlines()
    assert "== demo: one (finished earlier; kept)" in lines and lines[-1] == f"run folder: {out}"
    assert studies.calls == {"one": 1, "two": 2, "three": 1}
    assert snapshot(out / "one") == kept, "a finished part was touched"
    assert run_status(out) == "finished" and not list(out.glob(".*discard*"))
    page = (out / "report.html").read_text()
    assert [p for p in ("one", "two", "three") if f"{p} finished with seed 5" in page] == ["one", "two", "three"]


def test_the_demo_report_links_each_run_report_and_renders_none(studies, tmp_path, capsys):
    out = tmp_path / "demo"
    assert main(["demo", "--out", str(out)]) == 0
    page = (out / "report.html").read_text()
    links = re.findall(r'<a href="([^"#]+)">', page)  # not the contents list (#...)
    assert links == ["one/run/report.html", "two/run/report.html", "three/run/report.html"]
    assert all((out / link).is_file() for link in links)
    assert "report of one" not in page, "a run's report was rendered into the demo's"
    assert str(tmp_path) not in page, "an absolute path in the report"


def test_resume_with_every_part_finished_changes_no_file(studies, tmp_path, capsys):
    out = tmp_path / "demo"
    assert main(["demo", "--only", "one", "--out", str(out)]) == 0
    before = snapshot(out)
    capsys.readouterr()
    assert main(["demo", "--resume", "--out", str(out)]) == 0
    assert capsys.readouterr().out.strip().splitlines() == [
        f"nothing to do: {out} holds every study part of the demo; no file changed"
    ]
    assert snapshot(out) == before and studies.calls == {"one": 1}


def test_resume_with_other_flags_than_the_saved_demo_is_refused(studies, tmp_path, capsys):
    out = tmp_path / "demo"
    studies.fail["two"] = KeyboardInterrupt()
    assert main(["demo", "--seed", "3", "--only", "one", "--only", "two", "--out", str(out)]) == 130
    capsys.readouterr()
    message = refused(["demo", "--resume", "--seed", "4", "--out", str(out)], tmp_path, capsys)
    assert message.startswith(f"--resume: {out} is a demo run with --seed 3 --only one --only two;"), message
    with pytest.raises(InputError, match="None only with mode='resume'"):
        demo.run_demo(None, tmp_path / "other")


@pytest.mark.parametrize("fail", [AttnlabError("diverged at step 3", 2), KeyboardInterrupt(), RuntimeError("bug")])
def test_a_failed_overwrite_leaves_the_earlier_demo_in_place(studies, tmp_path, capsys, fail):
    out = tmp_path / "demo"
    assert main(["demo", "--out", str(out)]) == 0
    before = snapshot(out)
    studies.fail["three"] = fail
    if isinstance(fail, RuntimeError):  # a bug keeps its traceback, and still loses no data
        with pytest.raises(RuntimeError):
            main(["demo", "--overwrite", "--out", str(out)])
    else:
        assert main(["demo", "--overwrite", "--out", str(out)]) == (130 if isinstance(fail, KeyboardInterrupt) else 2)
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and err[0].endswith(f"the earlier run in {out} is back in place"), err
    assert snapshot(out) == before, "the earlier demo changed"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["demo"], "a set-aside or temporary folder was left"
