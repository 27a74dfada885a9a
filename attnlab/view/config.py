"""`attnlab view` configuration: which run folder to serve, on which port of 127.0.0.1."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from attnlab.errors import InputError, check, check_int


@dataclass(frozen=True)
class ViewConfig:
    """run_dir: a run folder with report.html; port: 0 picks a free port (the host is always 127.0.0.1)."""

    run_dir: str
    port: int = 8000

    def __post_init__(self) -> None:
        check(str(self.run_dir).strip() != "", "run_dir is an empty path; name a run folder with report.html")
        check_int(self.port, 0, "--port", maximum=65535)
        check_run_folder(Path(self.run_dir))


def check_run_folder(path: Path) -> None:
    """Refuse, in one line and before the server (or torch) starts, a folder with no report.html or a corrupt
    manifest.json (which says which command wrote the run)."""
    from attnlab.runs import read_json, recover_replaced

    recover_replaced(path)
    if not path.is_dir():
        raise InputError(f"{path} is not a folder; give a run folder written by an attnlab command")
    if not (path / "report.html").is_file():
        raise InputError(f"{path} has no report.html; give a run folder written by an attnlab command")
    if (path / "manifest.json").exists():
        read_json(path / "manifest.json", "run manifest")
