"""Issue 17, the run layer: library failures (a full disk, a read-only folder, a name too long, a corrupt file,
out of memory, a singular matrix) end in one line naming what failed, with the traceback only behind `--debug`;
atomic writes leave no temporary file behind; `attnlab view` refuses foreign Host headers and names each bad
pattern parameter. Every probe runs in this process through `tests.probes.refused`."""

from __future__ import annotations

import errno
import http.client
import json
import os
import subprocess
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import pytest

from attnlab.cli import main
from attnlab.runs import RunDir, WriteError, atomic_folder, write_bytes, write_json
from tests.probes import PREFIX, refused

LONG = "a" * 4200  # a path over 4,096 characters: ENAMETOOLONG
TINY_SOLVE = ["paths", "solve", "--P", "20", "--n-test", "40"]


def fake_run(folder: Path, command: str = "paths solve", manifest: str | None = None) -> Path:
    """A run folder as `compare` and `view` read it: manifest.json, config.json and report.html."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "manifest.json").write_text(manifest if manifest is not None else json.dumps({"command": command}))
    (folder / "config.json").write_text(json.dumps({"P": 20}))
    (folder / "report.html").write_text("<html><body>report</body></html>")
    return folder


def _no_setup(root: Path) -> None:
    pass


def _corrupt_manifest(root: Path) -> None:
    fake_run(root / "run", manifest="{not json")


def _docs_file(root: Path) -> None:
    (root / "docs").write_text("a file\n")


def _docs_figures_file(root: Path) -> None:
    (root / "docs").mkdir()
    (root / "docs" / "figures").write_text("a file\n")


def _two_runs(root: Path) -> None:
    fake_run(root / "runs" / "a")
    fake_run(root / "runs" / "b")


PROBES = [
    # (argv, setup, what the one line must name)
    (["view", "{root}/run", "--port", "0"], _corrupt_manifest, ["manifest.json", "corrupt"]),
    (["reproduce", "--profile", "tiny", "--docs", "{root}/docs", "--out", "{root}/rep"], _docs_file,
     ["--docs", "docs is a file, not a folder"]),
    (["reproduce", "--profile", "tiny", "--docs", "{root}/docs", "--out", "{root}/rep"], _docs_figures_file,
     ["--docs figures folder", "figures is a file"]),
    ([*TINY_SOLVE, "--out", "{root}/" + LONG], _no_setup, ["--out", "file name too long", "characters)"]),
    (["consensus", "simulate", "--out", "{root}/" + LONG], _no_setup, ["--out", "file name too long"]),
    (["compare", "--index", "{root}/" + LONG], _no_setup, ["--index", "file name too long"]),
    (["compare", "{root}/runs/a", "{root}/runs/b", "--out", "{root}/" + LONG], _two_runs, ["--out", "too long"]),
    (["view", "{root}/" + LONG], _no_setup, ["file name too long"]),
]  # fmt: skip


@pytest.mark.parametrize(("argv", "setup", "names"), PROBES, ids=lambda v: getattr(v, "__name__", None))
def test_library_failures_are_one_line(argv, setup, names, tmp_path, capsys):
    setup(tmp_path)
    message = refused(argv, tmp_path, capsys)
    assert all(n in message for n in names), message
    assert len(message) < 400, message  # a 4,200-character path is shortened


def test_debug_shows_the_traceback_and_still_ends_in_one_line(tmp_path, capsys):
    assert main(["--debug", *TINY_SOLVE, "--out", str(tmp_path / LONG)]) == 1
    err = capsys.readouterr().err
    assert "Traceback (most recent call last)" in err and "OSError" in err
    assert err.strip().splitlines()[-1].startswith(PREFIX + "--out ")
    assert not any(tmp_path.iterdir())


# --- a full disk and a read-only folder, through a patched writer ------------------------------------------------
@pytest.fixture
def failing_writes(monkeypatch) -> Callable[..., None]:
    """`fail(root, code, after=0)`: os.write (every atomic write and metrics line goes through it) and os.open
    of files under `root` raise OSError(code) once `after` writes under root have succeeded."""

    def fail(root: Path, code: int, after: int = 0) -> None:
        real_write, real_open, done = os.write, os.open, [0]

        def under_root(fd: int) -> bool:
            try:
                return os.readlink(f"/proc/self/fd/{fd}").startswith(str(root))
            except OSError:
                return False

        def write(fd: int, data) -> int:
            if fd > 2 and under_root(fd):
                if done[0] >= after:
                    raise OSError(code, os.strerror(code))
                done[0] += 1
            return real_write(fd, data)

        def open_(path, flags, mode=0o777, **kw) -> int:
            if code == errno.EACCES and str(path).startswith(str(root)) and flags & os.O_CREAT:
                raise PermissionError(code, os.strerror(code), str(path))
            return real_open(path, flags, mode, **kw)

        monkeypatch.setattr(os, "write", write)
        monkeypatch.setattr(os, "open", open_)

    return fail


FULL_DISK = [
    ([*TINY_SOLVE, "--out", "{root}/solve"], "solve/config.json"),
    (["consensus", "simulate", "--n", "8", "--d", "3", "--out", "{root}/sim"], "sim/config.json"),
    (["compare", "--index", "{root}/runs"], "runs/"),
    (["compare", "{root}/runs/a", "{root}/runs/b", "--out", "{root}/cmp"], "cmp/config.json"),
    (["demo", "--only", "paths", "--out", "{root}/demo"], "demo/config.json"),
    (["reproduce", "--profile", "tiny", "paths", "--out", "{root}/rep"], "rep/config.json"),
]


@pytest.mark.parametrize(("argv", "file"), FULL_DISK, ids=[a[0] + "-" + a[1] for a, _ in FULL_DISK])
def test_a_full_disk_is_one_line_naming_the_file(argv, file, tmp_path, capsys, failing_writes):
    _two_runs(tmp_path)
    failing_writes(tmp_path, errno.ENOSPC)
    message = refused(argv, tmp_path, capsys)  # also: no .tmp file and no new folder left behind
    assert message.startswith("no space left on device writing "), message
    assert file in message and str(tmp_path) in message


def test_a_read_only_index_folder_is_one_line(tmp_path, capsys, failing_writes):
    _two_runs(tmp_path)
    failing_writes(tmp_path / "runs", errno.EACCES)
    message = refused(["compare", "--index", "{root}/runs"], tmp_path, capsys)
    assert message.startswith("permission denied writing " + str(tmp_path / "runs")), message


def test_a_disk_filling_mid_run_leaves_no_temporary_file(tmp_path, capsys, failing_writes):
    failing_writes(tmp_path, errno.ENOSPC, after=3)  # config.json, manifest.json, one array, then full
    assert main([*TINY_SOLVE, "--out", str(tmp_path / "solve")]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(PREFIX + "no space left on device writing " + str(tmp_path)), err
    assert not [p for p in tmp_path.rglob("*") if p.name.endswith(".tmp")]


# --- the atomic writers themselves ---------------------------------------------------------------------------------
def test_write_bytes_removes_its_temporary_file_and_the_folders_it_made(tmp_path, failing_writes):
    (tmp_path / "keep").write_bytes(b"old")
    failing_writes(tmp_path, errno.ENOSPC)
    with pytest.raises(WriteError) as exc:
        write_bytes(tmp_path / "keep", b"new")
    assert exc.value.errno == errno.ENOSPC and exc.value.filename == str(tmp_path / "keep")
    with pytest.raises(WriteError):
        write_bytes(tmp_path / "new" / "deeper" / "x.json", b"{}")
    assert sorted(p.name for p in tmp_path.rglob("*")) == ["keep"]
    assert (tmp_path / "keep").read_bytes() == b"old"


def test_a_metrics_line_that_does_not_fit_leaves_the_file_as_it_was(tmp_path, failing_writes):
    run = RunDir(tmp_path)
    run.append_metrics({"step": 1})
    before = run.metrics_path.read_bytes()
    failing_writes(tmp_path, errno.ENOSPC)
    with pytest.raises(WriteError) as exc:
        run.append_metrics({"step": 2})
    assert exc.value.filename == str(run.metrics_path)
    assert run.metrics_path.read_bytes() == before


def test_atomic_folder_removes_the_half_built_folder(tmp_path):
    with pytest.raises(WriteError) as exc, atomic_folder(tmp_path / "step_5") as tmp:
        (tmp / "model.safetensors").write_bytes(b"half")
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
    assert exc.value.filename == str(tmp_path / "step_5") and not any(tmp_path.iterdir())
    with atomic_folder(tmp_path / "step_5") as tmp:
        (tmp / "state.json").write_text("{}")
    assert [p.name for p in tmp_path.iterdir()] == ["step_5"]


def test_a_checkpoint_on_a_full_disk_leaves_no_tmp_folder(tmp_path, monkeypatch):
    import torch
    from safetensors import SafetensorError

    from attnlab.training import checkpoint

    def full(*args, **kwargs):  # what safetensors raises on a full disk
        raise SafetensorError("Error while serializing: I/O error: No space left on device (os error 28)")

    monkeypatch.setattr(checkpoint, "save_file", full)
    model = torch.nn.Linear(2, 2)
    with pytest.raises(WriteError) as exc:
        checkpoint.save_checkpoint(tmp_path / "step_1", model, torch.optim.SGD(model.parameters()), {"step": 1})
    assert exc.value.errno == errno.ENOSPC and exc.value.filename == str(tmp_path / "step_1")
    assert not any(tmp_path.iterdir())


@pytest.fixture
def tiny_disk(tmp_path) -> Iterator[Path]:
    """A 64 KiB tmpfs (a real full disk); skipped where this process may not mount one."""
    disk = tmp_path / "disk"
    disk.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(disk)], capture_output=True)
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here ({mounted.stderr.decode().strip()})")
    try:
        yield disk
    finally:
        subprocess.run(["umount", "-l", str(disk)], check=False)


@pytest.mark.parametrize("argv", [TINY_SOLVE, ["consensus", "simulate", "--n", "8", "--d", "3"]], ids=["solve", "sim"])
def test_a_real_full_disk_is_one_line_and_leaves_no_temporary_file(argv, tiny_disk, capsys):
    assert main([*argv, "--out", str(tiny_disk / "run")]) == 1
    err = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert err and err[-1].startswith(PREFIX + "no space left on device writing " + str(tiny_disk / "run")), err
    assert not [p for p in tiny_disk.rglob("*") if p.name.endswith(".tmp")]


def test_a_read_only_file_system_is_one_line(tiny_disk, capsys):
    _two_runs(tiny_disk)
    remount = subprocess.run(["mount", "-o", "remount,ro", str(tiny_disk)], capture_output=True)
    if remount.returncode != 0:
        pytest.skip(f"cannot remount the tmpfs read-only ({remount.stderr.decode().strip()})")
    assert main(["compare", "--index", str(tiny_disk / "runs")]) == 1  # (refused() cannot write its file here)
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"{PREFIX}read-only file system writing {tiny_disk / 'runs' / 'index.html'}"]


# --- failures of numpy, torch and safetensors that reach the CLI --------------------------------------------------
def _library_failures() -> list[tuple[BaseException, int, str]]:
    import torch
    from safetensors import SafetensorError

    return [
        (MemoryError("Unable to allocate 8.00 GiB for an array"), 1, "out of memory (MemoryError: Unable to allocate"),
        (torch.OutOfMemoryError("CUDA out of memory.\nTried to allocate 2 GiB"), 1, "out of memory (OutOfMemoryError"),
        (np.linalg.LinAlgError("Singular matrix"), 2, "linear algebra failed (LinAlgError: Singular matrix)"),
        (torch.linalg.LinAlgError("linalg.cholesky: not positive-definite"), 2, "linear algebra failed"),
        (
            SafetensorError("Error while deserializing header: HeaderTooLarge"),
            1,
            "cannot read or write a safetensors file",
        ),
        (OSError(errno.EROFS, "Read-only file system", "/mnt/x"), 1, "/mnt/x: read-only file system"),
        (OSError(errno.ENOSPC, "No space left on device"), 1, "no space left on device (OSError)"),
    ]


@pytest.mark.parametrize("case", range(7))
def test_library_failures_reaching_the_cli_are_one_line(case, tmp_path, capsys, monkeypatch):
    exc, code, start = _library_failures()[case]

    def fails(args):
        raise exc

    monkeypatch.setattr("attnlab.compare.cli.cmd_compare", fails)
    message = refused(["compare", "--index", "{root}"], tmp_path, capsys, exit_codes=(code,))
    assert message.startswith(start), message


def test_interrupts_and_bugs_are_left_as_they_were(tmp_path, capsys, monkeypatch):
    def interrupted(args):
        raise KeyboardInterrupt

    monkeypatch.setattr("attnlab.compare.cli.cmd_compare", interrupted)
    assert main(["compare", "--index", str(tmp_path)]) == 130
    assert capsys.readouterr().err.strip() == "attnlab: interrupted"

    def bug(args):
        raise RuntimeError("a bug shows its traceback")

    monkeypatch.setattr("attnlab.compare.cli.cmd_compare", bug)
    with pytest.raises(RuntimeError):
        main(["compare", "--index", str(tmp_path)])


# --- attnlab view: the Host guard and the pattern API's messages ---------------------------------------------------
@pytest.mark.parametrize(
    ("host", "ok"),
    [("127.0.0.1:{port}", True), ("127.0.0.1", True), ("localhost:{port}", True), ("LOCALHOST", True),
     ("[::1]:{port}", True), ("[::1]", True), ("127.0.0.1:1", False), ("evil.example:{port}", False),
     ("localhost.evil.example", False), ("127.0.0.1.nip.io:{port}", False), ("::1", False), ("", False),
     (None, False)],
)  # fmt: skip
def test_view_answers_only_requests_naming_this_machine(host, ok, tmp_path):
    from attnlab.view.server import make_server

    server = make_server(fake_run(tmp_path / "run", "bb train"), 0)
    port = server.server_address[1]
    thread = threading.Thread(target=server.serve_forever, args=(0.02,), daemon=True)
    thread.start()
    try:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        conn.putrequest("GET", "/", skip_host=True)
        if host is not None:
            conn.putheader("Host", host.format(port=port))
        conn.endheaders()
        response = conn.getresponse()
        body = response.read()
    finally:
        server.shutdown()
        server.server_close()
    assert (response.status, body.startswith(b"<html>")) == ((200, True) if ok else (403, False)), body


@pytest.fixture
def scan_run(tmp_path) -> Path:
    """A scan run folder without a model behind it: every request below is refused before a model loads."""
    from attnlab.scan.config import ScanConfig

    run = fake_run(tmp_path / "scan", "scan")
    write_json(run / "config.json", ScanConfig(model=str(tmp_path / "no-model"), domains=("prose", "code")))
    rows = [{"domain": d, "token_ids": [1, 2, 3]} for d in ("prose", "code")]
    (run / "samples.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return run


def _ask(run: Path, query: str) -> tuple[int, str]:
    from attnlab.view.server import make_server

    server = make_server(run, 0)
    thread = threading.Thread(target=server.serve_forever, args=(0.02,), daemon=True)
    thread.start()
    try:
        conn = http.client.HTTPConnection("127.0.0.1", server.server_address[1], timeout=10)
        conn.request("GET", "/api/pattern" + query)
        response = conn.getresponse()
        return response.status, json.loads(response.read())["error"]
    finally:
        server.shutdown()
        server.server_close()


PATTERN_PROBES = [
    ("", "missing parameter 'layer'"),
    ("?layer=1", "missing parameter 'head'"),
    ("?layer=1&head=", "head must be an integer, got ''"),
    ("?layer=one&head=0", "layer must be an integer, got 'one'"),
    ("?layer=1.5&head=0", "layer must be an integer, got '1.5'"),
    ("?layer=1&head=0&layer=2", "parameter 'layer' is given 2 times"),
    ("?layer=1&head=0&heads=3", "unknown parameter 'heads'"),
    ("?layer=1&head=0&domain=poetry", "unknown domain 'poetry'; valid: code, prose"),
]


@pytest.mark.parametrize(("query", "says"), PATTERN_PROBES)
def test_view_pattern_api_names_the_bad_parameter(query, says, scan_run):
    status, error = _ask(scan_run, query)
    assert status == 400 and error.startswith(says), error


def test_view_pattern_api_names_a_run_that_cannot_answer(scan_run, tmp_path):
    (scan_run / "samples.jsonl").unlink()
    status, error = _ask(scan_run, "?layer=0&head=0")
    assert status == 400 and "saved no windows (samples.jsonl" in error
    (scan_run / "config.json").write_text("{cut")
    status, error = _ask(scan_run, "?layer=0&head=0")
    assert status == 400 and "config.json is corrupt" in error
    status, error = _ask(fake_run(tmp_path / "bb", "bb train"), "?layer=0&head=0")
    assert status == 404 and error == "bb is a run of `attnlab bb train`: only scan runs recompute patterns"


def test_a_failure_under_a_progress_bar_starts_its_own_line(tmp_path, capsys, monkeypatch):
    from tqdm import tqdm

    def fails_mid_bar(args):
        bar = tqdm(total=10, desc="train")
        bar.update(3)
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(tmp_path / "metrics.json"))

    monkeypatch.setattr("attnlab.compare.cli.cmd_compare", fails_mid_bar)
    assert main(["compare", "--index", str(tmp_path)]) == 1
    err = capsys.readouterr().err
    assert f"\n{PREFIX}{tmp_path / 'metrics.json'}: no space left on device\n" in err, err
