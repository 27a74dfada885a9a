"""Check that two run folders (e.g. `make demo` before and after a change) hold the same seeded results.

    python benchmarks/compare_runs.py OLD NEW [--map old_sub=new_sub ...] [--rtol 1e-5]

Compares every `.npy` array (exactly) and every metrics file (`*.jsonl`, `metrics*.json`, `*.csv`) value by value,
skipping fields that record time, the machine or paths (timings aside, as issue 8 asks). Prints one line per difference
and a summary; exits 1 if anything differs or a file is missing on the new side.
"""

from __future__ import annotations

import argparse
import csv
import json
import re
import sys
from pathlib import Path

import numpy as np

SKIP_KEY = re.compile(
    r"(time|seconds|elapsed|wall|duration|created|git_sha|platform|python|torch|numpy|"
    r"transformers|scipy|attnlab|per_s|_ms|_s$|folder|path|argv|checkpoint|resumed_from)",
    re.IGNORECASE,
)


def _clean(obj):
    if isinstance(obj, dict):
        return {k: _clean(v) for k, v in obj.items() if not SKIP_KEY.search(str(k))}
    if isinstance(obj, list):
        return [_clean(v) for v in obj]
    return obj


def _load(path: Path):
    if path.suffix == ".npy":
        return np.load(path, allow_pickle=False)
    if path.suffix == ".jsonl":
        return [_clean(json.loads(line)) for line in path.read_text().splitlines() if line.strip()]
    if path.suffix == ".csv":
        with open(path) as f:
            return [_clean(dict(r)) for r in csv.DictReader(f)]
    return _clean(json.loads(path.read_text()))


def result_files(root: Path) -> list[Path]:
    """The files compared: arrays and metric tables, not configs, manifests, figures or checkpoints."""
    keep = []
    for p in sorted(root.rglob("*")):
        if not p.is_file() or "checkpoints" in p.parts:
            continue
        if p.suffix in (".npy", ".jsonl", ".csv") or (
            p.suffix == ".json" and p.name not in ("config.json", "manifest.json", "state.json")
        ):
            keep.append(p.relative_to(root))
    return keep


def _number(x):
    """x as a float if it is one (CSV cells are strings), else None."""
    if isinstance(x, bool) or x is None:
        return None
    try:
        return float(x)
    except (TypeError, ValueError):
        return None


def close(a, b, rtol: float) -> bool:
    """Equal structure and strings, numbers within `rtol` relative (NaN matches NaN; rtol 0: bit for bit)."""
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        if not (isinstance(a, np.ndarray) and isinstance(b, np.ndarray) and a.shape == b.shape):
            return False
        if rtol == 0 or a.dtype.kind not in "fc":
            return a.dtype == b.dtype and a.tobytes() == b.tobytes()
        return bool(np.allclose(a, b, rtol=rtol, atol=0.0, equal_nan=True))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(close(a[k], b[k], rtol) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(close(x, y, rtol) for x, y in zip(a, b))
    x, y = _number(a), _number(b)
    if rtol and x is not None and y is not None:
        return (x != x and y != y) or abs(x - y) <= rtol * max(abs(x), abs(y))
    return a == b


def compare(old: Path, new: Path, mapping: dict[str, str], rtol: float = 0.0) -> list[str]:
    problems = []
    for rel in result_files(old):
        parts = list(rel.parts)
        parts[0] = mapping.get(parts[0], parts[0])
        parts = list(Path(mapping[str(rel)]).parts) if str(rel) in mapping else parts
        other = new.joinpath(*parts)
        if not other.exists():
            problems.append(f"missing: {rel} (looked for {Path(*parts)})")
        elif not close(_load(old / rel), _load(other), rtol):
            problems.append(f"differs: {rel}")
    return problems


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[1])
    ap.add_argument("old", type=Path)
    ap.add_argument("new", type=Path)
    ap.add_argument(
        "--map",
        action="append",
        default=[],
        help="old=new: a top-level folder renamed, or a file (relative path) moved",
    )
    ap.add_argument("--rtol", type=float, default=0.0, help="relative tolerance for numbers (default 0: exact)")
    args = ap.parse_args()
    mapping = dict(m.split("=", 1) for m in args.map)
    problems = compare(args.old, args.new, mapping, args.rtol)
    for p in problems:
        print(p)
    n = len(result_files(args.old))
    within = f"within rtol {args.rtol:g}" if args.rtol else "identical"
    print(f"{n - len(problems)} of {n} result files {within}")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
