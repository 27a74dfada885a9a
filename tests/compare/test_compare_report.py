"""A compare run's report.html comes from its own folder only (issue 20): runs.json and the scans' saved heads.csv
hold all it reads, so the page is the same when written again after the compared runs are gone."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from attnlab.compare import CompareConfig, compare
from attnlab.compare.report import write_report
from attnlab.runs import RunDir


def _fake_run(path: Path, command: str, config: dict, sink: float = 1.0) -> Path:
    """A run folder as a comparison reads it: manifest, config, a metrics curve and (scans) heads.csv."""
    path.mkdir(parents=True)
    (path / "manifest.json").write_text(json.dumps({"command": command, "status": "finished"}))
    (path / "config.json").write_text(json.dumps(config))
    (path / "metrics.jsonl").write_text(
        "".join(json.dumps({"step": s, "loss": sink / (s + 1)}) + "\n" for s in range(3))
    )
    if command == "scan":
        rows = [f"prose,{layer},{head},{sink * (layer + head) / 4}" for layer in range(2) for head in range(3)]
        (path / "heads.csv").write_text("domain,layer,head,sink_score\n" + "\n".join(rows) + "\n")
    return path


def test_the_page_is_written_from_the_compare_folder_alone(tmp_path):
    root = tmp_path / "runs"
    a = _fake_run(root / "scan-a", "scan", {"model": "x", "seed": 0})
    b = _fake_run(root / "scan-b", "scan", {"model": "x", "seed": 1}, sink=0.5)
    c = _fake_run(root / "other", "nonesuch", {"seed": 0})
    out = compare(CompareConfig(run_dirs=(str(a), str(b), str(c)), title="t"), root / "cmp").path
    page = (out / "report.html").read_text()
    assert "scan-pair" in page and "curves" in page  # the scans side by side and the curves overlaid
    assert (out / "heads_first.csv").read_bytes() == (a / "heads.csv").read_bytes()
    for run in (a, b, c):
        shutil.rmtree(run)
    (out / "report.html").unlink()
    write_report(RunDir(out))
    assert (out / "report.html").read_text() == page
    saved = json.loads((out / "runs.json").read_text())
    assert [r["run"] for r in saved["runs"]] == ["../scan-a", "../scan-b", "../other"]
    assert saved["scan_pair"] == ["../scan-a", "../scan-b"] and saved["defaults"]["nonesuch"] is None
