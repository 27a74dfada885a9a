"""benchmarks/gpu_check.sh --dry-run: the GPU machine's script on the CPU at tiny sizes, end to end."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_gpu_check_dry_run(tmp_path):
    env = {**os.environ, "OUT": str(tmp_path), "PYTHON": sys.executable, "PYTHONPATH": ""}
    proc = subprocess.run(["bash", str(ROOT / "benchmarks" / "gpu_check.sh"), "--dry-run"], env=env,
                          capture_output=True, text=True, timeout=900)  # fmt: skip
    log = (tmp_path / "gpu_check.log").read_text()
    assert proc.returncode == 0, log + proc.stdout[-2000:] + proc.stderr[-2000:]
    for step in ("gpu_tests", "timings", "reproduce_short", "reproduce_long"):
        assert f"end {step}: exit 0" in log, log
    assert "skipped" in (tmp_path / "gpu_tests.txt").read_text()  # no CUDA here: the gpu tests skip
    timings = json.loads((tmp_path / "timings.json").read_text())
    assert timings["tiny"] and all(v > 0 for v in timings["bb_step_s"].values())
    for part in ("short", "long"):
        record = json.loads((tmp_path / "runs" / "reproduce" / part / "reproduction.json").read_text())
        assert record["profile"] == "tiny" and record["rows"]
        assert json.loads((tmp_path / "runs" / "reproduce" / part / "manifest.json").read_text())["device"] == "cpu"
