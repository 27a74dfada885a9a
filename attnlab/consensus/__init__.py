"""Study 4 (consensus): token dynamics of attention on the sphere, in theory and in SmolLM2.

For notebooks: the configs `SimulateConfig`, `PhaseConfig`, `ModelConfig` and the run functions `simulate`,
`phase`, `model` (each `fn(config, out=None) -> RunResult` with pandas tables), e.g.

    from attnlab.consensus import SimulateConfig, simulate
    result = simulate(SimulateConfig(n=8, d=3, batch=4, t_max=2.0), out="runs/sim")
    result.tables["timeseries"]

The room: `config.py`, `run.py`, `figures.py`, `report.py`, `cli.py`, `demo.py`. The computation: `dynamics`
(attention drive and tangent field), `schedules` (time-varying weights), `integrators` (projected RK4, Euler,
exponential-map Euler, post-/pre-norm maps), `measures` (spec section 6), `theory` (equiangular rho-ODE, tail
rates), `sweeps` (phase diagram), `realmodel` and `modelrun` (iterating a Llama decoder stack), `stats`.
Imports are lazy: `import attnlab.consensus` does not load torch.
"""

from __future__ import annotations

from typing import Any

_CONFIGS = ("SimulateConfig", "PhaseConfig", "ModelConfig", "NormConfig")
_RUNS = ("simulate", "phase", "model", "norm")
__all__ = [*_CONFIGS, *_RUNS]


def __getattr__(name: str) -> Any:
    if name in _CONFIGS:
        from attnlab.consensus import config

        return getattr(config, name)
    if name in _RUNS:
        from attnlab.consensus import run

        return getattr(run, name)
    raise AttributeError(f"module 'attnlab.consensus' has no attribute {name!r}")
