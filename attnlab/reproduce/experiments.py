"""The study runs behind the targets as a table: experiment name -> its (command, config) runs, sized by profile.

Each experiment is a list of `Run(sub, command, config)`: a study command (as typed after `attnlab`) and its
config fields, run through `attnlab.core.registry.resolve` into runs/<experiment>/<sub> (`execute.py`), so `attnlab
rerun` can redo any of them. A few experiments are direct computations of library functions
(`attnlab/<study>/reproduction.py`). Experiments that a profile does not run are absent from `SIZES[profile]`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from attnlab.bb import reproduction as bb_rows
from attnlab.consensus import computations as consensus_checks
from attnlab.paths import computations as paths_checks
from attnlab.scan import reproduction as real_rows

# profile -> experiment -> its size settings (absent: not run at that profile). full: the paper-scale settings.
BB_TINY = dict(steps=60, d_model=32, d_mlp=64, batch=16, eval_batch=32, lin_every=10, lin_until=60, ckpt_every=60)
BB_QUICK = dict(steps=600, ckpt_every=600)
TINY_SIZES: dict[str, dict] = {
    "bb_sample": dict(n=32),
    "bb_smoke": dict(steps=40, d_model=32, d_mlp=64, seq_len=32, batch=16, eval_batch=32, lin_every=10),
    "bb_softmax": BB_TINY,
    "bb_intervene": {},
    "bb_relu": BB_TINY,
    "bb_theory": {},
    "cons_causal": dict(batch=4, t_max=6.0, schedules=("constant",)),
    "cons_tails": dict(batch=1),
    "cons_late": dict(batch=4),
    "cons_full": dict(batch=8, t_max=10.0, n=16),
    "cons_cluster": dict(batch=8, t_max=10.0),
    "cons_rho": {},
    "cons_phase": dict(d=16, starts=8, num_betas=4, t_max=10.0),
    "paths_ua": {},
    "paths_units": {},
    "paths_sampling_units": {},
    "paths_smoke": dict(steps=10, pool=200, P=40, n_test=60, heads=2, width=16, Ns=(20.0,), temperatures=(0.1,)),
    "paths_solve": dict(P=30, n_test=100),
    "paths_sweep": dict(P=30, n_test=100, Ns=(10.0, 30.0, 100.0)),
    "cons_counter": dict(batch=4, t_max=30.0),
    "paths_renorm": dict(P=30, n_test=100),
    "paths_2path": dict(P=30, n_test=100),
    # issue 18, bb R2 (wt-rbb): a direct computation on tiny random toy models (about 2 s)
    "bb_units": {},
    # issue 18, consensus R4c, R5b, R6b, R8, C-llama (wt-rcons): a few seconds each at tiny
    "cons_lag": dict(masks=("full",), omegas=(0.005, 0.04), starts=2),
    "cons_rho_sim": dict(starts=1),
    "cons_llama_units": {},
}
QUICK_SIZES: dict[str, dict] = {
    "bb_sample": dict(n=512),
    "bb_smoke": dict(steps=200, d_model=32, d_mlp=128, seq_len=32, batch=64, eval_batch=128, lin_every=25),
    "bb_softmax": BB_QUICK,
    "bb_intervene": {},
    "bb_relu": BB_QUICK,
    "bb_theory": {},
    "real_scan": dict(samples=8, tokens=128),
    "real_probe": {},
    "cons_causal": dict(batch=64, t_max=60.0, schedules=("constant", "random")),
    "cons_tails": dict(batch=2),
    "cons_late": dict(batch=64),
    "cons_full": dict(batch=64, t_max=100.0, n=32),
    "cons_cluster": dict(batch=64, t_max=30.0),
    "cons_rho": {},
    "cons_phase": dict(d=128, starts=16, num_betas=10, t_max=30.0),
    "paths_ua": {},
    "paths_units": {},
    "paths_sampling_units": {},
    "paths_smoke": dict(
        steps=200, pool=200, P=40, n_test=60, heads=2, width=16, Ns=(20.0,), temperatures=(0.1,)
    ),  # S5's 200 GD steps
    "paths_solve": dict(P=100, n_test=1000),
    "paths_sweep": dict(P=100, n_test=1000, Ns=(10.0, 30.0, 50.0, 100.0, 300.0, 500.0, 1000.0)),
    "paths_sample": dict(warmup=1000, draws=2000),  # B3's protocol: its time is the target
    # issue 14 (the authors' claims); R12 and S9 take seconds, R13 about a minute, R14 a few minutes
    "cons_counter": dict(batch=16, t_max=30.0),
    "cons_norm": dict(passes=10, prompts=4),
    "cons_decode": dict(passes=10, prompts=2),
    "paths_renorm": dict(P=100, n_test=1000),
    "real_quant": dict(samples=2, tokens=256, sites=("linear",)),  # R23, about a minute each
    "real_window": dict(samples=2, tokens=512, windows=(128,)),
    # issue 18: rows that were benchmarks or not wired in (B1 about 15 s, B2 about 90 s, the ablation about a minute)
    "cons_bench": dict(baseline_starts=1, baseline_steps=10),
    "cons_units": {},  # R2a, R4a, R4b, C-norm: about 40 s
    "cons_b2": {},
    "real_ablate": dict(samples=8, tokens=128, sweep_layers=(19, 29)),  # the windows of real_scan
    "paths_2path": dict(P=100, n_test=1000),
    # issue 18, bb R2 and real R15 (wt-rbb): direct computations on tiny random models (R2 about 2 s; R15 about 8 s,
    # most of it transformers' first model build)
    "bb_units": {},
    "real_units": {},
    # issue 18, paths rows T6, T11, T15, T16 (about 4 s) and T13, S4 (about 20 s), on one thread
    "paths_more_units": {},
    "paths_samplers": {},
    # issue 18, consensus R4c, R5b, R6b, R8, C-llama (wt-rcons): the spec's sizes, 10-20 s each on one thread
    "cons_lag": dict(masks=("full", "causal"), omegas=(0.005, 0.01, 0.02, 0.04), starts=8),
    "cons_rho_sim": dict(starts=8),
    "cons_sweep_integrator": dict(starts=256),
    "cons_llama_stack": dict(passes=50),
    "cons_llama_units": {},
}
FULL_SIZES: dict[str, dict] = {
    **QUICK_SIZES,
    "bb_softmax": dict(steps=2000),
    "bb_relu": dict(steps=2000),
    "bb_adam3": dict(n_layers=3, steps=3000),
    "bb_sgd3": dict(n_layers=3, steps=3000, optimizer="sgd"),
    "bb_ablate3": dict(n_layers=3, steps=3000, no_attn=(2,)),
    "bb_paper": dict(steps=10000),
    "cons_causal": dict(batch=256, t_max=60.0, schedules=("constant", "random")),
    "cons_full": dict(batch=256, t_max=100.0, n=32),
    "cons_phase": dict(d=128, starts=64, num_betas=46, t_max=30.0),
    "paths_sample": dict(warmup=1000, draws=2000),
    "paths_sample_full": dict(warmup=1000, draws=2000),  # B3's full-weight clause: about 6 min on one thread
    "paths_prune": dict(steps=3000),  # B5: the spec's provisional 3,000 GD steps (§15.4)
    # issue 14: the scales of docs/extreme-tokens.md, docs/attention-paths.md and docs/consensus.md (minutes to
    # about half an hour each on the shared 2-core machine)
    "bb_variants": dict(steps=500, eval_batch=128),  # docs/specs/bb-layer-variants.toml
    "bb_stability": dict(d_model=64, d_mlp=256, seq_len=32, batch=32, eval_batch=64, steps=200, ckpt_every=1000,
                         lrs=(1e-3, 3e-3, 1e-2, 3e-2), seeds=(0, 1, 2)),  # docs/specs/bb-softmax-relu-stability.toml
    "cons_decode": dict(passes=30, prompts=3),
    "paths_layers": dict(warmup=500, draws=1000),
    "paths_ensemble": dict(runs=16, steps=10000),
    "paths_outputs": dict(outputs=2, warmup=300, draws=400),
    "paths_prune_long": dict(steps=2000),
    "paths_plugin": dict(N=20.0, temperature=0.1, P=300, n_test=1000),
    "real_quant": dict(samples=8, tokens=512, sites=("linear", "residual")),  # docs/real-models.md, R23
    "real_window": dict(samples=8, tokens=1024, windows=(256,)),
    "series_scan": dict(steps=1500, save_every=25, tokens=64, samples=8),  # R25: about 8 minutes
    # issue 18: the pre-registered SmolLM2 protocols (R9, R10: 100 passes; R11: 30 passes with the depth view)
    "cons_rst": dict(passes=100, prompts=3),
    "cons_depth": dict(passes=30, prompts=3),
    # issue 18, bb R12 (wt-rbb): the paper-scale mitigations of extreme-tokens §8 (GPU only, PAPER_SCALE)
    "bb_paper_relu": dict(steps=10000),
    "bb_paper_adam3": dict(n_layers=3, steps=10000),
    "bb_paper_sgd3": dict(n_layers=3, steps=10000, optimizer="sgd"),
    "bb_paper_relu3": dict(n_layers=3, steps=10000),
    # issue 18, paths rows B2 (one P = 600 point, 3-6 min) and B4, SC-H1 (the §10 protocol, about 3.5 h: B4's note)
    "paths_b2": {},
    **{n: dict(warmup=1000, draws=2000, n_leapfrog=16, n_test=1000, doublings=2) for n in paths_checks.ADJUDICATION},
    # issue 18, consensus B3 (wt-rcons): B2's sweep at d = 128, about 11 minutes on one thread
    "cons_b3": dict(d=128),
}  # fmt: skip
SIZES = {"tiny": TINY_SIZES, "quick": QUICK_SIZES, "full": FULL_SIZES}


@dataclass(frozen=True)
class Run:
    """One study run: `command` (as typed after `attnlab`) with the config fields `config`, into the experiment's
    folder / `sub` ("" = the experiment's folder itself). Run through `attnlab.core.registry.resolve`, so `attnlab
    rerun` redoes it from the folder's config.json."""

    sub: str
    command: str
    config: Mapping[str, Any] | Callable[[], Mapping[str, Any]]  # a callable: fields known once earlier runs ran


@dataclass(frozen=True)
class Experiment:
    """The study runs behind some targets: `runs(seed, size, root)` lists them (root: the folder of all
    experiments, for the runs that read another's folder); `figure(folder)` draws a figure across its runs, after
    them. A `compute(seed, size)` experiment instead calls library functions directly and returns numbers."""

    runs: Callable[[int, dict, Path], list[Run]] | None = None
    figure: Callable[[Path], Any] | None = None
    compute: Callable[[int, dict], dict] | None = None


def _train(seed: int, size: dict, **fixed: Any) -> dict:
    """The config fields of a `bb train` run: the preset's sizes (paper from 10,000 steps) with `size` and
    `fixed` applied."""
    from attnlab.bb import resolve_config
    from attnlab.runs.configs import config_to_dict

    preset = "paper" if size.get("steps", 0) >= 10000 else "cpu"
    return config_to_dict(resolve_config(preset, seed=seed, **{**fixed, **size}))


def _one(command: str, fields: Callable[[int, dict, Path], dict]) -> Experiment:
    """An experiment of one run of `command` into its own folder, config fields `fields(seed, size, root)`."""
    return Experiment(runs=lambda seed, size, root: [Run("", command, fields(seed, size, root))])


def _on(size: dict) -> dict:
    """The `device` field of a run whose experiment's sizes carry one (`sized`: a GPU run), else nothing."""
    return {"device": size["device"]} if "device" in size else {}


def _later(command: str, fields: Callable[[int, dict, Path], dict]) -> Experiment:
    """Like `_one`, with the config built only when the run starts (it validates another experiment's folder)."""
    return Experiment(runs=lambda seed, size, root: [Run("", command, lambda: fields(seed, size, root))])


def _trained(**fixed: Any) -> Experiment:
    """One `bb train` run of the experiment's sizes with `fixed` settings."""
    return _one("bb train", lambda seed, size, root: _train(seed, size, **fixed))


def _slug(label: str) -> str:
    """A folder name for a layout label: "1 layer, parallel block" -> "1-layer-parallel-block"."""
    import re

    return re.sub(r"[^0-9A-Za-z]+", "-", label).strip("-")


def _variants(seed: int, size: dict, root: Path) -> list[Run]:
    """R19-R21: the six layer layouts of docs/specs/bb-layer-variants.toml (`attnlab.bb.claims.VARIANTS`)."""
    from attnlab.bb import claims

    return [Run(_slug(label), "bb train", _train(seed, size, n_layers=n, no_attn=a, no_mlp=m, block=b))
            for label, (n, a, m, b) in claims.VARIANTS]  # fmt: skip


def _variant_figure(folder: Path) -> Any:
    """R20's figure `r20_peak_by_layout.png` from the six runs."""
    from attnlab.bb import claims
    from attnlab.bb.figures import variant_figure

    return variant_figure(claims.variant_table(folder), folder / "r20_peak_by_layout.png")


def _stability(seed: int, size: dict, root: Path) -> list[Run]:
    """R22: one `attnlab sweep` of `bb train` over attention x lrs x seeds (docs/specs/bb-softmax-relu-stability
    .toml); a diverged trial is recorded in its trial.json, not raised."""
    base = {"preset": "cpu", **{k: v for k, v in size.items() if k not in ("lrs", "seeds", "device")}}
    base |= {"device": size["device"]} if "device" in size else {}
    grid = {"attention": ["softmax", "relu"], "lr": list(size["lrs"]), "seed": [seed + s for s in size["seeds"]]}
    return [Run("", "sweep", {"spec": {"command": "bb train", "base": base, "grid": grid}, "cpus": 1})]


def _series(seed: int, size: dict, root: Path) -> list[Run]:
    """R25: a small GPT-2 trained on Bigram-Backcopy into a checkpoint series (train/), then the series scanned on
    its own evaluation text with `<s>` before each window (scan/, with sink_dynamics)."""
    train = root / "series_scan" / "train"

    def scan_fields() -> dict:  # the checkpoints exist once train/ has run
        from attnlab.scan.series import expand_series

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


def _causal(seed: int, size: dict, root: Path) -> list[Run]:
    """R1a/R1b: causal, V = I, n = 10, d = 3, Gaussian P at scale 1 and 4, each schedule of the profile."""
    return [Run(f"{schedule}-scale{scale:g}", "consensus simulate",
                dict(n=10, d=3, batch=size["batch"], mask="causal", schedule=schedule, scale=scale,
                     t_max=size["t_max"], record_every=10, seed=seed))
            for schedule in size["schedules"] for scale in (1.0, 4.0)]  # fmt: skip


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
    """R12: Q = K = 0 with V = I and with a rotating V = J (n = 16, d = 4; `consensus.claims.run_R12`'s runs)."""
    return [Run(value, "consensus simulate", dict(n=16, d=4, batch=size["batch"], key_query="zero", value=value,
                                                  t_max=size["t_max"], seed=seed))
            for value in ("identity", "rotation")]  # fmt: skip


def _counter_figure(folder: Path) -> Any:
    from attnlab.consensus.figures import figure_R12

    return figure_R12(folder)


def _layers(seed: int, size: dict, root: Path) -> list[Run]:
    """S6: L = 3, H = 2 on digit episodes: a sweep and collapsed HMC at N = 10 (`paths.claims.run_S6`'s runs)."""
    common = {"task": "digits", "layers": 3, "heads": 2, "temperature": 0.1, "n_test": 500}
    return [Run("sweep", "paths sweep", {"Ns": [3.0, 10.0, 30.0, 100.0, 1000.0], "P": 100,
                                         "allow_unconverged": True, **common}),
            Run("sample", "paths sample", {"N": 10.0, "P": 40, "chains": 4, "warmup": size["warmup"],
                                           "draws": size["draws"], **common})]  # fmt: skip


def _layers_figure(folder: Path) -> Any:
    """S6's figure from the two runs: their off-diagonal fractions saved as S6.json first (as `claims.run_S6`)."""
    from attnlab.paths.claims import write_s6_fractions
    from attnlab.paths.figures import layers_figure

    write_s6_fractions(folder)
    return layers_figure(folder)


def _ensemble(seed: int, size: dict, root: Path) -> dict:
    """S7: U from gradient-descent ensembles, against the sampled U of paths_sample if that ran."""
    sampled = root / "paths_sample"
    return {"runs": size["runs"], "steps": size["steps"], "seed": seed,
            "sampled": str(sampled) if (sampled / "manifest.json").is_file() else None}  # fmt: skip


def _plugin(seed: int, size: dict, root: Path) -> dict:
    """S10: `paths solve --task digits --attention precomputed --from <paths_prune_long>`."""
    return {
        "task": "digits",
        "attention": "precomputed",
        "from_run": str(root / "paths_prune_long"),
        "N": size["N"],
        "temperature": size["temperature"],
        "P": size["P"],
        "n_test": size["n_test"],
        "seed": seed,
    }


def _ablate(seed: int, size: dict, root: Path) -> dict:
    """The seed claim on dormant heads: every head of `sweep_layers` zeroed in turn on real_scan's windows, its
    sink scores reused (`attnlab ablate --sweep-layer L --sink-from <real_scan>`)."""
    return {"domains": ["prose", "code"], "samples": size["samples"], "tokens": size["tokens"], "seed": seed,
            "sweep_layers": list(size["sweep_layers"]), "sink_from": str(root / "real_scan")}  # fmt: skip


# issue 18, consensus R6b (wt-rcons)
def _sweep_integrators(seed: int, size: dict, root: Path) -> list[Run]:
    """R6b: `consensus phase` at d = 8, n = 32, beta in {1, 3, 5}, t <= 30, h = 0.1 with projected Euler (the sweep's
    default) and with RK4 (`--integrator rk4`), from the same starts."""
    return [Run(m, "consensus phase", dict(d=8, beta_min=1.0, beta_max=5.0, num_betas=3, integrator=m,
                                           starts=size["starts"], seed=seed))
            for m in ("euler", "rk4")]  # fmt: skip


EXPERIMENTS: dict[str, Experiment] = {
    "bb_sample": _one("bb sample", lambda seed, size, root: {"n": size["n"], "seq_len": 256, "seed": seed}),
    "bb_smoke": _one(
        "bb train",
        lambda seed, size, root: _train(seed, {**size, "lin_until": size["steps"], "ckpt_every": size["steps"]}),
    ),
    "bb_softmax": _trained(attention="softmax"),
    "bb_intervene": _one("bb intervene", lambda seed, size, root: {"run_dir": str(root / "bb_softmax"), **_on(size)}),
    "bb_relu": _trained(attention="relu"),
    "bb_theory": _one("bb theory", lambda seed, size, root: {"seed": seed}),
    "bb_adam3": _trained(),
    "bb_sgd3": _trained(),
    "bb_ablate3": _trained(),
    "bb_paper": _trained(),
    "real_scan": _one(
        "scan",
        lambda seed, size, root: {
            "domains": ["prose", "code"],
            "samples": size["samples"],
            "tokens": size["tokens"],
            "seed": seed,
        },
    ),
    "real_probe": Experiment(compute=real_rows.real_probe),
    "real_quant": _one("deploy quantize", lambda seed, size, root: {**size, "seed": seed}),
    "real_window": _one("deploy window", lambda seed, size, root: {**size, "seed": seed}),
    "series_scan": Experiment(runs=_series),
    "cons_causal": Experiment(runs=_causal),
    "cons_full": Experiment(runs=_full),
    "cons_cluster": Experiment(runs=_cluster),
    "cons_tails": Experiment(compute=consensus_checks.cons_tails),
    "cons_late": Experiment(compute=consensus_checks.cons_late),
    "cons_rho": Experiment(compute=consensus_checks.cons_rho),
    "cons_phase": _one(
        "consensus phase", lambda seed, size, root: {"n": 32, "beta_min": 0.5, "beta_max": 5.0, **size, "seed": seed}
    ),
    "paths_ua": Experiment(compute=paths_checks.paths_ua),
    "paths_units": Experiment(compute=paths_checks.paths_units),
    "paths_sampling_units": Experiment(compute=paths_checks.paths_sampling_units),
    "paths_solve": _one("paths solve", lambda seed, size, root: {"N": 10.0, **size, "seed": seed}),
    "paths_sweep": _one("paths sweep", lambda seed, size, root: {**size, "seed": seed}),
    "paths_sample": _one("paths sample", lambda seed, size, root: {"N": 10.0, **size, "seed": seed}),
    "paths_sample_full": _one(
        "paths sample", lambda seed, size, root: {"N": 10.0, "target": "full", **size, "seed": seed}
    ),
    "paths_prune": _one("paths prune", lambda seed, size, root: {**size}),
    "bb_variants": Experiment(runs=_variants, figure=_variant_figure),
    "bb_stability": Experiment(runs=_stability),
    "cons_counter": Experiment(runs=_counter, figure=_counter_figure),
    "cons_norm": _one("consensus norm", lambda seed, size, root: {**size, "seed": seed}),
    "cons_decode": _one(
        "consensus model", lambda seed, size, root: {**size, "mlp": [True, False], "depth_view": False, "seed": seed}
    ),
    "paths_renorm": _one("paths solve", lambda seed, size, root: {"renorm": "scalar", **size, "seed": seed}),
    "paths_layers": Experiment(runs=_layers, figure=_layers_figure),
    "paths_ensemble": _one("paths ensemble", _ensemble),
    "paths_outputs": _one("paths sample", lambda seed, size, root: {**size, "seed": seed}),
    "paths_prune_long": _one("paths prune", lambda seed, size, root: {**size}),
    "paths_smoke": _one("paths prune", lambda seed, size, root: {**size}),
    "paths_plugin": _later("paths solve", _plugin),
    "cons_bench": Experiment(compute=consensus_checks.cons_bench),
    "cons_units": Experiment(compute=consensus_checks.cons_units),
    "cons_b2": _one("consensus phase", lambda seed, size, root: {**size, "seed": seed}),  # PhaseConfig's defaults: B2
    "cons_rst": _one(
        "consensus model",
        lambda seed, size, root: {
            **size,
            "schedules": ["constant", "periodic", "random"],
            "mlp": [True, False],
            "depth_view": False,
            "seed": seed,
        },
    ),
    "cons_depth": _one(
        "consensus model",
        lambda seed, size, root: {**size, "schedules": ["periodic"], "mlp": [True], "depth_view": True, "seed": seed},
    ),
    "real_ablate": _later("ablate", _ablate),
    "paths_2path": _one("paths solve", lambda seed, size, root: {"variant": "2path", **size, "seed": seed}),
    # issue 18, bb R2, real R15 and bb R12 (wt-rbb). R2, R15: direct computations on tiny random models; R12:
    # ReLU attention at §8's lr 3e-3; Adam / SGD / ReLU + Adam with 3 layers
    "bb_units": Experiment(compute=bb_rows.bb_units),
    "real_units": Experiment(compute=real_rows.real_units),
    "bb_paper_relu": _trained(attention="relu", lr=3e-3),
    "bb_paper_adam3": _trained(),
    "bb_paper_sgd3": _trained(),
    "bb_paper_relu3": _trained(attention="relu", lr=3e-3),
    # issue 18, paths rows T6, T11, T15, T16 (paths_more_units), T13 and S4 (paths_samplers), B2, B4 and SC-H1
    "paths_more_units": Experiment(compute=paths_checks.paths_more_units),
    "paths_samplers": Experiment(compute=paths_checks.paths_samplers),
    "paths_b2": Experiment(compute=paths_checks.paths_b2),
    "paths_adjudication_C1": Experiment(compute=paths_checks.paths_adjudication_c1),
    "paths_adjudication_C2": Experiment(compute=paths_checks.paths_adjudication_c2),
    "paths_adjudication_C3": Experiment(compute=paths_checks.paths_adjudication_c3),
    "paths_adjudication_gate": Experiment(compute=paths_checks.paths_adjudication_gate),
    # issue 18, consensus R4c, R5b, R6b, R8, C-llama, B3 (wt-rcons)
    "cons_lag": Experiment(compute=consensus_checks.cons_lag),
    "cons_rho_sim": Experiment(compute=consensus_checks.cons_rho_sim),
    "cons_sweep_integrator": Experiment(runs=_sweep_integrators),
    "cons_llama_stack": Experiment(compute=consensus_checks.cons_llama_stack),
    "cons_llama_units": Experiment(compute=consensus_checks.cons_llama_units),
    "cons_b3": _one("consensus phase", lambda seed, size, root: {**size, "seed": seed}),  # B2's defaults at d = 128
}
GPU = ("bb_smoke", "bb_softmax", "bb_intervene", "bb_relu", "bb_adam3", "bb_sgd3", "bb_ablate3", "bb_paper",
       "bb_variants", "bb_stability", "cons_phase",
       "bb_paper_relu", "bb_paper_adam3", "bb_paper_sgd3", "bb_paper_relu3")  # fmt: skip
NEEDS = {
    "bb_intervene": "bb_softmax",
    "paths_plugin": "paths_prune_long",
    "real_ablate": "real_scan",
}  # experiments that need another first


PAPER_SCALE = {
    "bb_paper": "paper scale, 10,000 steps at d 256, T 256, batch 512 (about 19 h on 2 cpu cores)",
    # issue 18, bb R12 (wt-rbb): the §8 mitigation runs at the paper preset
    "bb_paper_relu": "paper scale, ReLU attention, 1 layer, lr 3e-3, 10,000 steps (about 19 h on 2 cpu cores)",
    "bb_paper_adam3": "paper scale, 3 layers, Adam, 10,000 steps (about 2.5 days on 2 cpu cores)",
    "bb_paper_sgd3": "paper scale, 3 layers, SGD lr 0.03, 10,000 steps (about 2.5 days on 2 cpu cores)",
    "bb_paper_relu3": "paper scale, 3 layers, ReLU + Adam lr 3e-3, 10,000 steps (about 2.5 days on 2 cpu cores)",
}
"""Experiments the full profile runs only on a GPU (`--device cuda`); on the cpu their rows are not run, with the
command that runs them."""
MINUTES = {"cons_rst": 60, "paths_prune": 15, "bb_stability": 25, "bb_adam3": 20, "bb_sgd3": 20, "bb_ablate3": 20,
           "cons_phase": 20,
           "paths_ensemble": 15, "paths_prune_long": 12, "series_scan": 10, "bb_variants": 10, "cons_b2": 10,
           "paths_layers": 10, "paths_sample_full": 8, "cons_decode": 8, "cons_depth": 8, "real_quant": 6,
           "real_window": 6, "paths_adjudication_C3": 120, "paths_adjudication_C1": 40, "paths_adjudication_C2": 40,
           "paths_adjudication_gate": 10, "paths_b2": 4, "cons_b3": 11}  # fmt: skip
"""Rough single-thread minutes of the long full-profile experiments on this project's 2-core machine: Ray runs
the longest first, so two workers finish close together."""


def runs_at(profile: str, device: str) -> dict[str, dict]:
    """The experiments `profile` runs on `device` (name -> size settings): the paper-scale ones only on a GPU."""
    return {n: s for n, s in SIZES[profile].items() if device != "cpu" or n not in PAPER_SCALE}


LAST = ("paths_adjudication_C1", "paths_adjudication_C2", "paths_adjudication_gate", "paths_adjudication_C3")
"""Run after every other experiment: the §10 protocol alone needs hours, so a full profile that spans sessions
(`--resume`) has every other row first. Among themselves they run longest first too (C3 beside C1 then C2 on two
workers), so the wave ends near C3's own time."""


def longest_first(names: list[str]) -> list[str]:
    """`names` ordered by `MINUTES` (longest first; the rest keep their order after them), the `LAST` ones last."""
    return sorted(names, key=lambda n: (n in LAST, -MINUTES.get(n, 0)))


def sized(name: str, profile: str, device: str) -> dict:
    """The size settings of experiment `name` at `profile`, with `device` for the runs that compute on a GPU."""
    size = SIZES[profile][name]
    return {**size, "device": device} if device != "cpu" and name in GPU else size
