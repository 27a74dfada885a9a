"""The bad-input probe harness (issue 17): a probe is an argv that must be refused in one line.

`refused(argv, root, capsys)` runs `attnlab.cli.main(argv)` in this process with an earlier file under `root`, and
asserts what every refusal must satisfy:
- a non-zero exit code;
- exactly one stderr line, starting `attnlab: error: `, and no traceback;
- every file under `root` unchanged (bytes and mtime), and no new file or folder under `root`;
- well under 10 s (`seconds`): refusals come before model loading and before training.
It returns the message so a probe can also check what the line names. `{root}` in an argv item is replaced by
`root`, so probe tables can be written as plain lists.
"""

from __future__ import annotations

import time
from pathlib import Path

from attnlab.cli import main

PREFIX = "attnlab: error: "


def snapshot(root: Path) -> dict[str, tuple[bytes, int] | None]:
    """Every path under `root`: files as (bytes, mtime_ns), folders as None."""
    out: dict[str, tuple[bytes, int] | None] = {}
    for p in sorted(root.rglob("*")):
        key = str(p.relative_to(root))
        out[key] = (p.read_bytes(), p.stat().st_mtime_ns) if p.is_file() and not p.is_symlink() else None
    return out


def refused(argv: list[str], root: Path, capsys, *, seconds: float = 10.0, exit_codes: tuple = (1, 2)) -> str:
    """Run `argv` and assert a clean one-line refusal that changed nothing under `root`; returns the message."""
    argv = [a.replace("{root}", str(root)) for a in argv]
    (root / "earlier.txt").write_text("keep me\n")
    before = snapshot(root)
    capsys.readouterr()
    t0 = time.perf_counter()
    rc = main(argv)
    elapsed = time.perf_counter() - t0
    captured = capsys.readouterr()
    err = [line for line in captured.err.strip().splitlines() if line.strip()]
    assert rc in exit_codes, (rc, captured.err)
    assert len(err) == 1 and err[0].startswith(PREFIX), err
    assert "Traceback" not in captured.err + captured.out
    after = snapshot(root)
    assert after == before, sorted(set(after) ^ set(before)) or "a file changed"
    assert elapsed < seconds, f"refused after {elapsed:.1f} s"
    return err[0][len(PREFIX) :]
