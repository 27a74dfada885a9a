"""The action of the kernel-renormalisation theory and its analytic gradient (spec §5.1-5.5).

S = L_ent + (P/N_max) E with E = (1/P)[ln det(K(U)+TI) + Y^T (K+TI)^{-1} Y] [T1,T4]. Entropy `chain` [T2] over
U_1 [n_1, n_1] .. U_L [n_L, n_L] (U_a eliminated by its quadratic) or `simple` [T3] over U_1 alone. The gradient
returned is dS/dU_l (entries, symmetric) = (left-hand sides of [T6]/[T7]) / N_max.

Device: everything computes where the problem's path kernels are (`Problem.to(device)`), in float64. The
evaluation reads nothing back: a failed Cholesky factor is replaced by the identity and flagged in
`Evaluation.infos`, which `evaluate` checks once at its end (`checked=False` leaves the check to the caller, so
the solver's L-BFGS reads the flags, S and the gradient back in one transfer).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import cast

import numpy as np
import torch

from attnlab.errors import NumericalError, check
from attnlab.paths.networks.kernels import PathGram

FORMS = ("chain", "simple")


@dataclass
class Problem:
    """One saddle-point problem: training Gram, targets Y [P], temperature T, heads per layer, widths
    (N_1..N_L, N_a), variances (sigma0^2, sigma_1^2..sigma_L^2, sigma_a^2) and the entropy form."""

    gram: PathGram
    Y: torch.Tensor
    T: float
    H: list[int]
    widths: tuple[float, ...]
    variances: tuple[float, ...]
    form: str = "chain"
    outputs: int = 1

    def __post_init__(self) -> None:
        check(self.T > 0 and math.isfinite(self.T), f"temperature: must be > 0, got {self.T}")
        check(self.form in FORMS, f"entropy_form must be one of {FORMS}, got {self.form!r}")
        self.Y = torch.as_tensor(self.Y, dtype=torch.float64)
        check(bool(torch.isfinite(self.Y).all()), "Y: the targets must be finite (no NaN or Inf, spec §12)")
        self.Y = self.Y.to(self.gram.device)  # checked where it was given (the cpu), then beside the kernels
        check(
            self.Y.ndim == 1 and self.Y.shape[0] == self.gram.P,
            f"Y: expected shape [P] = [{self.gram.P}], got {tuple(self.Y.shape)}",
        )
        check(self.gram.P >= 2, f"P: need at least 2 training examples, got {self.gram.P}")
        check(self.outputs >= 1, f"outputs: need M >= 1, got {self.outputs}")
        check(
            int(np.prod(self.H)) * self.outputs == self.gram.n_paths,
            f"heads {self.H} and {self.outputs} output(s) give {int(np.prod(self.H)) * self.outputs} (path, output) "
            f"pairs but the Gram has {self.gram.n_paths}",
        )
        check(
            len(self.widths) == len(self.H) + 1, f"widths: need L+1 = {len(self.H) + 1} entries, got {len(self.widths)}"
        )
        check(len(self.variances) == len(self.H) + 2, f"variances: need L+2 entries, got {len(self.variances)}")
        for w in self.widths:
            check(w > 0, f"widths: each must be > 0 (or inf), got {w}")

    @property
    def L(self) -> int:
        return len(self.H)

    @property
    def device(self) -> torch.device:
        """Where the action computes: the device of the path kernels."""
        return self.gram.device

    def to(self, device: torch.device | str) -> Problem:
        """The same problem with its kernels and targets on `device` (copied, not recomputed); `self` if there."""
        if torch.device(device) == self.device:
            return self
        return dataclasses.replace(self, gram=self.gram.to(device), Y=self.Y.cpu())

    @property
    def N_max(self) -> float:
        return max(self.widths)

    @property
    def alpha(self) -> float:
        return self.gram.P / self.N_max

    @property
    def Sigma2(self) -> float:
        """Sigma^2 = sigma_a^2 prod_l sigma_l^2."""
        return float(np.prod(self.variances[1:]))

    def sizes(self) -> list[int]:
        """Sizes n_l of the free order parameters (`order_parameter_sizes`)."""
        return order_parameter_sizes(self.H, self.form, self.outputs)

    def gp_point(self) -> list[torch.Tensor]:
        """The GP limit: U_l = (prod_{k>=l} sigma_k^2) sigma_a^2 I (spec §5.5)."""
        return [
            torch.eye(n, dtype=torch.float64, device=self.device) * float(np.prod(self.variances[l + 1 :]))
            for l, n in enumerate(self.sizes())
        ]


def order_parameter_sizes(H: list[int], form: str, outputs: int = 1) -> list[int]:
    """Sizes n_l of the free order parameters (chain: U_1..U_L; simple: U_1). With M = `outputs` > 1 every index
    carries the output as its fastest part (n_l M) and the chain ends with the free U_a [M, M]."""
    M = outputs
    n = [int(np.prod(H[l:])) * M for l in range(len(H))]
    if form != "chain":
        return n[:1]
    return n + [M] if M > 1 else n


def ptrace(U: torch.Tensor, H: int) -> torch.Tensor:
    """Partial trace over the slow head index: [(H n), (H n)] -> [n, n]."""
    n = U.shape[-1] // H
    return torch.einsum("...hihj->...ij", U.reshape(*U.shape[:-2], H, n, H, n))


def kron_eye(H: int, X: torch.Tensor) -> torch.Tensor:
    """I_H (x) X (block diagonal)."""
    return torch.block_diag(*([X] * H))


def U_a_closed_form(trace_UL: torch.Tensor, H_L: int, N_L: float, N_a: float, s2_L: float, s2_a: float) -> torch.Tensor:
    """U_a = (-beta + sqrt(beta^2 + 4 gamma))/2, beta = s2_a (H_L N_L/N_a - 1), gamma = N_L s2_a Tr U_L/(N_a s2_L)."""
    beta = s2_a * (H_L * N_L / N_a - 1.0)
    gamma = N_L * s2_a * trace_UL / (N_a * s2_L)
    return 0.5 * (-beta + torch.sqrt(beta * beta + 4.0 * gamma))


@dataclass
class Evaluation:
    """S, E, entropy, gradients dS/dU_l [n_l, n_l], U_a, the Cholesky factor of K+TI and `infos` (int [1 + number
    of factors of U_l]: LAPACK's pivot of K+TI's factor first, then each U_l's; all zero when every factor held)."""

    S: torch.Tensor
    E: torch.Tensor
    ent: torch.Tensor
    grads: list[torch.Tensor]
    U_a: torch.Tensor
    chol: torch.Tensor
    infos: torch.Tensor


def _cholesky(X: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(factor, info) of X [n, n]; a failed factor is replaced by the identity (no read-back: `info` says it failed,
    and the values computed from it are discarded by the check)."""
    Lc, info = torch.linalg.cholesky_ex(X)
    eye = torch.eye(X.shape[-1], dtype=X.dtype, device=X.device)
    return torch.where(info == 0, Lc, eye), info


def _energy(prob: Problem, U1: torch.Tensor, need_grad: bool) -> tuple:
    """(E, Gamma [n, n] or None, chol [P, P], info) with one Cholesky of K+TI [P, P]; nothing read back."""
    K = prob.gram.kernel(U1)
    P = prob.gram.P
    Kt = K + prob.T * torch.eye(P, dtype=K.dtype, device=K.device)
    Lc, info = _cholesky(Kt)
    Y = prob.Y[:, None]
    a = torch.cholesky_solve(Y, Lc)
    logdet = 2.0 * torch.log(torch.diagonal(Lc)).sum()
    E = (logdet + (Y * a).sum()) / P
    if not need_grad:
        return E, None, Lc, info
    A = torch.cholesky_inverse(Lc)
    B = A - a @ a.T
    return E, prob.gram.contract(B), Lc, info


def _kernel_failure(prob: Problem, U1: torch.Tensor, pivot: int) -> NumericalError:
    lam = float(torch.linalg.eigvalsh(prob.gram.kernel(U1).detach())[-1])
    return NumericalError(
        f"Cholesky of K+TI failed at pivot {pivot} (T={prob.T:g}, lambda_max(K)={lam:.3g});"
        f" raise the temperature or rescale the inputs"
    )


def energy_terms(prob: Problem, U1: torch.Tensor, need_grad: bool = True):
    """One Cholesky of K+TI: returns (E, Gamma [n,n] or None, chol). Raises NumericalError on failure."""
    E, Gam, Lc, info = _energy(prob, U1, need_grad)
    pivot = int(info)
    if pivot != 0:
        raise _kernel_failure(prob, U1, pivot)
    return E, Gam, Lc


def check_infos(prob: Problem, Us: list[torch.Tensor], infos: list[int]) -> None:
    """Raise NumericalError when a factor of an evaluation at Us failed (`Evaluation.infos`, read back)."""
    if infos[0] != 0:
        raise _kernel_failure(prob, Us[0], int(infos[0]))
    if any(infos[1:]):
        raise NumericalError("an order parameter U_l lost positive definiteness")


def _inv_logdet(U: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(U^{-1}, ln det U, info) from one Cholesky factor of U [n, n]."""
    Lc, info = _cholesky(U)
    return torch.cholesky_inverse(Lc), 2.0 * torch.log(torch.diagonal(Lc)).sum(), info


def evaluate(prob: Problem, Us: list[torch.Tensor], need_grad: bool = True, checked: bool = True) -> Evaluation:
    """Action, energy, entropy and U-space gradients at Us (chain: [U_1..U_L]; simple: [U_1]). A failed Cholesky
    raises NumericalError (one read-back of `infos` at the end); `checked=False` leaves that to the caller."""
    ev = _evaluate(prob, Us, need_grad)
    if checked:
        check_infos(prob, Us, ev.infos.tolist())
    return ev


def _evaluate(prob: Problem, Us: list[torch.Tensor], need_grad: bool) -> Evaluation:
    """`evaluate` without the check: every tensor stays on the problem's device."""
    E, Gam, Lc, info = _energy(prob, Us[0], need_grad)
    Nmax = prob.N_max
    s2 = prob.variances
    if math.isinf(Nmax):
        raise NumericalError("infinite widths: use gp_point() (the GP limit) instead of the action")
    dev = prob.device
    if prob.form == "simple":
        Uinv, logdet, info_U = _inv_logdet(Us[0])
        ent = torch.trace(Us[0]) / prob.Sigma2 - logdet
        S = ent + prob.alpha * E
        grads = []
        if need_grad:
            n = Us[0].shape[0]
            g = (torch.eye(n, dtype=torch.float64, device=dev) / prob.Sigma2 - Uinv) + Gam / Nmax
            grads = [0.5 * (g + g.T)]
        Sigma2 = torch.tensor(prob.Sigma2, dtype=torch.float64, device=dev)
        return Evaluation(S, E, ent, grads, Sigma2, Lc, torch.stack([info, info_U]))
    pairs = [_inv_logdet(U) for U in Us]
    infos = torch.stack([info] + [p[2] for p in pairs])
    if prob.outputs > 1:
        return _evaluate_outputs(prob, Us, E, Gam, Lc, need_grad, pairs, infos)
    L, H, N = prob.L, prob.H, prob.widths
    U_a = U_a_closed_form(torch.trace(Us[-1]), H[-1], N[L - 1], N[L], s2[L], s2[L + 1])
    inv = [p[0] for p in pairs] + [(1.0 / U_a).reshape(1, 1)]
    ld = [p[1] for p in pairs] + [torch.log(U_a)]
    ent = N[L] * (U_a / s2[L + 1] - torch.log(U_a))
    for l in range(L):
        ent = ent + N[l] * (torch.sum(kron_eye(H[l], inv[l + 1]) * Us[l]) / s2[l + 1] - ld[l] + H[l] * ld[l + 1])
    ent = ent / Nmax
    S = ent + prob.alpha * E
    grads = []
    if need_grad:
        for l in range(L):
            g = N[l] * (kron_eye(H[l], inv[l + 1]) / s2[l + 1] - inv[l])
            if l == 0:
                g = g + Gam
            else:
                Ml = ptrace(Us[l - 1], H[l - 1])
                g = g + N[l - 1] * (H[l - 1] * inv[l] - inv[l] @ Ml @ inv[l] / s2[l])
            g = g / Nmax
            grads.append(0.5 * (g + g.T))
    return Evaluation(S, E, ent, grads, U_a, Lc, infos)


def _evaluate_outputs(
    prob: Problem,
    Us: list[torch.Tensor],
    E: torch.Tensor,
    Gam: torch.Tensor | None,
    Lc: torch.Tensor,
    need_grad: bool,
    pairs: list[tuple[torch.Tensor, torch.Tensor, torch.Tensor]],
    infos: torch.Tensor,
) -> Evaluation:
    """Chain form with M > 1 outputs (spec §16, S8): Us = [U_1..U_L, U_a], U_a = A A^T / N_a [M, M] free, with
    N_max L = N_a (Tr U_a / sigma_a^2 - ln det U_a) + sum_l N_l [Tr((I (x) U_{l+1}^{-1}) U_l)/sigma_l^2
    - ln det U_l + H_l ln det U_{l+1}]; U_a's gradient is [T7] with (I (x) U_{L+2}^{-1})/sigma^2 -> I/sigma_a^2.
    `Evaluation.U_a` holds Tr U_a / M."""
    L, H, N, s2 = prob.L, prob.H, prob.widths, prob.variances
    inv, ld = [p[0] for p in pairs], [p[1] for p in pairs]
    U_a = Us[L]
    ent = N[L] * (torch.trace(U_a) / s2[L + 1] - ld[L])
    for l in range(L):
        ent = ent + N[l] * (torch.sum(kron_eye(H[l], inv[l + 1]) * Us[l]) / s2[l + 1] - ld[l] + H[l] * ld[l + 1])
    ent = ent / prob.N_max
    S = ent + prob.alpha * E
    grads = []
    if need_grad:
        for l in range(L + 1):
            if l < L:
                g = N[l] * (kron_eye(H[l], inv[l + 1]) / s2[l + 1] - inv[l])
            else:
                g = N[L] * (torch.eye(prob.outputs, dtype=torch.float64, device=prob.device) / s2[L + 1] - inv[L])
            if l == 0:
                g = g + cast(torch.Tensor, Gam)
            else:
                Ml = ptrace(Us[l - 1], H[l - 1])
                g = g + N[l - 1] * (H[l - 1] * inv[l] - inv[l] @ Ml @ inv[l] / s2[l])
            g = g / prob.N_max
            grads.append(0.5 * (g + g.T))
    return Evaluation(S, E, ent, grads, torch.trace(U_a) / prob.outputs, Lc, infos)


def action_value(prob: Problem, Us: list[torch.Tensor]) -> torch.Tensor:
    """S(Us) alone (differentiable; used by autograd checks)."""
    return evaluate(prob, Us, need_grad=False).S


def entropy_gp_gradient(prob: Problem) -> float:
    """max |dL_ent/dU_l| at the GP point (energy left out): zero for both forms (test T4)."""
    Us = prob.gp_point()
    P = Problem(prob.gram, prob.Y, prob.T, prob.H, prob.widths, prob.variances, prob.form, prob.outputs)
    ev = evaluate(P, Us)
    _, Gam, _ = energy_terms(prob, Us[0])
    g0 = ev.grads[0] - Gam / prob.N_max
    return max([float(g0.abs().max())] + [float(g.abs().max()) for g in ev.grads[1:]])


def scalar_reference(
    C: torch.Tensor, Y: torch.Tensor, T: float, alpha: float, L: int, form: str, Sigma2: float = 1.0
) -> float:
    """H = 1, equal widths: solve (U/Sigma2)^{1/(L+1)} = 1 - alpha U E'(U) (chain) or U/Sigma2 = 1 - alpha U E'(U)
    (simple) with a bracketing root finder in ln U (spec §5.5). C [P, P] is the single path kernel."""
    from scipy.optimize import brentq

    lam, V = np.linalg.eigh(C.detach().cpu().numpy())
    lam = np.clip(lam, 0.0, None)
    c2 = (V.T @ Y.detach().cpu().numpy()) ** 2
    P = len(lam)
    power = 1.0 / (L + 1) if form == "chain" else 1.0

    def fn(lnU: float) -> float:
        U = math.exp(lnU)
        d = U * lam + T
        UEp = np.sum(U * lam / d - U * lam * c2 / d**2) / P
        return (U / Sigma2) ** power - (1.0 - alpha * UEp)

    lo, hi = -40.0, 40.0
    return math.exp(brentq(fn, lo, hi, xtol=1e-14, rtol=1e-15, maxiter=500))
