"""Attention paths: kernel theory, order-parameter solver, posterior sampling and pruning (spec attention-paths).

Data flow: task -> fixed attention -> attentioned inputs xi^pi -> path Gram tensor -> theory (U) or sampler (U_hat)
-> predictor -> metrics, figures, pruning.

For notebooks: `attnlab.paths.solve(SolveConfig(...), out=...)` (and `sweep`, `sample`, `prune`) run a command
into a run folder and return a `RunResult` whose tables are pandas DataFrames. The room's contract files
(config, run, figures, report, cli, demo) sit here and its reproduction in `repro/`; the computation lives in five
sub-rooms, imported lazily like everything here:
- `networks/`: the attention network and its paths, the path kernels and Gram tensor;
- `tasks/`: the Markov and digit tasks and the task -> paths -> Gram data (`tasks.data`);
- `theory/`: the action, the saddle-point solver, the predictor, scalar renormalisation, theory points and sweeps;
- `sampling/`: the posterior sampler and its diagnostics, sampled points, multiple outputs, the adjudication and
  gradient-descent ensembles;
- `pruning/`: the gradient-descent network and its training, head scores and the pruning experiments, and the
  trained network's attention plugged into the theory (S10).
Sub-rooms import downward only: networks <- tasks <- theory <- sampling, pruning.
"""

from __future__ import annotations

import importlib
from types import MappingProxyType
from typing import Any

_EXPORTS = MappingProxyType({
    "SolveConfig": "config", "SweepConfig": "config", "SampleConfig": "config", "PruneConfig": "config",
    "EnsembleConfig": "config",
    "solve": "run", "sweep": "run", "sample": "run", "prune": "run", "ensemble": "run", "RUNNERS": "run",
    "PathConfig": "networks.architecture", "HeadSpec": "networks.architecture", "PathNetwork": "networks.architecture",
    "PathGram": "networks.kernels", "check_memory": "networks.kernels", "cross_kernel": "networks.kernels",
    "scaled_paths": "networks.kernels",
    "Problem": "theory.action", "evaluate": "theory.action", "scalar_reference": "theory.action",
    "SaddlePoint": "theory.solver", "solve_saddle_point": "theory.solver",
    "Prediction": "theory.predictor", "alignment": "theory.predictor", "gp_U": "theory.predictor",
    "metrics": "theory.predictor", "predict": "theory.predictor",
    "CollapsedTarget": "sampling.sampler", "FullTarget": "sampling.sampler", "sample_chains": "sampling.sampler",
    "build_data": "tasks.data", "PathData": "tasks.data", "theory_point": "theory.points",
    "sample_point": "sampling.posterior",
    "ess": "sampling.diagnostics", "ess_bulk": "sampling.diagnostics", "rhat": "sampling.diagnostics",
    "summarize": "sampling.diagnostics",
    "head_scores": "pruning.pipeline",
})  # fmt: skip

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module 'attnlab.paths' has no attribute {name!r}")
    module = importlib.import_module(f"attnlab.paths.{_EXPORTS[name]}")
    return getattr(module, name)
