"""Issue 21, first contact for the commands that read other runs (`bb intervene`, `compare`, `view`, `rerun`,
`sweep`): a missing or corrupt run folder, a run of the wrong command or a bad value is refused in one line that
names it, changes nothing (`tests.probes.refused`), and comes before any heavy import (torch, transformers, pandas,
scipy, matplotlib: what made such refusals take seconds). The import check runs every probe in one subprocess."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.probes import refused

ROOT = Path(__file__).resolve().parents[2]
HEAVY = ("torch", "transformers", "pandas", "scipy", "matplotlib")
SPEC = 'command = "paths solve"\n[base]\nP = {P}\nn-test = 40\n[grid]\nN = [10, 20]\n'


def _run(folder: Path, command: str, config: str = '{"P": 20}', manifest: str | None = None) -> None:
    """A run folder as these commands read it: manifest.json, config.json and report.html."""
    folder.mkdir(parents=True)
    (folder / "manifest.json").write_text(manifest if manifest is not None else json.dumps({"command": command}))
    (folder / "config.json").write_text(config)
    (folder / "report.html").write_text("<html><body>report</body></html>")


def folders(root: Path) -> None:
    """Every folder and spec the probes name, under `root`."""
    _run(root / "solve", "paths solve")
    _run(root / "other", "paths solve")
    _run(root / "corrupt", "paths solve", manifest="{not json")
    _run(root / "badconfig", "paths solve", config="{not json")
    _run(root / "nocommand", "paths solve", manifest="{}")
    _run(root / "unknown", "nope run")
    (root / "empty").mkdir()
    (root / "good.toml").write_text(SPEC.format(P=20))
    (root / "badvalue.toml").write_text(SPEC.format(P=-3))
    (root / "badcommand.toml").write_text(SPEC.format(P=20).replace("paths solve", "paths nope"))
    (root / "notoml.toml").write_text("command: paths solve\n")


PROBES = [
    # (argv, what the one line must name)
    (["bb", "intervene", "{root}/missing"], ["missing is not a folder; expected a `bb train` run folder"]),
    (["bb", "intervene", "{root}/empty"], ["empty/config.json not found"]),
    (["bb", "intervene", "{root}/corrupt"], ["corrupt/manifest.json is corrupt"]),
    (["bb", "intervene", "{root}/solve"], ["is a run of `attnlab paths solve`, not of `attnlab bb train`"]),
    (["bb", "intervene", "{root}/solve", "--device", "tpu"], ["device must be one of"]),
    (["bb", "intervene", "{root}/solve", "--threads", "-1"], ["--threads must be >= 1"]),
    (["bb", "subspace", "{root}/solve"], ["not of `attnlab bb train`"]),
    (["compare", "{root}/solve", "{root}/missing"], ["missing: no such folder"]),
    (["compare", "{root}/solve", "{root}/corrupt"], ["corrupt/manifest.json is corrupt"]),
    (["compare", "{root}/solve", "{root}/empty"], ["empty is not an attnlab run folder"]),
    (["compare", "{root}/solve", "{root}/empty/../solve"], ["listed twice", "empty/../solve"]),
    (["compare", "{root}/solve"], ["compare needs two or more run folders, got 1"]),
    (["compare", "--index", "{root}/missing"], ["--index", "no such folder"]),
    (["view", "{root}/missing"], ["missing is not a folder"]),
    (["view", "{root}/empty"], ["empty has no report.html"]),
    (["view", "{root}/corrupt"], ["corrupt/manifest.json is corrupt"]),
    (["view", "{root}/solve", "--port", "70000"], ["--port must be an integer in [0, 65535], got 70000"]),
    (["view", "{root}/solve", "--threads", "-1"], ["--threads must be >= 1"]),
    (["rerun", "{root}/missing"], ["missing/manifest.json not found"]),
    (["rerun", "{root}/corrupt"], ["corrupt/manifest.json is corrupt"]),
    (["rerun", "{root}/nocommand"], ["names no command"]),
    (["rerun", "{root}/unknown"], ["unknown command 'nope run'"]),
    (["rerun", "{root}/badconfig"], ["badconfig/config.json is corrupt"]),
    (["rerun", "{root}/solve", "--out", "{root}/other"], ["--out", "other is not empty", "choose another --out"]),
    (["rerun", "{root}/solve", "--threads", "-1"], ["--threads must be >= 1"]),
    (["sweep", "{root}/missing.toml"], ["missing.toml not found"]),
    (["sweep", "{root}/notoml.toml"], ["is not valid TOML"]),
    (["sweep", "{root}/badvalue.toml"], ["--P must be an integer >= 2, got -3"]),
    (["sweep", "{root}/badcommand.toml"], ["unknown command 'paths nope'"]),
    (["sweep", "{root}/good.toml", "--retries", "-1"], ["--retries must be an integer >= 0, got -1"]),
    (["sweep", "{root}/good.toml", "--gpus-per-trial", "-1"], ["--gpus-per-trial must be >= 0"]),
    (["sweep", "{root}/good.toml", "--out", "{root}/solve"], ["--out", "solve is not empty"]),
]


@pytest.mark.parametrize("argv, names", PROBES, ids=[" ".join(a[:2]) + f"-{i}" for i, (a, _) in enumerate(PROBES)])
def test_bad_input_to_a_reader_is_refused_in_one_line(argv, names, tmp_path, capsys):
    folders(tmp_path)
    message = refused(argv, tmp_path, capsys, seconds=5.0)
    assert all(n.replace("{root}", str(tmp_path)) in message for n in names), message


DRIVER = r"""
import json, sys
from attnlab.cli import main
root, probes = sys.argv[1], json.loads(sys.argv[2])
for argv in probes:
    try:
        rc = main([a.replace("{root}", root) for a in argv])
    except SystemExit as exc:
        rc = exc.code
    print(json.dumps({"argv": argv, "rc": rc, "heavy": [m for m in HEAVY if m in sys.modules]}), flush=True)
""".replace("HEAVY", repr(HEAVY))


def test_every_refusal_comes_before_heavy_imports(tmp_path):
    """All probes in one fresh process, in order: after each, none of the heavy modules may have been imported."""
    folders(tmp_path)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    probes = json.dumps([argv for argv, _ in PROBES])
    proc = subprocess.run(
        [sys.executable, "-c", DRIVER, str(tmp_path), probes], capture_output=True, text=True, env=env, cwd=tmp_path
    )
    results = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    assert len(results) == len(PROBES), proc.stderr[-2000:]
    for result in results:
        assert result["rc"] in (1, 2), result
        assert result["heavy"] == [], f"{result['argv']}: refused only after importing {result['heavy']}"
