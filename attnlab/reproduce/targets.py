"""The registry: every study's reproduction targets, collected in the order of the report (bb, real, consensus,
paths). Each study owns its rows, runs, measures, verdicts and checks in `attnlab/<study>/repro/` (the real-models
study's in `attnlab/real/repro/`); the vocabulary is `attnlab.core.targets`. A target without a measure is
"not run" with its reason (`not_run`).
"""

from __future__ import annotations

from attnlab.bb.repro.targets import TARGETS as BB
from attnlab.consensus.repro.targets import TARGETS as CONSENSUS
from attnlab.core.targets import CLAIMS_NOTE, Recorded, Target  # noqa: F401 - re-exported for the tests and tools
from attnlab.paths.repro.targets import TARGETS as PATHS
from attnlab.real.repro.targets import TARGETS as REAL

TARGETS: tuple[Target, ...] = (*BB, *REAL, *CONSENSUS, *PATHS)
