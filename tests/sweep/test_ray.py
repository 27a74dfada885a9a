"""Sweeps on a real local Ray instance (loopback only): trials equal direct runs byte for byte, finished trials
are never recomputed, and a trial whose worker is killed is retried without duplicates."""

from __future__ import annotations

import json
import subprocess
import sys
import time

import psutil
import pytest

from attnlab.core.clitools import threads
from attnlab.core.registry import resolve
from attnlab.runs.configs import config_from_dict
from attnlab.sweep import SweepConfig, load_spec, sweep
from tests.sweep.conftest import load_compare, subprocess_env

pytestmark = pytest.mark.slow

BB_SPEC = """command = "bb train"
[base]
preset = "cpu"
steps = 30
d_model = 32
d_mlp = 64
seq_len = 32
batch = 8
eval_batch = 8
[grid]
optimizer = ["adam", "sgd"]
seed = [0, 1]
"""
CONSENSUS_SPEC = """command = "consensus simulate"
[base]
n = 8
d = 3
batch = 4
t_max = 1.0
[grid]
beta = [0.5, 2.0]
"""


def _sweep(tmp_path, name: str, text: str, **kw) -> tuple:
    spec = tmp_path / f"{name}.toml"
    spec.write_text(text)
    config = SweepConfig(spec=load_spec(spec), cpus=2, **kw)
    return config, sweep(config, tmp_path / name)


def _direct(command: str, trial_dir, out):
    config_cls, fn = resolve(command)
    config = config_from_dict(config_cls, json.loads((trial_dir / "config.json").read_text()))
    with threads(1):
        return fn(config, out)


def test_trials_equal_direct_runs_and_reruns_compute_nothing(tmp_path):
    compare = load_compare().compare
    for name, text, n in (("bb", BB_SPEC, 4), ("cons", CONSENSUS_SPEC, 2)):
        config, result = _sweep(tmp_path, name, text)
        table = result.tables["trials"]
        assert len(table) == n and (table["status"] == "done").all(), table.to_dict("records")
        for trial in table["trial"]:
            folder = result.path / "trials" / trial
            direct = _direct(config.spec.command, folder, tmp_path / "direct" / trial)
            assert compare(direct.path, folder, {}) == [], trial
        stamps = {p: p.stat().st_mtime_ns for p in (result.path / "trials").rglob("*") if p.is_file()}
        again = sweep(config, result.path)
        assert again.summary["ran"] == 0 and again.summary["done"] == n
        assert {p: p.stat().st_mtime_ns for p in (result.path / "trials").rglob("*") if p.is_file()} == stamps


def _trial_workers() -> list[psutil.Process]:
    found = []
    for proc in psutil.process_iter(["cmdline"]):
        cmd = " ".join(proc.info["cmdline"] or [])
        if cmd.startswith("ray::run_trial"):
            found.append(proc)
    return found


def test_killed_worker_is_retried_and_no_trial_is_duplicated(tmp_path):
    spec = tmp_path / "kill.toml"
    spec.write_text(BB_SPEC.replace("steps = 30", "steps = 120").replace('optimizer = ["adam", "sgd"]\n', ""))
    out = tmp_path / "kill"
    proc = subprocess.Popen(
        [sys.executable, "-m", "attnlab.cli", "sweep", str(spec), "--out", str(out), "--cpus", "2"],
        env=subprocess_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    killed = False
    deadline = time.time() + 240
    while proc.poll() is None and time.time() < deadline and not killed:
        busy = [p for p in _trial_workers()]
        if busy and any((out / "trials").glob("*/metrics.jsonl")):
            busy[0].kill()
            killed = True
        time.sleep(0.2)
    output, _ = proc.communicate(timeout=300)
    assert killed, output
    assert proc.returncode == 0, output
    trials = sorted((out / "trials").iterdir())
    assert len(trials) == 2
    for folder in trials:
        assert json.loads((folder / "trial.json").read_text())["status"] == "done"
        steps = [json.loads(line)["step"] for line in (folder / "metrics.jsonl").read_text().splitlines()]
        assert steps == sorted(set(steps)), f"duplicated metrics in {folder.name}"
