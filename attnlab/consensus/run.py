"""Run functions of `attnlab consensus simulate|phase|model`: compute, save everything the report needs, report.

Each is `fn(config, out=None, *, mode="new") -> RunResult` and writes one run folder (spec section 10):

- `simulate`: `E.npy` [batch, steps+1] (E_first), `E_pair.npy`, `t.npy` [steps+1], `x0.npy` [batch, n, d],
  `states.npy` [batch, records, n, d] at `t_states.npy`, `weights.npz` (P, V per interval start), `metrics.json`,
  `timeseries.csv`; a step size that blows up keeps the partial results and raises `NumericalError` (exit 2);
- `phase`: `frac.npy` [beta, steps+1], `betas.npy`, `t.npy`, `metrics.json`;
- `model`: `prompts.npy` [prompt, T], `model.json` (name, layers), `curves.npz` (`"<group>|<measure>"`:
  [prompt, passes*L+1]), `depth.npz`, `metrics.json`, `timeseries.csv`, `decode.npz` and `decode.json` (R14:
  every position's top-1 token at every pass end, and the share holding the most common one).

`RUNNERS` maps each command to (config class, run function) for `attnlab rerun` and sweeps.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch

from attnlab.consensus import figures, modelrun
from attnlab.consensus.arrays import save_npz
from attnlab.consensus.config import ModelConfig, NormConfig, PhaseConfig, SimulateConfig
from attnlab.consensus.dynamics import AttentionSpec, check_tokens
from attnlab.consensus.integrators import Trajectory, integrate, prepare
from attnlab.consensus.report import write_report
from attnlab.consensus.schedules import Schedule, make_schedule, roughness, schedule_arrays
from attnlab.consensus.stats import log_band, timeseries_rows
from attnlab.consensus.sweeps import PhaseDiagram, Sweep, phase_diagram
from attnlab.consensus.theory import fit_log_slope, tail_slope
from attnlab.core.device import on_device
from attnlab.errors import InputError, NumericalError, check
from attnlab.runs import RunDir, RunResult, check_out_folder, frame, open_run


def _refuse_resume(mode: str, command: str) -> None:
    if mode == "resume":
        raise InputError(f"`attnlab {command}` runs in one go and cannot --resume; use --overwrite or a new --out")


def _tables(rows: list[dict]) -> Any:
    return frame(rows)


# --- simulate ------------------------------------------------------------------------------------------------
def simulate_inputs(cfg: SimulateConfig) -> tuple[Schedule, AttentionSpec, torch.Tensor]:
    """The schedule of (P, V), the attention spec and the uniform starts X0 `[batch, n, d]` (seeded generator)."""
    sch = make_schedule(
        cfg.schedule,
        cfg.d,
        cfg.heads,
        cfg.seed,
        scale=cfg.scale,
        value=cfg.value,
        omega=cfg.omega,
        delta=cfg.delta,
        layers=cfg.layers,
        key_query=cfg.key_query,
    )
    spec = AttentionSpec(cfg.kind, cfg.mask, torch.full((cfg.heads,), float(cfg.beta)))
    g = torch.Generator().manual_seed(cfg.seed)
    X0 = check_tokens(torch.randn(cfg.batch, cfg.n, cfg.d, generator=g, dtype=torch.float64))
    return sch, spec, X0


def simulate_metrics(cfg: SimulateConfig, tr: Trajectory, sch: Schedule, wall: float) -> dict:
    """Final E_first quantiles and band, share below 1e-6, clustered fraction, tail slope of log E_pair."""
    E = tr.measures["E_first"]
    slopes = [fit_log_slope(tr.t, e) for e in tr.measures["E_pair"]]
    predicted = None
    if cfg.value == "identity" and cfg.kind == "SA":
        predicted = tail_slope("full_SA" if cfg.mask == "full" else "causal_SA")
    band = log_band(E[:, -1:])
    return {
        "final_E_first": {
            "median": float(np.median(E[:, -1])),
            "q10": float(np.quantile(E[:, -1], 0.1)),
            "q90": float(np.quantile(E[:, -1], 0.9)),
            "mean_log10": float(band["mean_log10"][0]),
            "ci_log10": [float(band["lo_log10"][0]), float(band["hi_log10"][0])],
        },
        "share_E_first_below_1e-6": float((E[:, -1] < 1e-6).mean()),
        "final_clustered_fraction_mean": float(tr.measures["clustered_fraction"][:, -1].mean()),
        "tail_slope_log_E_pair": {
            "median": float(np.nanmedian(slopes)) if np.isfinite(slopes).any() else None,
            "fitted_starts": int(np.isfinite(slopes).sum()),
            "predicted": predicted,
        },
        "roughness": roughness(sch, cfg.t_max),
        "stopped": tr.stopped,
        "t_reached": float(tr.t[-1]),
        "wall_seconds": round(wall, 3),
        "E_floor_float64": 2.2e-16,
    }


def _save_simulate(
    run: RunDir, cfg: SimulateConfig, X0: torch.Tensor, sch: Schedule, tr: Trajectory, metrics: dict
) -> list[dict]:
    """Write the arrays, metrics and time series of a simulation; returns the time-series rows."""
    E = tr.measures["E_first"]
    run.save_npy("E.npy", E)
    run.save_npy("E_pair.npy", tr.measures["E_pair"])
    run.save_npy("t.npy", tr.t)
    run.save_npy("x0.npy", X0.numpy())
    run.save_npy("states.npy", np.asarray(tr.states))
    run.save_npy("t_states.npy", tr.t_states)
    save_npz(run.file("weights.npz"), **schedule_arrays(sch, cfg.t_max))
    run.write_json("metrics.json", metrics)
    rows = timeseries_rows(tr.t, {cfg.schedule: E}, "E_first", every=max(1, len(tr.t) // 200))
    run.write_csv("timeseries.csv", rows)
    return rows


def simulate(
    config: SimulateConfig, out: str | Path | None = None, *, mode: str = "new", progress: bool = True
) -> RunResult:
    """Integrate `config.batch` uniform starts and write the run folder; tables: `timeseries` (median, mean log10
    E_first and its CI per time) and `final` (E_first, E_pair at the last time, per start)."""
    _refuse_resume(mode, "consensus simulate")
    device = _simulate_device(config)
    sch, spec, X0 = simulate_inputs(config)  # drawn on the cpu, so every device integrates the same starts
    prepare(X0, sch, spec, config.t_max, config.h, config.integrator)  # refuse bad weights before the folder
    with open_run(out, "consensus simulate", config, mode=mode, seed=config.seed) as run, on_device(device):
        t0 = time.perf_counter()
        tr = integrate(
            X0,
            sch,
            spec,
            config.t_max,
            config.h,
            config.integrator,
            measures=("E_first", "E_pair", "clustered_fraction"),
            record_every=config.record_every,
            progress=progress,
            stop_on_error=True,
            device=device,
        )
        metrics = simulate_metrics(config, tr, sch, time.perf_counter() - t0)
        rows = _save_simulate(run, config, X0, sch, tr, metrics)
        figures.simulate_figures(run.path)
        write_report(run)
    if tr.stopped:
        raise NumericalError(f"{tr.stopped}; partial results in {run.path}")
    final = {"E_first": tr.measures["E_first"][:, -1], "E_pair": tr.measures["E_pair"][:, -1]}
    return RunResult(
        run.path,
        config,
        metrics,
        {
            "timeseries": _tables(rows),
            "final": _tables([{"start": i, **{k: float(v[i]) for k, v in final.items()}} for i in range(config.batch)]),
        },
    )


def _simulate_device(cfg: SimulateConfig) -> torch.device:
    """The resolved device of a simulation; on a GPU, refuses (one line) a size over its memory: the states, a
    deferred chunk's states and Gram matrices, and the scores and weights of RK4's four stages."""
    from attnlab.consensus.integrators import CHUNK_BYTES
    from attnlab.core.device import resolve
    from attnlab.runs.budget import check_device_memory

    device = resolve(cfg.device)
    if device.type == "cuda":
        need = 2 * CHUNK_BYTES + 8 * cfg.batch * cfg.heads * cfg.n**2 * 8
        check_device_memory(need, f"consensus simulate --batch {cfg.batch} --n {cfg.n}", device)
    return device


# --- phase ---------------------------------------------------------------------------------------------------
def phase_metrics(pdg: PhaseDiagram, wall: float) -> dict:
    """t50 and t_eq per beta, their relative gap and its median, betas that never reach half clustering."""
    rel = (pdg.t50 - pdg.t_eq) / pdg.t_eq
    return {
        "t50": pdg.t50,
        "t_eq": pdg.t_eq,
        "relative_gap_t50_vs_t_eq": rel,
        "median_abs_relative_gap": float(np.nanmedian(np.abs(rel))) if np.isfinite(rel).any() else None,
        "betas_never_half_clustered": int(np.isnan(pdg.t50).sum()),
        "wall_seconds": round(wall, 2),
    }


def _sweep_of(cfg: PhaseConfig) -> Sweep:
    """The settings of the phase command's sweep (its betas: beta_min to beta_max, num_betas of them)."""
    dtype = torch.float32 if cfg.float32 else torch.float64
    return Sweep(cfg.n, cfg.d, cfg.starts, cfg.t_max, cfg.h, cfg.integrator, cfg.kind, cfg.seed, dtype=dtype)


def _chunk_mapper(cfg: PhaseConfig) -> Any:
    """None (chunks in this process), or a map of the chunks over Ray tasks when workers/address are set."""
    if not cfg.workers and not cfg.address:
        return None
    from functools import partial

    from attnlab.core.parallel import parallel_map

    return partial(parallel_map, workers=cfg.workers, address=cfg.address)


def phase(config: PhaseConfig, out: str | Path | None = None, *, mode: str = "new", progress: bool = True) -> RunResult:
    """The (t, beta) phase diagram of clustering; table `betas`: beta, t50, t_eq and their relative gap."""
    _refuse_resume(mode, "consensus phase")
    cfg = config
    device = _phase_device(cfg)
    if cfg.address:  # an address where nothing listens is one line, not a hang in ray.init
        from attnlab.core.parallel import check_address

        check_address(cfg.address)
    with open_run(out, "consensus phase", config, mode=mode, seed=config.seed) as run:
        betas = np.linspace(cfg.beta_min, cfg.beta_max, cfg.num_betas)
        t0 = time.perf_counter()
        pdg = phase_diagram(betas, _sweep_of(cfg), progress=progress, map_chunks=_chunk_mapper(cfg), device=device)
        metrics = phase_metrics(pdg, time.perf_counter() - t0)
        run.save_npy("frac.npy", pdg.frac)
        run.save_npy("betas.npy", pdg.betas)
        run.save_npy("t.npy", pdg.t)
        run.write_json("metrics.json", metrics)
        figures.phase_figures(run.path)
        write_report(run)
    table = _tables(
        [
            {"beta": float(b), "t50": float(a), "t_eq": float(c), "relative_gap": float(r)}
            for b, a, c, r in zip(pdg.betas, pdg.t50, pdg.t_eq, metrics["relative_gap_t50_vs_t_eq"])
        ]
    )
    return RunResult(run.path, config, metrics, {"betas": table})


def _phase_device(cfg: PhaseConfig) -> torch.device:
    """The resolved device of a phase diagram; a GPU run refuses Ray workers and sizes over its memory (one line)."""
    from attnlab.consensus.sweeps import GPU_CHUNK_BYTES
    from attnlab.core.device import resolve
    from attnlab.runs.budget import check_device_memory

    device = resolve(cfg.device)
    if device.type == "cuda":
        check(not (cfg.workers or cfg.address), "--workers/--address run the beta chunks on cpus; drop them for cuda")
        steps = int(round(cfg.t_max / cfg.h))
        gram = min(GPU_CHUNK_BYTES, cfg.num_betas * cfg.starts * cfg.n**2 * 8)
        need = 6 * gram + cfg.num_betas * (steps + 1) * 8  # Gram/weights and their temporaries, and the fractions
        check_device_memory(need, f"consensus phase --starts {cfg.starts} --n {cfg.n}", device)
    return device


# --- model ---------------------------------------------------------------------------------------------------
def model(config: ModelConfig, out: str | Path | None = None, *, mode: str = "new", progress: bool = True) -> RunResult:
    """Iterate the model's decoder stack for every (schedule, MLP) group on the same prompts; tables: `groups`
    (fall of mean log10 E_first from pass 1 to the last, CI, Spearman) and `timeseries` (E_first per layer step)."""
    from attnlab.hf.loader import load_causal_lm

    _refuse_resume(mode, "consensus model")
    from attnlab.core.device import resolve

    device = resolve(config.device)  # cuda without one: one line, before the model is loaded
    if out is not None:  # refuse a bad --out before spending seconds on loading the model
        check_out_folder(Path(out), mode, "consensus model")
    loaded = load_causal_lm(config.model, cache_dir=config.cache_dir, seq_len=config.seq_len, seq_flag="--seq-len")
    _check_model_memory(loaded.model, config, device)
    runner = modelrun.runner_for(loaded.model.to(device), config)
    ids, groups = modelrun.load_prompts(loaded.tokenizer, config)  # on the cpu: saved as they are
    with open_run(out, "consensus model", config, mode=mode, seed=config.seed) as run, on_device(device):
        run.save_npy("prompts.npy", ids.numpy())
        run.write_json(
            "model.json",
            {
                "name": loaded.name,
                "given": loaded.given,  # as the user named it, not the folder it was loaded from
                "n_layers": runner.n_layers,
                "dtype": "float32",
                "measures": modelrun.MEASURES_NOTE,
            },
        )
        res = modelrun.iterate_groups(runner, ids.to(device), groups, config, progress)
        metrics = modelrun.model_metrics(runner, res)
        rows = modelrun.save_model(run, config, runner.n_layers, res, metrics)
        modelrun.save_decode(run, res, loaded.tokenizer)
        figures.model_figures(run.path)
        write_report(run)
    table = _tables(
        [
            {
                "group": g,
                "fall_pass1_to_last": s["fall_pass1_to_last"],
                "ci95_lo": s["fall_ci95"][0],
                "ci95_hi": s["fall_ci95"][1],
                "spearman": s["spearman_pass_vs_mean_log10_E"],
            }
            for g, s in metrics["groups"].items()
        ]
    )
    return RunResult(run.path, config, metrics, {"groups": table, "timeseries": _tables(rows)})


def _check_model_memory(model: torch.nn.Module, cfg: ModelConfig, device: torch.device) -> None:
    """On a GPU, one line when the model, a random stack's copy of its blocks and a pass's kept states (prompts
    and controls, float32 hidden states and their float64 measures) exceed its memory."""
    from attnlab.runs.budget import check_device_memory

    if device.type != "cuda":
        return
    params = sum(p.numel() * p.element_size() for p in model.parameters())
    d, L = int(getattr(model.config, "hidden_size", 0) or 0), int(getattr(model.config, "num_hidden_layers", 1) or 1)
    rows = 2 * cfg.prompts * len(cfg.domains)
    states = rows * cfg.seq_len * d * (L + 1) * (4 + 3 * 8)
    check_device_memory(2 * params + states, f"consensus model --model {cfg.model}", device)


# --- norm ----------------------------------------------------------------------------------------------------
def norm(config: NormConfig, out: str | Path | None = None, *, mode: str = "new", progress: bool = True) -> RunResult:
    """R13: per-layer relative error of the sphere idealisation of the pre-attention RMSNorm, and the fall of
    E_first over periodic passes with the real and the idealised norms; table `layers` (errors per layer).
    Writes `metrics.json`, `curves.npz` (`real`, `ideal`: E_first [prompt, passes*L+1]), `prompts.npy`,
    `R13.png` and `report.html`."""
    from attnlab.consensus import normproj
    from attnlab.hf.loader import load_causal_lm
    from attnlab.hf.texts import domain_windows

    _refuse_resume(mode, "consensus norm")
    if out is not None:
        check_out_folder(Path(out), mode, "consensus norm")
    loaded = load_causal_lm(config.model, cache_dir=config.cache_dir, seq_len=config.seq_len, seq_flag="--seq-len")
    runner = normproj.StackRunner(loaded.model)
    normproj.check_input_norms(runner)  # before the run folder exists
    blocks = [domain_windows(loaded.tokenizer, d, config.prompts, config.seq_len, config.seed) for d in config.domains]
    ids = torch.cat(blocks)
    with open_run(out, "consensus norm", config, mode=mode, seed=config.seed) as run:
        run.save_npy("prompts.npy", ids.numpy())
        norms, err = normproj.fit_layers(runner, ids)
        curves = normproj.consensus_curves(loaded.model, norms, ids, config.passes, config.mlp)
        L = runner.n_layers
        metrics = normproj.norm_metrics(err, curves, L, config.passes, config.fall)
        save_npz(run.file("curves.npz"), **curves)
        run.write_json("metrics.json", metrics)
        figures.norm_figures(run.path)
        write_report(run)
    rows = [{"layer": i, **{k: err[k][i] for k in err}} for i in range(L)]
    return RunResult(run.path, config, metrics, {"layers": _tables(rows)})


RUNNERS: dict[str, tuple[type, Callable[..., RunResult]]] = {
    "consensus simulate": (SimulateConfig, simulate),
    "consensus phase": (PhaseConfig, phase),
    "consensus model": (ModelConfig, model),
    "consensus norm": (NormConfig, norm),
}
