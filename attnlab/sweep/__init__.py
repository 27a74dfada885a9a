"""Sweeps of any command's configs on Ray: `attnlab.sweep.sweep(SweepConfig(spec=load_spec(path)), out=...)`."""

from attnlab.sweep.config import SweepConfig, SweepSpec, load_spec
from attnlab.sweep.run import sweep

__all__ = ["SweepConfig", "SweepSpec", "load_spec", "sweep"]
