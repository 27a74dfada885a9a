"""benchmarks/gpu_check.sh --dry-run --pack: the GPU machine's script on the CPU at tiny sizes, end to end, packed
as the device tool brings files back (at most 8, none deeper than two folders)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_gpu_check_dry_run(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    env = {**os.environ, "OUT": str(out), "PYTHON": sys.executable, "PYTHONPATH": ""}
    proc = subprocess.run(["bash", str(ROOT / "benchmarks" / "gpu_check.sh"), "--dry-run", "--pack"], env=env,
                          capture_output=True, text=True, timeout=900)  # fmt: skip
    log = (out / "gpu_check.log").read_text()
    assert proc.returncode == 0, log + proc.stdout[-2000:] + proc.stderr[-2000:]
    kept = sorted(p.name for p in out.iterdir())
    assert all(p.is_file() for p in out.iterdir()) and len(kept) <= 8, kept
    assert {"gpu_check.tar.gz", "timings.json", "long_scan.json", "issue41.json", "reproduction_short.json",
            "reproduction_long.json"} <= set(kept)  # fmt: skip
    with tarfile.open(out / "gpu_check.tar.gz") as tar:
        tar.extractall(tmp_path / "unpacked", filter="data")
    tmp_path = tmp_path / "unpacked"
    for step in ("gpu_tests", "long_scan", "timings", "reproduce_short", "reproduce_long", "issue41"):
        assert f"end {step}: exit 0" in log, log
    assert "skipped" in (tmp_path / "gpu_tests.txt").read_text()  # no CUDA here: the gpu tests skip
    long = json.loads((out / "long_scan.json").read_text())
    for key in ("long_scan_smollm2_bfloat16", "long_scan_llama4_float32", "long_scan_smollm2_float32"):
        assert long[key]["tokens"] == 256 and {"plain_s", "scan_s", "full_s"} <= set(long[key]), key
    issue41 = json.loads((out / "issue41.json").read_text())  # issue 41 item 4: Llama-3-8B- and SmolLM2-shaped rows
    for key in ("issue41_llama3_8b", "issue41_smollm2"):
        row = issue41[key]
        assert row["tokens"] == 256 and row["dtype"] == "bfloat16", key
        assert {"plain_s", "scan_s", "full_s", "scan_over_plain", "full_over_plain", "scan_stats_gib"} <= set(row), key
        assert row["scan_paths"] == ["flash"] and row["full_paths"] == ["blocked"], key  # the cpu's own paths
    assert issue41["issue41_llama3_8b"]["kv_heads"] < issue41["issue41_llama3_8b"]["heads"]  # GQA kept
    timings = json.loads((tmp_path / "timings.json").read_text())
    assert timings["tiny"] and all(v > 0 for v in timings["bb_step_s"].values())
    for part in ("short", "long"):
        record = json.loads((tmp_path / "runs" / "reproduce" / part / "reproduction.json").read_text())
        assert record["profile"] == "tiny" and record["rows"]
        assert json.loads((tmp_path / "runs" / "reproduce" / part / "manifest.json").read_text())["device"] == "cpu"
        assert json.loads((out / f"reproduction_{part}.json").read_text()) == record
