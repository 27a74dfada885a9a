"""`paths sweep --resume` after an interrupt saves the same numbers, bit for bit, as a sweep never interrupted.

The resume runs in a fresh interpreter, as a user's would: the first solve of a process must equal any later one
(scipy's BLAS used to run multi-threaded until scipy was first imported inside the solver's one-thread limit).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from attnlab.cli import main

ROOT = Path(__file__).resolve().parents[2]
ARGV = ["paths", "sweep", "--P", "20", "--n-test", "40", "--Ns", "30", "10", "--temperature", "0.05"]
TIMED = {"wall_s"}  # fields that record time, not results


def _numbers(obj: Any) -> Any:
    """`obj` without the fields that record time."""
    if isinstance(obj, dict):
        return {k: _numbers(v) for k, v in obj.items() if k not in TIMED}
    if isinstance(obj, list):
        return [_numbers(v) for v in obj]
    return obj


def _saved(folder: Path) -> dict[str, Any]:
    """Every saved number of a sweep folder: JSON(-lines) files without times, and each array of each .npz."""
    out: dict[str, Any] = {}
    for path in sorted(folder.rglob("*")):
        key = str(path.relative_to(folder))
        if path.suffix == ".jsonl":
            out[key] = [_numbers(json.loads(line)) for line in path.read_text().splitlines()]
        elif path.suffix == ".json" and path.name != "manifest.json":
            out[key] = _numbers(json.loads(path.read_text()))
        elif path.suffix == ".npz":
            with np.load(path) as z:
                out.update({f"{key}:{name}": z[name].tobytes() for name in z.files})
    return out


@pytest.mark.slow  # three small sweeps, one in a fresh interpreter (about 10 s on 2 busy cores)
def test_resumed_sweep_is_bit_identical(tmp_path, monkeypatch, capsys):
    import attnlab.paths.theory.points as points

    full, part = tmp_path / "full", tmp_path / "part"
    assert main([*ARGV, "--out", str(full)]) == 0
    real, calls = points.theory_point, []

    def interrupted_after_first(*args: Any, **kwargs: Any) -> Any:
        calls.append(1)
        if len(calls) == 2:
            raise KeyboardInterrupt
        return real(*args, **kwargs)

    monkeypatch.setattr(points, "theory_point", interrupted_after_first)
    assert main([*ARGV, "--out", str(part)]) == 130
    assert len((part / "metrics.jsonl").read_text().splitlines()) == 1
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    code = "import sys; from attnlab.cli import main; sys.exit(main(sys.argv[1:]))"
    done = subprocess.run(
        [sys.executable, "-c", code, *ARGV, "--out", str(part), "--resume"], env=env, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr[-2000:]
    a, b = _saved(full), _saved(part)
    assert sorted(a) == sorted(b)
    assert [k for k in a if a[k] != b[k]] == []
