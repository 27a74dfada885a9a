"""The study runs behind the bb targets, sized by profile: experiment name -> its (command, config) runs
(`attnlab.core.experiments`), merged with the other studies' tables by `attnlab.reproduce.experiments`.

TINY / QUICK / FULL: each experiment's size settings at that profile (absent: not run at that profile; full: the
paper-scale settings). GPU: the experiments whose runs compute on a GPU when reproduce is given one; PAPER_SCALE:
those the full profile runs only there; NEEDS: experiments that need another first; MINUTES: rough single-thread
minutes of the long full-profile ones (Ray runs the longest first)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from attnlab.bb.repro import checks_reducers
from attnlab.core.experiments import Experiment, Run, one

TINY_TRAIN = dict(steps=60, d_model=32, d_mlp=64, batch=16, eval_batch=32, lin_every=10, lin_until=60, ckpt_every=60)
QUICK_TRAIN = dict(steps=600, ckpt_every=600)
TINY: dict[str, dict] = {
    "bb_sample": dict(n=32),
    "bb_smoke": dict(steps=40, d_model=32, d_mlp=64, seq_len=32, batch=16, eval_batch=32, lin_every=10),
    "bb_softmax": TINY_TRAIN,
    "bb_intervene": {},
    "bb_relu": TINY_TRAIN,
    "bb_theory": {},
    # issue 18, bb R2 (wt-rbb): a direct computation on tiny random toy models (about 2 s)
    "bb_units": {},
}
QUICK: dict[str, dict] = {
    "bb_sample": dict(n=512),
    "bb_smoke": dict(steps=200, d_model=32, d_mlp=128, seq_len=32, batch=64, eval_batch=128, lin_every=25),
    "bb_softmax": QUICK_TRAIN,
    "bb_intervene": {},
    "bb_relu": QUICK_TRAIN,
    "bb_theory": {},
    # issue 18, bb R2 (wt-rbb): a direct computation on tiny random models (about 2 s)
    "bb_units": {},
}
FULL: dict[str, dict] = {
    **QUICK,
    "bb_softmax": dict(steps=2000),
    "bb_relu": dict(steps=2000),
    "bb_adam3": dict(n_layers=3, steps=3000),
    "bb_sgd3": dict(n_layers=3, steps=3000, optimizer="sgd"),
    "bb_ablate3": dict(n_layers=3, steps=3000, no_attn=(2,)),
    "bb_paper": dict(steps=10000),
    # issue 14: the scales of docs/extreme-tokens.md (minutes to about half an hour each on the shared 2-core machine)
    # issue 39: R19-R21, SC-3layer and R22 at the spec's cpu preset (2,000 steps, d 128, T 64, batch 64, evaluation
    # batch 256), no longer the reduced docs/specs/*.toml sizes (500 steps; R22 200 steps at half width)
    "bb_variants": dict(steps=2000),
    "bb_stability": dict(steps=2000, lrs=(1e-3, 3e-3, 1e-2, 3e-2), seeds=(0, 1, 2)),
    "series_scan": dict(steps=1500, save_every=25, tokens=64, samples=8),  # R25: about 8 minutes
    # issue 18, bb R12 (wt-rbb): the paper-scale mitigations of extreme-tokens §8 (GPU only, PAPER_SCALE)
    "bb_paper_relu": dict(steps=10000),
    "bb_paper_adam3": dict(n_layers=3, steps=10000),
    "bb_paper_sgd3": dict(n_layers=3, steps=10000, optimizer="sgd"),
    "bb_paper_relu3": dict(n_layers=3, steps=10000),
}  # fmt: skip


def _train(seed: int, size: dict, **fixed: Any) -> dict:
    """The config fields of a `bb train` run: the preset's sizes (paper from 10,000 steps) with `size` and
    `fixed` applied."""
    from attnlab.bb import resolve_config
    from attnlab.runs.configs import config_to_dict

    preset = "paper" if size.get("steps", 0) >= 10000 else "cpu"
    return config_to_dict(resolve_config(preset, seed=seed, **{**fixed, **size}))


def _on(size: dict) -> dict:
    """The `device` field of a run whose experiment's sizes carry one (`sized`: a GPU run), else nothing."""
    return {"device": size["device"]} if "device" in size else {}


def _trained(**fixed: Any) -> Experiment:
    """One `bb train` run of the experiment's sizes with `fixed` settings."""
    return one("bb train", lambda seed, size, root: _train(seed, size, **fixed))


def _slug(label: str) -> str:
    """A folder name for a layout label: "1 layer, parallel block" -> "1-layer-parallel-block"."""
    import re

    return re.sub(r"[^0-9A-Za-z]+", "-", label).strip("-")


def _variants(seed: int, size: dict, root: Path) -> list[Run]:
    """R19-R21: the six layer layouts of docs/specs/bb-layer-variants.toml (`verdicts.VARIANTS`)."""
    from attnlab.bb.repro import verdicts

    return [Run(_slug(label), "bb train", _train(seed, size, n_layers=n, no_attn=a, no_mlp=m, block=b))
            for label, (n, a, m, b) in verdicts.VARIANTS]  # fmt: skip


def _variant_figure(folder: Path) -> Any:
    """R20's figure `r20_peak_by_layout.png` from the six runs."""
    from attnlab.bb.figures import variant_figure
    from attnlab.bb.repro import verdicts

    return variant_figure(verdicts.variant_table(folder), folder / "r20_peak_by_layout.png")


def _stability(seed: int, size: dict, root: Path) -> list[Run]:
    """R22: one `attnlab sweep` of `bb train` over attention x lrs x the seeds of `size` (its replicates, whatever
    the global `seed`: `RESAMPLED`; docs/specs/bb-softmax-relu-stability.toml); a diverged trial is recorded in its
    trial.json, not raised."""
    base = {"preset": "cpu", **{k: v for k, v in size.items() if k not in ("lrs", "seeds", "device")}}
    base |= {"device": size["device"]} if "device" in size else {}
    grid = {"attention": ["softmax", "relu"], "lr": list(size["lrs"]), "seed": list(size["seeds"])}
    return [Run("", "sweep", {"spec": {"command": "bb train", "base": base, "grid": grid}, "cpus": 1})]


def _series(seed: int, size: dict, root: Path) -> list[Run]:
    """R25: a small GPT-2 trained on Bigram-Backcopy into a checkpoint series (train/), then the series scanned on
    its own evaluation text with `<s>` before each window (scan/, with sink_dynamics)."""
    train = root / "series_scan" / "train"

    def scan_fields() -> dict:  # the checkpoints exist once train/ has run
        from attnlab.hf.checkpoints import expand_series

        series = expand_series([str(train / "checkpoints")], [])
        return {
            "model": series[0][0],
            "domains": ["text"],
            "text": str(train / "bb_eval.txt"),
            "prefix": "bos",
            "tokens": size["tokens"],
            "samples": size["samples"],
            "checkpoints": [list(c) for c in series],
            "seed": seed,
        }

    fields = {"steps": size["steps"], "save_every": size["save_every"], "seed": seed}
    return [Run("train", "series train", fields), Run("scan", "scan", scan_fields)]


EXPERIMENTS: dict[str, Experiment] = {
    "bb_sample": one("bb sample", lambda seed, size, root: {"n": size["n"], "seq_len": 256, "seed": seed}),
    "bb_smoke": one(
        "bb train",
        lambda seed, size, root: _train(seed, {**size, "lin_until": size["steps"], "ckpt_every": size["steps"]}),
    ),
    "bb_softmax": _trained(attention="softmax"),
    "bb_intervene": one("bb intervene", lambda seed, size, root: {"run_dir": str(root / "bb_softmax"), **_on(size)}),
    "bb_relu": _trained(attention="relu"),
    "bb_theory": one("bb theory", lambda seed, size, root: {"seed": seed}),
    "bb_adam3": _trained(),
    "bb_sgd3": _trained(),
    "bb_ablate3": _trained(),
    "bb_paper": _trained(),
    "series_scan": Experiment(runs=_series),
    "bb_variants": Experiment(runs=_variants, figure=_variant_figure),
    "bb_stability": Experiment(runs=_stability),
    # issue 18, bb R2 and R12 (wt-rbb). R2: a direct computation on tiny random models; R12: ReLU attention at
    # §8's lr 3e-3; Adam / SGD / ReLU + Adam with 3 layers
    "bb_units": Experiment(compute=checks_reducers.bb_units),
    "bb_paper_relu": _trained(attention="relu", lr=3e-3),
    "bb_paper_adam3": _trained(),
    "bb_paper_sgd3": _trained(),
    "bb_paper_relu3": _trained(attention="relu", lr=3e-3),
}
GPU = ("bb_smoke", "bb_softmax", "bb_intervene", "bb_relu", "bb_adam3", "bb_sgd3", "bb_ablate3", "bb_paper",
       "bb_variants", "bb_stability", "bb_paper_relu", "bb_paper_adam3", "bb_paper_sgd3", "bb_paper_relu3")  # fmt: skip
NEEDS = {"bb_intervene": "bb_softmax"}
PAPER_SCALE = {
    "bb_paper": "paper scale, 10,000 steps at d 256, T 256, batch 512 (about 19 h on 2 cpu cores)",
    # issue 18, bb R12 (wt-rbb): the §8 mitigation runs at the paper preset
    "bb_paper_relu": "paper scale, ReLU attention, 1 layer, lr 3e-3, 10,000 steps (about 19 h on 2 cpu cores)",
    "bb_paper_adam3": "paper scale, 3 layers, Adam, 10,000 steps (about 2.5 days on 2 cpu cores)",
    "bb_paper_sgd3": "paper scale, 3 layers, SGD lr 0.03, 10,000 steps (about 2.5 days on 2 cpu cores)",
    "bb_paper_relu3": "paper scale, 3 layers, ReLU + Adam lr 3e-3, 10,000 steps (about 2.5 days on 2 cpu cores)",
}
MINUTES = {"bb_stability": 150, "bb_adam3": 20, "bb_sgd3": 20, "bb_ablate3": 20, "series_scan": 10, "bb_variants": 60}
LAST: tuple[str, ...] = ()
RESAMPLED = ("bb_stability",)
"""Experiments that hold their own replicates, so `--seeds` does not run them again: R22's sweep trains every
(form, lr) at the seeds of its size (0, 1, 2) and is judged by the t-interval over them."""
