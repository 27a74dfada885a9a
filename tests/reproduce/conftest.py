"""The reproduce tests run with one torch thread (tiny runs: more threads only add overhead)."""

import pytest

from attnlab.clitools import threads


@pytest.fixture(autouse=True)
def _one_thread():
    with threads(1):
        yield
