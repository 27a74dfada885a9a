"""docs/from-transformerlens.md runs: its attnlab blocks (fenced `python`), in order, as one notebook in a fresh
interpreter (offline, a tiny model); its TransformerLens blocks (fenced `python transformerlens`) are not run."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "from-transformerlens.md"
BLOCK = re.compile(r"```python\n(.*?)```", re.DOTALL)


def test_every_transformerlens_call_has_its_attnlab_block():
    text = DOC.read_text()
    calls = ("run_with_cache", "run_with_hooks", "hook_pattern", "hook.name", "get_act_name", "attention_patterns")
    for call in (*calls, "heads_view", "grad=True", "attention_mask="):
        assert call in text, call
    assert len(BLOCK.findall(text)) >= 7 and text.count("```python transformerlens\n") >= 6


def test_the_attnlab_blocks_run_in_order(tmp_path):
    code = "\n".join(BLOCK.findall(DOC.read_text()))
    env = dict(os.environ, PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1", HF_HUB_OFFLINE="1")
    out = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True,
                         timeout=300)  # fmt: skip
    assert out.returncode == 0, out.stderr[-3000:]
    for line in ("run_with_hooks == ZeroHead: True", "rows sum to 1: True", "pattern edit == MoveToSink: True",
                 "padded == alone: True"):  # fmt: skip
        assert line in out.stdout, line
    assert "blocks.1.attn.hook_z" in out.stdout and (tmp_path / "patterns.html").is_file()
