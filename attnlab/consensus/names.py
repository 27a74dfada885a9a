"""The consensus study's choice names, in a module without torch: configs validate them before any heavy import."""

from __future__ import annotations

KINDS = ("SA", "USA")  # attention kinds (dynamics.py)
MASKS = ("full", "causal")
METHODS = ("rk4", "euler", "exp_euler", "postnorm", "prenorm")  # integrators (integrators.py)
VARIANTS = ("constant", "periodic", "random")  # real-model layer schedules (realmodel.py)
SCHEDULES = ("constant", "periodic", "cycle", "random")  # parameter schedules (schedules.py)
ENSEMBLES = ("identity", "gaussian", "goe", "zero")
