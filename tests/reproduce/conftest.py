"""The reproduce tests run with one torch thread (tiny runs: more threads only add overhead); `specs` is the specs
folder beside the repository (`<repo>/../shared/specs`, as CI's clone and every worktree have it)."""

from pathlib import Path

import pytest

from attnlab.core.clitools import threads

SPECS = Path(__file__).resolve().parents[2].parent / "shared" / "specs"


@pytest.fixture(autouse=True)
def _one_thread():
    with threads(1):
        yield


@pytest.fixture(scope="session")
def specs() -> Path:
    """The specs folder; the test is skipped, saying where it looked, only if that folder is truly absent."""
    if not SPECS.is_dir():
        pytest.skip(f"no specs folder at {SPECS} (the repository's ../shared/specs)")
    return SPECS
