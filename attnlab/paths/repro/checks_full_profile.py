"""The direct computations of paths that only the full profile runs: B2 (the solver on the image-like synthetic
problem at P = 600) and B4 / SC-H1 (the §10 adjudication protocol, `sampling.protocol`, hours). Each
`compute(seed, size)` returns named numbers, which reproduce saves; the rows are in `targets.py`."""

from __future__ import annotations

import math
from typing import Any

# B2: the solver on the image-like synthetic problem (P = 600, N0 = 192, n_tok = 48, H = 4, L = 2) ------------------
B2_POINT = {"N": 100.0, "T": 0.1}  # alpha = P/N = 6


def image_data(P: int = 600, n_test: int = 1000, d_qk: int = 128, seed: int = 0) -> Any:
    """`PathData` of `tasks.images` for 2 layers of 4 random qk heads (d_qk = 128, entries N(0, 1/N0)), unit
    variances, mean readout; the memory is checked before anything is drawn (`tasks.data.check_sizes`)."""
    import torch

    from attnlab.paths.networks.architecture import PathConfig, PathNetwork
    from attnlab.paths.networks.kernels import PathGram, scaled_paths
    from attnlab.paths.tasks.data import PathData, check_sizes, random_qk_layers
    from attnlab.paths.tasks.images import N0, N_TOK, image_task

    mode = check_sizes(P, n_test, N_TOK, N0, [4, 4])
    cfg = PathConfig(random_qk_layers([4, 4], N0, d_qk, seed + 1000), (10.0, 10.0, 10.0), (1.0,) * 4, "mean")
    xtr, ytr, xte, yte = image_task(P, n_test)
    net = PathNetwork(cfg)
    xit = scaled_paths(net.paths(torch.tensor(xtr)), cfg.variances[0])
    xit_test = scaled_paths(net.paths(torch.tensor(xte)), cfg.variances[0])
    return PathData(cfg, PathGram(xit, mode), xit_test, ytr, yte, {}, "images")


def paths_b2(seed: int, size: dict) -> dict:
    """B2: one (N, T) point (`B2_POINT`) solved by `theory.points.theory_point` (Newton, tol 1e-8, Hessian check)
    on `size["threads"]` torch threads (default `TIMING_THREADS`, the spec's 2 cores; set for this experiment only
    by `core.clitools.threads`): max|grad|, convergence, the smallest Hessian eigenvalue, the solve's seconds (data
    building excluded), the threads, the 1-minute load average at the start (issue 39: judged only below
    `QUIET_LOAD`) and the test accuracies of the theory and the GP."""
    import time

    from attnlab.core.clitools import threads
    from attnlab.core.targets import TIMING_THREADS, machine_load
    from attnlab.paths.theory.points import theory_point

    n_threads, load = int(size.get("threads", TIMING_THREADS)), machine_load()
    with threads(n_threads):
        t0 = time.perf_counter()
        data = image_data(size.get("P", 600), size.get("n_test", 1000), seed=seed)
        build = time.perf_counter() - t0
        sp, rec = theory_point(data, B2_POINT["N"], B2_POINT["T"])
    return {"B2_max_grad": sp.max_grad, "B2_converged": float(sp.converged), "B2_point_seconds": sp.wall_s,
            "B2_hessian_min_eig": sp.hessian_min_eig if sp.hessian_min_eig is not None else math.nan,
            "B2_iterations": float(sp.iterations), "B2_build_seconds": build, "B2_accuracy": rec["accuracy"],
            "B2_accuracy_gp": rec["accuracy_gp"], "B2_P": float(data.P), "B2_threads": float(n_threads),
            "B2_load_at_start": load}  # fmt: skip


# B4 and SC-H1: the §10 adjudication (sampling.protocol), full profile --------------------------------------------
ADJUDICATION = ("paths_adjudication_C1", "paths_adjudication_C2", "paths_adjudication_C3", "paths_adjudication_gate")
"""The experiments of the adjudication: one per configuration (C3 with the paper's point) and gate 1, so a kill
loses at most one and `--workers` runs them side by side."""


ADJ_CHAINS = 4  # protocol.protocol_point's chains: kept_draws_min = the fewest kept draws (all chains) of a point


def _gate_numbers(points: list[dict]) -> dict:
    """How many points failed R̂ <= 1.01 and bulk ESS >= 400 after their doublings, the extremes, and the fewest
    kept draws of a point (the replicates of SC-H1's MCSE intervals)."""
    rh = [float(p["rhat_max"]) for p in points]
    ess = [float(p["ess_bulk_min"]) for p in points]
    return {"points": float(len(points)), "points_failing_rhat_1.01": float(sum(r > 1.01 for r in rh)),
            "points_failing_ess_400": float(sum(e < 400 for e in ess)), "rhat_max": max(rh), "ess_bulk_min": min(ess),
            "points_counted_s_0.10": float(sum(p["s"] >= 0.10 and p["T"] == 0.1 for p in points)),
            "draws_doubled_points": float(sum(p["tries"] > 1 for p in points)),
            "kept_draws_min": float(min(ADJ_CHAINS * p["draws_used"] for p in points))}  # fmt: skip


def _e64_mcse(points: list[dict], config: str, alphas: tuple[float, ...], form: str) -> float:
    """The MCSE of e_f at N = 64 as `protocol.form_status` reports it (the largest over alphas), by the delta method
    on that point's per-entry MCSEs (`sampling.diagnostics.rel_frob_err_mcse`); NaN where that e is NaN (an alpha
    whose N = 64 point the s >= 0.10 filter removed)."""
    from attnlab.paths.sampling.diagnostics import rel_frob_err_mcse
    from attnlab.paths.sampling.protocol import E_AT_N, counted

    at = [p for a in alphas for p in counted(points, config, a) if p["N"] == E_AT_N]
    if len(at) < len(alphas):
        return math.nan
    worst = max(at, key=lambda p: float(p[f"e_{form}"]))
    return rel_frob_err_mcse(worst["U_hat"], worst["U_mcse"], worst[f"U_{form}"])


def _config_numbers(points: list[dict], config: str, alphas: tuple[float, ...]) -> dict:
    """§10.8's status of each form in `config` (`protocol.form_status`) as numbers, with the MCSE of its e at
    N = 64 (`_e64_mcse`)."""
    from attnlab.paths.sampling.protocol import FORMS, form_status

    out: dict[str, float] = {}
    for f in FORMS:
        st = form_status(points, config, alphas, f)
        out |= {f"{f}_max_a_over_se_{config}": st["max_a_over_se"], f"{f}_e_N64_{config}": st["e_N64"]}
        out |= {f"{f}_supported_{config}": float(st["supported"]), f"{f}_rejected_{config}": float(st["rejected"])}
        out[f"{f}_e_N64_mcse_{config}"] = _e64_mcse(points, config, alphas, f)  # SC-H1's interval of e(64)
    return out


B4_THREADS = 2  # §10.10's budget is "1 h on 2 cores": each adjudication experiment runs on two torch threads


def paths_adjudication(config: str, seed: int, size: dict) -> dict:
    """B4 for one configuration: every point of §10.3's grid in `config` by `protocol.protocol_point` (collapsed
    HMC, 4 chains, `warmup` + `draws` doubled up to `doublings` times until the gates pass), then its §10.8 status
    with the s >= 0.10 filter. `size` may shrink the grid (alphas, Ns, paper_point) for a check. Runs on
    `size["threads"]` (default `B4_THREADS`) torch threads, set for this experiment only by the CLI helper
    (`core.clitools.threads`); `seconds` is its wall time on them, `threads` and `load_at_start` (the 1-minute
    load average when it began) say how it was measured."""
    import os
    import time

    from attnlab.core.clitools import threads
    from attnlab.paths.sampling.protocol import grid, protocol_point

    n_threads, load = int(size.get("threads", B4_THREADS)), os.getloadavg()[0]
    t0, alphas = time.perf_counter(), tuple(size.get("alphas", (1.0, 4.0)))
    run = {k: size[k] for k in ("warmup", "draws", "n_leapfrog", "n_test")}
    with threads(n_threads):
        points = [protocol_point(c, a, N, T, **run, doublings=size.get("doublings", 2), seed=seed)
                  for c, a, N, T in grid((config,), alphas, tuple(size.get("Ns", (8, 16, 32, 64))),
                                         size.get("paper_point", True))]  # fmt: skip
    return {**_gate_numbers(points), **_config_numbers(points, config, alphas), "seconds": time.perf_counter() - t0,
            "threads": float(n_threads), "load_at_start": load}  # fmt: skip


def paths_adjudication_c1(seed: int, size: dict) -> dict:
    """`paths_adjudication` in C1 (H = 1, L = 1)."""
    return paths_adjudication("C1", seed, size)


def paths_adjudication_c2(seed: int, size: dict) -> dict:
    """`paths_adjudication` in C2 (H = 1, L = 2)."""
    return paths_adjudication("C2", seed, size)


def paths_adjudication_c3(seed: int, size: dict) -> dict:
    """`paths_adjudication` in C3 (the 4-path network), with the paper's point."""
    return paths_adjudication("C3", seed, size)


def paths_adjudication_gate(seed: int, size: dict) -> dict:
    """§10.1's gate 1 (`protocol.gate_full_vs_collapsed`), on two threads as `paths_adjudication`."""
    import os
    import time

    from attnlab.core.clitools import threads
    from attnlab.paths.sampling.protocol import gate_full_vs_collapsed

    n_threads, load, t0 = int(size.get("threads", B4_THREADS)), os.getloadavg()[0], time.perf_counter()
    run = {k: size[k] for k in ("warmup", "draws", "n_leapfrog", "n_test")}
    with threads(n_threads):
        gate = gate_full_vs_collapsed(**run, seed=seed)
    return {**gate, "gate1_full_vs_collapsed_run": 1.0, "seconds": time.perf_counter() - t0,
            "threads": float(n_threads), "load_at_start": load}  # fmt: skip
