"""Bad sweep specs get one line before any work starts (no Ray, no folder)."""

from __future__ import annotations

import pytest

from attnlab.cli import main

GOOD_BASE = 'command = "consensus simulate"\n[base]\nn = 8\n'


def _error(capsys, tmp_path, spec: str, *extra: str) -> str:
    path = tmp_path / "spec.toml"
    path.write_text(spec)
    out = tmp_path / "sweep"
    assert main(["sweep", str(path), "--out", str(out), *extra]) == 1
    err = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert len(err) == 1 and err[0].startswith("attnlab: error:"), err
    assert not out.exists()
    return err[0]


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ('command = "bogus run"\n[grid]\nseed = [0]\n', "unknown command 'bogus run'"),
        (GOOD_BASE + "[grid]\nbogus_field = [1, 2]\n", "has no field 'bogus_field'"),
        (GOOD_BASE + '[grid]\nseed = ["zero"]\n', "field 'seed' must be a number"),
        (GOOD_BASE + "[grid]\nseed = []\n", "grid field 'seed' needs a non-empty list"),
        (GOOD_BASE, "give a [grid], [[list]] trials or [random] draws"),
        (GOOD_BASE + "[grid]\nseed = [0\n", "is not valid TOML"),
        (GOOD_BASE + "[grid]\nseed = [0]\n[extra]\na = 1\n", "unknown key(s) extra"),
    ],
)
def test_bad_spec_is_one_line(capsys, tmp_path, spec, message):
    assert message in _error(capsys, tmp_path, spec)


def test_too_many_trials_need_yes(capsys, tmp_path):
    spec = GOOD_BASE + "[grid]\nseed = [" + ", ".join(str(i) for i in range(100)) + "]\n"
    assert "makes 100 trials" in _error(capsys, tmp_path, spec)


def test_missing_spec_file(capsys, tmp_path):
    assert main(["sweep", str(tmp_path / "none.toml")]) == 1
    assert "not found" in capsys.readouterr().err
