"""Attention paths: kernel theory, order-parameter solver, posterior sampling and pruning (spec attention-paths).

Data flow: task -> fixed attention -> attentioned inputs xi^pi -> path Gram tensor -> theory (U) or sampler (U_hat)
-> predictor -> metrics, figures, pruning.

For notebooks: `attnlab.paths.solve(SolveConfig(...), out=...)` (and `sweep`, `sample`, `prune`) run a command
into a run folder and return a `RunResult` whose tables are pandas DataFrames. The computation modules
(`network`, `kernels`, `theory`, `solver`, `predictor`, `sampling`, `diagnostics`, `pruning`) are imported
lazily, like everything here.
"""

from __future__ import annotations

import importlib
from types import MappingProxyType
from typing import Any

_EXPORTS = MappingProxyType({
    "SolveConfig": "config", "SweepConfig": "config", "SampleConfig": "config", "PruneConfig": "config",
    "EnsembleConfig": "config",
    "solve": "run", "sweep": "run", "sample": "run", "prune": "run", "ensemble": "run", "RUNNERS": "run",
    "PathConfig": "network", "HeadSpec": "network", "PathNetwork": "network",
    "PathGram": "kernels", "check_memory": "kernels", "cross_kernel": "kernels", "scaled_paths": "kernels",
    "Problem": "theory", "evaluate": "theory", "scalar_reference": "theory",
    "SaddlePoint": "solver", "solve_saddle_point": "solver",
    "Prediction": "predictor", "alignment": "predictor", "gp_U": "predictor", "metrics": "predictor",
    "predict": "predictor",
    "CollapsedTarget": "sampling", "FullTarget": "sampling", "sample_chains": "sampling",
    "build_data": "data", "PathData": "data", "theory_point": "points", "sample_point": "points",
    "ess": "diagnostics", "ess_bulk": "diagnostics", "rhat": "diagnostics", "summarize": "diagnostics",
    "head_scores": "pruning",
})  # fmt: skip
# public names that differ from the module's own name
_RENAMED = MappingProxyType({"solve_saddle_point": "solve", "sample_chains": "sample"})

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module 'attnlab.paths' has no attribute {name!r}")
    module = importlib.import_module(f"attnlab.paths.{_EXPORTS[name]}")
    return getattr(module, _RENAMED.get(name, name))
