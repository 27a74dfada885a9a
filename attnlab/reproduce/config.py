"""`attnlab reproduce` settings: which studies, at which profile (sizes of the study runs behind the targets)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

from attnlab.core.device import check_device
from attnlab.core.registry import studies
from attnlab.errors import check, check_choice, check_int, names

STUDIES = studies()  # the spec studies of the one table in attnlab.core.registry
PROFILES = ("tiny", "quick", "full")


@dataclass(frozen=True)
class ReproduceConfig:
    """Run the pre-registered targets of `studies` at `profile`.

    profile: "tiny" (about a minute: the machinery only, numbers far from the papers' scale), "quick" (about 15
    minutes on 2 free cores: the CI/slow-tier scale) or "full" (the paper-scale settings: hours). `docs`: a folder
    that also gets reproduction.md and the figures (the committed docs/). `workers` / `address`: run the study runs
    as Ray tasks on a local instance of that many CPUs / on a cluster.
    """

    # the fields a --resume may change: where results go and where runs run, not what they compute
    PLACEMENT: ClassVar[tuple[str, ...]] = ("docs", "workers", "address")

    studies: tuple[str, ...] = STUDIES
    profile: str = "quick"
    seed: int = 0
    # independent replicates of the experiments behind the claim rows (issue 39): seeds seed, seed + 1, ...,
    # seed + seeds - 1; seed `seed` runs into runs/<name>, each other seed s into seeds/<s>/runs/<name>. Checks and
    # timings keep one seed. A rerun of one seed s is `attnlab reproduce ... --seed s` (its runs/<name>).
    seeds: int = field(default=1, metadata={"omit_if_default": True})
    device: str = field(default="cpu", metadata={"omit_if_default": True})  # issue 22 (absent: cpu)
    # only these target ids of the chosen studies (empty: all), e.g. the long targets run on a GPU machine
    targets: tuple[str, ...] = field(default=(), metadata={"omit_if_default": True})
    # also write docs/reproduction.md and the rows' figures under docs/figures/<study>/ (None: only the run folder)
    docs: str | None = field(default=None, metadata={"omit_if_default": True})
    # where the study runs run (not what they compute): 1 = in this process; more, or a Ray cluster's address:
    # as Ray tasks (attnlab.core.parallel); the table is the same either way
    workers: int = field(default=1, metadata={"omit_if_default": True})
    address: str | None = field(default=None, metadata={"omit_if_default": True})

    def __post_init__(self) -> None:
        check_device(self.device)
        object.__setattr__(self, "targets", tuple(str(t) for t in self.targets))
        check(all(t.strip() for t in self.targets), f"targets: {list(self.targets)} has an empty id")
        object.__setattr__(self, "studies", names(self.studies, "studies") or STUDIES)
        for s in self.studies:
            check_choice(s, STUDIES, "study")
        check(len(set(self.studies)) == len(self.studies), f"studies: {list(self.studies)} repeats a study")
        check_choice(self.profile, PROFILES, "profile")
        check_int(self.seed, 0, "seed")
        check_int(self.seeds, 1, "seeds", 100)
        check_int(self.workers, 1, "workers")
        check(self.docs is None or str(self.docs).strip() != "", "docs: give a folder path (or leave it out)")
        check(self.address is None or str(self.address).strip() != "", "address: give host:port (or leave it out)")
