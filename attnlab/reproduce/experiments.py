"""The study runs behind the targets as one table: each study's `attnlab/<study>/repro/runs.py` merged (experiment
name -> its (command, config) runs, sized by profile), for `execute.py` and `run.py`.

Each experiment is a list of `Run(sub, command, config)`: a study command (as typed after `attnlab`) and its
config fields, run through `attnlab.core.registry.resolve` into runs/<experiment>/<sub> (`execute.py`), so `attnlab
rerun` can redo any of them. A few experiments are direct computations of library functions (the studies'
`repro/checks*.py`). Experiments that a profile does not run are absent from `SIZES[profile]`. The vocabulary
(`Run`, `Experiment`) is `attnlab.core.experiments`.
"""

from __future__ import annotations

from types import ModuleType

from attnlab.bb.repro import runs as bb
from attnlab.consensus.repro import runs as consensus
from attnlab.core.experiments import Experiment, Run  # noqa: F401 - re-exported for execute.py and the tests
from attnlab.paths.repro import runs as paths
from attnlab.real.repro import runs as real

STUDY_RUNS: tuple[ModuleType, ...] = (bb, real, consensus, paths)  # in the order of the report


def _merged(name: str) -> dict:
    """The studies' tables `name` as one dict (an experiment belongs to one study only)."""
    out: dict = {}
    for study in STUDY_RUNS:
        table = getattr(study, name)
        twice = set(out) & set(table)
        if twice:
            raise ValueError(f"experiments {sorted(twice)} are in two studies' {name}")
        out |= table
    return out


# The order the experiments run in when they run in one process (before issue 38 split the table by study);
# an experiment not listed runs after these, in the order of STUDY_RUNS.
RUN_ORDER = (
    "bb_sample", "bb_smoke", "bb_softmax", "bb_intervene", "bb_relu", "bb_theory", "bb_adam3", "bb_sgd3",
    "bb_ablate3", "bb_paper", "real_scan", "real_probe", "real_quant", "real_window", "series_scan", "cons_causal",
    "cons_full", "cons_cluster", "cons_tails", "cons_late", "cons_rho", "cons_phase", "paths_ua", "paths_units",
    "paths_sampling_units", "paths_solve", "paths_sweep", "paths_sample", "paths_sample_full", "paths_prune",
    "bb_variants", "bb_stability", "cons_counter", "cons_norm", "cons_decode", "paths_renorm", "paths_layers",
    "paths_ensemble", "paths_outputs", "paths_smoke", "paths_plugin", "cons_bench", "cons_units",
    "cons_b2", "cons_rst", "cons_depth", "real_ablate", "paths_2path", "bb_units", "real_units", "bb_paper_relu",
    "bb_paper_adam3", "bb_paper_sgd3", "bb_paper_relu3", "paths_more_units", "paths_samplers", "paths_b2",
    "paths_adjudication_C1", "paths_adjudication_C2", "paths_adjudication_C3", "paths_adjudication_gate",
    "cons_lag", "cons_rho_sim", "cons_sweep_integrator", "cons_llama_stack", "cons_llama_units", "cons_b3",
)  # fmt: skip
_EXPERIMENTS: dict[str, Experiment] = _merged("EXPERIMENTS")
EXPERIMENTS: dict[str, Experiment] = {n: _EXPERIMENTS[n] for n in (*RUN_ORDER, *_EXPERIMENTS) if n in _EXPERIMENTS}
# profile -> experiment -> its size settings (absent: not run at that profile). full: the paper-scale settings.
TINY_SIZES: dict[str, dict] = _merged("TINY")
QUICK_SIZES: dict[str, dict] = _merged("QUICK")
FULL_SIZES: dict[str, dict] = _merged("FULL")
SIZES = {"tiny": TINY_SIZES, "quick": QUICK_SIZES, "full": FULL_SIZES}
GPU: tuple[str, ...] = tuple(n for study in STUDY_RUNS for n in study.GPU)
"""Experiments whose study runs compute on the device reproduce is given (`sized`)."""
NEEDS: dict[str, str] = _merged("NEEDS")  # experiments that need another first
PAPER_SCALE: dict[str, str] = _merged("PAPER_SCALE")
"""Experiments the full profile runs only on a GPU (`--device cuda`); on the cpu their rows are not run, with the
command that runs them."""
MINUTES: dict[str, int] = _merged("MINUTES")
"""Rough single-thread minutes of the long full-profile experiments on this project's 2-core machine: Ray runs
the longest first, so two workers finish close together."""
RESAMPLED: tuple[str, ...] = tuple(n for study in STUDY_RUNS for n in study.RESAMPLED)
"""Experiments that hold their own replicates (a sweep's seeds, a bootstrap over windows or prompts of a fixed
model): `--seeds` does not run them again."""
LAST: tuple[str, ...] = tuple(n for study in STUDY_RUNS for n in study.LAST)
"""Run alone, one at a time in the reproduce process, after every other experiment and after the seeds'
replicates: the experiments that time themselves on two threads (B2, B4) and the hours of paths' §10 protocol, so a
full profile that spans sessions (`--resume`) has every other row first."""


def runs_at(profile: str, device: str) -> dict[str, dict]:
    """The experiments `profile` runs on `device` (name -> size settings): the paper-scale ones only on a GPU."""
    return {n: s for n, s in SIZES[profile].items() if device != "cpu" or n not in PAPER_SCALE}


def longest_first(names: list[str]) -> list[str]:
    """`names` ordered by `MINUTES` (longest first; the rest keep their order after them), the `LAST` ones last."""
    return sorted(names, key=lambda n: (n in LAST, -MINUTES.get(n, 0)))


def sized(name: str, profile: str, device: str) -> dict:
    """The size settings of experiment `name` at `profile`, with `device` for the runs that compute on a GPU."""
    size = SIZES[profile][name]
    return {**size, "device": device} if device != "cpu" and name in GPU else size
