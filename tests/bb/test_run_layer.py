"""The run layer of `attnlab bb`: bad inputs get one line and change no earlier file (issue 8)."""

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

from attnlab.cli import main

ROOT = Path(__file__).resolve().parents[2]
TINY = ["--d-model", "32", "--d-mlp", "64", "--seq-len", "16", "--batch", "8", "--eval-batch", "16", "--threads", "1"]


def _errors(capsys) -> list[str]:
    return [line for line in capsys.readouterr().err.splitlines() if "error:" in line]


def _state(folder: Path) -> dict:
    """Bytes and mtime of every file under `folder` (to check that a refused command changed nothing)."""
    return {p: (p.read_bytes(), p.stat().st_mtime_ns) for p in sorted(folder.rglob("*")) if p.is_file()}


def _fails(argv, capsys, message, code=1) -> str:
    assert main(argv) == code
    err = _errors(capsys)
    assert len(err) == 1 and message in err[0], err
    return err[0]


@pytest.fixture(scope="module")
def trained(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("bb") / "run"
    assert main(["bb", "train", "--steps", "30", "--ckpt-every", "10", *TINY, "--out", str(out)]) == 0
    return out


@pytest.mark.parametrize(
    "extra, message",
    [
        ([], "is not empty; pass --overwrite"),
        (["--resume", "--lr", "0.01"], "the config differs from the saved one in {out}: lr: 0.001 -> 0.01"),
        (
            ["--resume", "--d-model", "64", "--seed", "3"],
            "differs from the saved one in {out}: d_model: 32 -> 64; seed: 0 -> 3",
        ),
        (["--resume", "--preset", "paper"], "preset: 'cpu' -> 'paper'"),
        (["--resume", "--steps", "20"], "--steps 20 is below the run's current step 30"),
        (["--resume", "--overwrite"], "--resume and --overwrite exclude each other"),
        (["--threads", "-1"], "--threads must be >= 1"),
    ],
)
def test_train_refusals_leave_the_run_alone(trained, capsys, extra, message):
    before = _state(trained)
    argv = ["bb", "train", "--out", str(trained), *extra]
    _fails(argv + (["--threads", "1"] if "--threads" not in extra else []), capsys, message.format(out=trained))
    assert _state(trained) == before


def test_corrupt_files_given_to_resume_and_compare(trained, tmp_path, capsys):
    import shutil

    run = tmp_path / "copy"
    shutil.copytree(trained, run)
    ckpt = sorted((run / "checkpoints").glob("step_*"))[-1]
    state = (ckpt / "state.json").read_text()
    (ckpt / "state.json").write_text(state[: len(state) // 2])  # truncated by a crash
    before = _state(run)
    _fails(["bb", "train", "--out", str(run), "--resume", "--steps", "40"], capsys, "state.json is corrupt")
    assert _state(run) == before
    (ckpt / "state.json").write_text(json.dumps({**json.loads(state), "config_hash": "0" * 16}))
    _fails(["bb", "train", "--out", str(run), "--resume", "--steps", "40"], capsys, "config changed")
    cfg = (run / "config.json").read_text()
    (run / "config.json").write_text(cfg[:40])
    before = _state(run)
    _fails(["bb", "train", "--out", str(run), "--resume", "--steps", "40"], capsys, "config.json is corrupt")
    _fails(["bb", "compare", str(run), "--out", str(tmp_path / "cmp")], capsys, "config.json is corrupt")
    assert _state(run) == before and not (tmp_path / "cmp").exists()


def test_resume_without_a_checkpoint_is_one_line(trained, tmp_path, capsys):
    import shutil

    run = tmp_path / "nockpt"
    shutil.copytree(trained, run)
    shutil.rmtree(run / "checkpoints")
    before = _state(run)
    _fails(["bb", "train", "--out", str(run), "--resume", "--threads", "1"], capsys, "no complete checkpoint")
    _fails(
        ["bb", "train", "--out", str(tmp_path / "none"), "--resume"],
        capsys,
        "is not a folder; expected a `bb train` run folder",
    )
    assert _state(run) == before and not (tmp_path / "none").exists()


def test_compare_refuses_other_studies_and_bad_layers(trained, tmp_path, capsys):
    assert main(["bb", "sample", "--n", "2", "--seq-len", "8", "--out", str(tmp_path / "s")]) == 0
    capsys.readouterr()
    _fails(
        ["bb", "compare", str(trained), str(tmp_path / "s"), "--out", str(tmp_path / "c")],
        capsys,
        "is a run of `attnlab bb sample`, not of `attnlab bb train`",
    )
    _fails(
        ["bb", "compare", str(trained), "--layer", "99", "--out", str(tmp_path / "c")],
        capsys,
        "--layer 99 is out of range; ",
    )
    assert not (tmp_path / "c").exists()
    _fails(  # issue 17: the same run twice is refused (it used to draw one run as two)
        ["bb", "compare", str(trained), str(trained), "--out", str(tmp_path / "c")], capsys, "is given twice"
    )
    assert main(["bb", "compare", str(trained), "--out", str(tmp_path / "c")]) == 0
    assert (tmp_path / "c" / "figures" / "compare_sink.png").exists()


@pytest.mark.parametrize(
    "argv, message",
    [
        (["bb", "sample", "--seq-len", "1e8"], "would need about"),
        (["bb", "sample", "--n", "1e12", "--seq-len", "10"], "would need about"),
        (["bb", "sample", "--n", "0"], "n must be an integer >= 1"),
        (["bb", "train", "--d-model", "1e6", "--steps", "1"], "would need about"),
        (["bb", "train", "--lr", "nan"], "lr must be a finite positive number"),
        (["bb", "train", "--lr", "-1"], "lr must be a finite positive number"),
        (["bb", "train", "--no-attn", "3"], "no_attn layer must be an integer in [0, 0]"),
        (["bb", "train", "--preset", "huge"], "unknown preset 'huge'; valid: cpu, paper"),
        (["bb", "sample", "--n", "4", "--triggers", "70"], "k=70 triggers but the vocabulary has 64 characters"),
        (["bb", "sample", "--n", "4", "--corpus", "/nonexistent.txt"], "does not exist"),
        (["bb", "theory", "--t-max", "1e300"], "t_max=1e+300 is out of range"),
        (["bb", "theory", "--t-max", "nan"], "t_max must be a finite number"),
        (["bb", "theory", "--threads", "-1"], "--threads must be >= 1"),
    ],
)
def test_bad_sizes_and_values_are_one_line_before_any_work(argv, message, capsys, tmp_path):
    t0 = time.perf_counter()
    _fails(argv + ["--out", str(tmp_path / "o")], capsys, message)
    assert not (tmp_path / "o").exists()
    assert time.perf_counter() - t0 < 20


def test_intervene_writes_its_own_folder(trained, tmp_path, capsys):
    before = _state(trained)
    _fails(["bb", "intervene", str(trained), "--out", str(trained / "iv")], capsys, "inside the training run")
    assert main(["bb", "intervene", str(trained), "--out", str(tmp_path / "iv")]) == 0
    assert _state(trained) == before  # the training run is never rewritten
    rows = json.loads((tmp_path / "iv" / "interventions.json").read_text())
    assert rows[0]["intervention"] == "none (full model)" and rows[0]["step"] == 30
    assert {"zero head 0.0", "zero MLP 0", "zero layer 0", "attention 0.0 -> <s> (non-trigger queries)"} <= {
        r["intervention"] for r in rows
    }
    full, head = rows[0], next(r for r in rows if r["intervention"] == "zero head 0.0")
    assert head["delta_risk_backcopy"] == pytest.approx(head["risk_backcopy"] - full["risk_backcopy"])


def test_intervene_on_a_diverged_or_broken_run(trained, tmp_path, capsys):
    import shutil

    run = tmp_path / "nan"
    shutil.copytree(trained, run)
    ckpt = sorted((run / "checkpoints").glob("step_*"))[-1]
    weights = load_file(str(ckpt / "model.safetensors"))
    name = sorted(weights)[0]
    weights[name] = torch.full_like(weights[name], float("nan"))
    save_file(weights, str(ckpt / "model.safetensors"))
    _fails(
        ["bb", "intervene", str(run), "--out", str(tmp_path / "a")],
        capsys,
        f"parameter {name} is not finite in the checkpoint of step 30",
        code=2,
    )
    (ckpt / "model.safetensors").write_bytes(b"garbage")
    _fails(["bb", "intervene", str(run), "--out", str(tmp_path / "b")], capsys, "unreadable checkpoint")
    assert not (tmp_path / "a").exists() and not (tmp_path / "b").exists()


def test_cut_metrics_line_is_dropped_on_resume(tmp_path):
    straight, cut = tmp_path / "straight", tmp_path / "cut"
    args = ["bb", "train", "--ckpt-every", "25", *TINY]
    assert main(args + ["--steps", "50", "--out", str(straight)]) == 0
    assert main(args + ["--steps", "25", "--out", str(cut)]) == 0
    with open(cut / "metrics.jsonl", "a") as f:
        f.write('{"step": 50, "attn_sink": 0.1')  # kill -9 in the middle of a line
    assert main(["bb", "train", "--resume", "--steps", "50", "--threads", "1", "--out", str(cut)]) == 0
    assert (cut / "metrics.jsonl").read_bytes() == (straight / "metrics.jsonl").read_bytes()


def test_sigterm_checkpoints_and_resume_is_bit_identical(tmp_path):
    # every run is a fresh process with one OpenMP thread, so all three compute with the same kernels
    straight, cut = tmp_path / "straight", tmp_path / "cut"
    args = ["bb", "train", "--steps", "400", "--ckpt-every", "1000", *TINY]
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    cli = [sys.executable, "-m", "attnlab.cli"]
    done = subprocess.run([*cli, *args, "--out", str(straight)], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    proc = subprocess.Popen(
        [*cli, *args, "--out", str(cut)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.time() + 120
    while time.time() < deadline and proc.poll() is None:
        lines = (cut / "metrics.jsonl").read_text().count("\n") if (cut / "metrics.jsonl").exists() else 0
        if lines >= 3:
            break
        time.sleep(0.05)
    assert proc.poll() is None, "the run ended before it could be interrupted"
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    assert "interrupted at step" in err and "continue with --resume" in err
    step = int(err.split("interrupted at step ")[1].split(";")[0])
    assert 0 < step < 400 and (cut / "checkpoints" / f"step_{step}" / "model.safetensors").exists()
    resumed = subprocess.run([*cli, "bb", "train", "--resume", "--out", str(cut)], env=env, capture_output=True,
                             text=True, timeout=300)  # fmt: skip
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    assert (cut / "metrics.jsonl").read_bytes() == (straight / "metrics.jsonl").read_bytes()
    wa = load_file(str(straight / "checkpoints" / "step_400" / "model.safetensors"))
    wb = load_file(str(cut / "checkpoints" / "step_400" / "model.safetensors"))
    assert all(torch.equal(wa[k], wb[k]) for k in wa)


def test_a_signal_sent_from_another_thread_waits_for_the_update_to_finish():
    # the kernel may hand a process signal to any thread; the deferral must hold it whichever thread receives it
    from attnlab.training.loop import signals_deferred

    def interrupt(signum, frame):
        raise KeyboardInterrupt

    old = signal.signal(signal.SIGTERM, interrupt)
    finished = []
    try:
        with pytest.raises(KeyboardInterrupt):
            with signals_deferred():
                sender = threading.Thread(target=os.kill, args=(os.getpid(), signal.SIGTERM))
                sender.start()
                sender.join()
                for _ in range(200):  # the interpreter checks for pending signals many times in here
                    time.sleep(0.001)
                finished.append(True)
        assert finished == [True]
        assert signal.getsignal(signal.SIGTERM) is interrupt
    finally:
        signal.signal(signal.SIGTERM, old)
