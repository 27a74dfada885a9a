"""docs/api.md runs: its Python blocks, in order, as one notebook in a fresh interpreter (offline, a tiny model)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
BLOCK = re.compile(r"```python\n(.*?)```", re.DOTALL)


def test_api_page_blocks_run_in_order(tmp_path):
    blocks = BLOCK.findall((ROOT / "docs" / "api.md").read_text())
    assert len(blocks) >= 5
    env = dict(os.environ, PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1", HF_HUB_OFFLINE="1")
    out = subprocess.run([sys.executable, "-c", "\n".join(blocks)], cwd=tmp_path, env=env, capture_output=True,
                         text=True, timeout=300)  # fmt: skip
    assert out.returncode == 0, out.stderr[-3000:]
    assert "hook == ZeroHead: True" in out.stdout and "round trip: True" in out.stdout
