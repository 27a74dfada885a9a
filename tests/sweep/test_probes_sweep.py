"""Issue 17's probes of `attnlab sweep` (and of `consensus phase --address`): each is one line before any work
starts; a sweep with a failed trial exits non-zero naming it; SIGTERM exits 130 in one line; a local sweep opens
no socket to anything but loopback."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
import torch

from tests.probes import refused
from tests.sweep.conftest import subprocess_env

CONS = 'command = "consensus simulate"\n[base]\nn = 8\nd = 3\nbatch = 4\nt_max = 1.0\n'
GRID = CONS + "[grid]\nbeta = [0.5, 2.0]\n"
RANDOM = CONS + "[random]\nn = {n}\nseed = 0\n[random.fields]\nbeta = {law}\n"
BIG_GRID = CONS + "[grid]\n" + "".join(f"{f} = [{', '.join(map(str, range(10)))}]\n" for f in ("seed", "n", "d"))
BIG_GRID += "".join(f"{f} = [{', '.join(str(0.1 * (i + 1)) for i in range(10))}]\n" for f in ("beta", "h"))
BIG_GRID += "".join(f"{f} = [{', '.join(str(i + 1) for i in range(10))}]\n" for f in ("batch", "t_max", "heads"))
BIG_GRID += "".join(f"{f} = [{', '.join(str(i + 1) for i in range(10))}]\n" for f in ("record_every", "scale"))
NO_GPU = str(torch.cuda.device_count() + 1)  # more GPUs than this machine has

PROBES = [
    # (spec text, extra argv, what the message must name)
    (GRID, ["--gpus-per-trial", "inf"], "--gpus-per-trial must be a finite number"),
    (GRID, ["--gpus-per-trial", "nan"], "--gpus-per-trial must be a finite number"),
    (GRID, ["--gpus-per-trial", "-1"], "--gpus-per-trial must be >= 0"),
    (GRID, ["--gpus-per-trial", "1.5"], "--gpus-per-trial above 1 must be whole"),
    (GRID, ["--gpus-per-trial", NO_GPU], f"--gpus-per-trial {NO_GPU}: this machine has"),
    (GRID, ["--cpus", "2", "--threads-per-trial", "3"], "--threads-per-trial 3 is more than --cpus 2"),
    (GRID, ["--threads-per-trial", "100000"], "--threads-per-trial 100000 is more than the"),
    (GRID, ["--address", "127.0.0.1:1"], "--address 127.0.0.1:1: no Ray cluster answers there"),
    (GRID, ["--address", "ray://127.0.0.1:1"], "--address ray://127.0.0.1:1: no Ray cluster answers there"),
    (GRID, ["--address", "nonsense"], "--address 'nonsense': give host:port"),
    (GRID, ["--address", "127.0.0.1:99999"], "--address '127.0.0.1:99999': give host:port"),
    (RANDOM.format(n=4, law="{low = 0, high = 1, log = true}"), [], "field 'beta': a log-uniform law needs low > 0"),
    (RANDOM.format(n=4, law="{low = -1, high = 1, log = true}"), [], "a log-uniform law needs low > 0"),
    (RANDOM.format(n=4, law="{low = 2, high = 1}"), [], "random field 'beta': low must be <= high"),
    (RANDOM.format(n=4, law="{low = 0, high = inf}"), [], "random field 'beta': high must be a finite number"),
    (RANDOM.format(n=4, law="{low = 0, high = 1, log = 1}"), [], "random field 'beta': log must be true or false"),
    (RANDOM.format(n=4, law="{low = 0, hi = 1}"), [], "random field 'beta' needs a list of choices"),
    (RANDOM.format(n=4, law="[]"), [], "random field 'beta' needs a non-empty list"),
    (RANDOM.format(n=4, law='"x"'), [], "random field 'beta' needs a list of choices"),
    (CONS + "[random]\nn = 4\n", [], "spec: [random.fields] must name at least one field"),
    (RANDOM.format(n=1.5, law="[1.0]"), [], "spec: random.n must be an integer"),
    (RANDOM.format(n=4, law="[1.0]").replace("seed = 0", "seed = -1"), [], "spec: random.seed must be an integer"),
    (RANDOM.format(n=4, law="[1.0]").replace("seed = 0", "sede = 0"), [], "unknown key(s) sede in [random]"),
    (RANDOM.format(n="1e9", law="[1.0]"), ["--yes"], "the spec makes 1,000,000,000 trials; the limit is 10,000"),
    (RANDOM.format(n=100, law="[1.0]"), [], "the spec makes 100 trials (more than 64); pass --yes"),
    (BIG_GRID, ["--yes"], "the spec makes 10,000,000,000 trials; the limit is 10,000"),
]


@pytest.mark.parametrize(("spec", "extra", "message"), PROBES)
def test_sweep_probe_is_one_line(tmp_path, capsys, spec, extra, message):
    (tmp_path / "spec.toml").write_text(spec)
    assert message in refused(["sweep", "{root}/spec.toml", "--out", "{root}/sw", *extra], tmp_path, capsys)


def test_phase_address_where_nothing_listens_is_one_line(tmp_path, capsys):
    argv = ["consensus", "phase", "--n", "4", "--d", "2", "--starts", "2", "--num-betas", "2", "--t-max", "1"]
    message = refused([*argv, "--address", "127.0.0.1:1", "--out", "{root}/ph"], tmp_path, capsys)
    assert "--address 127.0.0.1:1: no Ray cluster answers there" in message


# --- on a real local Ray instance (loopback only) ------------------------------------------------------------
AUDIT = """import os, socket, sys
_log = os.environ["ATTNLAB_CONNECT_LOG"]
def _hook(event, args):
    if event == "socket.connect" and isinstance(args[1], tuple):
        with open(f"{_log}.{os.getpid()}", "a") as f:
            f.write(f"{args[1][0]} {args[1][1]}\\n")
    elif event == "socket.getaddrinfo" and args[0] not in (None, "localhost", "127.0.0.1", "::1", b"localhost"):
        with open(f"{_log}.{os.getpid()}", "a") as f:
            f.write(f"dns {args[0]!r} {args[1]}\\n")
sys.addaudithook(_hook)
"""
LOOPBACK = ("127.", "::1", "0.0.0.0", "::", "::ffff:127.")


def _remote_addresses(proc: psutil.Process) -> set[str]:
    """Non-loopback remote addresses of the sockets of `proc` and its children right now."""
    found = set()
    for p in [proc, *proc.children(recursive=True)]:
        try:
            conns = p.net_connections(kind="inet")
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
        found |= {c.raddr.ip for c in conns if c.raddr and not c.raddr.ip.startswith(LOOPBACK)}
    return found


def _run_watched(tmp_path: Path, argv: list[str]) -> tuple[int, str, set[str]]:
    """Run `attnlab argv` in a subprocess whose Python processes (driver, Ray's) log every connect(); also poll the
    process tree's sockets (Ray's C++ processes). Returns (exit code, stderr, non-loopback targets)."""
    hooks = tmp_path / "hooks"
    hooks.mkdir()
    (hooks / "sitecustomize.py").write_text(AUDIT)
    env = subprocess_env()
    env["PYTHONPATH"] = f"{hooks}{os.pathsep}{env['PYTHONPATH']}"
    env["ATTNLAB_CONNECT_LOG"] = str(tmp_path / "connect")
    cmd = [sys.executable, "-m", "attnlab.cli", *argv]
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    watched, seen = psutil.Process(proc.pid), set()
    while proc.poll() is None:
        seen |= _remote_addresses(watched)
        time.sleep(0.05)
    err = proc.stderr.read() if proc.stderr else ""
    for log in tmp_path.glob("connect.*"):
        for line in log.read_text().splitlines():
            if line.startswith("dns ") or not line.startswith(LOOPBACK):
                seen.add(line)
    return proc.returncode, err, seen


@pytest.mark.slow
def test_local_sweep_talks_to_loopback_only_and_a_failed_trial_fails_the_command(tmp_path):
    spec = tmp_path / "spec.toml"
    spec.write_text(CONS.replace("t_max = 1.0", "t_max = 2.0\nbeta = 9.0") + "[grid]\nh = [0.5, 1.0]\n")
    out = tmp_path / "sw"
    rc, err, seen = _run_watched(tmp_path, ["sweep", str(spec), "--out", str(out), "--cpus", "1"])
    assert seen == set(), seen
    assert (tmp_path / "connect.0").exists() or any(tmp_path.glob("connect.*")), "the audit hook did not run"
    lines = [line for line in err.splitlines() if line.startswith("attnlab: error:")]
    assert rc == 1 and len(lines) == 1, err[-3000:]
    failed = [p.parent for p in out.glob("trials/*/trial.json") if json.loads(p.read_text())["status"] == "failed"]
    assert len(failed) == 1
    assert f"1 of 2 trials failed; trial {failed[0].name}: NumericalError: step size too large" in lines[0]
    assert f"traceback in {failed[0] / 'trial.json'}" in lines[0]
    assert (out / "sweep.csv").is_file() and (out / "report.html").is_file()


@pytest.mark.slow
def test_sigterm_exits_130_in_one_line_and_keeps_finished_trials(tmp_path):
    spec = tmp_path / "spec.toml"
    spec.write_text(CONS.replace("t_max = 1.0", "t_max = 40.0") + "[grid]\nseed = [0, 1, 2, 3, 4, 5]\n")
    out = tmp_path / "sw"
    cmd = [sys.executable, "-m", "attnlab.cli", "sweep", str(spec), "--out", str(out), "--cpus", "1"]
    proc = subprocess.Popen(cmd, env=subprocess_env(), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 120
    while proc.poll() is None and time.time() < deadline and not list(out.glob("trials/*/trial.json")):
        time.sleep(0.1)
    assert proc.poll() is None, "the sweep ended before it could be interrupted"
    proc.terminate()
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err[-3000:]
    lines = [line for line in err.splitlines() if line.strip() and "sweep:" not in line and "INFO" not in line]
    assert lines == ["attnlab: interrupted"], err[-3000:]
    assert "SIGTERM" not in err and "stack trace" not in err.lower()
    done = [p for p in out.glob("trials/*/trial.json") if json.loads(p.read_text())["status"] == "done"]
    assert done, "the finished trial was lost"
