"""Issue 37, the last rough edges of 151 probes, each fed as the probe found it: one line naming the real cause
(`tests.probes.refused`: non-zero exit, one stderr line, no traceback, no file under the test's folder changed),
and for a full disk, no partial folder left behind while an earlier run stays byte-identical.

Everything runs in this process on a 4-step toy `bb train` run (trained once per module) or on hand-made folders;
only the import check of `bb compare RUN RUN` starts a subprocess.
"""

from __future__ import annotations

import errno
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from attnlab import runs
from attnlab.cli import main
from attnlab.runs import io as runs_io
from tests.probes import PREFIX, refused, snapshot

ROOT = Path(__file__).resolve().parents[2]
TINY = ["--d-model", "16", "--d-mlp", "16", "--seq-len", "16", "--batch", "4", "--eval-batch", "8", "--threads", "1"]
BB = ["bb", "train", "--steps", "4", "--ckpt-every", "2", *TINY]
HEAVY = ("torch", "transformers", "pandas", "scipy", "matplotlib")


@pytest.fixture(scope="module")
def bb_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A finished 4-step `bb train` run (checkpoints at steps 2 and 4)."""
    from attnlab.bb.config import resolve_config
    from attnlab.bb.run import train

    out = tmp_path_factory.mktemp("bb") / "run"
    sizes = dict(d_model=16, d_mlp=16, seq_len=16, batch=4, eval_batch=8, ckpt_every=2)
    train(resolve_config("cpu", steps=4, **sizes), out, progress=False)
    return out


def _copy(run: Path, root: Path, name: str = "run") -> Path:
    return Path(shutil.copytree(run, root / name))


@pytest.fixture
def no_bars(monkeypatch: pytest.MonkeyPatch) -> None:
    """Progress bars off (they share stderr with the one line `refused` reads); item 7's test keeps them."""
    from tqdm import std

    real = std.tqdm.__init__

    def quiet(self, *args, **kwargs) -> None:
        real(self, *args, **{**kwargs, "disable": True})

    monkeypatch.setattr(std.tqdm, "__init__", quiet)


# --- item 1: a config.json nested 100,000 deep ---------------------------------------------------------------------
def test_a_config_nested_too_deeply_is_one_line(bb_run: Path, tmp_path: Path, capsys) -> None:
    run = _copy(bb_run, tmp_path)
    (run / "config.json").write_text("[" * 100_000)
    message = refused(["bb", "train", "--resume", "--steps", "6", "--out", "{root}/run"], tmp_path, capsys)
    assert message == f"run config {run / 'config.json'} is corrupt (nested too deeply to read); restore or delete it"


def test_a_sweep_spec_nested_too_deeply_is_one_line(tmp_path: Path, capsys) -> None:
    (tmp_path / "spec.toml").write_text("command = 'paths solve'\n[base]\nP = " + "[" * 100_000 + "\n")
    message = refused(["sweep", "{root}/spec.toml"], tmp_path, capsys)
    assert message.endswith("spec.toml is not valid TOML: nested too deeply"), message


# --- item 2: metrics.jsonl is read through one validating reader, which names the line before any work ----------
BAD_LINES = [
    # (line appended after the run's 2 lines, what the one line says)
    ('{"loss": 1.0}', 'metrics.jsonl line 3 has no "step"'),
    ('{"step": "4", "loss": 1.0}', "metrics.jsonl line 3: \"step\" must be an integer >= 0, got '4'"),
    ("[1, 2]", "metrics.jsonl line 3 is not a JSON object (list)"),
    ("[" * 100_000, "metrics.jsonl line 3 is corrupt"),
]
READERS = [
    ["bb", "train", "--resume", "--steps", "6", "--out", "{root}/run"],  # trained to the end, then KeyError 'step'
    ["bb", "train", "--resume", "--steps", "4", "--out", "{root}/run"],  # nothing to do: the summary reads it too
    ["bb", "compare", "{root}/run", "{root}/other", "--out", "{root}/cmp"],
    ["compare", "{root}/run", "{root}/other", "--out", "{root}/cmp"],
]


@pytest.mark.parametrize("argv", READERS, ids=["resume", "resume-done", "bb-compare", "compare"])
@pytest.mark.parametrize(("line", "says"), BAD_LINES, ids=["no-step", "str-step", "list", "nested"])
def test_a_bad_metrics_line_is_refused_before_any_work(bb_run, tmp_path, capsys, argv, line, says) -> None:
    run, _ = _copy(bb_run, tmp_path), _copy(bb_run, tmp_path, "other")
    assert len((run / "metrics.jsonl").read_text().splitlines()) == 2
    with (run / "metrics.jsonl").open("a") as f:
        f.write(line + "\n")
    message = refused(argv, tmp_path, capsys)
    assert str(run / "metrics.jsonl") in message and says in message, message


def test_the_reader_checks_the_keys_its_caller_needs(tmp_path: Path) -> None:
    path = tmp_path / "metrics.jsonl"
    path.write_text('{"N": 10, "converged": true}\n{"N": 20}\n{"step": 0')  # a cut last line is dropped
    assert runs.read_metrics(path) == [{"N": 10, "converged": True}, {"N": 20}]
    with pytest.raises(runs.InputError, match=r'line 2 has no "converged"'):
        runs.read_metrics(path, ("N", "converged"))
    path.write_text('{"loss": 1.0}\n')
    with pytest.raises(runs.InputError, match=r'line 1 has no "step"'):
        runs.RunDir(tmp_path).metrics(runs.STEPPED)


# --- item 3: compare on a run whose metrics.jsonl is empty -----------------------------------------------------------
@pytest.mark.parametrize(
    ("text", "says"), [("", "is empty"), ('{"step": 0, "lo', "holds no complete line (its only line was cut off)")]
)
def test_compare_says_the_metrics_file_is_empty(bb_run, tmp_path, capsys, text, says) -> None:
    run, _ = _copy(bb_run, tmp_path), _copy(bb_run, tmp_path, "other")
    (run / "metrics.jsonl").write_text(text)
    message = refused(["compare", "{root}/run", "{root}/other", "--out", "{root}/cmp"], tmp_path, capsys)
    assert message.startswith(f"{run / 'metrics.jsonl'} {says}: the run recorded no metrics"), message


# --- item 4: a new run that a full disk stops leaves nothing behind; an earlier run is never touched ------------
def _full_disk_at(monkeypatch: pytest.MonkeyPatch, name: str) -> None:
    """Every atomic write goes through `attnlab.runs.io._write_all`: the one of the file `name` finds the disk full."""
    real = runs_io._write_all

    def write_all(tmp: Path, data: bytes) -> None:
        if tmp.name.startswith(f".{name}."):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        real(tmp, data)

    monkeypatch.setattr(runs_io, "_write_all", write_all)


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from tests.real.conftest import save_tiny_hf_folder

    return save_tiny_hf_folder(tmp_path_factory.mktemp("model") / "llama")


NEW_RUNS = {
    # command: (argv without --out, the file whose write finds the disk full)
    # the snapshot of step 4, after the metrics line and snapshot of step 0, before the first checkpoint
    "bb train": (["bb", "train", "--steps", "4", "--ckpt-every", "4", *TINY], "step_4.safetensors"),
    "consensus": (["consensus", "simulate", "--n", "8", "--d", "3", "--batch", "2", "--t-max", "2"], "report.html"),
    "paths": (["paths", "solve", "--P", "20", "--n-test", "40"], "report.html"),
    "scan": (["scan", "--model", "{model}", "--domain", "random", "--tokens", "16", "--samples", "1"], "report.html"),
}


@pytest.mark.parametrize("out", ["new/run", "empty"], ids=["created", "existing-empty"])
@pytest.mark.parametrize("command", list(NEW_RUNS))
@pytest.mark.usefixtures("no_bars")
def test_a_new_run_stopped_by_a_full_disk_leaves_nothing(command, out, bb_run, tmp_path, capsys, monkeypatch, request):
    argv, name = NEW_RUNS[command]
    model = request.getfixturevalue("model_dir") if command == "scan" else None
    argv = [a.replace("{model}", str(model)) for a in argv]
    _copy(bb_run, tmp_path, "earlier")  # an earlier run beside it: byte-identical afterwards (`refused`)
    (tmp_path / "empty").mkdir()
    _full_disk_at(monkeypatch, name)
    message = refused([*argv, "--out", "{root}/" + out], tmp_path, capsys, seconds=120)
    assert message.startswith(f"no space left on device writing {tmp_path / out}") and name in message, message
    assert not (tmp_path / "new").exists() and not any((tmp_path / "empty").iterdir())


@pytest.mark.usefixtures("no_bars")
def test_a_run_stopped_after_a_checkpoint_is_kept_and_the_line_says_how_to_continue(tmp_path, capsys, monkeypatch):
    run = tmp_path / "run"
    with monkeypatch.context() as patch:
        _full_disk_at(patch, "report.html")  # after the last checkpoint
        capsys.readouterr()
        assert main([*BB, "--out", str(run)]) == 1
    err = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    says = f"no space left on device writing {run / 'report.html'}; the run so far is kept in {run}: continue it"
    assert err == [f"{PREFIX}{says} with --resume"], err
    assert main(["bb", "train", "--resume", "--steps", "6", "--out", str(run), "--threads", "1"]) == 0
    assert (run / "report.html").is_file() and (run / "checkpoints" / "step_6").is_dir()


@pytest.mark.usefixtures("no_bars")
def test_a_resumed_run_stopped_by_a_full_disk_is_never_removed(bb_run, tmp_path, capsys, monkeypatch) -> None:
    run = _copy(bb_run, tmp_path)
    kept = snapshot(run / "checkpoints" / "step_4")  # the checkpoint it resumes from (step_2 is pruned: keep_last 2)
    _full_disk_at(monkeypatch, "report.html")
    capsys.readouterr()
    assert main(["bb", "train", "--resume", "--steps", "6", "--out", str(run), "--threads", "1"]) == 1
    err = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert err == [f"{PREFIX}no space left on device writing {run / 'report.html'}"], err
    assert snapshot(run / "checkpoints" / "step_4") == kept and (run / "checkpoints" / "step_6").is_dir()
    assert json.loads((run / "manifest.json").read_text())["status"] == "failed"


# --- item 5: messages that named the wrong cause ---------------------------------------------------------------------
def _odd_files(root: Path) -> None:
    (root / "folder").mkdir()
    os.mkfifo(root / "fifo")
    (root / "FILE").write_text("a file, not a folder\n")


PROBES = [
    # (argv, what the one line must say)
    (["bb", "sample", "--corpus", "{root}/folder"], "corpus file {root}/folder is a folder, not a file"),
    (["bb", "sample", "--corpus", "{root}/fifo"], "corpus file {root}/fifo is not a regular file (a FIFO)"),
    (["bb", "sample", "--corpus", "/dev/zero"], "corpus file /dev/zero is not a regular file (a character device)"),
    (["bb", "train", "--corpus", "/dev/zero", *TINY], "corpus file /dev/zero is not a regular file"),
    (["scan", "--text", "{root}/folder"], "text file {root}/folder is a folder, not a file"),
    (["scan", "--text", "{root}/fifo"], "text file {root}/fifo is not a regular file (a FIFO)"),
    (["scan", "--text", "/dev/zero"], "text file /dev/zero is not a regular file (a character device)"),
    (["ablate", "--head", "0.0", "--text", "{root}/folder"], "text file {root}/folder is a folder, not a file"),
    (["scan", "--text", ""], "text file: the path is empty; name a file"),
    (["scan", "--model", ""], "--model is an empty name; give 'smollm2', a local model folder or a hub id"),
    (["scan", "--model", "{root}/folder", "--model", ""], "--model is an empty name"),
    (["bb", "intervene", ""], "run_dir is an empty path; name a `bb train` run folder"),
    (["bb", "subspace", ""], "run_dir is an empty path; name a `bb train` run folder"),
    (["bb", "compare", "", "{root}/folder"], "run_dirs: one is an empty path"),
    (["rerun", ""], "run_dir is an empty path; name a run folder written by an attnlab command"),
    (["view", ""], "run_dir is an empty path; name a run folder with report.html"),
    (["compare", "", "{root}/folder"], "run_dirs: one is an empty path; name run folders"),
    (["sweep", "{root}/fifo"], "sweep spec {root}/fifo is not a regular file (a FIFO)"),
    (["sweep", "{root}/folder"], "sweep spec {root}/folder is a folder, not a file"),
    ([*BB, "--out", "{root}/FILE/sub"], "--out {root}/FILE/sub: {root}/FILE is a file, not a folder"),
    (["paths", "solve", "--out", "{root}/FILE/a/b"], "--out {root}/FILE/a/b: {root}/FILE is a file, not a folder"),
]


@pytest.mark.parametrize(("argv", "says"), PROBES, ids=[f"{' '.join(a[:2])}-{i}" for i, (a, _) in enumerate(PROBES)])
def test_the_line_names_the_real_cause(argv, says, tmp_path, capsys) -> None:
    _odd_files(tmp_path)
    out = [] if "--out" in argv or argv[0] in ("sweep", "view") else ["--out", "{root}/out"]  # view has no --out
    message = refused([*argv, *out], tmp_path, capsys, seconds=5.0)
    assert says.replace("{root}", str(tmp_path)) in message, message
    assert "does not exist" not in message and "not writable" not in message, message


# --- item 6: bb compare RUN RUN is refused before anything is loaded -------------------------------------------------
DRIVER = r"""
import json, sys
from attnlab.cli import main
rc = main(["bb", "compare", sys.argv[1], sys.argv[1] + "/.", "--out", sys.argv[2]])
print(json.dumps({"rc": rc, "heavy": [m for m in HEAVY if m in sys.modules]}))
""".replace("HEAVY", repr(HEAVY))


def test_bb_compare_of_one_run_twice_is_refused_before_loading(bb_run, tmp_path, capsys) -> None:
    message = refused(["bb", "compare", str(bb_run), str(bb_run), "--out", "{root}/cmp"], tmp_path, capsys, seconds=2)
    assert message == f"run_dirs: {bb_run} is given twice (as {bb_run}); compare different runs"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.run([sys.executable, "-c", DRIVER, str(bb_run), str(tmp_path / "cmp")], capture_output=True,
                          text=True, env=env, cwd=tmp_path, timeout=120)  # fmt: skip
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result == {"rc": 1, "heavy": []}, (result, proc.stderr[-2000:])
    assert proc.stderr.strip().splitlines() == [f"{PREFIX}run_dirs: {bb_run}/. is given twice (as {bb_run}); "
                                                "compare different runs"]  # fmt: skip


# --- item 7: the progress bar shows no loss until there is one -------------------------------------------------------
def test_the_progress_bar_shows_no_loss_before_the_first_update(tmp_path: Path, capsys) -> None:
    assert main([*BB, "--out", str(tmp_path / "run")]) == 0
    bars = capsys.readouterr().err.replace("\r", "\n")
    assert "sink=" in bars and "loss=nan" not in bars and "loss=" in bars, bars[-2000:]  # a loss once there is one
