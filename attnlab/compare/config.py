"""`attnlab compare` settings: the run folders to put side by side."""

from __future__ import annotations

import os
from dataclasses import dataclass

from attnlab.errors import check, folders


@dataclass(frozen=True)
class CompareConfig:
    """Runs of any commands (`run_dirs`, two or more folders) compared on one page titled `title`."""

    run_dirs: tuple[str, ...]
    title: str = "Run comparison"

    def __post_init__(self) -> None:
        object.__setattr__(self, "run_dirs", folders(self.run_dirs))
        check(len(self.run_dirs) >= 2, f"run_dirs: compare needs two or more run folders, got {len(self.run_dirs)}")
        seen: dict[str, str] = {}
        for d in self.run_dirs:
            check(d.strip() != "", "run_dirs: one is an empty path; name run folders")
        for d in self.run_dirs:  # the same folder by two spellings (a/../b, ./b, a link) is the same run
            key = os.path.realpath(d)
            check(key not in seen, f"run_dirs: a run folder is listed twice ({seen.get(key)} and {d})")
            seen[key] = d
