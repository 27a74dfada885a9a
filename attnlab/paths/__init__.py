"""Attention paths: kernel theory, order-parameter solver, posterior sampling and pruning (spec attention-paths).

Data flow: task -> fixed attention -> attentioned inputs xi^pi -> path Gram tensor -> theory (U) or sampler (U_hat)
-> predictor -> metrics, figures, pruning.
"""

from attnlab.paths.diagnostics import ess, ess_bulk, rhat, summarize
from attnlab.paths.errors import KernelConditionError, MemoryBudgetError, PathsConfigError
from attnlab.paths.kernels import PathGram, check_memory, cross_kernel, scaled_paths
from attnlab.paths.network import HeadSpec, PathConfig, PathNetwork
from attnlab.paths.predictor import Prediction, alignment, gp_U, metrics, predict
from attnlab.paths.pruning import head_scores
from attnlab.paths.sampling import CollapsedTarget, FullTarget, sample
from attnlab.paths.solver import SaddlePoint, solve
from attnlab.paths.theory import Problem, evaluate, scalar_reference

__all__ = ["CollapsedTarget", "FullTarget", "HeadSpec", "KernelConditionError", "MemoryBudgetError", "PathConfig",
           "PathGram", "PathNetwork", "PathsConfigError", "Prediction", "Problem", "SaddlePoint", "alignment",
           "check_memory", "cross_kernel", "ess", "ess_bulk", "evaluate", "gp_U", "head_scores", "metrics",
           "predict", "rhat", "sample", "scalar_reference", "scaled_paths", "solve", "summarize"]
