"""Bad inputs of `attnlab scan` / `attnlab ablate` (issue 8): one line on stderr, exit 1, no file changed and no
folder left behind."""

from __future__ import annotations

import pytest

from attnlab.cli import main
from tests.real.conftest import save_tiny_hf_folder


@pytest.fixture(scope="module")
def llama_dir(tmp_path_factory):
    return save_tiny_hf_folder(tmp_path_factory.mktemp("tiny-llama"), "llama")


def _snapshot(root):
    return {p: (p.read_bytes(), p.stat().st_mtime_ns) for p in sorted(root.rglob("*")) if p.is_file()}


def _one_line_error(capsys, rc, message):
    err = capsys.readouterr().err.strip()
    assert rc == 1, err
    assert message in err and len(err.splitlines()) == 1 and "Traceback" not in err, err


SMALL = ["--tokens", "16", "--samples", "1"]


@pytest.mark.parametrize(
    "argv, message",
    [
        (["ablate", "--head", "0.0", "--batch-size", "0"], "batch_size must be an integer >= 1, got 0"),
        (["ablate", "--head", "0.0", "--batch-size", "-1"], "batch_size must be an integer >= 1, got -1"),
        (["scan", "--batch-size", "0"], "batch_size must be an integer >= 1, got 0"),
        (["scan", "--samples", "0"], "samples must be an integer >= 1, got 0"),
        (["scan", "--tokens", "1"], "tokens must be an integer >= 2, got 1"),
        (["scan", "--threads", "-1"], "--threads must be >= 1"),
        (["ablate", "--head", "1.4"], "head 4 is out of range; the model has heads 0..3"),
        (["ablate", "--head", "-1.0"], "heads layer must be an integer >= 0, got -1"),
        (["ablate", "--sink-head", "0.9"], "head 9 is out of range; the model has heads 0..3"),
        (["ablate", "--sweep-layer", "2"], "sweep layer 2 is out of range; the model has layers 0..1"),
        (["ablate", "--mlp", "5"], "MLP layer 5 is out of range; the model has layers 0..1"),
        (["ablate", "--dim", "0:*:32"], "residual dimension 32 is out of range 0..31"),
        (["ablate", "--dim", "0:16:3"], "dims position must be an integer in [0, 15], got 16"),
        (["scan", "--pattern-head", "1.4"], "head 4 is out of range; the model has heads 0..3"),
        (["scan", "--pattern-head", "2.0"], "layer 2 is out of range; the model has layers 0..1"),
    ],
)
def test_bad_value_refused_before_any_folder(llama_dir, tmp_path, capsys, argv, message):
    out = tmp_path / "run"
    rc = main(argv[:1] + SMALL + argv[1:] + ["--model", str(llama_dir), "--out", str(out)])  # argv's values win
    _one_line_error(capsys, rc, message)
    assert not out.exists()  # nothing written, not even an empty folder


@pytest.mark.parametrize("command", [["scan"], ["ablate", "--head", "0.1"]])
def test_non_empty_out_is_refused_and_untouched(llama_dir, tmp_path, capsys, command):
    out = tmp_path / "taken"
    out.mkdir()
    (out / "notes.txt").write_text("my notes\n")
    (out / "sub").mkdir()
    (out / "sub" / "data.csv").write_text("a,b\n1,2\n")
    before = _snapshot(out)
    rc = main(command + ["--model", str(llama_dir), "--out", str(out)] + SMALL)
    _one_line_error(capsys, rc, f"--out {out} is not empty")
    assert _snapshot(out) == before
    # --overwrite refuses a folder that is not an attnlab run
    rc = main(command + ["--model", str(llama_dir), "--out", str(out), "--overwrite"] + SMALL)
    _one_line_error(capsys, rc, "it is not an attnlab run folder")
    assert _snapshot(out) == before


def test_earlier_run_untouched_then_overwritten(llama_dir, tmp_path, capsys):
    out = tmp_path / "scan"
    assert main(["scan", "--model", str(llama_dir), "--domain", "code", "--out", str(out)] + SMALL) == 0
    capsys.readouterr()
    before = _snapshot(out)
    rc = main(["scan", "--model", str(llama_dir), "--domain", "prose", "--out", str(out)] + SMALL)
    _one_line_error(capsys, rc, "is not empty; pass --overwrite to replace that run")
    assert _snapshot(out) == before
    assert main(["scan", "--model", str(llama_dir), "--domain", "prose", "--out", str(out), "--overwrite"] + SMALL) == 0
    assert "prose" in (out / "heads.csv").read_text() and "code" not in (out / "heads.csv").read_text()


@pytest.mark.parametrize("model", ["smollm2", "local"])
def test_cache_dir_that_is_a_file(llama_dir, tmp_path, capsys, model):
    cache = tmp_path / "cache.txt"
    cache.write_text("not a folder\n")
    out = tmp_path / "run"
    rc = main(
        ["scan", "--model", str(llama_dir) if model == "local" else model, "--cache-dir", str(cache), "--out", str(out)]
        + SMALL
    )
    _one_line_error(capsys, rc, f"--cache-dir {cache} is a file, not a folder")
    assert cache.read_text() == "not a folder\n" and not out.exists()


def test_cache_dir_below_a_file(tmp_path):
    from attnlab.errors import InputError
    from attnlab.hf.loader import cache_root

    (tmp_path / "f").write_text("x")
    with pytest.raises(InputError, match="is a file, not a folder"):
        cache_root(tmp_path / "f" / "cache")


def test_ablate_sink_from_other_windows_is_refused(llama_dir, tmp_path, capsys):
    scan_dir = tmp_path / "scan"
    assert main(["scan", "--model", str(llama_dir), "--domain", "prose", "--out", str(scan_dir)] + SMALL) == 0
    capsys.readouterr()
    out = tmp_path / "abl"
    rc = main(
        [
            "ablate",
            "--model",
            str(llama_dir),
            "--head",
            "0.0",
            "--sink-from",
            str(scan_dir),
            "--seed",
            "3",
            "--out",
            str(out),
        ]
        + SMALL
    )
    _one_line_error(capsys, rc, "its seed is 0, this ablation's is 3; the windows differ")
    assert not out.exists()


def test_out_that_is_a_file(llama_dir, tmp_path, capsys):
    out = tmp_path / "file.txt"
    out.write_text("keep me\n")
    rc = main(["ablate", "--head", "0.0", "--model", str(llama_dir), "--out", str(out)] + SMALL)
    _one_line_error(capsys, rc, "is a file, not a folder")
    assert out.read_text() == "keep me\n"


def test_report_reads_a_corrupt_trace_with_one_line(llama_dir, tmp_path):
    from attnlab.errors import InputError
    from attnlab.runs import RunDir
    from attnlab.scan.report import write_report

    out = tmp_path / "scan"
    assert main(["scan", "--model", str(llama_dir), "--domain", "code", "--out", str(out)] + SMALL) == 0
    (out / "traces" / "code.json").write_text('{"massive": [')
    with pytest.raises(InputError, match="code.json is corrupt"):
        write_report(RunDir(out))
