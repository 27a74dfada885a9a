"""A study run that a kill interrupted resumes from its newest checkpoint when reproduce resumes it (issue 18:
long full-profile runs keep their finished steps), and ends bit-identical to an uninterrupted run."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from attnlab.cli import main

ROOT = Path(__file__).resolve().parents[2]
ARGS = ["--d-model", "16", "--d-mlp", "32", "--seq-len", "16", "--batch", "4", "--eval-batch", "8", "--steps", "120",
        "--ckpt-every", "10", "--seed", "3", "--threads", "1"]  # fmt: skip


def test_an_interrupted_training_run_resumes_from_its_checkpoint(tmp_path) -> None:
    from attnlab.core.clitools import threads
    from attnlab.reproduce.execute import Run, execute
    from attnlab.runs.configs import config_to_dict
    from attnlab.runs.results import load_run

    ref, cut = tmp_path / "ref", tmp_path / "cut"
    assert main(["bb", "train", *ARGS, "--out", str(ref)]) == 0
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen([sys.executable, "-m", "attnlab", "bb", "train", *ARGS, "--out", str(cut)], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
    while proc.poll() is None and not (cut / "checkpoints" / "step_20").is_dir():
        time.sleep(0.02)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert not (cut / "train_summary.json").exists(), "the run ended before it could be killed"
    kept = sorted(p.name for p in (cut / "checkpoints").iterdir())
    config = config_to_dict(load_run(ref).config)
    with threads(1):  # as the two command-line runs: the same kernels' reduction order
        execute(Run("", "bb train", config), cut, tmp_path / "marks")
    assert (cut / "metrics.jsonl").read_bytes() == (ref / "metrics.jsonl").read_bytes()
    assert kept and '"resumed_from": "checkpoints/step_' in (cut / "train_summary.json").read_text()
