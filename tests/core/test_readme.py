"""Every README code block runs: Python blocks execute in a fresh interpreter; every `attnlab` command line in a
shell block parses with the real parser (running them all would take hours)."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from attnlab.cli import build_parser

ROOT = Path(__file__).resolve().parents[2]
BLOCK = re.compile(r"```(\w+)\n(.*?)```", re.DOTALL)


def _blocks(language: str) -> list[str]:
    return [body for lang, body in BLOCK.findall((ROOT / "README.md").read_text()) if lang == language]


def test_readme_has_examples_for_every_study():
    python = "\n".join(_blocks("python"))
    for study in ("attnlab.bb", "attnlab.consensus", "attnlab.paths", "attnlab.scan"):
        assert f"import {study}" in python


@pytest.mark.slow
@pytest.mark.parametrize("index", range(len(_blocks("python"))))
def test_readme_python_block_runs(index, tmp_path):
    code = _blocks("python")[index]
    env = dict(os.environ, PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1")
    out = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True,
                         timeout=600)  # fmt: skip
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.strip(), "the example prints its result"


def test_readme_command_lines_parse():
    parser = build_parser()
    lines = [line for body in _blocks("bash") for line in body.splitlines() if line.startswith("attnlab ")]
    assert len(lines) >= 15
    for line in lines:
        argv = shlex.split(line.split("  #")[0])[1:]
        try:
            args = parser.parse_args(argv)
        except SystemExit:
            pytest.fail(f"README command does not parse: {line}")
        assert callable(args.func), line
