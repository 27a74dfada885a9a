"""The study runs behind the real-models targets, sized by profile: experiment name -> its (command, config) runs
(`attnlab.core.experiments`), merged with the other studies' tables by `attnlab.reproduce.experiments`.

TINY / QUICK / FULL: each experiment's size settings at that profile (absent: not run at that profile; full: the
scales of docs/real-models.md). NEEDS: experiments that need another first; MINUTES: rough single-thread minutes
of the long full-profile ones (Ray runs the longest first). The real models need the cached SmolLM2, so the tiny
profile runs none of them."""

from __future__ import annotations

from pathlib import Path

from attnlab.core.experiments import Experiment, later, one
from attnlab.real.repro import checks_models

TINY: dict[str, dict] = {}
QUICK: dict[str, dict] = {
    "real_scan": dict(samples=8, tokens=128),
    "real_probe": {},
    "real_quant": dict(samples=2, tokens=256, sites=("linear",)),  # R23, about a minute each
    "real_window": dict(samples=2, tokens=512, windows=(128,)),
    # issue 18: the ablation (about a minute)
    "real_ablate": dict(samples=8, tokens=128, sweep_layers=(19, 29)),  # the windows of real_scan
    # issue 18, real R15 (wt-rbb): a direct computation on tiny random models (about 8 s, most of it transformers'
    # first model build)
    "real_units": {},
    # issue 41, R26 / R27: a full-statistics scan, 16 windows of 512 tokens per domain (the minimum)
    "real_sinks": dict(samples=16, tokens=512),
}
FULL: dict[str, dict] = {
    **QUICK,
    "real_quant": dict(samples=8, tokens=512, sites=("linear", "residual")),  # docs/real-models.md, R23
    "real_window": dict(samples=8, tokens=1024, windows=(256,)),
    # R27's intervals at 16 windows per domain (27 windows with sinks) would need ~140-190 windows with sinks to
    # decide (docs/real-models.md, secondary sinks): 96 per domain, ~8 single-thread CPU minutes
    "real_sinks": dict(samples=96, tokens=512),
}


def _scan(seed: int, size: dict) -> dict:
    """A scan of both domains at the profile's size (`samples` windows of `tokens` tokens each)."""
    return {"domains": ["prose", "code"], "samples": size["samples"], "tokens": size["tokens"], "seed": seed}


def _ablate(seed: int, size: dict, root: Path) -> dict:
    """The seed claim on dormant heads: every head of `sweep_layers` zeroed in turn on real_scan's windows, its
    sink scores reused (`attnlab ablate --sweep-layer L --sink-from <real_scan>`)."""
    return {**_scan(seed, size), "sweep_layers": list(size["sweep_layers"]), "sink_from": str(root / "real_scan")}


EXPERIMENTS: dict[str, Experiment] = {
    "real_scan": one("scan", lambda seed, size, root: _scan(seed, size)),
    "real_probe": Experiment(compute=checks_models.real_probe),
    "real_quant": one("deploy quantize", lambda seed, size, root: {**size, "seed": seed}),
    "real_window": one("deploy window", lambda seed, size, root: {**size, "seed": seed}),
    "real_ablate": later("ablate", _ablate),
    "real_units": Experiment(compute=checks_models.real_units),
    "real_sinks": one(
        "scan", lambda seed, size, root: {**_scan(seed, size), "stats": "full", "n_auto_pattern_heads": 0}
    ),
}
GPU: tuple[str, ...] = ()
NEEDS = {"real_ablate": "real_scan"}
PAPER_SCALE: dict[str, str] = {}
MINUTES = {"real_quant": 6, "real_window": 6, "real_sinks": 8}
LAST: tuple[str, ...] = ()
RESAMPLED = ("real_sinks",)
"""Experiments that hold their own replicates, so `--seeds` does not run them again: R26 and R27 are judged by a
bootstrap over their 96 windows per domain of the fixed SmolLM2 (issue 39: a fixed model resamples what varies)."""
