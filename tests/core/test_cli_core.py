"""The top-level CLI and its helpers: one-line errors, threads restored, SIGTERM acts as Ctrl-C."""

from __future__ import annotations

import os
import signal

import pytest
import torch

from attnlab.cli import main
from attnlab.core.clitools import process_settings, run_mode, threads
from attnlab.core.registry import resolve
from attnlab.errors import InputError


def _one_line_error(capsys, argv, code=1) -> str:
    assert main(argv) == code
    err = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    errors = [line for line in err if line.startswith("attnlab: error:")]
    assert len(errors) == 1 and "Traceback" not in "\n".join(err), err
    return errors[0]


def test_threads_context_restores_the_count():
    before = torch.get_num_threads()
    with threads(1):
        assert torch.get_num_threads() == 1
    assert torch.get_num_threads() == before
    with pytest.raises(InputError, match="--threads must be >= 1"):
        with threads(-1):
            pass
    assert torch.get_num_threads() == before


def test_sigterm_becomes_keyboard_interrupt_and_is_restored():
    old = signal.getsignal(signal.SIGTERM)
    with process_settings():
        with pytest.raises(KeyboardInterrupt):
            signal.raise_signal(signal.SIGTERM)
    assert signal.getsignal(signal.SIGTERM) == old


def test_process_settings_restore_the_environment(monkeypatch):
    monkeypatch.delenv("MPLBACKEND", raising=False)
    with process_settings():
        assert os.environ["MPLBACKEND"] == "Agg"
    assert "MPLBACKEND" not in os.environ


def test_run_mode_flags_exclude_each_other():
    class A:
        resume, overwrite = True, True

    with pytest.raises(InputError, match="exclude each other"):
        run_mode(A())  # type: ignore[arg-type]


def test_demo_only_unknown_study_is_refused(capsys, tmp_path):
    line = _one_line_error(capsys, ["demo", "--only", "bogus", "--out", str(tmp_path / "d")])
    assert "--only bogus: unknown study" in line
    assert not (tmp_path / "d").exists()


def test_rerun_of_a_folder_that_is_no_run(capsys, tmp_path):
    line = _one_line_error(capsys, ["rerun", str(tmp_path)])
    assert "manifest.json not found" in line


def test_registry_unknown_command():
    with pytest.raises(InputError, match="unknown command 'nope'"):
        resolve("nope")
