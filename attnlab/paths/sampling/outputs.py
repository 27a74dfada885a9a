"""Multiple outputs (attention-paths spec §16, S8): Y in R^{P x M}, an order parameter with output indices.

With a readout A [M, N_a] (rows a_m ~ N(0, sigma_a^2 I)), output m of path pi has the effective weights
V_eff^{pi m} = a_m^T V^(L)h_L ... V^(1)h_1 / sqrt(N_a N_L ... N_2), and

    U^{(pi m),(pi' m')} = V_eff^{pi m} . V_eff^{pi' m'} / N_1,
    K_{(mu m),(nu m')} = sum_{pi pi'} U^{(pi m),(pi' m')} C^{pi pi'}_{mu nu}.

The flat index of (pi, m) is pi M + m (the output is the fastest index) and that of an example-output pair
(mu, m) is mu M + m, so `augment` turns the scaled paths [P, n_paths, N0] into block paths
[P M, n_paths M, N0] (xi~^{(pi m)}_{(mu a)} = xi~^pi_mu delta_{m a}); the existing Gram, predictor, action and
sampler then apply unchanged to vec(Y). The chain entropy ends with a free U_a = A A^T / N_a [M, M]
(`theory._evaluate_outputs`).

Markov targets (all +-1; the first M are used): `class` (the task label), `last` (the observed state of the last
token, sign of x_last . (v+ - v-)), `first` (the same for the first visible token), `majority` (the sign of the
mean observed state).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

import numpy as np
import torch

from attnlab.errors import check
from attnlab.paths.networks.architecture import PathConfig, PathNetwork
from attnlab.paths.networks.kernels import PathGram, check_memory, scaled_paths
from attnlab.paths.sampling.sampler import CollapsedTarget, sample_chains
from attnlab.paths.theory.action import Problem
from attnlab.paths.theory.predictor import gp_U, predict
from attnlab.paths.theory.solver import SaddlePoint, solve_saddle_point

OUTPUT_NAMES = ("class", "last", "first", "majority")
MAX_OUTPUTS = len(OUTPUT_NAMES)


def augment(xit: torch.Tensor, M: int) -> torch.Tensor:
    """Block paths: [P, n, N0] -> [P M, n M, N0] with out[mu M + a, pi M + m] = xit[mu, pi] delta_{a m}."""
    P, n, N0 = xit.shape
    eye = torch.eye(M, dtype=xit.dtype)
    return torch.einsum("pni,am->panmi", xit, eye).reshape(P * M, n * M, N0)


def markov_targets(x: np.ndarray, y: np.ndarray, M: int) -> np.ndarray:
    """Y [P, M] from Markov inputs x [P, 31, 231] and labels y [P] (see the module docstring)."""
    from attnlab.paths.tasks.markov import N_FEAT, _vectors

    vp, vm = _vectors()
    obs = np.sign(x[:, 1:, :N_FEAT] @ (vp - vm))  # [P, 30] observed states
    cols = {"class": y, "last": obs[:, -1], "first": obs[:, 0], "majority": np.sign(obs.mean(1) + 1e-12)}
    return np.stack([cols[name] for name in OUTPUT_NAMES[:M]], axis=1).astype(np.float64)


@dataclass
class MultiData:
    """Block Gram over (example, output) pairs, block test paths, Y_train [P, M], Y_test [n_test, M]."""

    cfg: PathConfig
    gram: PathGram
    xit_test: torch.Tensor
    Y_train: np.ndarray
    Y_test: np.ndarray
    M: int

    @property
    def P(self) -> int:
        return self.Y_train.shape[0]


def build_multi(P: int, n_test: int, variant: str, M: int, memory_budget: float | None = None) -> MultiData:
    """The Markov task with M outputs (variant as `paths solve --variant`)."""
    from attnlab.paths.tasks.data import VARIANT_HEADS
    from attnlab.paths.tasks.markov import N0, N_TOK, markov_config, markov_task

    check(1 <= M <= MAX_OUTPUTS, f"--outputs: the Markov task has {MAX_OUTPUTS} targets, got {M}")
    n_paths = math.prod(VARIANT_HEADS[variant]) * M
    mode = check_memory(P * M, n_paths, N0, N_TOK, sum(VARIANT_HEADS[variant]), "auto", memory_budget)
    cfg = markov_config(variant)
    t = markov_task(P, n_test, sigma_out=5.0 if variant == "2path" else 1.0)
    net = PathNetwork(cfg)
    xit = augment(scaled_paths(net.paths(torch.tensor(t.x_train)), cfg.variances[0]), M)
    xit_test = augment(scaled_paths(net.paths(torch.tensor(t.x_test)), cfg.variances[0]), M)
    Ytr, Yte = markov_targets(t.x_train, t.y_train, M), markov_targets(t.x_test, t.y_test, M)
    return MultiData(cfg, PathGram(xit, mode), xit_test, Ytr, Yte, M)


def multi_problem(md: MultiData, N: float, T: float, form: str = "chain") -> Problem:
    """The saddle-point problem over (path, output) pairs at width N, temperature T (Y = vec Y_train)."""
    L = md.cfg.L
    Y = torch.tensor(md.Y_train.reshape(-1))
    return Problem(md.gram, Y, T, md.cfg.H, tuple([float(N)] * (L + 1)), md.cfg.variances, form, outputs=md.M)


def output_accuracies(md: MultiData, U: np.ndarray | torch.Tensor, T: float) -> list[float]:
    """Test accuracy of sign(f_m) against Y_test[:, m], per output m."""
    mean = predict(U, md.gram, md.Y_train.reshape(-1), T, md.xit_test).mean.reshape(-1, md.M)
    return [float(np.mean(np.sign(mean[:, m]) == md.Y_test[:, m])) for m in range(md.M)]


def multi_theory(
    md: MultiData,
    N: float,
    T: float,
    form: str = "chain",
    method: str = "newton",
    tol: float = 1e-8,
    device: torch.device | None = None,
) -> tuple[SaddlePoint, dict]:
    """Solve at (N, T) on `device` (default the cpu; the block Gram is copied there) and evaluate per-output
    accuracies against the GP (U = Sigma^2 I) on the cpu; returns (sp, record)."""
    prob = multi_problem(md, N, T, form)
    prob = prob if device is None else prob.to(device)
    sp = solve_saddle_point(prob, method, tol=tol)
    S2 = prob.Sigma2
    acc, acc_gp = output_accuracies(md, sp.U, T), output_accuracies(md, gp_U(md.gram.n_paths, S2), T)
    U_out = sp.chain[-1] if (form == "chain" and md.M > 1) else None
    rec = {
        "N": N, "T": T, "P": md.P, "outputs": md.M, "output_names": list(OUTPUT_NAMES[: md.M]),
        "alpha": md.P / N, "entropy_form": form, "converged": sp.converged, "iterations": sp.iterations,
        "max_grad": sp.max_grad, "hessian_min_eig": sp.hessian_min_eig, "action": sp.S, "U": sp.U,
        "U_outputs": U_out, "accuracy_per_output": acc, "accuracy_gp_per_output": acc_gp,
        "accuracy": float(np.mean(acc)), "accuracy_gp": float(np.mean(acc_gp)), "wall_s": sp.wall_s,
    }  # fmt: skip
    return sp, rec


class MultiOutputTarget(CollapsedTarget):
    """The collapsed posterior (V^(0) integrated out) of the network with readout A [M, N_a]: theta holds the
    V^(l)h and A (flat); U is over (path, output) pairs with the output fastest."""

    def __init__(self, cfg: PathConfig, gram: PathGram, Y, T: float, M: int) -> None:
        super().__init__(cfg, gram, Y, T)
        self.M = M
        N_a = int(cfg.widths[-1])
        self.shapes[-1] = (M, N_a)  # type: ignore[assignment]  # the readout A [M, N_a] replaces a [N_a]
        self.sizes[-1] = M * N_a
        self.dim = sum(self.sizes)
        sd = [math.sqrt(cfg.variances[l + 1]) for l in range(cfg.L + 1)]
        self.prior_sd = torch.cat([torch.full((n,), s, dtype=torch.float64) for n, s in zip(self.sizes, sd)])

    def order_parameters(self, theta: torch.Tensor) -> tuple[list[torch.Tensor], torch.Tensor]:
        """([U_1..U_L] each [C, n_l M, n_l M], Tr U_a / M [C]); W_l rows (h_l..h_L, m) built top-down [N6]."""
        w = self.unpack(theta)
        A = w["a"].reshape(*theta.shape[:-1], *self.shapes[-1])
        W, out = A, []
        for l in reversed(range(self.cfg.L)):
            V = w["V"][l]
            Wn = torch.einsum("...rj,...hjk->...hrk", W, V) / math.sqrt(V.shape[-2])
            W = Wn.reshape(*Wn.shape[:-3], -1, Wn.shape[-1])
            out.append(W)
        Us = [W @ W.transpose(-1, -2) / W.shape[-1] for W in out[::-1]]
        return Us, (A * A).sum((-1, -2)) / (A.shape[-1] * self.M)


def multi_sample(
    md: MultiData, N: int, T: float, chains: int, warmup: int, draws: int, leapfrog: int = 16, seed: int = 0
) -> dict:
    """HMC at width N: U_hat [n M, n M] (mean of the draws of U), its MCSE, worst R-hat and bulk ESS."""
    from attnlab.paths.sampling.diagnostics import summarize

    target = MultiOutputTarget(md.cfg.with_widths(N), md.gram, md.Y_train.reshape(-1), T, md.M)
    t0 = time.perf_counter()
    res = sample_chains(target, chains, warmup, draws, leapfrog, "hmc", seed=seed, progress=False)
    n = res.U.shape[-1]
    iu = np.triu_indices(n)
    s = summarize(res.U[:, :, iu[0], iu[1]])
    U_hat, mcse = np.zeros((n, n)), np.zeros((n, n))
    U_hat[iu], mcse[iu] = s["mean"], s["mcse"]
    U_hat, mcse = U_hat + np.triu(U_hat, 1).T, mcse + np.triu(mcse, 1).T
    return {
        "U_hat": U_hat, "U_mcse": mcse, "rhat_max": float(np.nanmax(s["rhat"])),
        "ess_bulk_min": float(np.nanmin(s["ess_bulk"])), "accept_mean": float(res.accept.mean()),
        "divergences": int(res.divergences.sum()), "chains": chains, "warmup": warmup, "draws": draws,
        "sample_wall_s": time.perf_counter() - t0,
    }  # fmt: skip
