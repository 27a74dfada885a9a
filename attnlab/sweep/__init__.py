"""Sweeps of any command's configs on Ray: `attnlab.sweep.sweep(SweepConfig(spec=load_spec(path)), out=...)`.

`sweep` (the run function, with tqdm and the trial engine) is imported on first use, so the CLI's parser stays
cheap for every other command.
"""

from typing import Any

from attnlab.sweep.config import SweepConfig, SweepSpec, load_spec

__all__ = ["SweepConfig", "SweepSpec", "load_spec", "sweep"]


def __getattr__(name: str) -> Any:
    if name == "sweep":
        from attnlab.sweep.run import sweep

        return sweep
    raise AttributeError(f"module 'attnlab.sweep' has no attribute {name!r}")
