"""Each consensus command writes report.html once, from its run folder only (issue 20): the page is the same when
written again from a copy of the folder, R13.png of `consensus norm` is drawn by figures.py, and a folder of another
command is refused in one line."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from attnlab.consensus.config import ModelConfig, NormConfig, PhaseConfig, SimulateConfig
from attnlab.consensus.report import write_report
from attnlab.consensus.run import model, norm, phase, simulate
from attnlab.core.clitools import threads
from attnlab.errors import InputError
from attnlab.runs import RunDir
from tests.real.conftest import save_tiny_hf_folder


@pytest.fixture(scope="module")
def tiny_llama(tmp_path_factory) -> str:
    return str(save_tiny_hf_folder(tmp_path_factory.mktemp("models") / "tiny-llama", "llama"))


def _rewritten(path: Path, tmp: Path) -> str:
    """report.html written again by `write_report` from a copy of the run folder (same name, other parent)."""
    copy = tmp / "copy" / path.parent.name / path.name  # element ids carry the two last names
    shutil.copytree(path, copy)
    (copy / "report.html").unlink()
    assert write_report(RunDir(copy)) == copy / "report.html"
    return (copy / "report.html").read_text()


def _runs(tmp: Path, tiny: str) -> dict[str, Path]:
    with threads(1):
        return {
            "simulate": simulate(SimulateConfig(n=6, d=3, batch=3, t_max=2.0), tmp / "sim", progress=False).path,
            "phase": phase(PhaseConfig(n=6, d=3, starts=4, num_betas=3, t_max=2.0), tmp / "ph", progress=False).path,
            "model": model(
                ModelConfig(model=tiny, passes=2, prompts=1, seq_len=8, domains=("prose",)), tmp / "m", progress=False
            ).path,
            "norm": norm(NormConfig(model=tiny, passes=2, prompts=2, seq_len=8, domains=("prose",)), tmp / "n").path,
        }


TITLES = {
    "simulate": "Consensus: simulation",
    "phase": "Consensus: phase diagram",
    "model": "Consensus: iterated",
    "norm": "Consensus: RMSNorm as a projection onto a sphere (R13)",
}


def test_every_command_writes_its_report_from_the_folder_alone(tmp_path, tiny_llama):
    runs = _runs(tmp_path, tiny_llama)
    for command, path in runs.items():
        page = (path / "report.html").read_text()
        assert f"<title>{TITLES[command]}" in page, command
        assert _rewritten(path, tmp_path) == page, command  # nothing but the folder went into the page
    assert (runs["norm"] / "R13.png").stat().st_size > 1000
    assert "data:image/png;base64" in (runs["norm"] / "report.html").read_text()  # the figure is on the page


def test_a_run_of_another_command_is_refused(tmp_path):
    path = simulate(SimulateConfig(n=4, d=3, batch=2, t_max=1.0), tmp_path / "sim", progress=False).path
    manifest = (path / "manifest.json").read_text().replace('"consensus simulate"', '"sweep"')
    (path / "manifest.json").write_text(manifest)
    with pytest.raises(InputError, match="not of a consensus command"):
        write_report(RunDir(path))
