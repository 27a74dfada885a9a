"""`attnlab view` configuration: which run folder to serve, on which port of 127.0.0.1."""

from __future__ import annotations

from dataclasses import dataclass

from attnlab.errors import check, check_int


@dataclass(frozen=True)
class ViewConfig:
    """run_dir: a run folder with report.html; port: 0 picks a free port (the host is always 127.0.0.1)."""

    run_dir: str
    port: int = 8000

    def __post_init__(self) -> None:
        check(bool(self.run_dir), "view: name a run folder")
        check_int(self.port, 0, "--port", maximum=65535)
