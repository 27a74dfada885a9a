"""Suite-wide fixtures."""

import pytest
import torch


@pytest.fixture(autouse=True)
def _restore_torch_threads():
    """Commands may set torch's thread count (several default to 1); give every test the count it started with."""
    threads = torch.get_num_threads()
    yield
    torch.set_num_threads(threads)


def pytest_configure(config: pytest.Config) -> None:
    """Under pytest-xdist (`make test` runs two workers on CI's two cores) each worker computes on one thread;
    `ATTNLAB_TEST_THREADS` (set by `make test-numerics`, tests/numerics_matrix.py) gives the count explicitly."""
    import os

    threads = os.environ.get("ATTNLAB_TEST_THREADS")
    if threads:
        torch.set_num_threads(int(threads))
    elif os.environ.get("PYTEST_XDIST_WORKER"):
        torch.set_num_threads(1)


# The slowest test files, slowest first: seconds of one worker (setup + call + teardown, `pytest -n 2 --dist loadfile
# --durations=0` on a 2-core AMD EPYC, 2026-12-07; 1,040 worker-seconds in all over 125 files). Under `make test`
# (`--dist loadfile`) a free worker takes the next file in collection order; left where they fall, the long files
# ran last and one core sat idle for minutes (a fresh clone's suite took 10 min 52 s; 9 min 39 s with this order,
# 9 min 10 s warm, against the 8 min 40 s of the total split evenly). Starting the longest first is the classic
# longest-processing-time rule; every other file keeps its place.
SLOW_FILES = (
    "tests/sweep/test_ray.py",  # 75 s
    "tests/bb/test_phenomena_slow.py",  # 70 s
    "tests/bb/test_phenomena_relu_slow.py",  # 65 s
    "tests/core/test_gpu_check.py",  # 53 s
    "tests/reproduce/test_resume.py",  # 51 s
    "tests/core/test_readme.py",  # 40 s
    "tests/reproduce/test_reproduce.py",  # 36 s
    "tests/bb/test_run_layer.py",  # 30 s
    "tests/sweep/test_probes_sweep.py",  # 30 s
    "tests/bb/test_training.py",  # 28 s
    "tests/reports/test_viewer.py",  # 28 s
    "tests/reports/test_pages.py",  # 25 s
    "tests/core/test_training_layer.py",  # 25 s
    "tests/core/test_codebase.py",  # 24 s
    "tests/real/test_series.py",  # 22 s
)


def pytest_collection_modifyitems(session: pytest.Session, config: pytest.Config, items: list) -> None:
    """Run the files of `SLOW_FILES` first, in its order; the sort is stable, so the rest keep theirs."""
    rank = {path: i for i, path in enumerate(SLOW_FILES)}
    items.sort(key=lambda item: rank.get(item.nodeid.split("::")[0], len(rank)))
