"""The study runs behind the targets, one function per run, sized by profile (tiny / quick / full).

Each experiment calls a study's Python API (attnlab.bb.train, attnlab.scan.scan, attnlab.consensus.simulate,
attnlab.paths.sweep, ...) into `folder` and returns its `RunResult` (or, for a few direct computations, a
dict of numbers). Experiments that a profile does not run are absent from `SIZES[profile]`.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

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
    "paths_solve": dict(P=30, n_test=100),
    "paths_sweep": dict(P=30, n_test=100, Ns=(10.0, 30.0, 100.0)),
    "cons_counter": dict(batch=4, t_max=30.0),
    "paths_renorm": dict(P=30, n_test=100),
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
}
FULL_SIZES: dict[str, dict] = {
    **QUICK_SIZES,
    "bb_softmax": dict(steps=2000),
    "bb_relu": dict(steps=2000),
    "bb_adam3": dict(n_layers=3, steps=3000),
    "bb_sgd3": dict(n_layers=3, steps=3000, optimizer="sgd"),
    "bb_ablate3": dict(n_layers=3, steps=3000, no_attn=(2,)),
    "bb_ablate3_nomlp0": dict(n_layers=3, steps=3000, no_attn=(2,), no_mlp=(0,)),
    "bb_paper": dict(steps=10000),
    "cons_causal": dict(batch=256, t_max=60.0, schedules=("constant", "random")),
    "cons_full": dict(batch=256, t_max=100.0, n=32),
    "cons_phase": dict(d=128, starts=64, num_betas=46, t_max=30.0),
    "paths_sample": dict(warmup=1000, draws=2000),
    "paths_prune": {},
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
}  # fmt: skip
SIZES = {"tiny": TINY_SIZES, "quick": QUICK_SIZES, "full": FULL_SIZES}


def _bb_train(folder: Path, seed: int, size: dict, **fixed: Any) -> Any:
    import attnlab.bb as bb
    from attnlab.bb.config import resolve_config

    preset = "paper" if size.get("steps", 0) >= 10000 else "cpu"
    return bb.train(resolve_config(preset, seed=seed, **{**fixed, **size}), folder, progress=False)


def bb_sample(folder: Path, seed: int, size: dict, done: dict) -> Any:
    import attnlab.bb as bb
    from attnlab.bb.config import SampleConfig

    return bb.sample(SampleConfig(n=size["n"], seq_len=256, seed=seed), folder)


def bb_intervene(folder: Path, seed: int, size: dict, done: dict) -> Any:
    import attnlab.bb as bb
    from attnlab.bb.config import InterveneConfig

    return bb.intervene(InterveneConfig(str(done["bb_softmax"].path)), folder)


def bb_theory(folder: Path, seed: int, size: dict, done: dict) -> Any:
    import attnlab.bb as bb
    from attnlab.bb.config import TheoryConfig

    return bb.theory(TheoryConfig(seed=seed), folder)


def bb_smoke(folder: Path, seed: int, size: dict, done: dict) -> Any:
    return _bb_train(folder, seed, {**size, "lin_until": size["steps"], "ckpt_every": size["steps"]})


def bb_softmax(folder: Path, seed: int, size: dict, done: dict) -> Any:
    return _bb_train(folder, seed, size, attention="softmax")


def bb_relu(folder: Path, seed: int, size: dict, done: dict) -> Any:
    return _bb_train(folder, seed, size, attention="relu")


def bb_train_as_sized(folder: Path, seed: int, size: dict, done: dict) -> Any:
    """bb_adam3, bb_sgd3, bb_ablate3, bb_paper: a `bb train` run of the sizes given."""
    return _bb_train(folder, seed, size)


def _slug(label: str) -> str:
    """A folder name for a layout label: "1 layer, parallel block" -> "1-layer-parallel-block"."""
    import re

    return re.sub(r"[^0-9A-Za-z]+", "-", label).strip("-")


def bb_variants(folder: Path, seed: int, size: dict, done: dict) -> dict:
    """R19-R21: the six layer layouts of docs/specs/bb-layer-variants.toml (`attnlab.bb.claims.VARIANTS`), one
    `bb train` run each in folder/<layout>, then the R20 figure `r20_peak_by_layout.png`. Returns {layout: run}."""
    from attnlab.bb import claims
    from attnlab.bb.figures import variant_figure

    out = {}
    for label, (n_layers, no_attn, no_mlp, block) in claims.VARIANTS:
        fixed = dict(n_layers=n_layers, no_attn=no_attn, no_mlp=no_mlp, block=block)
        out[label] = _bb_train(folder / _slug(label), seed, size, **fixed)
    variant_figure(claims.variant_table(folder), folder / "r20_peak_by_layout.png")
    return out


def bb_stability(folder: Path, seed: int, size: dict, done: dict) -> dict:
    """R22: softmax and ReLU attention over `lrs` x `seeds` (docs/specs/bb-softmax-relu-stability.toml), each trial
    run as `attnlab sweep` runs it (`sweep.engine.run_trial`: a diverged trial is recorded in its trial.json, not
    raised) into folder/trials/<attention>-lr<lr>-s<seed>. Returns {trial: record}."""
    import torch

    from attnlab.bb.config import resolve_config
    from attnlab.sweep.engine import run_trial

    fixed = {k: v for k, v in size.items() if k not in ("lrs", "seeds")}
    out = {}
    for attention in ("softmax", "relu"):
        for lr in size["lrs"]:
            for s in size["seeds"]:
                cfg = resolve_config("cpu", attention=attention, lr=lr, seed=seed + s, **fixed).to_dict()
                name = f"{attention}-lr{lr:g}-s{seed + s}"
                out[name] = run_trial("bb train", cfg, str(folder / "trials" / name), torch.get_num_threads())
    return out


# --- real models -------------------------------------------------------------------------------------------------
def real_scan(folder: Path, seed: int, size: dict, done: dict) -> Any:
    from attnlab.scan import ScanConfig, scan

    cfg = ScanConfig(domains=("prose", "code"), samples=size["samples"], tokens=size["tokens"], seed=seed)
    return scan(cfg, folder)


def real_probe(folder: Path, seed: int, size: dict, done: dict) -> dict:
    """Greedy next token after "The capital of France is", the same with dim 507 zeroed after block 11, and the
    time of a cached reload of SmolLM2."""
    import torch

    from attnlab.hf.loader import load_causal_lm
    from attnlab.tracing.adapters.hf import forward_logits
    from attnlab.tracing.interventions import ZeroDims

    load_causal_lm("smollm2")  # builds the fp32 cache on the first call
    t0 = time.perf_counter()
    lm = load_causal_lm("smollm2")
    reload_s = time.perf_counter() - t0
    ids = torch.tensor([lm.tokenizer("The capital of France is", add_special_tokens=False)["input_ids"]])
    clean = int(forward_logits(lm.model, ids)[0, -1].argmax())
    ablated = int(forward_logits(lm.model, ids, interventions=[ZeroDims(11, (507,), (0,))])[0, -1].argmax())
    return {
        "greedy": lm.tokenizer.decode([clean]),
        "greedy_dim507_zeroed": lm.tokenizer.decode([ablated]),
        "reload_seconds": reload_s,
    }


def real_quant(folder: Path, seed: int, size: dict, done: dict) -> Any:
    """R23 (a): SmolLM2's perplexity under fake int8 activations, with and without its outlier channels."""
    from attnlab.deploy import QuantizeConfig, quantize

    return quantize(QuantizeConfig(samples=size["samples"], tokens=size["tokens"], sites=size["sites"], seed=seed),
                    folder)  # fmt: skip


def real_window(folder: Path, seed: int, size: dict, done: dict) -> Any:
    """R23 (b): SmolLM2's perplexity with a sliding-window KV policy, with and without the sink (token 0)."""
    from attnlab.deploy import SlidingWindowConfig, window

    cfg = SlidingWindowConfig(samples=size["samples"], tokens=size["tokens"], windows=size["windows"], seed=seed)
    return window(cfg, folder)


def series_scan(folder: Path, seed: int, size: dict, done: dict) -> Any:
    """R25: a small GPT-2 trained on Bigram-Backcopy into a checkpoint series (`series train`, in train/), then the
    series scanned on its own evaluation text with `<s>` before each window (scan/, with sink_dynamics)."""
    from attnlab.scan import ScanConfig, scan
    from attnlab.scan.series import expand_series
    from attnlab.series import SeriesTrainConfig, train_series

    trained = train_series(SeriesTrainConfig(steps=size["steps"], save_every=size["save_every"], seed=seed),
                           folder / "train")  # fmt: skip
    series = expand_series([str(trained.path / "checkpoints")], [])
    cfg = ScanConfig(model=series[0][0], domains=("text",), text=str(trained.path / "bb_eval.txt"), prefix="bos",
                     tokens=size["tokens"], samples=size["samples"], checkpoints=series, seed=seed)  # fmt: skip
    return scan(cfg, folder / "scan")


# --- consensus ---------------------------------------------------------------------------------------------------
def cons_causal(folder: Path, seed: int, size: dict, done: dict) -> dict:
    """R1a/R1b: causal, V = I, n = 10, d = 3, Gaussian P at scale 1 and 4, each schedule of the profile."""
    from attnlab.consensus import SimulateConfig, simulate

    out = {}
    for schedule in size["schedules"]:
        for scale in (1.0, 4.0):
            cfg = SimulateConfig(n=10, d=3, batch=size["batch"], mask="causal", schedule=schedule, scale=scale,
                                 t_max=size["t_max"], record_every=10, seed=seed)  # fmt: skip
            out[f"{schedule}/scale {scale:g}"] = simulate(cfg, folder / f"{schedule}-scale{scale:g}", progress=False)
    return out


def cons_full(folder: Path, seed: int, size: dict, done: dict) -> dict:
    """R3: full attention, V = I, d = 3, n = 32, constant and random P, to t = 100."""
    from attnlab.consensus import SimulateConfig, simulate

    out = {}
    for schedule in ("constant", "random"):
        cfg = SimulateConfig(n=size["n"], d=3, batch=size["batch"], schedule=schedule, t_max=size["t_max"],
                             record_every=100_000, seed=seed)  # fmt: skip
        out[schedule] = simulate(cfg, folder / schedule, progress=False)
    return out


def cons_cluster(folder: Path, seed: int, size: dict, done: dict) -> dict:
    """R7a (beta 0.5 and 1 to t = 30) and R7b (beta 4 and 9 to t = 200, states every t = 10); Q = K = V = I."""
    from attnlab.consensus import SimulateConfig, simulate

    out = {}
    for beta, t_max in ((0.5, size["t_max"]), (1.0, size["t_max"]), (4.0, 200.0), (9.0, 200.0)):
        cfg = SimulateConfig(n=32, d=3, batch=size["batch"], beta=beta, key_query="identity", t_max=t_max,
                             integrator="euler", record_every=100, seed=seed)  # fmt: skip
        out[f"beta {beta:g}"] = simulate(cfg, folder / f"beta{beta:g}", progress=False)
    return out


def cons_tails(folder: Path, seed: int, size: dict, done: dict) -> dict:
    """R2c: fitted slope of log E_pair over E in [1e-11, 1e-3] against spec 4.6, n = 8, d = 5, P = V = I."""
    import torch

    from attnlab.consensus.dynamics import AttentionSpec
    from attnlab.consensus.integrators import integrate
    from attnlab.consensus.schedules import Constant
    from attnlab.consensus.theory import fit_log_slope, tail_slope

    n, beta, rows = 8, 0.5, {}
    for case in ("full_SA", "full_USA", "causal_SA", "causal_USA"):
        mask, kind = case.split("_")
        g = torch.Generator().manual_seed(seed + 3)
        X0 = torch.randn(size["batch"], n, 5, generator=g, dtype=torch.float64)
        X0[..., 0] = X0[..., 0].abs() + 2.0  # a hemisphere start
        t_max = 45.0 if mask == "causal" else 12.0
        spec = AttentionSpec(kind, mask, torch.tensor([beta]))
        tr = integrate(X0, Constant(), spec, t_max=t_max, h=0.05, method="rk4", measures=("E_pair",))
        pred = tail_slope(case, beta=beta, n=n)
        slopes = [fit_log_slope(tr.t, E, 1e-11, 1e-3) for E in tr.measures["E_pair"]]
        rows[case] = {"predicted": pred, "fitted": slopes, "max_rel_err": max(abs(s / pred - 1) for s in slopes)}
    return rows


def _antipodal_starts(batch: int, seed: int) -> Any:
    """[batch, 6, 3] unit tokens outside every open hemisphere: 5 random ones and minus their normalised sum, so
    0 is a positive combination of the tokens (LP margin 0)."""
    import torch

    g = torch.Generator().manual_seed(seed + 11)
    X = torch.randn(batch, 6, 3, generator=g, dtype=torch.float64)
    X[:, 5] = -X[:, :5].div(X[:, :5].norm(dim=-1, keepdim=True)).sum(1)
    return X / X.norm(dim=-1, keepdim=True)


def _entry(states: Any) -> tuple[int | None, Any]:
    """First recorded step whose LP margin is > 1e-9 (bisection: the margin stays positive once it is, spec 4.4),
    and the LP's w there; (None, None) if the tokens never enter an open hemisphere."""
    import torch

    from attnlab.consensus.measures import hemisphere_lp

    def margin(i: int) -> tuple[float, Any]:
        m, w = hemisphere_lp(torch.as_tensor(states[i : i + 1]))
        return float(m[0]), w[0]

    if margin(len(states) - 1)[0] <= 1e-9:
        return None, None
    lo, hi = 0, len(states) - 1  # margin(lo) <= 1e-9 < margin(hi)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if margin(mid)[0] > 1e-9 else (mid, hi)
    return hi, margin(hi)[1]


def cons_late(folder: Path, seed: int, size: dict, done: dict) -> dict:
    """R2b: full attention, V = P = I, n = 6, d = 3, starts outside every open hemisphere; RK4 h = 0.1 to t = 60
    with every state recorded: the per-step drop of min_i<w, x_i> after entry (w: the LP's at entry) and the share
    of starts with E_pair < 1e-8 at t = 60."""
    import numpy as np
    import torch

    from attnlab.consensus.dynamics import AttentionSpec
    from attnlab.consensus.integrators import integrate
    from attnlab.consensus.measures import hemisphere_lp, hemisphere_margin
    from attnlab.consensus.schedules import Constant

    X0 = _antipodal_starts(size["batch"], seed)
    tr = integrate(X0, Constant(), AttentionSpec("SA", "full", torch.tensor([1.0])), t_max=60.0, h=0.1,
                   method="rk4", measures=("E_pair",), record_every=1)  # fmt: skip
    states = tr.states
    assert states is not None  # record_every=1 keeps every state
    drops, entered = [], 0
    for b in range(X0.shape[0]):
        step, w = _entry(states[b])
        if step is None:
            continue
        entered += 1
        m = hemisphere_margin(torch.as_tensor(states[b, step:]), torch.as_tensor(w)).numpy()
        drops.append(float(np.max(m[:-1] - m[1:], initial=-np.inf)))
    return {
        "start_lp_margin_max": float(hemisphere_lp(X0)[0].max()),
        "max_margin_drop_after_entry": max(drops, default=float("nan")),
        "share_entered": entered / X0.shape[0],
        "share_E_pair_below_1e-8": float((tr.measures["E_pair"][:, -1] < 1e-8).mean()),
        "starts": X0.shape[0],
    }


def cons_rho(folder: Path, seed: int, size: dict, done: dict) -> dict:
    """R5a: rho = 1 is a fixed point; slopes near 1 against -2 (SA) and -2 e^beta (USA), n = 16."""
    import numpy as np

    from attnlab.consensus.theory import rho_rhs

    eps, n, worst_sa, worst_usa, fixed = 1e-7, 16, 0.0, 0.0, 0.0
    for beta in (0.5, 1.0, 2.0, 4.0):
        fixed = max(fixed, abs(float(rho_rhs(1.0, beta, n, "SA"))), abs(float(rho_rhs(1.0, beta, n, "USA"))))
        sa = -float(rho_rhs(1 - eps, beta, n, "SA")) / eps
        usa = -float(rho_rhs(1 - eps, beta, n, "USA")) / eps
        worst_sa = max(worst_sa, abs(sa + 2.0))
        worst_usa = max(worst_usa, abs(usa / (-2 * np.exp(beta)) - 1))
    return {"rho_rhs_at_1": fixed, "sa_slope_abs_err": worst_sa, "usa_slope_rel_err": worst_usa}


def cons_phase(folder: Path, seed: int, size: dict, done: dict) -> Any:
    """R6a: the phase diagram (n = 32, beta in [0.5, 5]) against the equiangular curve."""
    from attnlab.consensus import PhaseConfig, phase

    cfg = PhaseConfig(n=32, d=size["d"], starts=size["starts"], beta_min=0.5, beta_max=5.0,
                      num_betas=size["num_betas"], t_max=size["t_max"], seed=seed,
                      device=size.get("device", "cpu"))  # fmt: skip
    return phase(cfg, folder, progress=False)


def cons_counter(folder: Path, seed: int, size: dict, done: dict) -> Path:
    """R12: Q = K = 0 with V = I and with a rotating V = J (`consensus.claims.run_R12`: n = 16, d = 4)."""
    from attnlab.consensus.claims import run_R12

    run_R12(folder, batch=size["batch"], t_max=size["t_max"], seed=seed)
    return folder


def cons_norm(folder: Path, seed: int, size: dict, done: dict) -> Any:
    """R13: SmolLM2's pre-attention RMSNorm against its sphere idealisation (`consensus norm`, MLPs off)."""
    from attnlab.consensus import NormConfig, norm

    return norm(NormConfig(passes=size["passes"], prompts=size["prompts"], seed=seed), folder, progress=False)


def cons_decode(folder: Path, seed: int, size: dict, done: dict) -> Any:
    """R14: SmolLM2's stack cycled (periodic) with MLPs on and off, every position decoded at each pass end
    (`consensus model --both-mlp --no-depth-view`)."""
    from attnlab.consensus import ModelConfig, model

    cfg = ModelConfig(passes=size["passes"], prompts=size["prompts"], mlp=(True, False), depth_view=False, seed=seed)
    return model(cfg, folder, progress=False)


# --- paths -------------------------------------------------------------------------------------------------------
def _timed(fn: Callable[[], Any]) -> tuple[Any, float]:
    t0 = time.perf_counter()
    result = fn()
    return result, time.perf_counter() - t0


def paths_ua(folder: Path, seed: int, size: dict, done: dict) -> dict:
    """T5: U_a's closed form against a 1-D bounded minimiser of its action, and the stationarity residual."""
    import math

    import torch
    from scipy.optimize import minimize_scalar

    from attnlab.paths.theory.action import U_a_closed_form

    err, resid, s2L, s2a = 0.0, 0.0, 1.3, 0.8
    for H_L, N_L, N_a, trace in [(2, 10.0, 10.0, 3.0), (1, 5.0, 20.0, 0.4), (4, 30.0, 7.0, 9.0)]:

        def action(u: float, H_L: int = H_L, N_L: float = N_L, N_a: float = N_a, tr: float = trace) -> float:
            return N_a * (u / s2a - math.log(u)) + N_L * (tr / (u * s2L) + H_L * math.log(u))

        ref = minimize_scalar(action, bounds=(1e-6, 1e3), method="bounded", options={"xatol": 1e-13}).x
        cf = float(U_a_closed_form(torch.tensor(trace, dtype=torch.float64), H_L, N_L, N_a, s2L, s2a))
        err = max(err, abs(cf - ref) / max(1.0, ref))
        resid = max(resid, abs(N_a / s2a - N_a / cf - N_L * trace / (s2L * cf**2) + N_L * H_L / cf))
    return {"closed_form_vs_minimiser": err, "stationarity_residual": resid}


def paths_solve(folder: Path, seed: int, size: dict, done: dict) -> dict:
    from attnlab.paths import SolveConfig, solve

    cfg = SolveConfig(N=10.0, P=size["P"], n_test=size["n_test"], seed=seed)
    result, wall = _timed(lambda: solve(cfg, folder))
    return {"result": result, "wall_s": wall}


def paths_sweep(folder: Path, seed: int, size: dict, done: dict) -> dict:
    from attnlab.paths import SweepConfig, sweep

    cfg = SweepConfig(Ns=size["Ns"], P=size["P"], n_test=size["n_test"], seed=seed)
    result, wall = _timed(lambda: sweep(cfg, folder))
    return {"result": result, "wall_s": wall}


def paths_sample(folder: Path, seed: int, size: dict, done: dict) -> dict:
    from attnlab.paths import SampleConfig, sample

    cfg = SampleConfig(N=10.0, warmup=size["warmup"], draws=size["draws"], seed=seed)
    result, wall = _timed(lambda: sample(cfg, folder))
    return {"result": result, "wall_s": wall}


def paths_prune(folder: Path, seed: int, size: dict, done: dict) -> dict:
    from attnlab.paths import PruneConfig, prune

    result, wall = _timed(lambda: prune(PruneConfig(), folder))
    return {"result": result, "wall_s": wall}


def paths_renorm(folder: Path, seed: int, size: dict, done: dict) -> Any:
    """S9: `paths solve --renorm scalar` (the scalar saddle against the GP and the matrix renormalisation)."""
    from attnlab.paths import SolveConfig, solve

    return solve(SolveConfig(renorm="scalar", P=size["P"], n_test=size["n_test"], seed=seed), folder)


def paths_layers(folder: Path, seed: int, size: dict, done: dict) -> Path:
    """S6: L = 3, H = 2 on digit episodes (`paths.claims.run_S6`: a sweep and collapsed HMC at N = 10)."""
    from attnlab.paths.claims import run_S6

    run_S6(folder, warmup=size["warmup"], draws=size["draws"])
    return folder


def paths_ensemble(folder: Path, seed: int, size: dict, done: dict) -> Any:
    """S7: U from gradient-descent ensembles (`paths ensemble`), against the sampled U of paths_sample if run."""
    from attnlab.paths import EnsembleConfig, ensemble

    sampled = done.get("paths_sample", {}).get("result")
    cfg = EnsembleConfig(runs=size["runs"], steps=size["steps"], seed=seed,
                         sampled=str(sampled.path) if sampled is not None else None)  # fmt: skip
    return ensemble(cfg, folder)


def paths_outputs(folder: Path, seed: int, size: dict, done: dict) -> Any:
    """S8: `paths sample --outputs M` (U over path-output pairs against collapsed HMC)."""
    from attnlab.paths import SampleConfig, sample

    cfg = SampleConfig(outputs=size["outputs"], warmup=size["warmup"], draws=size["draws"], seed=seed)
    return sample(cfg, folder)


def paths_prune_long(folder: Path, seed: int, size: dict, done: dict) -> Any:
    """The `paths prune` network trained longer (S10 plugs its attention into the theory)."""
    from attnlab.paths import PruneConfig, prune

    return prune(PruneConfig(steps=size["steps"]), folder)


def paths_plugin(folder: Path, seed: int, size: dict, done: dict) -> Any:
    """S10: `paths solve --task digits --attention precomputed --from <paths_prune_long>`."""
    from attnlab.paths import SolveConfig, solve

    cfg = SolveConfig(task="digits", attention="precomputed", from_run=str(done["paths_prune_long"].path),
                      N=size["N"], temperature=size["temperature"], P=size["P"], n_test=size["n_test"],
                      seed=seed)  # fmt: skip
    return solve(cfg, folder)


EXPERIMENTS: dict[str, Callable[[Path, int, dict, dict], Any]] = {
    "bb_sample": bb_sample,
    "bb_smoke": bb_smoke,
    "bb_softmax": bb_softmax,
    "bb_intervene": bb_intervene,
    "bb_relu": bb_relu,
    "bb_theory": bb_theory,
    "bb_adam3": bb_train_as_sized,
    "bb_sgd3": bb_train_as_sized,
    "bb_ablate3": bb_train_as_sized,
    "bb_ablate3_nomlp0": bb_train_as_sized,
    "bb_paper": bb_train_as_sized,
    "real_scan": real_scan,
    "real_probe": real_probe,
    "real_quant": real_quant,
    "real_window": real_window,
    "series_scan": series_scan,
    "cons_causal": cons_causal,
    "cons_full": cons_full,
    "cons_cluster": cons_cluster,
    "cons_tails": cons_tails,
    "cons_late": cons_late,
    "cons_rho": cons_rho,
    "cons_phase": cons_phase,
    "paths_ua": paths_ua,
    "paths_solve": paths_solve,
    "paths_sweep": paths_sweep,
    "paths_sample": paths_sample,
    "paths_prune": paths_prune,
    "bb_variants": bb_variants,
    "bb_stability": bb_stability,
    "cons_counter": cons_counter,
    "cons_norm": cons_norm,
    "cons_decode": cons_decode,
    "paths_renorm": paths_renorm,
    "paths_layers": paths_layers,
    "paths_ensemble": paths_ensemble,
    "paths_outputs": paths_outputs,
    "paths_prune_long": paths_prune_long,
    "paths_plugin": paths_plugin,
}


# experiments that need another one first
def sized(name: str, profile: str, device: str) -> dict:
    """The size settings of experiment `name` at `profile`, with `device` for the runs that compute on a GPU."""
    size = SIZES[profile][name]
    gpu = (bb_smoke, bb_softmax, bb_relu, bb_train_as_sized, bb_variants, bb_stability, cons_phase)
    return {**size, "device": device} if device != "cpu" and EXPERIMENTS[name] in gpu else size


NEEDS = {"bb_intervene": "bb_softmax", "paths_plugin": "paths_prune_long"}
