"""Do attention and MLP write into different subspaces? (spec extreme-tokens §14, R19)

Rows of X_a [N,D] are the attention block's outputs o_i = Σ_h W_O^h Σ_j A^h_ij v^h_j and rows of X_m [N,D] the MLP
block's outputs, one per (sequence, position) of the evaluation batch (no centring: the spans, not the spreads).
  k(X)        the smallest k with Σ_{r≤k} σ_r² ≥ e·Σ_r σ_r² (e = 0.95), σ the singular values of X
  U(X) [D,k]  the top-k right singular vectors of X (an orthonormal basis of its 95 %-energy subspace)
  θ_1 ≤ … ≤ θ_min(k_a,k_m)   principal angles: cos θ_r = σ_r(U_aᵀ U_m)
  E(a in m) = ‖X_a U_m‖_F² / ‖X_a‖_F²   the fraction of the attention output's energy inside the MLP subspace
A random k_m-dimensional subspace of R^D holds k_m/D of any fixed energy on average (`random_baseline`).
"""

from __future__ import annotations

import numpy as np
import torch

ENERGY = 0.95


def energy_rank(x: np.ndarray, energy: float = ENERGY) -> int:
    """k: the fewest singular directions of x [N,D] holding `energy` of Σσ² (0 for an all-zero x)."""
    s2 = np.linalg.svd(np.asarray(x, dtype=np.float64), compute_uv=False) ** 2
    total = s2.sum()
    if total <= 0:
        return 0
    return int(np.searchsorted(np.cumsum(s2) / total, energy - 1e-12) + 1)


def top_subspace(x: np.ndarray, energy: float = ENERGY) -> np.ndarray:
    """An orthonormal basis [D,k] of the span of the top-k right singular vectors of x [N,D], k = `energy_rank`."""
    x = np.asarray(x, dtype=np.float64)
    k = energy_rank(x, energy)
    _, _, vt = np.linalg.svd(x, full_matrices=False)
    return vt[:k].T


def principal_angles(u: np.ndarray, v: np.ndarray) -> np.ndarray:
    """Principal angles in degrees, ascending, between span(u) and span(v) (orthonormal columns [D,k], [D,m])."""
    if u.shape[1] == 0 or v.shape[1] == 0:
        return np.zeros(0)
    cos = np.linalg.svd(u.T @ v, compute_uv=False)
    return np.degrees(np.arccos(np.clip(cos, -1.0, 1.0)))


def energy_inside(x: np.ndarray, basis: np.ndarray) -> float:
    """‖x B‖_F² / ‖x‖_F²: the share of the energy of the rows of x [N,D] inside span(B) (B orthonormal [D,k])."""
    x = np.asarray(x, dtype=np.float64)
    total = float((x**2).sum())
    return float(((x @ basis) ** 2).sum() / total) if total > 0 else float("nan")


def subspace_measure(attn: np.ndarray, mlp: np.ndarray, energy: float = ENERGY) -> dict:
    """The R19 numbers for attention outputs `attn` [N,D] and MLP outputs `mlp` [N,D] (rows matched or not)."""
    ua, um = top_subspace(attn, energy), top_subspace(mlp, energy)
    angles = principal_angles(ua, um)
    D = attn.shape[1]
    return {
        "d_model": D,
        "n_vectors": int(attn.shape[0]),
        "energy": energy,
        "k_attn": int(ua.shape[1]),
        "k_mlp": int(um.shape[1]),
        "angles_deg": [round(float(a), 4) for a in angles],
        "min_angle_deg": float(angles.min()) if angles.size else float("nan"),
        "median_angle_deg": float(np.median(angles)) if angles.size else float("nan"),
        "energy_attn_in_mlp": energy_inside(attn, um),
        "energy_mlp_in_attn": energy_inside(mlp, ua),
        "random_baseline_attn_in_mlp": um.shape[1] / D,
        "random_baseline_mlp_in_attn": ua.shape[1] / D,
        "singular_values_attn": [float(v) for v in np.linalg.svd(attn, compute_uv=False)],
        "singular_values_mlp": [float(v) for v in np.linalg.svd(mlp, compute_uv=False)],
    }


def block_outputs(model, inputs: torch.Tensor, layer: int) -> tuple[np.ndarray, np.ndarray]:
    """(attention outputs, MLP outputs) of block `layer` on `inputs` [B,T], each [B·T, D] float64."""
    from attnlab.tracing.adapters.toy import run_with_hooks

    got: dict[str, torch.Tensor] = {}

    def grab(x: torch.Tensor, name: str) -> None:
        got[name] = x.detach().reshape(-1, x.shape[-1]).double()

    attn, mlp = f"blocks.{layer}.hook_attn_out", f"blocks.{layer}.hook_mlp_out"
    run_with_hooks(model, inputs, {attn: grab, mlp: grab})
    return got[attn].numpy(), got[mlp].numpy()
