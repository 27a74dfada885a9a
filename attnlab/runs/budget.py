"""Memory and time budgets: refuse, before any work, a run that would not fit in memory or could not finish.

Memory: an estimate of the bytes a command will hold is compared with `memory_limit()`, half this machine's
physical RAM (8 GiB when unknown). Estimates are rough but err low; the point is to refuse sizes that are off by
orders of magnitude (a batch of 1e8) before they allocate, with one line giving the estimate and the limit.

Time: `min_seconds(steps, flops_per_step)` is a LOWER bound on the run time, never a prediction. Each step costs
at least `STEP_FLOOR_S` (a training or sampler step is tens of torch operations, each of which costs microseconds
of dispatch on any device) and at least its floating-point work divided by `PEAK_FLOPS`, a throughput no single
device sustains on these workloads (an H100 peaks near 1e15 dense bf16 FLOP/s; these runs are float32/float64).
A run is refused only when even this bound exceeds `TIME_BUDGET_S` (30 days): such a run cannot finish.
Configs call `check_memory` / `check_time` from `__post_init__`, so the CLI and the Python API refuse alike.
"""

from __future__ import annotations

import os

PEAK_FLOPS = 1e15  # FLOP/s: more than any single device sustains on float32/float64 training or sampling
STEP_FLOOR_S = 1e-4  # s per training / sampler step: >= ~50 torch ops, each >= ~2 us of dispatch on any device
TIME_BUDGET_S = 30 * 86400.0  # 30 days: a lower bound above this means the run cannot finish


def memory_limit() -> int:
    """Bytes a single command may plan to use: half the physical memory (8 GiB if unknown)."""
    try:
        return int(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // 2)
    except (ValueError, OSError, AttributeError):
        return 8 << 30


def check_memory(estimate: float, what: str, limit: float | None = None, fix: str = "choose smaller sizes") -> None:
    """Raise InputError when `estimate` bytes exceed `limit` (default `memory_limit()`), giving both."""
    from attnlab.errors import InputError

    cap = float(memory_limit() if limit is None else limit)
    if not estimate <= cap:
        raise InputError(
            f"{what} would need about {estimate / 2**30:.3g} GiB of memory (limit {cap / 2**30:.3g} GiB, half "
            f"this machine's RAM); {fix}"
        )


def min_seconds(steps: float, flops_per_step: float = 0.0, floor: float = STEP_FLOOR_S) -> float:
    """A lower bound on the run time of `steps` steps of `flops_per_step` FLOPs each (see the module docstring)."""
    return float(steps) * max(floor, float(flops_per_step) / PEAK_FLOPS)


def duration(seconds: float) -> str:
    """'3.2e+04 days' / '5.1 days' / '2.0 hours': a readable duration."""
    days = seconds / 86400.0
    if days >= 1e4:
        return f"{days:.2g} days"
    return f"{days:.1f} days" if days >= 1 else f"{seconds / 3600:.1f} hours"


def check_time(seconds: float, what: str, fix: str) -> None:
    """Raise InputError when the lower bound `seconds` exceeds `TIME_BUDGET_S`."""
    from attnlab.errors import InputError

    if not seconds <= TIME_BUDGET_S:
        raise InputError(
            f"{what} would take at least {duration(seconds)} (a lower bound: {STEP_FLOOR_S:g} s a step or "
            f"{PEAK_FLOPS:.0e} FLOP/s), over the {TIME_BUDGET_S / 86400:.0f}-day limit; {fix}"
        )


def transformer_train_bytes(
    vocab: int, d_model: int, n_layers: int, seq_len: int, d_mlp: int, n_heads: int, batch: int
) -> float:
    """Rough bytes of training a small transformer: float32 weights, grads and two Adam moments, plus the
    activations of one step kept for backward (residual/MLP streams, [B, H, T, T] scores and patterns, logits)."""
    V, D, L, T = vocab, d_model, n_layers, seq_len
    params = 2 * V * D + T * D + L * (4 * D * D + 2 * D * d_mlp)
    per_seq = T * L * (12 * D + 2 * d_mlp) + 4 * L * n_heads * T * T + 2 * T * V
    return 4.0 * (4 * params + per_seq * batch)


def transformer_step_flops(vocab: int, d_model: int, n_layers: int, seq_len: int, d_mlp: int, batch: int) -> float:
    """FLOPs of one training step (forward and backward: 6 per weight per token, plus attention's T^2 terms)."""
    D, L, T = d_model, n_layers, seq_len
    weights = L * (4 * D * D + 2 * D * d_mlp) + vocab * D
    return 6.0 * batch * T * (weights + 2 * L * T * D)


def check_device_memory(estimate: float, what: str, device: object, fix: str = "choose smaller sizes") -> None:
    """On a GPU: raise InputError when `estimate` bytes exceed 90% of its free memory (`attnlab.core.device`). On the
    CPU the configs have already checked the RAM limit, so nothing is done here."""
    from attnlab.core.device import memory_bytes
    from attnlab.errors import InputError

    cap = memory_bytes(device)
    if cap is not None and not estimate <= cap:
        raise InputError(
            f"{what} would need about {estimate / 2**30:.3g} GiB on {device} (limit {cap / 2**30:.3g} GiB, 90% of "
            f"its free memory); {fix}"
        )
