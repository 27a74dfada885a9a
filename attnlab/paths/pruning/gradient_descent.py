"""Gradient-descent path (spec §9.3): the same architecture [N1-N4] with `qk` heads computed from the raw x,
trained in float32 (V0, V^(l)h, a, Q_h, K_h), then handed to the theory with the query/key weights frozen.

Shapes: x [B, n_tok, N0]; Q, K per layer [H, d_qk, N0]; V0 [N, N0]; V per layer [H, N, N]; a [N].
Head masks (for pruning) zero a head and rescale the head sum to 1/sqrt(#active heads); they are kept on the cpu
and copied to the input's device in the forward (their count is read on the cpu: no read-back).
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import torch

from attnlab.paths.networks.architecture import HeadSpec, PathConfig


class GDNetwork(torch.nn.Module):
    """f(x) = a . x^(L) r / sqrt(N) with x^(l) = (n_active N)^{-1/2} sum_h m_h V^(l)h x^(l-1) Omega^(l)h(x)."""

    def __init__(
        self, N0: int, H: int = 4, L: int = 2, N: int = 128, d_qk: int = 16, readout: str = "mean", seed: int = 42
    ) -> None:
        super().__init__()
        g = torch.Generator().manual_seed(seed)
        self.N0, self.H, self.L, self.N, self.d_qk, self.readout = N0, H, L, N, d_qk, readout
        rn = lambda *s: torch.nn.Parameter(torch.randn(*s, generator=g))  # noqa: E731
        self.V0 = rn(N, N0)
        self.V = torch.nn.ParameterList([rn(H, N, N) for _ in range(L)])
        self.a = rn(N)
        self.Q = torch.nn.ParameterList(
            [torch.nn.Parameter(torch.randn(H, d_qk, N0, generator=g) / math.sqrt(N0)) for _ in range(L)]
        )
        self.K = torch.nn.ParameterList(
            [torch.nn.Parameter(torch.randn(H, d_qk, N0, generator=g) / math.sqrt(N0)) for _ in range(L)]
        )
        self.masks = [torch.ones(H) for _ in range(L)]

    def attention(self, x: torch.Tensor, l: int) -> torch.Tensor:
        """[B, H, query, key] from the raw x."""
        q = torch.einsum("btd,hkd->bhtk", x, self.Q[l])
        k = torch.einsum("btd,hkd->bhtk", x, self.K[l])
        return torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(self.d_qk), dim=-1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.einsum("ij,btj->bit", self.V0, x) / math.sqrt(self.N0)
        for l in range(self.L):
            A = self.attention(x, l)
            active = float(self.masks[l].sum())  # the cpu mask: no read-back from the device
            m = self.masks[l].to(device=x.device, dtype=x.dtype)
            y = torch.einsum("bjt,bhst->bhjs", h, A) * m[None, :, None, None]
            h = torch.einsum("hij,bhjs->bis", self.V[l], y) / math.sqrt(active * self.N)
        xbar = h.mean(-1) if self.readout == "mean" else h[..., -1]
        return xbar @ self.a / math.sqrt(self.N)

    def set_pruned(self, removed: list[tuple[int, int]]) -> None:
        """Zero the listed (layer, head) pairs; an empty list restores the full network."""
        self.masks = [torch.ones(self.H) for _ in range(self.L)]
        for l, h in removed:
            self.masks[l][h] = 0.0

    def to_config(self, N: float = 10.0) -> PathConfig:
        """Freeze Q/K as float64 qk heads of a PathConfig (the theory recomputes the attention)."""
        layers = [
            [
                HeadSpec(
                    "qk",
                    Q=self.Q[l][h].detach().double().numpy(),
                    K=self.K[l][h].detach().double().numpy(),
                    name=f"L{l + 1}H{h}",
                )
                for h in range(self.H)
            ]
            for l in range(self.L)
        ]
        return PathConfig(layers, tuple([float(N)] * (self.L + 1)), tuple([1.0] * (self.L + 2)), self.readout)


def accuracy(model: GDNetwork, x: np.ndarray, y: np.ndarray) -> float:
    with torch.no_grad():
        f = model(torch.tensor(x, dtype=torch.float32))
    return float((torch.sign(f).numpy() == y).mean())


def train_gd(
    model: GDNetwork,
    steps: int = 3000,
    batch: int = 128,
    lr: float = 1e-3,
    weight_decay: float = 5e-5,
    seed: int = 42,
    pool_size: int = 20000,
    progress: bool = True,
    augment: str = "none",
) -> list[dict]:
    """Adam on the MSE to +-1 over batches drawn from a pool of `pool_size` training episodes (fresh draws are
    approximated by a large pool, which keeps the episode sampler out of the inner loop). Trains where the model
    is: the pool [pool, n_tok, N0] is drawn on the cpu and copied there once (`gd_loop`). `augment="dihedral"`
    gives each pool episode one random symmetry of the square on all three images (`digits.digit_episodes`).
    Returns the log, one {step, loss} every 50 steps and at the last."""
    from attnlab.paths.tasks.digits import digit_episodes

    device = model.a.device
    x_pool, y_pool = digit_episodes(pool_size - pool_size % 2, "train", seed=seed, augment=augment)
    xp = torch.tensor(x_pool, dtype=torch.float32).to(device)
    yp = torch.tensor(y_pool, dtype=torch.float32).to(device)
    logged = gd_loop(model, xp, yp, steps, batch, lr, weight_decay, seed, progress)
    values = torch.stack([loss for _, loss in logged]).cpu().tolist()  # the losses' one read-back
    return [{"step": step, "loss": value} for (step, _), value in zip(logged, values)]


def gd_loop(
    model: GDNetwork,
    xp: torch.Tensor,
    yp: torch.Tensor,
    steps: int,
    batch: int,
    lr: float,
    weight_decay: float,
    seed: int,
    progress: bool = True,
) -> list[tuple[int, torch.Tensor]]:
    """The Adam steps on the pool xp [pool, n_tok, N0], yp [pool] (on the model's device): each batch's indices
    come from a cpu generator seeded with `seed` and are copied, so every device trains on the same batches.
    Returns (step, loss) every 50 steps and at the last, the losses left on the device (nothing read back)."""
    from tqdm import tqdm

    opt = torch.optim.Adam(model.parameters(), lr=lr, betas=(0.9, 0.999), weight_decay=weight_decay)
    g = torch.Generator().manual_seed(seed)
    logged = []
    for step in tqdm(range(steps), desc="paths train-gd", disable=not progress):
        idx = torch.randint(0, len(yp), (batch,), generator=g).to(xp.device)
        loss = torch.mean((model(xp[idx]) - yp[idx]) ** 2)
        opt.zero_grad()
        loss.backward()
        opt.step()
        if step % 50 == 0 or step == steps - 1:
            logged.append((step, loss.detach()))
    return logged


def save_checkpoint(model: GDNetwork, path: Path) -> None:
    """safetensors weights + JSON hyper-parameters, each written atomically."""
    from safetensors.torch import save

    from attnlab.runs import write_bytes, write_text

    path = Path(path)
    write_bytes(
        path.with_suffix(".safetensors"), save({k: v.detach().contiguous() for k, v in model.state_dict().items()})
    )
    hp = {"N0": model.N0, "H": model.H, "L": model.L, "N": model.N, "d_qk": model.d_qk, "readout": model.readout}
    write_text(path.with_suffix(".json"), json.dumps(hp))


def load_checkpoint(path: Path) -> GDNetwork:
    from safetensors.torch import load_file

    path = Path(path)
    hp = json.loads(path.with_suffix(".json").read_text())
    model = GDNetwork(**hp)
    model.load_state_dict(load_file(str(path.with_suffix(".safetensors"))))
    return model
