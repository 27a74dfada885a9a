"""U from ensembles of gradient-descent runs with frozen query/key weights (attention-paths spec §16, S7).

The attention (and so the paths xi^pi) is fixed; only the value weights {V^(0), V^(l)h, a} are trained, K times
from independent prior draws, by full-batch Adam on the negative log posterior of the `full` target

    loss(theta) = (1/2T) sum_mu (f(x^mu) - y^mu)^2 + sum_W |W|^2 / (2 sigma_W^2)

(MSE with the weight decay that the Gaussian prior implies). The K runs are one batch of C = K "chains". Then
U_GD = mean_k V_eff^k V_eff^k^T / N_1 [N8], compared with the theory's U at the same (N, T) and, when given, the
sampled U. The runs reach the posterior's modes, not its spread: U_GD is the MAP counterpart of U.
"""

from __future__ import annotations

import time

import numpy as np
import torch

from attnlab.errors import NumericalError
from attnlab.paths.sampling.sampler import FullTarget
from attnlab.paths.tasks.data import PathData
from attnlab.paths.theory.predictor import metrics, predict


def gd_ensemble(data: PathData, N: int, T: float, runs: int, steps: int, lr: float, seed: int) -> dict:
    """Train `runs` networks of width N from prior draws (seeded generator); returns U_GD [n, n], the per-run
    U [runs, n, n], final losses [runs], the per-run training MSE and the test accuracy of the mean U."""
    target = FullTarget(data.cfg.with_widths(N), data.gram, data.y_train, T)
    g = torch.Generator().manual_seed(seed)
    theta = target.prior_draw(runs, g).requires_grad_(True)
    opt = torch.optim.Adam([theta], lr=lr)
    # lr decays geometrically to lr/50 over the run, so the runs settle instead of oscillating about a mode
    sched = torch.optim.lr_scheduler.ExponentialLR(opt, gamma=0.02 ** (1.0 / max(1, steps)))
    t0 = time.perf_counter()
    losses = []
    for step in range(steps):
        opt.zero_grad()
        lp, _ = target.log_prob(theta)
        loss = -lp
        loss.sum().backward()
        opt.step()
        sched.step()
        if not torch.isfinite(loss).all():
            raise NumericalError(f"gradient descent diverged at step {step} (non-finite loss); lower --lr")
        if step % max(1, steps // 50) == 0 or step == steps - 1:
            losses.append(loss.detach().numpy().copy())
    with torch.no_grad():
        Us, _ = target.order_parameters(theta)
        U_runs = Us[0].numpy()
        w = target.unpack(theta)
        Veff = target.net.partial_weights(w)[0]
        f = torch.einsum("cpj,cji,mpi->cm", Veff, w["V0"], data.gram.xit)
        f = f / np.sqrt(data.cfg.variances[0] * N)
        mse = ((f - torch.as_tensor(data.y_train)) ** 2).mean(-1).numpy()
    U_gd = U_runs.mean(0)
    acc = metrics(predict(U_gd, data.gram, data.y_train, T, data.xit_test), data.y_test)["accuracy"]
    return {
        "U_gd": U_gd, "U_runs": U_runs, "loss_curve": np.stack(losses, 1), "final_loss": losses[-1],
        "train_mse": mse, "accuracy_U_gd": acc, "gd_wall_s": time.perf_counter() - t0,
    }  # fmt: skip


def rel_frob(A: np.ndarray, B: np.ndarray) -> float:
    """|A - B|_F / |B|_F."""
    return float(np.linalg.norm(A - B) / np.linalg.norm(B))


def run_spread(U_runs: np.ndarray) -> float:
    """Standard error of U_GD relative to its norm: |sd_k(U^k)|_F / sqrt(K) / |mean_k U^k|_F."""
    K = U_runs.shape[0]
    return float(np.linalg.norm(U_runs.std(0, ddof=1)) / np.sqrt(K) / np.linalg.norm(U_runs.mean(0)))
