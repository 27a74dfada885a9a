"""One sampled point: HMC/MALA at width N (spec §7), U_hat (Eq 14) with its MCSE, the diagnostics, the gates
(spec §7.3) and the sampled (Rao-Blackwellised) predictor."""

from __future__ import annotations

import time
from collections.abc import Callable
from types import MappingProxyType
from typing import Any

import numpy as np

from attnlab.paths.networks.kernels import PathGram
from attnlab.paths.sampling.diagnostics import ebfmi, summarize
from attnlab.paths.sampling.sampler import CollapsedTarget, FullTarget, PredictorSums, SamplerResult, sample_chains
from attnlab.paths.tasks.data import PathData
from attnlab.paths.theory.predictor import Prediction, metrics

# sampler gates (spec §7.3): a sampled point is `converged` when all hold
GATES = MappingProxyType({"rhat_max": 1.01, "ess_bulk_min": 400, "ebfmi_min": 0.3, "divergence_rate": 0.005})


def sample_point(
    data: PathData,
    N: int,
    T: float,
    chains: int,
    warmup: int,
    draws: int,
    kind: str = "hmc",
    n_leapfrog: int = 16,
    thin: int = 1,
    predict_every: int = 5,
    seed: int = 0,
    progress: bool = True,
    target_kind: str = "collapsed",
    device: Any = None,
) -> dict:
    """Sampling at width N: U_hat (Eq 14) with MCSE, diagnostics, gates and the sampled predictor. The predictor
    is the Rao-Blackwellised mean over the upper-weight draws (valid for both targets: their upper-weight
    marginals are the same posterior). Diagnostics that too few draws leave undefined are NaN. `device` (a
    `torch.device`; None: the cpu): where the chains run; the path kernels are rebuilt there from the data's."""
    cfg = data.cfg.with_widths(N)
    cls = FullTarget if target_kind == "full" else CollapsedTarget
    gram, xit_test = data.gram, data.xit_test
    if device is not None and device.type != "cpu":
        gram, xit_test = PathGram(gram.xit.to(device), gram.mode), xit_test.to(device)
    target = cls(cfg, gram, data.y_train, T)
    sums = PredictorSums(target, xit_test, every=predict_every)
    t0 = time.perf_counter()
    res = sample_chains(
        target, chains, warmup, draws, n_leapfrog, kind, seed=seed, thin=thin, on_draw=sums, progress=progress
    )
    wall = time.perf_counter() - t0
    mean, var, fixed = sums.result()
    rec: dict[str, Any] = {"N": N, "T": T, "alpha": data.P / N, "sampler": kind, "target": target_kind,
                           "chains": chains, "warmup": warmup, "draws": draws}  # fmt: skip
    rec.update(_sample_summary(res, fixed, wall))
    rec.update({"pred_mean": mean, "pred_var": var})
    rec.update({f"sampled_{k}": v for k, v in metrics(Prediction(mean, var), data.y_test).items()})
    n_iter = res.U.shape[1] * thin
    rec["converged"] = bool(
        rec["rhat_max"] <= GATES["rhat_max"]
        and rec["ess_bulk_min"] >= GATES["ess_bulk_min"]
        and rec["ebfmi_min"] >= GATES["ebfmi_min"]
        and rec["divergences"] <= GATES["divergence_rate"] * chains * n_iter
    )
    return rec


def until_gates(
    run: Callable[[int], dict], draws: int, doublings: int, passed: Callable[[dict], bool] | None = None
) -> dict:
    """Spec §10.4's doubling: `run(draws * 2**k)` for k = 0, 1, ..., `doublings`, stopping at the first record whose
    gates pass (`passed`, default its `converged`: the §7.3 gates of `sample_point`). Returns the last record with
    `draws_used` (its draws per chain) and `tries` (runs made). The stated budget: at most `doublings` + 1 runs and
    draws * (2**(doublings + 1) - 1) draws per chain in all. Used by the §10 protocol (B4) and `paths sample
    --doublings` (S6)."""
    ok = passed if passed is not None else (lambda r: bool(r["converged"]))
    for k in range(doublings + 1):
        rec = run(draws * 2**k)
        if ok(rec):
            break
    return {**rec, "draws_used": draws * 2**k, "tries": k + 1}


def check_sample_memory(config: Any, gram: PathGram, device: Any) -> None:
    """On a GPU, one line when the path kernels (M [n, n, P, P] in gram mode, xi~ [P, n, N0] in factor mode), each
    chain's [P, P] kernels and their temporaries (8 copies) and the kept draws ([n, n] each) exceed its memory."""
    from attnlab.runs.budget import check_device_memory

    if getattr(device, "type", "cpu") != "cuda":
        return
    n, P = gram.n_paths, gram.P
    kernels = 8.0 * (n * n * P * P if gram.mode == "gram" else P * n * gram.N0)
    need = kernels + 8.0 * 8 * config.chains * P**2 + 8.0 * config.chains * config.draws * (n * n + 6)
    check_device_memory(need, f"paths sample --chains {config.chains} --draws {config.draws} --P {config.P}", device)


def _nan_extreme(values: np.ndarray, fn: str) -> float:
    """nanmax / nanmin of `values`, NaN (not available) when every entry is NaN."""
    finite = values[~np.isnan(values)]
    if finite.size == 0:
        return float("nan")
    return float(finite.max() if fn == "max" else finite.min())


def _sample_summary(res: SamplerResult, fixed: np.ndarray, wall: float) -> dict:
    """U_hat, U_mcse [n, n], U_a with MCSE, worst R-hat and bulk ESS over U, U_a, log p and the fixed predictor
    draws, acceptance, divergences, E-BFMI and the final step sizes."""
    n = res.U.shape[-1]
    iu = np.triu_indices(n)
    s_U = summarize(res.U[:, :, iu[0], iu[1]])
    s_a = summarize(res.U_a[..., None])
    s_lp = summarize(res.log_prob[..., None])
    s_f = summarize(fixed)
    U_hat, U_mcse = np.zeros((n, n)), np.zeros((n, n))
    U_hat[iu], U_mcse[iu] = s_U["mean"], s_U["mcse"]
    U_hat, U_mcse = U_hat + np.triu(U_hat, 1).T, U_mcse + np.triu(U_mcse, 1).T
    rh = np.concatenate([s_U["rhat"], s_a["rhat"], s_lp["rhat"], s_f["rhat"]])
    es = np.concatenate([s_U["ess_bulk"], s_a["ess_bulk"], s_lp["ess_bulk"], s_f["ess_bulk"]])
    ess_min = _nan_extreme(es, "min")
    return {
        "U_hat": U_hat, "U_mcse": U_mcse, "U_a_hat": float(s_a["mean"][0]), "U_a_mcse": float(s_a["mcse"][0]),
        "rhat_max": _nan_extreme(rh, "max"), "ess_bulk_min": ess_min,
        "accept_mean": float(res.accept.mean()), "divergences": int(res.divergences.sum()),
        "numerical_rejections": int(res.numerical_rejections.sum()),
        "ebfmi_min": float(ebfmi(res.energy).min()), "step_size": res.step_size,
        "ess_per_s": ess_min / wall, "wall_s": wall,
    }  # fmt: skip
