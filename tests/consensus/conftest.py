"""The consensus tests run with one torch thread (tiny tensors: more threads only add overhead)."""

import pytest

from attnlab.core.clitools import threads


@pytest.fixture(autouse=True)
def _one_thread():
    with threads(1):
        yield
