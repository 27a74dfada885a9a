"""Saddle-point solver for the order parameters (spec §5.6).

U_l = R_l R_l^T with R_l lower triangular, diagonal exp(rho_l) (so every U_l stays positive definite); U_a is
eliminated in closed form. `newton`: L-BFGS (scipy, Moré-Thuente line search, history 20) from the GP point to
max|dS/dU| < 1e-5, then Newton steps on the exact Hessian (autograd of the analytic gradient) with backtracking
(Levenberg shift when the Hessian is not PD). `lbfgs`: L-BFGS alone, except that a line search stalling above
`tol` is finished by at most 10 Newton steps (phase "newton_polish" in the trace, said in `note`).
`fixed_point`: block updates [T8] + damped U_1.
Stopping: max over entries of |dS/dU_l| < tol, or `max_iter`.

Where it computes: on the cpu with the Gram stored (one output), the L-BFGS phase and the Newton Hessian use the
NumPy mirror `fast.FastAction`; otherwise, and on any other device, the torch action `evaluate` computes where the
problem's kernels are (`Problem.to(device)`, float64): K(U), its Cholesky, inverse and Gamma, the Newton Hessian
(autograd of the analytic gradient), the fixed-point updates. scipy's L-BFGS still drives from the host, so each
function evaluation copies theta there and S, the gradient and the factor flags back, in one transfer each way.
`fast=False` forces the torch path on the cpu (what a GPU runs; the tests compare the two).
"""

from __future__ import annotations

import json
import math
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from attnlab.errors import InputError, NumericalError, check
from attnlab.paths.theory.action import Evaluation, Problem, U_a_closed_form, energy_terms, evaluate, kron_eye, ptrace

METHODS = ("newton", "lbfgs", "fixed_point")


@dataclass
class SaddlePoint:
    """Result of a solve: U = U_1 [n_paths, n_paths], chain [U_1..U_L], U_a, S, E, entropy and diagnostics."""

    U: np.ndarray
    chain: list[np.ndarray]
    U_a: float
    S: float
    E: float
    entropy: float
    max_grad: float
    hessian_min_eig: float | None
    iterations: int
    method: str
    entropy_form: str
    converged: bool
    trace: list[dict] = field(default_factory=list)
    lambda_min: list[float] = field(default_factory=list)
    cond_K: float = float("nan")
    wall_s: float = 0.0
    note: str = ""

    def summary(self) -> dict:
        """JSON-ready scalars (no trace)."""
        return {
            "U": self.U.tolist(),
            "U_a": self.U_a,
            "action": self.S,
            "energy": self.E,
            "entropy": self.entropy,
            "max_grad": self.max_grad,
            "hessian_min_eig": self.hessian_min_eig,
            "iterations": self.iterations,
            "method": self.method,
            "entropy_form": self.entropy_form,
            "converged": self.converged,
            "lambda_min": self.lambda_min,
            "cond_K": self.cond_K,
            "wall_s": self.wall_s,
            "note": self.note,
        }

    def save(self, stem: str | Path) -> None:
        """`<stem>.safetensors` (U and the chain) + `<stem>.json` (scalars and trace)."""
        from safetensors.numpy import save

        from attnlab.runs import write_bytes, write_text

        stem = Path(stem)
        write_bytes(
            stem.with_suffix(".safetensors"),
            save({f"U_{l + 1}": np.ascontiguousarray(u) for l, u in enumerate(self.chain)}),
        )
        write_text(stem.with_suffix(".json"), json.dumps({**self.summary(), "trace": self.trace}, indent=1))


class Param:
    """theta <-> (R_l, U_l): per layer the lower-triangular entries of R_l, the diagonal stored as log. theta
    [dim] and every R_l, U_l [n_l, n_l] live on `device` (default the cpu)."""

    def __init__(self, sizes: list[int], device: torch.device | None = None) -> None:
        self.sizes = sizes
        self.device = torch.device("cpu") if device is None else device
        self.idx = [torch.tril_indices(n, n, device=self.device) for n in sizes]
        self.counts = [n * (n + 1) // 2 for n in sizes]

    @property
    def dim(self) -> int:
        return sum(self.counts)

    def Rs(self, theta: torch.Tensor) -> list[torch.Tensor]:
        out, k = [], 0
        for n, (i, j), c in zip(self.sizes, self.idx, self.counts):
            v = theta[k : k + c]
            v = torch.where(i == j, torch.exp(v), v)
            R = torch.zeros(n, n, dtype=theta.dtype, device=theta.device).index_put((i, j), v)
            out.append(R)
            k += c
        return out

    def Us(self, theta: torch.Tensor) -> list[torch.Tensor]:
        return [R @ R.T for R in self.Rs(theta)]

    def from_Us(self, Us: list[torch.Tensor]) -> torch.Tensor:
        parts = []
        for U, (i, j) in zip(Us, self.idx):
            R = torch.linalg.cholesky(U)
            v = R[i, j]
            parts.append(torch.where(i == j, torch.log(v), v))
        return torch.cat(parts)

    def grad_theta(self, Rs: list[torch.Tensor], grads: list[torch.Tensor]) -> torch.Tensor:
        """dS/dtheta from dS/dU_l: dS/dR = 2 G R (lower part), times R_ii on the log-diagonal."""
        parts = []
        for R, G, (i, j) in zip(Rs, grads, self.idx):
            gR = 2.0 * G @ R
            v = gR[i, j]
            parts.append(torch.where(i == j, v * R[i, j], v))
        return torch.cat(parts)


def _fast(prob: Problem, fast: bool = True):
    """(FastAction, NumpyParam) when `fast` and the Gram tensor is stored on the cpu (one output), else None."""
    if not fast or prob.gram.M is None or prob.outputs > 1 or prob.device.type != "cpu":
        return None
    from attnlab.paths.theory.fast import FastAction, NumpyParam

    return FastAction(prob), NumpyParam(prob.sizes())


def _max_grad(grads: list[torch.Tensor]) -> float:
    """max over layers and entries of |dS/dU_l| (one read-back)."""
    return float(_max_abs(grads))


def _max_abs(grads: list[torch.Tensor]) -> torch.Tensor:
    return torch.stack([g.detach().abs().max() for g in grads]).max()


def hessian_min_eig(prob: Problem, Us: list[torch.Tensor], max_params: int = 2000) -> float | None:
    """Smallest eigenvalue of the Hessian of S in U-coordinates (upper-triangular entries); None above max_params."""
    idx = [torch.triu_indices(U.shape[0], U.shape[0], device=U.device) for U in Us]
    n_par = sum(i.shape[1] for i in idx)
    if n_par > max_params:
        return None
    u0 = torch.cat([U[i, j] for U, (i, j) in zip(Us, idx)]).detach()

    def grad_u(u: torch.Tensor) -> torch.Tensor:
        Vs, k = [], 0
        for U, (i, j) in zip(Us, idx):
            c = i.shape[0]
            M = torch.zeros_like(U).index_put((i, j), u[k : k + c])
            Vs.append(M + M.T - torch.diag(torch.diagonal(M)))
            k += c
        ev = evaluate(prob, Vs)
        return torch.cat([torch.where(i == j, G[i, j], 2.0 * G[i, j]) for G, (i, j) in zip(ev.grads, idx)])

    Hm = torch.autograd.functional.jacobian(grad_u, u0)
    Hm = 0.5 * (Hm + Hm.T)
    return float(torch.linalg.eigvalsh(Hm)[0])


def _torch_fg(prob: Problem, par: Param, th: np.ndarray) -> tuple[float, np.ndarray, float] | None:
    """(S, dS/dtheta [dim], max|dS/dU|) by the torch action where the problem is; None when a factor failed.
    theta goes to the device in one copy and S, the gradient and the flags come back in one: scipy's L-BFGS runs
    on the host, so these two small transfers a function evaluation are the price of the device."""
    Rs = par.Rs(torch.from_numpy(th).to(par.device))
    ev = evaluate(prob, [R @ R.T for R in Rs], checked=False)
    grad = par.grad_theta(Rs, ev.grads)
    k = ev.infos.numel()
    head = [ev.S.reshape(1), _max_abs(ev.grads).reshape(1), ev.infos.to(torch.float64)]
    host = torch.cat([*head, grad]).detach().cpu().numpy()
    if np.any(host[2 : 2 + k] != 0):
        return None
    return float(host[0]), host[2 + k :].copy(), float(host[1])


def _lbfgs(
    prob: Problem, par: Param, theta0: torch.Tensor, stop_tol: float, max_iter: int, trace: list, fast: bool = True
) -> tuple[torch.Tensor, int]:
    """scipy L-BFGS until max|dS/dU| < stop_tol; returns (theta, iterations). theta0 may be on any device; the
    optimiser's copy is on the host and the result goes back to theta0's device."""
    from scipy.optimize import minimize

    state: dict[str, Any] = {"g": math.inf, "n": 0}
    numpy_path = _fast(prob, fast)

    def fg(th: np.ndarray):
        if numpy_path is not None:
            act, npar = numpy_path
            Rs = npar.Rs(th)
            try:
                S, grads = act([R @ R.T for R in Rs])
            except (NumericalError, np.linalg.LinAlgError):
                return 1e300, np.zeros_like(th)
            state["g"] = max(float(np.abs(g).max()) for g in grads)
            state["last"] = (th.copy(), S)
            return S, npar.grad_theta(Rs, grads)
        out = _torch_fg(prob, par, th)
        if out is None:
            return 1e300, np.zeros_like(th)
        state["g"], state["last"] = out[2], (th.copy(), out[0])
        return out[0], out[1]

    def cb(intermediate_result):
        state["n"] += 1
        trace.append({"it": len(trace), "phase": "lbfgs", "S": float(state["last"][1]), "max_grad": state["g"]})
        if state["g"] < stop_tol:
            raise StopIteration

    th = theta0.cpu().numpy()
    for _ in range(4):  # restart with fresh memory when the line search stalls short of the tolerance
        options = {"maxcor": 20, "maxiter": max_iter, "ftol": 0.0, "gtol": 0.0, "maxls": 50}
        res = minimize(fg, th, jac=True, method="L-BFGS-B", callback=cb, options=options)
        th = res.x
        fg(th)
        if state["g"] < stop_tol or state["n"] >= max_iter:
            break
    return torch.from_numpy(np.array(th)).to(theta0.device), state["n"]


def _fd_hessian(fast: tuple, th: torch.Tensor) -> torch.Tensor:
    """Central differences (h = 1e-6) of the analytic NumPy theta-gradient: [dim, dim]."""
    act, npar = fast
    x = th.numpy()

    def gnp(v: np.ndarray) -> np.ndarray:
        Rs = npar.Rs(v)
        return npar.grad_theta(Rs, act([R @ R.T for R in Rs])[1])

    h, cols = 1e-6, []
    for k in range(len(x)):
        e = np.zeros_like(x)
        e[k] = h
        cols.append((gnp(x + e) - gnp(x - e)) / (2 * h))
    return torch.from_numpy(np.stack(cols, 1))


def _newton_direction(Hm: torch.Tensor, g: torch.Tensor) -> torch.Tensor:
    """-(H + shift I)^{-1} g with the symmetrised Hessian, Levenberg-shifted when not positive definite."""
    Hm = 0.5 * (Hm + Hm.T)
    shift = 0.0
    lam_min = float(torch.linalg.eigvalsh(Hm)[0])
    if lam_min <= 1e-12:
        shift = -lam_min + 1e-6 * max(1.0, float(Hm.diagonal().abs().max()))
    return -torch.linalg.solve(Hm + shift * torch.eye(len(g), dtype=Hm.dtype, device=Hm.device), g)


def _backtrack(prob: Problem, par: Param, theta: torch.Tensor, ev: Evaluation, step: torch.Tensor) -> tuple:
    """Halve t from 1 (at most 40 times) until S decreases, or holds within 1e-13 while max|g| drops; returns
    (theta, evaluation, t, accepted), the inputs unchanged when no t is accepted."""
    t = 1.0
    g0 = _max_grad(ev.grads)
    for _ in range(40):
        cand = theta + t * step
        try:
            ev_c = evaluate(prob, par.Us(cand))
        except NumericalError:
            t *= 0.5
            continue
        dS = float(ev_c.S - ev.S)
        if dS < 0 or (dS <= 1e-13 * max(1.0, abs(float(ev.S))) and _max_grad(ev_c.grads) < g0):
            return cand, ev_c, t, True
        t *= 0.5
    return theta, ev, t, False


def _newton(
    prob: Problem, par: Param, theta: torch.Tensor, tol: float, max_iter: int, trace: list, fast: bool = True
) -> tuple:
    """Damped Newton on the exact theta-Hessian; each step accepted only if S decreases (or holds while |g| drops).
    The Hessian [dim, dim] is central differences of the NumPy gradient on the cpu fast path, else autograd of the
    torch gradient where the problem is."""

    def gfun(th: torch.Tensor) -> torch.Tensor:
        Rs = par.Rs(th)  # at a theta whose evaluation was checked: nothing to read back here
        return par.grad_theta(Rs, evaluate(prob, [R @ R.T for R in Rs], checked=False).grads)

    numpy_path = _fast(prob, fast)
    ev = evaluate(prob, par.Us(theta))
    it = 0
    while _max_grad(ev.grads) >= tol and it < max_iter:
        it += 1
        g = gfun(theta).detach()
        if numpy_path is not None:
            Hm = _fd_hessian(numpy_path, theta)
        else:
            Hm = torch.autograd.functional.jacobian(gfun, theta)
        theta, ev, t, accepted = _backtrack(prob, par, theta, ev, _newton_direction(Hm, g))
        trace.append({"it": len(trace), "phase": "newton", "S": float(ev.S), "E": float(ev.E),
                      "entropy": float(ev.ent), "max_grad": _max_grad(ev.grads),
                      "step": t if accepted else 0.0})  # fmt: skip
        if not accepted:
            break
    return theta, ev, it


def _chain_blocks(prob: Problem, new: list[torch.Tensor]) -> tuple[torch.Tensor, float]:
    """Chain form: update U_L..U_2 in place by [T8] (U_a from its quadratic) and return the U_1 bracket's base
    I (x) U_2^{-1} / sigma_1^2 and scale N_1; simple form: (I / Sigma^2, N_max)."""
    if prob.form != "chain":
        return torch.eye(new[0].shape[0], dtype=torch.float64, device=new[0].device) / prob.Sigma2, prob.N_max
    H, N, s2, L = prob.H, prob.widths, prob.variances, prob.L
    U_a = U_a_closed_form(torch.trace(new[-1]), H[-1], N[L - 1], N[L], s2[L], s2[L + 1])
    for l in reversed(range(1, L)):
        upper_inv = (1.0 / U_a).reshape(1, 1) if l == L - 1 else torch.linalg.inv(new[l + 1])
        D = kron_eye(H[l], upper_inv) / s2[l + 1]
        Ml = ptrace(new[l - 1], H[l - 1])
        c, b, d = N[l - 1] / s2[l], N[l - 1] * H[l - 1] - N[l], N[l]
        w, V = torch.linalg.eigh(Ml)
        Mh = (V * w.clamp_min(0).sqrt()) @ V.T
        Q = Mh @ D @ Mh
        wq, Vq = torch.linalg.eigh(0.5 * (Q + Q.T))
        root = (Vq * (b * b + 4 * c * d * wq).clamp_min(0).sqrt()) @ Vq.T
        Z = 0.5 * (b * torch.eye(len(Q), dtype=Q.dtype, device=Q.device) + root)
        Ul = c * Mh @ torch.linalg.solve(Z, Mh)
        new[l] = 0.5 * (Ul + Ul.T)
    upper = (1.0 / U_a).reshape(1, 1) if L == 1 else torch.linalg.inv(new[1])
    return kron_eye(H[0], upper) / s2[1], N[0]


def _u1_target(prob: Problem, new: list[torch.Tensor], base: torch.Tensor, scale: float) -> torch.Tensor:
    """The U_1 fixed point (base + Gamma/scale)^{-1}, or a natural-gradient step U - U G U when the bracket is
    not positive definite (stays PD for small eta)."""
    _, Gam, _ = energy_terms(prob, new[0])
    bracket = base + Gam / scale
    if bool(torch.linalg.cholesky_ex(bracket)[1] == 0):
        return torch.linalg.inv(bracket)
    Gs = evaluate(prob, new).grads[0] * (prob.N_max / scale)
    return new[0] - new[0] @ Gs @ new[0]


def _fixed_point(prob: Problem, Us: list[torch.Tensor], tol: float, max_iter: int, trace: list):
    """Block updates [T8] for U_L..U_2, U_a by its quadratic, then a damped U_1 update (eta halved on failure)."""
    Us = [U.clone() for U in Us]
    ev = evaluate(prob, Us)
    eta, it = 0.5, 0
    while _max_grad(ev.grads) >= tol and it < max_iter:
        it += 1
        new = [U.clone() for U in Us]
        base, scale = _chain_blocks(prob, new)
        target = _u1_target(prob, new, base, scale)
        while True:
            cand = [*new]
            cand[0] = (1 - eta) * Us[0] + eta * 0.5 * (target + target.T)
            try:
                ev_c = evaluate(prob, cand)
                ok = float(ev_c.S) <= float(ev.S) + 1e-12 * abs(float(ev.S))
            except NumericalError:
                ok = False
            if ok or eta < 1e-8:
                break
            eta *= 0.5
        if not ok:
            break
        eta = min(0.5, 2 * eta)
        Us, ev = cand, ev_c
        trace.append({"it": len(trace), "phase": "fixed_point", "S": float(ev.S), "E": float(ev.E),
                      "entropy": float(ev.ent), "max_grad": _max_grad(ev.grads), "eta": eta})  # fmt: skip
    return Us, ev, it


def solve_saddle_point(
    prob: Problem,
    method: str = "newton",
    tol: float = 1e-8,
    max_iter: int = 500,
    init: list[torch.Tensor] | None = None,
    hessian: bool = True,
    fast: bool = True,
) -> SaddlePoint:
    """Minimise S over the order parameters; returns the SaddlePoint (host arrays) with diagnostics (spec §5.6).
    Computes where `prob` is (`Problem.to(device)`); `init` may be on any device. `fast=False`: the torch action
    even where the NumPy fast path applies (the cpu), i.e. the path a GPU runs."""
    check(method in METHODS, f"method must be one of {METHODS}, got {method!r}")
    check(tol > 0, f"tol must be > 0, got {tol}")
    check(prob.outputs == 1 or method != "fixed_point", "--method fixed_point: supports one output only")
    import scipy.optimize  # noqa: F401 - load scipy's own BLAS first: the limit only reaches libraries loaded now
    from threadpoolctl import threadpool_limits

    with threadpool_limits(limits=1):  # small dense algebra: threads only add overhead
        return _solve(prob, method, tol, max_iter, init, hessian, fast)


def _solve(
    prob: Problem, method: str, tol: float, max_iter: int, init: list[torch.Tensor] | None, hessian: bool, fast: bool
) -> SaddlePoint:
    t0 = time.perf_counter()
    trace: list[dict] = []
    if math.isinf(prob.N_max):
        Us = prob.gp_point()
        _, _, Lc = energy_terms(prob, Us[0], need_grad=False)
        return _result(prob, Us, None, 0, "gp", True, trace, t0, None, note="GP limit (N = inf)")
    Us0 = [U.to(prob.device).clone() for U in (init if init is not None else prob.gp_point())]
    check_condition(prob, Us0[0], "start point")
    par = Param(prob.sizes(), prob.device)
    note = ""
    if method == "fixed_point":
        Us, ev, it = _fixed_point(prob, Us0, tol, max_iter, trace)
    else:
        theta = par.from_Us(Us0)
        stop = 1e-5 if method == "newton" else tol
        theta, it = _lbfgs(prob, par, theta, max(stop, tol), max_iter, trace, fast)
        ev = evaluate(prob, par.Us(theta))
        if method == "lbfgs":
            theta, ev, it, note = _polish_stalled_lbfgs(prob, par, theta, ev, tol, max_iter, it, trace, fast)
        elif _max_grad(ev.grads) >= tol:
            theta, ev, it2 = _newton(prob, par, theta, tol, max(1, max_iter - it), trace, fast)
            it += it2
        Us = [U.detach() for U in par.Us(theta)]
    mg = _max_grad(ev.grads)
    hmin = hessian_min_eig(prob, Us) if hessian else None
    return _result(prob, Us, ev, it, method, mg < tol, trace, t0, hmin, note=note)


POLISH_STEPS = 10


def _polish_stalled_lbfgs(
    prob: Problem,
    par: Param,
    theta: torch.Tensor,
    ev: Evaluation,
    tol: float,
    max_iter: int,
    it: int,
    trace: list,
    fast: bool = True,
) -> tuple[torch.Tensor, Evaluation, int, str]:
    """L-BFGS whose line search stalled above `tol` (its result depends on the floating-point path: 1.2e-8
    against 1e-8 on one CPU, below on another) is finished by at most POLISH_STEPS damped Newton steps; the note
    says so with the gradient L-BFGS reached. Returns (theta, evaluation, iterations, note)."""
    reached = _max_grad(ev.grads)
    if reached < tol or it >= max_iter:
        return theta, ev, it, ""
    theta, ev, steps = _newton(prob, par, theta, tol, min(POLISH_STEPS, max(1, max_iter - it)), trace, fast)
    for row in trace[len(trace) - steps :]:
        row["phase"] = "newton_polish"
    return theta, ev, it + steps, f"L-BFGS stalled at max|dS/dU| = {reached:.2g}; {steps} Newton steps polished it"


def device_bytes(P: int, n_paths: int, N0: int, mode: str, sizes: list[int], method: str = "newton") -> float:
    """Bytes a solve holds where it computes (float64): the path kernels (M [n_paths^2, P^2] in gram mode; xi~
    [P, n_paths, N0] and two temporaries of its size in factor mode), 16 [P, P] matrices (K+TI, its factor, the
    inverse, B and the copies autograd keeps for the Newton Hessian) and three [dim, dim] (the Hessian, its
    symmetrised copy and eigendecomposition; dim = sum n_l (n_l + 1) / 2 over `sizes`, at most 2000 for the
    fixed-point method, which builds only `hessian_min_eig`'s)."""
    kernels = n_paths * n_paths * P * P if mode == "gram" else 3 * P * n_paths * N0
    dim = sum(n * (n + 1) // 2 for n in sizes)
    dim = min(dim, 2000) if method == "fixed_point" else dim
    return 8.0 * (kernels + 16 * P * P + 3 * dim * dim)


def check_solve_memory(what: str, device: Any, gram: tuple[int, int, int, str], sizes: list[int], method: str) -> None:
    """One line when a solve of the Gram of shape `gram` (P, n_paths, N0, mode) would not fit `device`'s memory
    (90% of its free memory; nothing is checked on the cpu, whose RAM the data's own check covers)."""
    from attnlab.runs.budget import check_device_memory as check

    P, n_paths, N0, mode = gram
    fix = "use a smaller --P, fewer heads or layers, or --device cpu"
    check(device_bytes(P, n_paths, N0, mode, sizes, method), what, device, fix)


COND_WARN, COND_REFUSE = 1e10, 1e12


def check_condition(prob: Problem, U1: torch.Tensor, where: str) -> float:
    """cond(K+TI) by eigvalsh (spec §12): warn above 1e10, refuse above 1e12 (InputError at the start point, which
    only the inputs and T determine; NumericalError at the solution)."""
    K = prob.gram.kernel(U1)
    eig = torch.linalg.eigvalsh(K + prob.T * torch.eye(prob.gram.P, dtype=K.dtype, device=K.device))
    cond = float(eig[-1] / eig[0]) if float(eig[0]) > 0 else math.inf
    if cond > COND_REFUSE:
        error = InputError if where == "start point" else NumericalError
        raise error(
            f"cond(K+TI) = {cond:.3g} > {COND_REFUSE:g} at the {where} (T={prob.T:g}, "
            f"lambda_max(K)={float(eig[-1]):.3g}); raise the temperature or rescale the inputs"
        )
    if cond > COND_WARN:
        import warnings

        warnings.warn(f"cond(K+TI) = {cond:.3g} > {COND_WARN:g} at the {where}; results may lose digits", stacklevel=3)
    return cond


def _result(prob, Us, ev, it, method, converged, trace, t0, hmin, note="") -> SaddlePoint:
    ev = ev if ev is not None and not math.isinf(prob.N_max) else None
    cond = check_condition(prob, Us[0], "solution")
    if ev is None:
        E, _, _ = energy_terms(prob, Us[0], need_grad=False)
        S, ent, mg, U_a = float("nan"), float("nan"), 0.0, float(prob.variances[-1])
    else:
        E, S, ent, mg, U_a = ev.E, float(ev.S), float(ev.ent), _max_grad(ev.grads), float(ev.U_a)
    return SaddlePoint(
        U=Us[0].detach().cpu().numpy().copy(),
        chain=[U.detach().cpu().numpy().copy() for U in Us],
        U_a=U_a,
        S=S,
        E=float(E),
        entropy=ent,
        max_grad=mg,
        hessian_min_eig=hmin,
        iterations=it,
        method=method,
        entropy_form=prob.form,
        converged=bool(converged),
        trace=trace,
        lambda_min=[float(torch.linalg.eigvalsh(U)[0]) for U in Us],
        cond_K=cond,
        wall_s=time.perf_counter() - t0,
        note=note,
    )
