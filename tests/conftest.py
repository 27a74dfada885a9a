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
