"""The study runs behind the consensus targets, sized by profile: experiment name -> its (command, config) runs
(`attnlab.core.experiments`), merged with the other studies' tables by `attnlab.reproduce.experiments`.

TINY / QUICK / FULL: each experiment's size settings at that profile (absent: not run at that profile; full: the
spec's and docs/consensus.md's scales). GPU: the experiments whose runs compute on a GPU when reproduce is given
one; MINUTES: rough single-thread minutes of the long full-profile ones (Ray runs the longest first)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from attnlab.consensus.names import SCHEDULES
from attnlab.consensus.repro import checks_llama, checks_theory
from attnlab.consensus.repro.checks_theory import B2_THREADS
from attnlab.core.experiments import Experiment, Run, one

TINY: dict[str, dict] = {
    "cons_causal": dict(batch=4, t_max=6.0, schedules=("constant",), dims=(3,)),
    "cons_tails": dict(batch=1),
    "cons_late": dict(batch=4),
    "cons_full": dict(batch=8, t_max=10.0, n=16),
    "cons_cluster": dict(batch=8, t_max=10.0),
    "cons_rho": {},
    "cons_phase": dict(d=16, starts=8, num_betas=4, t_max=10.0),
    "cons_counter": dict(batch=4, t_max=30.0),
    # issue 18, consensus R4c, R5b, R6b, R8, C-llama (wt-rcons): a few seconds each at tiny
    "cons_lag": dict(masks=("full",), omegas=(0.005, 0.04), starts=2),
    "cons_rho_sim": dict(starts=1),
    "cons_llama_units": {},
}
QUICK: dict[str, dict] = {
    # R1b's CI size (64 starts at d = 3 and 16), two of the schedules
    "cons_causal": dict(batch=64, t_max=60.0, schedules=("constant", "random"), dims=(3, 16)),
    "cons_tails": dict(batch=2),
    "cons_late": dict(batch=64),
    "cons_full": dict(batch=64, t_max=100.0, n=32),
    "cons_cluster": dict(batch=64, t_max=30.0),
    "cons_rho": {},
    "cons_phase": dict(d=128, starts=16, num_betas=10, t_max=30.0),
    # issue 14 (the authors' claims); R12 takes seconds, R13 about a minute, R14 a few minutes
    "cons_counter": dict(batch=16, t_max=30.0),
    "cons_norm": dict(passes=10, prompts=4),
    "cons_decode": dict(passes=10, prompts=2),
    # issue 18: rows that were benchmarks or not wired in (B1 about 15 s, B2 about 90 s)
    "cons_bench": dict(baseline_starts=1, baseline_steps=10),
    "cons_units": {},  # R2a, R4a, R4b, C-norm: about 40 s
    "cons_b2": dict(threads=B2_THREADS),  # issue 39: timed on two threads, the machine's load recorded
    # issue 18, consensus R4c, R5b, R6b, R8, C-llama (wt-rcons): the spec's sizes, 10-20 s each on one thread
    "cons_lag": dict(masks=("full", "causal"), omegas=(0.005, 0.01, 0.02, 0.04), starts=8),
    "cons_rho_sim": dict(starts=8),
    "cons_sweep_integrator": dict(starts=256),
    "cons_llama_stack": dict(passes=50),
    "cons_llama_units": {},
}
FULL: dict[str, dict] = {
    **QUICK,
    # R1b's slow run (issue 39): 256 starts at d = 3, 16, 64, every schedule of schedules.py
    "cons_causal": dict(batch=256, t_max=60.0, schedules=SCHEDULES, dims=(3, 16, 64)),
    "cons_full": dict(batch=256, t_max=100.0, n=32),
    "cons_phase": dict(d=128, starts=64, num_betas=46, t_max=30.0),
    # issue 14: the scales of docs/consensus.md
    "cons_decode": dict(passes=30, prompts=3),
    # issue 18: the pre-registered SmolLM2 protocols (R9, R10: 100 passes; R11: 30 passes with the depth view)
    "cons_rst": dict(passes=100, prompts=3),
    "cons_depth": dict(passes=30, prompts=3),
    # issue 18, consensus B3 (wt-rcons): B2's sweep at d = 128, about 11 minutes on one thread
    "cons_b3": dict(d=128),
}


def _causal(seed: int, size: dict, root: Path) -> list[Run]:
    """R1a/R1b: causal, V = I, n = 10, Gaussian P at scale 1 and 4, each schedule and dimension d of the profile
    (folder `<schedule>-scale<s>` at d = 3, `<schedule>-scale<s>-d<d>` otherwise)."""
    return [Run(f"{schedule}-scale{scale:g}" + (f"-d{d}" if d != 3 else ""), "consensus simulate",
                dict(n=10, d=d, batch=size["batch"], mask="causal", schedule=schedule, scale=scale,
                     t_max=size["t_max"], record_every=10, seed=seed))
            for d in size.get("dims", (3,)) for schedule in size["schedules"] for scale in (1.0, 4.0)]  # fmt: skip


def _full(seed: int, size: dict, root: Path) -> list[Run]:
    """R3: full attention, V = I, d = 3, n = 32, constant and random P, to t = 100."""
    return [Run(schedule, "consensus simulate", dict(n=size["n"], d=3, batch=size["batch"], schedule=schedule,
                                                     t_max=size["t_max"], record_every=100_000, seed=seed))
            for schedule in ("constant", "random")]  # fmt: skip


def _cluster(seed: int, size: dict, root: Path) -> list[Run]:
    """R7a (beta 0.5 and 1 to t = 30) and R7b (beta 4 and 9 to t = 200, states every t = 10); Q = K = V = I."""
    return [Run(f"beta{beta:g}", "consensus simulate",
                dict(n=32, d=3, batch=size["batch"], beta=beta, key_query="identity", t_max=t_max,
                     integrator="euler", record_every=100, seed=seed))
            for beta, t_max in ((0.5, size["t_max"]), (1.0, size["t_max"]), (4.0, 200.0), (9.0, 200.0))]  # fmt: skip


def _counter(seed: int, size: dict, root: Path) -> list[Run]:
    """R12: Q = K = 0 with V = I and with a rotating V = J (n = 16, d = 4; `verdicts.run_R12`'s runs)."""
    return [Run(value, "consensus simulate", dict(n=16, d=4, batch=size["batch"], key_query="zero", value=value,
                                                  t_max=size["t_max"], seed=seed))
            for value in ("identity", "rotation")]  # fmt: skip


def _counter_figure(folder: Path) -> Any:
    from attnlab.consensus.figures import figure_R12

    return figure_R12(folder)


# issue 18, consensus R6b (wt-rcons)
def _sweep_integrators(seed: int, size: dict, root: Path) -> list[Run]:
    """R6b: `consensus phase` at d = 8, n = 32, beta in {1, 3, 5}, t <= 30, h = 0.1 with projected Euler (the sweep's
    default) and with RK4 (`--integrator rk4`), from the same starts."""
    return [Run(m, "consensus phase", dict(d=8, beta_min=1.0, beta_max=5.0, num_betas=3, integrator=m,
                                           starts=size["starts"], seed=seed))
            for m in ("euler", "rk4")]  # fmt: skip


EXPERIMENTS: dict[str, Experiment] = {
    "cons_causal": Experiment(runs=_causal),
    "cons_full": Experiment(runs=_full),
    "cons_cluster": Experiment(runs=_cluster),
    "cons_tails": Experiment(compute=checks_theory.cons_tails),
    "cons_late": Experiment(compute=checks_theory.cons_late),
    "cons_rho": Experiment(compute=checks_theory.cons_rho),
    "cons_phase": one(
        "consensus phase", lambda seed, size, root: {"n": 32, "beta_min": 0.5, "beta_max": 5.0, **size, "seed": seed}
    ),
    "cons_counter": Experiment(runs=_counter, figure=_counter_figure),
    "cons_norm": one("consensus norm", lambda seed, size, root: {**size, "seed": seed}),
    "cons_decode": one(
        "consensus model", lambda seed, size, root: {**size, "mlp": [True, False], "depth_view": False, "seed": seed}
    ),
    "cons_bench": Experiment(compute=checks_theory.cons_bench),
    "cons_units": Experiment(compute=checks_theory.cons_units),
    "cons_b2": Experiment(compute=checks_theory.cons_b2),  # B2's sweep on two threads, the load at its start
    "cons_rst": one(
        "consensus model",
        lambda seed, size, root: {
            **size,
            "schedules": ["constant", "periodic", "random"],
            "mlp": [True, False],
            "depth_view": False,
            "seed": seed,
        },
    ),
    "cons_depth": one(
        "consensus model",
        lambda seed, size, root: {**size, "schedules": ["periodic"], "mlp": [True], "depth_view": True, "seed": seed},
    ),
    # issue 18, consensus R4c, R5b, R6b, R8, C-llama, B3 (wt-rcons)
    "cons_lag": Experiment(compute=checks_theory.cons_lag),
    "cons_rho_sim": Experiment(compute=checks_theory.cons_rho_sim),
    "cons_sweep_integrator": Experiment(runs=_sweep_integrators),
    "cons_llama_stack": Experiment(compute=checks_llama.cons_llama_stack),
    "cons_llama_units": Experiment(compute=checks_llama.cons_llama_units),
    "cons_b3": one("consensus phase", lambda seed, size, root: {**size, "seed": seed}),  # B2's defaults at d = 128
}
GPU = ("cons_phase",)
NEEDS: dict[str, str] = {}
PAPER_SCALE: dict[str, str] = {}
MINUTES = {"cons_rst": 60, "cons_phase": 20, "cons_b2": 10, "cons_decode": 8, "cons_depth": 8, "cons_b3": 11}
LAST: tuple[str, ...] = ("cons_b2",)
RESAMPLED = ("cons_rst",)
"""Experiments that hold their own replicates, so `--seeds` does not run them again: R9 and R10 cycle the fixed
SmolLM2 on 9 prompts and are judged by the bootstrap over those prompts (issue 39: a fixed model resamples what
varies)."""
"""Run alone after every other experiment and the seeds' replicates: B2 times itself on two threads on a quiet
machine (issue 39)."""
