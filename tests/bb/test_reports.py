"""The `bb` reports read their run folder only (issue 20): one entry `write_report(run)`, and a page that is a
function of the folder: written again it is the same bytes; a compare page needs none of the compared runs; the
theory page's fixed choices come from the run's setup.json, not from today's code."""

from __future__ import annotations

import json
import re
import shutil

import pytest

from attnlab.bb.config import CompareConfig, TheoryConfig, resolve_config
from attnlab.bb.report import write_report
from attnlab.bb.run import compare, theory, train
from attnlab.runs import RunDir

TINY = dict(d_model=16, d_mlp=32, batch=8, eval_batch=16, steps=10, lin_every=5, lin_until=5, ckpt_every=10, seq_len=32)


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """Two tiny training runs (softmax, ReLU) and their comparison."""
    root = tmp_path_factory.mktemp("bb-reports")
    a = train(resolve_config("cpu", **TINY), root / "a", progress=False).path
    b = train(resolve_config("cpu", attention="relu", **TINY), root / "b", progress=False).path
    c = compare(CompareConfig(run_dirs=(str(a), str(b)), title="softmax vs relu"), root / "c").path
    return {"a": a, "c": c}


def _without_images(page: str) -> str:
    return re.sub(r"base64,[^\"]*", "base64,", page)


@pytest.mark.parametrize("name", ["a", "c"])
def test_a_report_written_again_from_its_folder_is_the_same_page(runs, name):
    """What the run wrote equals what `write_report` makes from the folder alone, figures included."""
    page = (runs[name] / "report.html").read_bytes()
    (runs[name] / "report.html").unlink()
    assert write_report(RunDir(runs[name])) == runs[name] / "report.html"
    assert (runs[name] / "report.html").read_bytes() == page


def test_compare_report_needs_none_of_the_compared_runs(runs, tmp_path):
    """`bb compare` saves the series it draws (compared.json): its page and figures come back with the compared
    runs gone."""
    for name in ("a", "b"):
        shutil.copytree(runs["a"].parent / name, tmp_path / name)
    cfg = CompareConfig(run_dirs=(str(tmp_path / "a"), str(tmp_path / "b")), title="softmax vs relu")
    folder = compare(cfg, tmp_path / "c").path
    page = _without_images((folder / "report.html").read_text())
    for name in ("a", "b"):
        shutil.rmtree(tmp_path / name)
    shutil.rmtree(folder / "figures")
    write_report(RunDir(folder))
    assert {p.name for p in (folder / "figures").iterdir()} == {"compare_sink.png", "compare_risk.png"}
    assert _without_images((folder / "report.html").read_text()) == page
    saved = json.loads((folder / "compared.json").read_text())
    assert [len(rows) for rows in saved["runs"].values()] == [len(RunDir(runs["a"]).metrics())] * 2


@pytest.mark.slow
def test_theory_page_reads_the_fixed_choices_the_run_saved(tmp_path):
    """m, K, the context sizes, the integrator, the reduced recursion's lr and the transient window are read from
    setup.json and metrics.json: edited there, the page follows (and unedited, it is the page the run wrote)."""
    folder = theory(TheoryConfig(seed=0, t_max=1e5), tmp_path / "theory").path
    written = (folder / "report.html").read_bytes()
    assert write_report(RunDir(folder)).read_bytes() == written
    setup = json.loads((folder / "setup.json").read_text())
    setup.update(m=7, K=11, context_sizes=[2, 3, 4])
    setup["integrator"]["rtol"] = 1e-7
    setup["residual"]["lr"] = 0.25
    (folder / "setup.json").write_text(json.dumps(setup))
    metrics = json.loads((folder / "metrics.json").read_text())
    metrics["transient_window"] = [100.0, 1000.0]
    (folder / "metrics.json").write_text(json.dumps(metrics))
    page = write_report(RunDir(folder)).read_text()
    for text in ("m = 7 query tokens, K = 11", "uniform on 2..4", "rtol 1e-07", "reduced recursion, lr 0.25",
                 "slope [1e+02, 1e+03] (transient)"):  # fmt: skip
        assert text in page, text
