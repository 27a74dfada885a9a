"""The direct computations behind some reproduction targets of paths: library functions run with no study command,
checked against the spec's formulas (each `compute(seed, size)` returns named numbers, which reproduce saves). Here
the theory's unit checks: T5 (U_a's closed form, `paths_ua`), T1–T4 and T7–T9 (`paths_units`) and T6, T11, T15,
T16 (the block update, head scores, the tasks and the bad inputs, `paths_more_units`). The samplers' checks are in
`checks_sampling.py`, B2 and the §10 adjudication of the full profile in `checks_full_profile.py`. The unit tests
that cover the same formulas call the same library functions; the rows are in `targets.py`, the measures that read
study runs in `measures.py`."""

from __future__ import annotations

import math
from typing import Any

import numpy as np


def paths_ua(seed: int, size: dict) -> dict:
    """T5: U_a's closed form against the 1-D minimiser of its action, as tests/paths/test_theory.py checks it: a
    bounded minimiser (good to ~sqrt(eps) only, shown as closed_form_vs_bounded_minimiser) refined by a root-finder
    on the action's derivative bracketed within 1e-4 of it (good to eps: closed_form_vs_minimiser, judged)."""
    import math

    import torch
    from scipy.optimize import brentq, minimize_scalar

    from attnlab.paths.theory.action import U_a_closed_form

    err, rough_err, resid, s2L, s2a = 0.0, 0.0, 0.0, 1.3, 0.8
    for H_L, N_L, N_a, trace in [(2, 10.0, 10.0, 3.0), (1, 5.0, 20.0, 0.4), (4, 30.0, 7.0, 9.0)]:

        def action(u: float, H_L: int = H_L, N_L: float = N_L, N_a: float = N_a, tr: float = trace) -> float:
            return N_a * (u / s2a - math.log(u)) + N_L * (tr / (u * s2L) + H_L * math.log(u))

        def slope(u: float, H_L: int = H_L, N_L: float = N_L, N_a: float = N_a, tr: float = trace) -> float:
            return N_a / s2a - N_a / u - N_L * tr / (s2L * u**2) + N_L * H_L / u

        rough = minimize_scalar(action, bounds=(1e-6, 1e3), method="bounded", options={"xatol": 1e-13}).x
        ref = brentq(slope, rough * (1 - 1e-4), rough * (1 + 1e-4), xtol=1e-15, rtol=1e-15)
        cf = float(U_a_closed_form(torch.tensor(trace, dtype=torch.float64), H_L, N_L, N_a, s2L, s2a))
        err = max(err, abs(cf - ref) / max(1.0, ref))
        rough_err = max(rough_err, float(abs(cf - rough) / max(1.0, rough)))
        resid = max(resid, abs(slope(cf)))
    return {"closed_form_vs_minimiser": err, "closed_form_vs_bounded_minimiser": rough_err,
            "stationarity_residual": resid}  # fmt: skip


# network of bilinear heads (P = 10, N0 = 6, n_tok = 4), their largest deviation recorded ------------------------
def tiny_paths(H: tuple[int, ...], P: int = 10, readout: str = "last", seed: int = 0) -> tuple:
    """(network, x [P, n_tok, N0], y [P], its path Gram) for random bilinear heads per layer `H`."""
    import torch

    from attnlab.paths.networks.architecture import HeadSpec, PathConfig, PathNetwork
    from attnlab.paths.networks.kernels import PathGram, scaled_paths

    rng = np.random.default_rng(seed)
    layers = [[HeadSpec("bilinear", W=rng.standard_normal((6, 6)) / 2) for _ in range(h)] for h in H]
    net = PathNetwork(PathConfig(layers, tuple([5.0] * (len(H) + 1)), tuple([1.0] * (len(H) + 2)), readout))
    x = torch.tensor(rng.standard_normal((P, 4, 6)))
    y = np.where(np.arange(P) < P // 2, 1.0, -1.0)
    return net, x, y, PathGram(scaled_paths(net.paths(x)))


def _problem(gram: Any, y: Any, H: tuple[int, ...], N: float = 5.0, T: float = 0.1, form: str = "chain",
             variances: tuple[float, ...] | None = None) -> Any:  # fmt: skip
    import torch

    from attnlab.paths.theory.action import Problem

    L = len(H)
    return Problem(gram, torch.tensor(y), T, list(H), tuple([float(N)] * (L + 1)),
                   tuple(variances or [1.0] * (L + 2)), form)  # fmt: skip


def _paths_t1_t3() -> dict:
    """T1 layer form vs path form; T2 attention rows sum to 1 and layer 2 is softmax of the raw x; T3 Gram mode,
    factor mode and the direct contraction."""
    import torch

    from attnlab.paths.networks.kernels import PathGram

    t1 = 0.0
    for H, readout in [((2, 2), "last"), ((2, 1), "mean"), ((3,), "first")]:
        net, x, _, _ = tiny_paths(H, readout=readout)
        w = net.init_weights(x.shape[-1], torch.Generator().manual_seed(1))
        t1 = max(t1, float((net.forward(x, w) - net.forward_paths(x, w)).abs().max()))
    net, x, _, gram = tiny_paths((2, 2))
    A = net.attention(x)
    t2 = max(float((a.sum(-1) - 1).abs().max()) for a in A)
    for h, head in enumerate(net.cfg.layers[1]):
        score = (x @ torch.as_tensor(head.W) @ x.transpose(1, 2)).transpose(1, 2)
        t2 = max(t2, float((A[1][:, h] - torch.softmax(score, -1)).abs().max()))
    M = torch.tensor(np.random.default_rng(2).standard_normal((4, 4)))
    U = M @ M.T
    direct = sum(U[p, q] * gram.xit[:, p] @ gram.xit[:, q].T for p in range(4) for q in range(4))
    fac = PathGram(gram.xit, mode="factor")
    t3 = max(float((g.kernel(U) - direct).abs().max()) for g in (gram, fac))
    return {"T1_max_abs_diff": t1, "T2_max_abs_diff": t2, "T3_max_abs_diff": t3}


def _paths_t4_t7() -> dict:
    """T4 the entropy gradient at the GP point and the solver at N = 1e12; T7 the analytic gradient against
    autograd and central finite differences (relative)."""
    import torch

    from attnlab.paths.theory.action import action_value, entropy_gp_gradient, evaluate
    from attnlab.paths.theory.solver import solve_saddle_point

    _, _, y, gram = tiny_paths((2, 2))
    grad = max(entropy_gp_gradient(_problem(gram, y, (2, 2), 7.0, form=f, variances=(1.0, 1.3, 0.7, 1.1)))
               for f in ("chain", "simple"))  # fmt: skip
    huge = float(np.abs(solve_saddle_point(_problem(gram, y, (2, 2), N=1e12), hessian=False).U - np.eye(4)).max())
    auto_err, fd_err, rng = 0.0, 0.0, np.random.default_rng(0)
    for form in ("chain", "simple"):
        prob = _problem(gram, y, (2, 2), N=4.0, form=form)
        Ms = [torch.tensor(rng.standard_normal((n, n))) for n in prob.sizes()]
        Us = [(M @ M.T / M.shape[0] + torch.eye(M.shape[0], dtype=torch.float64)).requires_grad_(True) for M in Ms]
        ev = evaluate(prob, Us)
        for g, auto in zip(ev.grads, torch.autograd.grad(action_value(prob, Us), Us)):
            auto_err = max(auto_err, float((g.detach() - 0.5 * (auto + auto.T)).abs().max()))
        for l, U in enumerate(Us):
            D = torch.tensor(rng.standard_normal(U.shape))
            D = D + D.T
            shifted = [[u.detach() + (s * 1e-5 * D if k == l else 0) for k, u in enumerate(Us)] for s in (1, -1)]
            fd = float(action_value(prob, shifted[0]) - action_value(prob, shifted[1])) / 2e-5
            an = float((ev.grads[l].detach() * D).sum())
            fd_err = max(fd_err, abs(fd - an) / max(1.0, abs(an)))
    return {"T4_gp_entropy_gradient": float(grad), "T4_huge_N_max_abs_U_minus_I": huge,
            "T7_grad_vs_autograd": auto_err, "T7_grad_vs_fd_rel": fd_err}  # fmt: skip


def _paths_t8_t9() -> dict:
    """T8 H = 1 (L = 1, 2; both forms): the solver (tol 1e-11) against `scalar_reference`, and U -> Σ² as α -> 0;
    T9 the predictor at U = Σ²I against GP regression (mean, variance) and the smallest variance."""
    import torch

    from attnlab.paths.theory.action import scalar_reference
    from attnlab.paths.theory.predictor import gp_U, predict
    from attnlab.paths.theory.solver import solve_saddle_point

    ref_err, small_err = 0.0, 0.0
    for L in (1, 2):
        _, _, y, gram = tiny_paths((1,) * L, P=12)
        for form in ("chain", "simple"):
            for N in (3.0, 30.0):
                prob = _problem(gram, y, (1,) * L, N=N, T=0.05, form=form)
                sp = solve_saddle_point(prob, tol=1e-11, hessian=False)
                ref = scalar_reference(gram.path_kernels()[0, 0], prob.Y, 0.05, prob.alpha, L, form)
                ref_err = max(ref_err, abs(sp.U[0, 0] - ref) / max(1, ref) if sp.converged else math.inf)
            small = solve_saddle_point(_problem(gram, y, (1,) * L, N=1e10, T=0.05, form=form), hessian=False)
            small_err = max(small_err, abs(small.U[0, 0] - 1.0))
    _, _, y, gram = tiny_paths((2, 2))
    K = sum(gram.xit[:, p] @ gram.xit[:, p].T for p in range(4))
    pred = predict(gp_U(4), gram, y, 0.1, gram.xit)
    reg = K + 0.1 * torch.eye(10, dtype=torch.float64)
    mean = (K @ torch.linalg.solve(reg, torch.tensor(y))).numpy()
    var = torch.diag(K - K @ torch.linalg.solve(reg, K)).numpy()
    return {"T8_solver_vs_root_finder": float(ref_err), "T8_small_alpha_U_minus_1": float(small_err),
            "T9_mean_vs_gp": float(np.abs(pred.mean - mean).max()), "T9_var_vs_gp": float(np.abs(pred.var - var).max()),
            "T9_min_var": float(pred.var.min())}  # fmt: skip


def paths_units(seed: int, size: dict) -> dict:
    """The attention-paths T1-T4 and T7-T9 numbers (module section above)."""
    return {**_paths_t1_t3(), **_paths_t4_t7(), **_paths_t8_t9()}


# T6, T11, T15 and T16: the block update, head scores, the tasks and the bad inputs of §12 ---------------------------
def _t7_residual(prob: Any, before: list, after: list) -> float:
    """max |LHS of [T7]| / N_max over the blocks U_2..U_L of `after`, each with the neighbours [T8]'s sweep used
    for it: U_{l+1} from `after` (U_a by its closed form from `before`'s U_L when l = L) and U_{l-1} from `before`
    (the sweep runs l = L..2, so the lower block was not yet updated)."""
    import torch

    from attnlab.paths.theory.action import U_a_closed_form, kron_eye, ptrace

    H, N, s2, L = prob.H, prob.widths, prob.variances, prob.L
    U_a = U_a_closed_form(torch.trace(before[-1]), H[-1], N[L - 1], N[L], s2[L], s2[L + 1])
    worst = 0.0
    for j in range(1, L):  # block U_{j+1} of the spec (0-indexed j)
        X = torch.linalg.inv(after[j])
        upper = (1.0 / U_a).reshape(1, 1) if j == L - 1 else torch.linalg.inv(after[j + 1])
        M = ptrace(before[j - 1], H[j - 1])
        lhs = N[j] * (kron_eye(H[j], upper) / s2[j + 1] - X) + N[j - 1] * (H[j - 1] * X - X @ M @ X / s2[j])
        worst = max(worst, float(lhs.abs().max()) / prob.N_max)
    return worst


def _t6_blocks() -> dict:
    """T6: one [T8] sweep (`solver._chain_blocks`, the fixed-point method's block update) from random PD blocks,
    L = 2 and 3, equal widths (b >= 0) and unequal ones (b < 0), checked against [T7] (`_t7_residual`)."""
    import torch

    from attnlab.paths.theory.action import Problem
    from attnlab.paths.theory.solver import _chain_blocks

    rng, worst, b_signs = np.random.default_rng(3), 0.0, set()
    for H, widths in [((2, 2), (5.0, 5.0, 5.0)), ((2, 2), (3.0, 20.0, 4.0)), ((2, 2, 2), (4.0, 6.0, 30.0, 5.0))]:
        _, _, y, gram = tiny_paths(H)
        prob = Problem(gram, torch.tensor(y), 0.1, list(H), widths, (1.0, 1.3, 0.7, 1.1, 0.9)[: len(H) + 2])
        Ms = [torch.tensor(rng.standard_normal((n, n))) for n in prob.sizes()]
        before = [M @ M.T / M.shape[0] + torch.eye(M.shape[0], dtype=torch.float64) for M in Ms]
        after = [U.clone() for U in before]
        _chain_blocks(prob, after)
        worst = max(worst, _t7_residual(prob, before, after))
        b_signs |= {float(np.sign(widths[j - 1] * H[j - 1] - widths[j])) for j in range(1, len(H))}
    return {"T6_T8_vs_T7_residual": worst, "T6_b_signs_tried": float(len(b_signs))}


T11_U = ((6, 1, 0, -2), (1, 1, 1, 0), (0, 1, 3, 1), (-2, 0, 1, 7))  # paths (h1, h2): 00, 01, 10, 11


T11_SCORES = (15 / 19, 18 / 19, 19 / 19, 18 / 19)  # by hand: row + column sums of |U| over a head's paths, less


def _relabel_mismatches(U: Any, H: list[int]) -> int:
    """Head scores of `U` against those of every relabelling of the heads within each layer (the paths permuted
    accordingly): the number of score entries that differ at all."""
    import itertools

    from attnlab.paths.pruning.pipeline import head_scores

    ref, bad = head_scores(U, H), 0
    idx = np.array(np.unravel_index(np.arange(int(np.prod(H))), H)).T
    offsets = np.cumsum([0, *H[:-1]])
    for perms in itertools.product(*[list(itertools.permutations(range(h))) for h in H]):
        new = np.ravel_multi_index(tuple(np.array(perms[l])[idx[:, l]] for l in range(len(H))), H)
        Up = np.empty_like(U)
        Up[np.ix_(new, new)] = U
        got = head_scores(Up, H)
        moved = np.concatenate([offsets[l] + np.array(perms[l]) for l in range(len(H))])
        bad += int(np.sum(got[moved] != ref))
    return bad


def _t11_scores() -> dict:
    """T11: `pruning.pipeline.head_scores` on the hand-computed U above (H = [2, 2]), and its invariance under
    every relabelling of the heads of a random integer U (H = [2, 3]; integer entries keep the sums exact)."""

    from attnlab.paths.pruning.pipeline import head_scores

    hand = float(np.max(np.abs(head_scores(np.array(T11_U, dtype=float), [2, 2]) - np.array(T11_SCORES))))
    A = np.random.default_rng(11).integers(-9, 10, (6, 6)).astype(float)
    return {"T11_hand_max_abs_diff": hand, "T11_relabel_mismatches": float(_relabel_mismatches(A + A.T, [2, 3]))}


def _t15_tasks() -> dict:
    """T15: Markov shapes 31 x 231, balance, BOS and positions, stay rates of the sign of v+ - v- per class
    (400 sequences, seed 5); digit episodes: disjoint classes, balance, role codes, determinism (the test's calls)."""

    from attnlab.paths.tasks.digits import digit_episodes, episode_classes
    from attnlab.paths.tasks.markov import N_FEAT, markov_data

    x, y = markov_data(400, seed=5)
    s = np.sign(x[:, 1:, :100].mean(-1) - x[:, 1:, 100:N_FEAT].mean(-1))
    stay = (s[:, 1:] == s[:, :-1]).mean(1)
    shape_ok = x.shape == (400, 31, 231) and bool(np.all(x[:, 0, :N_FEAT] == 0))
    shape_ok = shape_ok and bool(np.allclose(x[:, :, N_FEAT:], np.eye(31)))
    d1, e1 = digit_episodes(40, "test")
    d2, e2 = digit_episodes(40, "test")
    roles = bool(np.all(d1[:, :4, 20] == 1) and np.all(d1[:, 4:8, 21] == 1) and np.all(d1[:, 8:, 22] == 1))
    return {"T15_markov_shapes_ok": float(shape_ok), "T15_markov_label_sum": float(abs(y.sum())),
            "T15_stay_plus_minus_0.7": float(stay[:200].mean() - 0.7),
            "T15_stay_minus_minus_0.3": float(stay[200:].mean() - 0.3),
            "T15_digits_disjoint": float(set(episode_classes("train")).isdisjoint(episode_classes("test"))),
            "T15_digits_label_sum": float(abs(e1.sum())),
            "T15_digits_ok": float(d1.shape == (40, 12, 23) and roles and np.array_equal(d1, d2)
                                   and np.array_equal(e1, e2))}  # fmt: skip


def _shape_inputs() -> list[tuple[str, Any, str]]:
    """(what, call, text its one-line InputError must contain): the shape and value checks of spec §12 that the
    tests call (tests/paths/test_errors.py), and the NaN check."""
    import torch

    from attnlab.paths.networks.architecture import HeadSpec, PathConfig, PathNetwork
    from attnlab.paths.tasks.markov import markov_data
    from attnlab.paths.theory.predictor import predict

    net, x, y, gram = tiny_paths((2, 2))
    y_nan, x_nan = y.copy(), x.clone()
    y_nan[0], x_nan[0, 0, 0] = np.nan, np.nan
    one = [[HeadSpec("bilinear", W=np.eye(5))]]
    qk = [[HeadSpec("qk", Q=np.ones((3, 5)), K=np.ones((4, 5)))]]
    maps = [[HeadSpec("precomputed", maps=np.ones((2, 3, 3)))]]
    x5, x6 = (torch.zeros(2, 3, n, dtype=torch.float64) for n in (5, 6))
    return [
        ("T = 0", lambda: _problem(gram, y, (2, 2), T=0.0), "temperature"),
        ("T < 0", lambda: _problem(gram, y, (2, 2), T=-1.0), "temperature"),
        ("P = 1 task", lambda: markov_data(1, seed=0), "got 1"),
        ("P = 1 problem", lambda: _problem(tiny_paths((2, 2), P=1)[3], y[:1], (2, 2)), "at least 2"),
        ("y shape", lambda: _problem(gram, y[:-1], (2, 2)), "Y: expected shape [P] = [10], got (9,)"),
        ("U shape", lambda: predict(np.eye(3), gram, y, 0.1, gram.xit), "U: expected [4, 4], got (3, 3)"),
        ("W shape", lambda: PathNetwork(PathConfig(one)).attention(x6), "bilinear W: expected [N0, N0] = [6, 6]"),
        ("Q/K shape", lambda: PathNetwork(PathConfig(qk)).attention(x5), "Q and K must be [d_qk, N0=5]"),
        ("attention rows", lambda: PathNetwork(PathConfig(maps)).attention(x5), "rows must sum to 1 within 1e-10"),
        ("widths count", lambda: PathConfig(one, widths=(3.0,)), "widths: need L+1 = 2 entries"),
        *[(f"width {w:g}", lambda w=w: PathConfig(one, widths=(w, 4.0)), f"got {w}") for w in (0.0, -3.0, 2.5)],
        ("variance 0", lambda: PathConfig(one, widths=(3.0, 4.0), variances=(1.0, 0.0, 1.0)), "must be > 0"),
        ("L = 0", lambda: PathConfig([]), "need L >= 1"),
        ("H_l = 0", lambda: PathConfig([[]]), "need H_l >= 1"),
        ("NaN x", lambda: net.attention(x_nan), "NaN"),
        ("NaN y", lambda: _problem(gram, y_nan, (2, 2)), "NaN"),
    ]


def _other_inputs() -> list[tuple[str, Any, str]]:
    """(what, call, text): the options as configs refuse them, the n_π cap, labels for the classification
    metrics, user kernels and conditioning."""

    from attnlab.paths.config import SampleConfig, SolveConfig
    from attnlab.paths.networks.kernels import PathGram
    from attnlab.paths.theory.predictor import Prediction, add_jitter, metrics
    from attnlab.paths.theory.solver import solve_saddle_point

    _, _, y12, gram12 = tiny_paths((2, 2), P=12)
    low_rank = PathGram(gram12.xit[..., :2].contiguous())  # N0 = 2: K has rank <= 8 < P
    v = np.random.default_rng(0).standard_normal((6, 2))
    return [
        ("odd P", lambda: SolveConfig(P=31), "even number"),
        ("--temperature 0", lambda: SolveConfig(temperature=0.0), "finite positive number, got 0.0"),
        ("--N 0.5", lambda: SolveConfig(N=0.5), "widths must be >= 1"),
        ("--thin 0", lambda: SampleConfig(thin=0), "--thin must be an integer >= 1, got 0"),
        ("n_paths cap", lambda: _check_memory_cap(), "exceeds the cap 4096"),
        (
            "y not in {±1} for metrics",
            lambda: metrics(Prediction(np.ones(4), np.ones(4)), np.array([0.5, 1, 2, 3])),
            "y",
        ),
        ("kernel not PSD", lambda: add_jitter(np.diag([1.0, -1e-3, 0.0])), "not PSD"),
        ("kernel not symmetric", lambda: add_jitter(np.array([[1.0, 0.5], [0.4, 1.0]])), "not symmetric"),
        ("kernel rank 2 needs jitter", lambda: _jitter_refused(v @ v.T), "jitter"),
        ("cond(K+TI) > 1e12", lambda: solve_saddle_point(_problem(low_rank, y12, (2, 2), T=1e-14)), "cond(K+TI)"),
    ]


def _bad_inputs() -> list[tuple[str, Any, str]]:
    """Every bad input of spec §12 that T16 tries (the memory refusal is `_memory_refusal`)."""
    return [*_shape_inputs(), *_other_inputs()]


def _check_memory_cap() -> None:
    from attnlab.paths.networks.kernels import check_memory

    check_memory(P=100, n_paths=8**4 + 1, N0=10, n_tok=5, sum_heads=32)


def _jitter_refused(K: Any) -> None:
    """`add_jitter(mode="none")` on a kernel that needs jitter: refused (jitter is never silent, spec §12)."""
    from attnlab.paths.theory.predictor import add_jitter

    add_jitter(K, mode="none")


def _refused(call: Any, text: str) -> bool:
    """Whether `call()` raises a one-line InputError containing `text` (warnings of the call are not raised)."""
    import warnings

    from attnlab.errors import InputError

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            call()
    except InputError as exc:
        return "\n" not in str(exc) and text in str(exc)
    except Exception:  # noqa: BLE001 - another error type is a miss of T16, counted, not raised
        return False
    return False


def _memory_refusal() -> tuple[bool, float]:
    """`check_memory` at P = 10^6, 256 paths (petabytes): refused with the budget named, and the bytes Python
    allocated during the refusal (tracemalloc peak: nothing of the estimate is allocated first)."""
    import tracemalloc

    from attnlab.paths.networks.kernels import check_memory

    tracemalloc.start()
    try:
        ok = _refused(lambda: check_memory(P=10**6, n_paths=256, N0=10**4, n_tok=5, sum_heads=8, mode="gram",
                                           budget=1e9), "exceeds the budget")  # fmt: skip
        peak = float(tracemalloc.get_traced_memory()[1])
    finally:
        tracemalloc.stop()
    return ok, peak


def _t16_errors() -> dict:
    """T16: how many of the bad inputs of §12 (`_bad_inputs`, plus the memory refusal) were tried, how many were
    refused with their one-line InputError, the names of those that were not, and the refusal's allocation."""
    cases = _bad_inputs()
    missed = [what for what, call, text in cases if not _refused(call, text)]
    mem_ok, peak = _memory_refusal()
    missed += [] if mem_ok and peak < 2**20 else ["memory budget"]
    return {"T16_bad_inputs_tried": float(len(cases) + 1), "T16_not_refused": float(len(missed)),
            "T16_not_refused_names": ", ".join(missed) or "none", "T16_refusal_peak_bytes": peak}  # fmt: skip


def paths_more_units(seed: int, size: dict) -> dict:
    """The attention-paths T6, T11, T15 and T16 numbers (module section above)."""
    return {**_t6_blocks(), **_t11_scores(), **_t15_tasks(), **_t16_errors()}
