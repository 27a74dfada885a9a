"""Run folders record the model as the user named it (issue 38): an alias, a hub id or a folder path as typed
(tests/real/test_hub.py: a hub id), never the absolute path of the folder it was loaded from on this machine (a run
folder moves between machines)."""

from __future__ import annotations

import json

import pytest

from attnlab.hf.loader import load_causal_lm
from attnlab.scan.config import ScanConfig
from attnlab.scan.run import scan
from tests.real.conftest import save_tiny_hf_folder


@pytest.mark.parametrize("typed", ["~/models/tiny", "models/tiny"])
def test_a_scan_records_the_model_as_typed(tmp_path, monkeypatch, typed):
    """`~` is expanded to load the folder (an absolute path), a relative path is read from the working folder:
    summary.json and manifest.json hold what was typed, and no file of the run's record names tmp_path."""
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.chdir(tmp_path)
    save_tiny_hf_folder(tmp_path / "models" / "tiny", "llama")
    assert load_causal_lm(typed).given == typed
    out = scan(ScanConfig(model=typed, domains=("prose",), tokens=8, samples=1), "scan").path
    summary = json.loads((out / "summary.json").read_text())
    manifest = json.loads((out / "manifest.json").read_text())
    assert summary["model_given"] == manifest["model_given"] == typed
    assert summary["model"] == manifest["model"] == "tiny"
    for name in ("summary.json", "manifest.json", "config.json"):
        text = (out / name).read_text()
        assert str(tmp_path) not in text and str(tmp_path.resolve()) not in text, name
