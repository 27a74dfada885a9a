"""Every Ray instance a sweep test starts stays on 127.0.0.1 (Ray's single-machine mode) and is shut down."""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(autouse=True)
def _loopback_ray(monkeypatch):
    monkeypatch.setenv("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    yield
    if "ray" in __import__("sys").modules:
        import ray

        if ray.is_initialized():
            ray.shutdown()


def load_compare():
    """benchmarks/compare_runs.py as a module (the same check `make demo`'s identity script uses)."""
    spec = importlib.util.spec_from_file_location("compare_runs", ROOT / "benchmarks" / "compare_runs.py")
    module = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    spec.loader.exec_module(module)  # type: ignore[union-attr]
    return module


def subprocess_env() -> dict[str, str]:
    env = dict(os.environ, RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER="0", PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1")
    env.pop("RAY_ADDRESS", None)
    return env
