"""Posterior sampling in PyTorch, float64 (spec §7): the `collapsed` target (V^(0) integrated out exactly) and an
HMC / MALA sampler with dual-averaging step size and windowed diagonal-mass adaptation, C chains batched.

Device: the chains run where the target's path kernels are (`gram.xit.device`). Every random draw comes from a cpu
`torch.Generator` seeded with `seed` and is copied over, so every device makes the same draws; nothing is read
back to the host between kept draws but the predictor's Cholesky check.

Collapsed log density (theta = upper weights {V^(l)h, a}, flat [C, d]):
  log p = -sum |W|^2/(2 sigma_W^2) - 1/2 ln det(K(U(theta)) + T I) - 1/2 Y^T (K + T I)^{-1} Y,
with U(theta) = V_eff V_eff^T / N_1 [N8]. A failed Cholesky gives -inf (a numerical rejection).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import torch

from attnlab.errors import check
from attnlab.paths.networks.architecture import PathConfig, PathNetwork
from attnlab.paths.networks.kernels import PathGram


def _draw(values: torch.Tensor, device: torch.device) -> torch.Tensor:
    """Draws made on the cpu generator, on `device` (the same numbers on every device; no copy on the cpu)."""
    return values if values.device == device else values.to(device)


class CollapsedTarget:
    """log p(theta_up | data) for C chains at once; widths from cfg (finite integers)."""

    def __init__(self, cfg: PathConfig, gram: PathGram, Y, T: float, prior_only: bool = False) -> None:
        self.prior_only = prior_only
        check(T > 0, f"temperature: must be > 0, got {T}")
        for w in cfg.widths:
            check(math.isfinite(w) and w >= 1, f"widths: sampling needs finite positive widths, got {w}")
        self.cfg, self.gram, self.T = cfg, gram, float(T)
        self.device = gram.xit.device
        self.net = PathNetwork(cfg)
        self.Y = torch.as_tensor(Y, dtype=torch.float64).to(self.device)
        self.eye = torch.eye(gram.P, dtype=torch.float64, device=self.device)
        Ns = [int(w) for w in cfg.widths]
        self.shapes = [(cfg.H[l], Ns[l + 1], Ns[l]) for l in range(cfg.L)] + [(Ns[-1],)]
        self.sizes = [int(np.prod(s)) for s in self.shapes]
        self.dim = sum(self.sizes)
        sd = [math.sqrt(cfg.variances[l + 1]) for l in range(cfg.L + 1)]
        self.prior_sd = torch.cat([torch.full((n,), s, dtype=torch.float64) for n, s in zip(self.sizes, sd)])
        self.prior_sd = self.prior_sd.to(self.device)

    def _fix_failed(self, Lc: torch.Tensor, bad: torch.Tensor) -> torch.Tensor:
        """Failed Cholesky factors replaced by the identity (their chains are rejected). On the cpu only when one
        failed, as always; elsewhere unconditionally (the same values, and no read-back)."""
        if self.device.type != "cpu" or bool(bad.any()):
            return torch.where(bad[:, None, None], self.eye, Lc)
        return Lc

    def unpack(self, theta: torch.Tensor) -> dict:
        """theta [C, d] -> {'V': [V_l [C, H_l, N_{l+1}, N_l]], 'a': [C, N_a]}."""
        parts = torch.split(theta, self.sizes, dim=-1)
        V = [p.reshape(*theta.shape[:-1], *s) for p, s in zip(parts[:-1], self.shapes[:-1])]
        return {"V": V, "a": parts[-1]}

    def order_parameters(self, theta: torch.Tensor) -> tuple[list[torch.Tensor], torch.Tensor]:
        """([U_1..U_L] each [C, n_l, n_l], U_a [C]) at theta."""
        return self.net.order_parameters(self.unpack(theta))

    def log_prob(self, theta: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(log p [C], numerical-failure mask [C])."""
        Us, _ = self.order_parameters(theta)
        K = self.gram.kernel(Us[0]) + self.T * self.eye
        Lc, info = torch.linalg.cholesky_ex(K)
        bad = info != 0
        Lc = self._fix_failed(Lc, bad)
        a = torch.cholesky_solve(self.Y.expand(theta.shape[0], -1)[..., None], Lc)[..., 0]
        lp = (
            -0.5 * ((theta / self.prior_sd) ** 2).sum(-1)
            - torch.log(torch.diagonal(Lc, dim1=-2, dim2=-1)).sum(-1)
            - 0.5 * (a * self.Y).sum(-1)
        )
        return torch.where(bad, torch.full_like(lp, -math.inf), lp), bad

    def log_prob_and_grad(self, theta: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(log p [C], d log p / d theta [C, d], failure mask [C]). The data term's gradient in U is the analytic
        -1/2 <A - a a^T, C^{pi pi'}> (spec T5); autograd only carries it from U back to theta."""
        th = theta.detach().requires_grad_(True)
        if self.prior_only:
            lp = -0.5 * ((theta / self.prior_sd) ** 2).sum(-1)
            return lp, -theta / self.prior_sd**2, torch.zeros(theta.shape[0], dtype=torch.bool, device=theta.device)
        Us, _ = self.order_parameters(th)
        U = Us[0]
        with torch.no_grad():
            K = self.gram.kernel(U) + self.T * self.eye
            Lc, info = torch.linalg.cholesky_ex(K)
            bad = info != 0
            Lc = self._fix_failed(Lc, bad)
            a = torch.cholesky_solve(self.Y.expand(theta.shape[0], -1)[..., None], Lc)
            B = torch.cholesky_inverse(Lc) - a @ a.transpose(-1, -2)
            GU = -0.5 * self.gram.contract(B)
            GU = torch.where(bad[:, None, None], torch.zeros_like(GU), GU)
            lp_data = -torch.log(torch.diagonal(Lc, dim1=-2, dim2=-1)).sum(-1) - 0.5 * (a[..., 0] * self.Y).sum(-1)
        prior = -0.5 * ((th / self.prior_sd) ** 2).sum(-1)
        (g,) = torch.autograd.grad(prior.sum() + (U * GU).sum(), th)
        lp = prior.detach() + lp_data
        return torch.where(bad, torch.full_like(lp, -math.inf), lp), g, bad

    def prior_draw(self, C: int, generator: torch.Generator) -> torch.Tensor:
        return _draw(torch.randn(C, self.dim, generator=generator, dtype=torch.float64), self.device) * self.prior_sd


@dataclass
class SamplerResult:
    """Stored draws [C, n, ...] and per-chain statistics."""

    U: np.ndarray  # [C, n, n_paths, n_paths]
    U_a: np.ndarray  # [C, n]
    chain_Us: list[np.ndarray]  # per layer [C, n, n_l, n_l]
    log_prob: np.ndarray  # [C, n]
    accept: np.ndarray  # [C, n] acceptance probabilities
    energy: np.ndarray  # [C, n] Hamiltonian at each draw
    energy_error: np.ndarray  # [C, n]
    divergences: np.ndarray  # [C]
    numerical_rejections: np.ndarray  # [C]
    step_size: np.ndarray  # [C]
    extras: dict = field(default_factory=dict)


def _windows(n_warmup: int) -> list[int]:
    """End iterations of the slow mass-adaptation windows (fast 15%, doubling slow windows, terminal 10%)."""
    start, end = int(0.15 * n_warmup), n_warmup - int(0.1 * n_warmup)
    ends, w, s = [], 25, start
    while s + w < end:
        nxt = s + w if s + 3 * w <= end else end
        ends.append(nxt)
        s, w = nxt, 2 * w
    if not ends or ends[-1] < end:
        ends.append(end)
    return ends


@dataclass
class _Adaptation:
    """Warmup state per chain [C]: dual averaging of log eps toward acceptance `delta` (Hoffman & Gelman 2014,
    gamma = 0.05, t0 = 10, kappa = 0.75) and the windowed diagonal inverse mass `minv` [C, d] (Stan's windows,
    regularised toward 1e-3 of the prior variance)."""

    eps: torch.Tensor
    minv: torch.Tensor
    delta: float
    win_ends: list[int]
    win_start: int
    mu: torch.Tensor = field(init=False)
    Hbar: torch.Tensor = field(init=False)
    logeps_bar: torch.Tensor = field(init=False)
    t_da: int = 0
    win_buf: list[torch.Tensor] = field(default_factory=list)

    def __post_init__(self) -> None:
        C = self.eps.shape[0]
        self.mu = torch.log(10 * self.eps)
        self.Hbar = torch.zeros(C, dtype=torch.float64, device=self.eps.device)
        self.logeps_bar = torch.zeros(C, dtype=torch.float64, device=self.eps.device)

    def update(self, it: int, q: torch.Tensor, acc_prob: torch.Tensor, prior_sd: torch.Tensor, warmup: int) -> None:
        """One warmup iteration: step-size update, window bookkeeping, and the final step size at the end."""
        self.t_da += 1
        t = self.t_da
        self.Hbar = (1 - 1 / (t + 10)) * self.Hbar + (self.delta - acc_prob) / (t + 10)
        logeps = self.mu - math.sqrt(t) / 0.05 * self.Hbar
        w = t**-0.75
        self.logeps_bar = w * logeps + (1 - w) * self.logeps_bar
        self.eps = torch.exp(logeps)
        if it >= self.win_start:
            self.win_buf.append(q)
        if self.win_ends and it + 1 == self.win_ends[0]:
            n = len(self.win_buf)
            var = torch.stack(self.win_buf).var(0)
            self.minv = (n / (n + 5.0)) * var + 1e-3 * (5.0 / (n + 5.0)) * prior_sd**2
            self.win_buf, self.win_ends = [], self.win_ends[1:]
            self.mu, self.t_da = torch.log(10 * self.eps), 0
            self.Hbar, self.logeps_bar = torch.zeros_like(self.Hbar), torch.zeros_like(self.Hbar)
        if it + 1 == warmup:
            self.eps = torch.exp(self.logeps_bar)


@dataclass
class _Chains:
    """Current position q [C, d] with its log p [C], gradient [C, d] and failure mask [C]."""

    q: torch.Tensor
    lp: torch.Tensor
    g: torch.Tensor
    bad: torch.Tensor


def _transition(
    target: CollapsedTarget, s: _Chains, e: torch.Tensor, minv: torch.Tensor, n_lf: int, gen: torch.Generator
) -> dict[str, torch.Tensor]:
    """One HMC transition (n_lf leapfrog steps; MALA when n_lf = 1) of every chain with step sizes e [C]:
    momentum p ~ N(0, M) with M = 1/minv, Metropolis on H = -log p + p^T minv p / 2; a non-finite or failed
    proposal is a numerical rejection, dH > 1000 a divergence. Updates `s` in place; returns the statistics."""
    C, d = s.q.shape
    p = _draw(torch.randn(C, d, generator=gen, dtype=torch.float64), s.q.device) / torch.sqrt(minv)
    H0 = -s.lp + 0.5 * (p * p * minv).sum(-1)
    qn, pn, gn, lpn, badn = s.q, p + 0.5 * e[:, None] * s.g, s.g, s.lp, s.bad
    for k in range(n_lf):
        qn = qn + e[:, None] * minv * pn
        lpn, gn, badn_k = target.log_prob_and_grad(qn)
        badn = badn_k if k == 0 else (badn | badn_k)
        pn = pn + (e[:, None] * gn if k < n_lf - 1 else 0.5 * e[:, None] * gn)
    H1 = -lpn + 0.5 * (pn * pn * minv).sum(-1)
    dH = H1 - H0
    finite = torch.isfinite(dH) & ~badn
    divergent = finite & (dH > 1000)
    acc_prob = torch.where(finite, torch.exp(torch.clamp(-dH, max=0.0)), torch.zeros_like(dH))
    acc_prob = torch.where(divergent, torch.zeros_like(acc_prob), acc_prob)
    accept = _draw(torch.rand(C, generator=gen, dtype=torch.float64), s.q.device) < acc_prob
    s.q = torch.where(accept[:, None], qn, s.q)
    s.g = torch.where(accept[:, None], gn, s.g)
    s.lp = torch.where(accept, lpn, s.lp)
    return {"acc": acc_prob, "accept": accept, "H0": H0, "H1": H1, "dH": dH, "finite": finite, "divergent": divergent}


class _Draws:
    """The kept draws: U_1, U_a, every layer's U_l, log p, acceptance, energy and energy error per draw."""

    def __init__(self) -> None:
        self.keep: dict[str, list[torch.Tensor]] = {k: [] for k in ["U", "U_a", "lp", "acc", "H", "dH"]}
        self.chain: list[list[torch.Tensor]] = []

    def add(self, target: CollapsedTarget, q: torch.Tensor, lp: torch.Tensor, st: dict[str, torch.Tensor]) -> None:
        with torch.no_grad():
            Us, U_a = target.order_parameters(q)
        self.keep["U"].append(Us[0])
        self.keep["U_a"].append(U_a)
        self.chain.append(Us)
        self.keep["lp"].append(lp)
        self.keep["acc"].append(st["acc"])
        self.keep["H"].append(torch.where(st["accept"], st["H1"], st["H0"]))
        self.keep["dH"].append(st["dH"])

    def result(self, L: int, div: torch.Tensor, numrej: torch.Tensor, eps: torch.Tensor) -> SamplerResult:
        st = {k: torch.stack(v, 1).cpu().numpy() for k, v in self.keep.items()}
        chain_Us = [torch.stack([u[l] for u in self.chain], 1).cpu().numpy() for l in range(L)]
        return SamplerResult(st["U"], st["U_a"], chain_Us, st["lp"], st["acc"], st["H"], st["dH"], div.cpu().numpy(),
                             numrej.cpu().numpy(), eps.cpu().numpy())  # fmt: skip


def sample_chains(
    target: CollapsedTarget,
    chains: int = 4,
    warmup: int = 1000,
    draws: int = 2000,
    n_leapfrog: int = 16,
    kind: str = "hmc",
    target_accept: float | None = None,
    seed: int = 0,
    thin: int = 1,
    on_draw: Callable[[torch.Tensor], None] | None = None,
    progress: bool = True,
) -> SamplerResult:
    """HMC (n_leapfrog steps) or MALA (one step) with per-chain step sizes adapted during `warmup`, then
    `draws * thin` iterations with the step size jittered by +-20%, keeping every `thin`-th; `on_draw(theta)`
    is called on every kept draw (e.g. for running predictor sums). Randomness comes from a generator seeded
    with `seed` (the global torch generator is not used)."""
    from tqdm import tqdm

    check(kind in ("hmc", "mala"), f"kind must be hmc or mala, got {kind!r}")
    check(chains >= 1 and draws >= 4 and warmup >= 0, f"need chains >= 1, draws >= 4, warmup >= 0; got "
                                                     f"{chains}, {draws}, {warmup}")  # fmt: skip
    check(n_leapfrog >= 1 and thin >= 1, f"need n_leapfrog >= 1 and thin >= 1; got {n_leapfrog}, {thin}")
    n_lf = n_leapfrog if kind == "hmc" else 1
    gen = torch.Generator().manual_seed(seed)
    C, d = chains, target.dim
    q = target.prior_draw(C, gen)
    s = _Chains(q, *target.log_prob_and_grad(q))
    dev = q.device  # the target's (its prior draw is made there)
    ad = _Adaptation(
        eps=torch.full((C,), 0.1 if kind == "hmc" else 0.05, dtype=torch.float64, device=dev),
        minv=torch.ones(C, d, dtype=torch.float64, device=dev) * target.prior_sd**2,
        delta=target_accept if target_accept is not None else (0.75 if kind == "hmc" else 0.574),
        win_ends=_windows(warmup),
        win_start=int(0.15 * warmup),
    )
    div, numrej = (torch.zeros(C, dtype=torch.long, device=dev) for _ in range(2))
    kept = _Draws()
    for it in tqdm(range(warmup + draws * thin), desc=f"paths {kind}", disable=not progress):
        jitter = None
        if it >= warmup:
            jitter = 1 + 0.2 * (2 * _draw(torch.rand(C, generator=gen, dtype=torch.float64), dev) - 1)
        st = _transition(target, s, ad.eps if jitter is None else ad.eps * jitter, ad.minv, n_lf, gen)
        if it < warmup:
            ad.update(it, s.q, st["acc"], target.prior_sd, warmup)
            continue
        div += st["divergent"].long()
        numrej += (~st["finite"]).long()
        if (it - warmup) % thin:
            continue
        kept.add(target, s.q, s.lp, st)
        if on_draw is not None:
            on_draw(s.q)
    return kept.result(target.cfg.L, div, numrej, ad.eps)


class PredictorSums:
    """Running (Welford) Rao-Blackwellised predictor over draws: mean of k_s^T (K_s+TI)^{-1} Y, variance =
    mean of the conditional variances + variance of the conditional means; `fixed` test points also kept per draw."""

    def __init__(self, target: CollapsedTarget, xit_test: torch.Tensor, every: int = 1, n_fixed: int = 16) -> None:
        check(every >= 1, f"predict_every must be >= 1, got {every}")
        self.t, self.every, self.calls = target, every, 0
        n = target.gram.n_paths
        self.Ct = torch.einsum("tpi,mqi->pqtm", xit_test, target.gram.xit).reshape(n * n, -1)  # cross path Gram
        self.Dt = torch.einsum("tpi,tqi->pqt", xit_test, xit_test).reshape(n * n, -1)
        self.n_test = xit_test.shape[0]
        self.count = 0
        dev = target.device
        self.mean = torch.zeros(self.n_test, dtype=torch.float64, device=dev)
        self.m2 = torch.zeros(self.n_test, dtype=torch.float64, device=dev)
        self.cvar = torch.zeros(self.n_test, dtype=torch.float64, device=dev)
        self.fixed_idx = torch.linspace(0, self.n_test - 1, min(n_fixed, self.n_test)).long().to(dev)
        self.fixed: list[torch.Tensor] = []

    def __call__(self, theta: torch.Tensor) -> None:
        self.calls += 1
        if (self.calls - 1) % self.every:
            return
        with torch.no_grad():
            Us, _ = self.t.order_parameters(theta)
            U = Us[0]  # [C, n, n]
            C, P = U.shape[0], self.t.gram.P
            K = self.t.gram.kernel(U) + self.t.T * self.t.eye
            Lc = torch.linalg.cholesky(K)
            k = (U.reshape(C, -1) @ self.Ct).reshape(C, self.n_test, P)
            f = (k @ torch.cholesky_solve(self.t.Y.expand(C, -1)[..., None], Lc))[..., 0]  # [C, n_test]
            v = torch.linalg.solve_triangular(Lc, k.transpose(1, 2), upper=False)
            cvar = U.reshape(C, -1) @ self.Dt - (v * v).sum(1)
            self.fixed.append(f[:, self.fixed_idx])
            for c in range(C):
                self.count += 1
                dlt = f[c] - self.mean
                self.mean += dlt / self.count
                self.m2 += dlt * (f[c] - self.mean)
                self.cvar += (cvar[c] - self.cvar) / self.count

    def result(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(mean [n_test], variance [n_test], fixed-point draws [C, n_draws, 16])."""
        var = self.cvar + self.m2 / max(self.count - 1, 1)
        return self.mean.cpu().numpy(), var.cpu().numpy(), torch.stack(self.fixed, 1).cpu().numpy()


class FullTarget(CollapsedTarget):
    """The paper's setting: all weights {V0, V^(l)h, a}, theta [C, d] with V0 [N_1, N0] first.
    log p = -(1/2T) sum_mu (f(x^mu) - y^mu)^2 - sum |W|^2/(2 sigma_W^2), f in the path form [N7] over the
    precomputed scaled paths: f = sum_pi V_eff^pi V0 xi~^pi / (sigma0 sqrt(N_1))."""

    def __init__(self, cfg: PathConfig, gram: PathGram, Y, T: float) -> None:
        super().__init__(cfg, gram, Y, T)
        if T < 1e-3:
            import warnings

            warnings.warn(f"full sampler at T = {T:g} < 1e-3: the posterior is stiff; expect small steps", stacklevel=2)
        self.N1, self.N0 = int(cfg.widths[0]), gram.N0
        self.n_v0 = self.N1 * self.N0
        self.dim = self.n_v0 + self.dim
        self.prior_sd = torch.cat(
            [torch.full((self.n_v0,), math.sqrt(cfg.variances[0]), dtype=torch.float64, device=self.device),
             self.prior_sd]
        )  # fmt: skip

    def unpack(self, theta: torch.Tensor) -> dict:
        w = super().unpack(theta[..., self.n_v0 :])
        w["V0"] = theta[..., : self.n_v0].reshape(*theta.shape[:-1], self.N1, self.N0)
        return w

    def order_parameters(self, theta: torch.Tensor) -> tuple[list[torch.Tensor], torch.Tensor]:
        return self.net.order_parameters(super().unpack(theta[..., self.n_v0 :]))

    def log_prob(self, theta: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        w = self.unpack(theta)
        Veff = self.net.partial_weights(w)[0]  # [C, n_paths, N_1]
        f = torch.einsum("cpj,cji,mpi->cm", Veff, w["V0"], self.gram.xit) / math.sqrt(self.cfg.variances[0] * self.N1)
        lp = -0.5 * ((f - self.Y) ** 2).sum(-1) / self.T - 0.5 * ((theta / self.prior_sd) ** 2).sum(-1)
        return lp, torch.zeros(theta.shape[0], dtype=torch.bool, device=theta.device)

    def log_prob_and_grad(self, theta: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        th = theta.detach().requires_grad_(True)
        lp, bad = self.log_prob(th)
        (g,) = torch.autograd.grad(lp.sum(), th)
        return lp.detach(), g, bad
