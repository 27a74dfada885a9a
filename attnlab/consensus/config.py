"""Configs of `attnlab consensus simulate|phase|model`: frozen, validated before any work starts.

Each `__post_init__` checks every field and raises a one-line `InputError` naming it. It also estimates the work
and the memory a run needs and refuses, naming the fields to change, a run above the documented limits:

- `MAX_STEPS` integration steps (t_max / h): the Python loop costs ~0.1-1 ms a step, so 10^6 steps is minutes
  to an hour;
- `MAX_WORK` token-pair-dimension updates, steps x starts x heads x n^2 x d x field evaluations per step (4 for
  RK4): at the ~4 ns per update measured in `benchmarks/bench_consensus.py` (B1), 2e12 is about two hours on
  one core;
- `MAX_BYTES` of stored curves, recorded states and score tensors (4 GiB);
- `MAX_BETA` for inverse temperatures: at beta = 10^4 softmax attention is already an argmax for any score gap
  above 4e-3 and GLPR's metastable states last ~e^beta, so larger values only overflow the scores;
- `MAX_SCALE` for the random-weight scale sigma (scores grow like beta sigma^2: 10^3 already gives 10^6 beta);
- the periodic schedule's omega must be resolved by the step: |omega| h <= pi (at most half a period a step);
- `phase --workers` at most this machine's CPU count (a local Ray instance of more CPUs only oversubscribes);
- `MAX_TOKEN_PASSES` prompt tokens x passes x groups for `model` (SmolLM2: ~0.3 GFLOP a token-pass, so 2e6 is
  hours), and `MAX_SEQ_LEN` tokens per prompt.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field

from attnlab.consensus.names import ENSEMBLES, KINDS, MASKS, METHODS, SCHEDULES, VARIANTS
from attnlab.core.device import check_device
from attnlab.errors import InputError, check, check_choice, check_count, check_finite, check_int, names

MAX_STEPS = 1_000_000
MAX_WORK = 2e12
MAX_BYTES = 4 * 2**30
MAX_TOKEN_PASSES = 2_000_000
MAX_SEQ_LEN = 2048
MAX_BETA = 1e4
MAX_SCALE = 1e3
MAX_LAYERS = 10_000  # cycle schedule: layers drawn and stored
MAX_SEED = 2**63 - 1
MAX_CLUSTER_WORKERS = 4096  # phase --workers on a Ray cluster (--address)
DOMAINS = ("prose", "code", "random")
VALUES = ("identity", "random", "rotation")
SWEEP_METHODS = ("euler", "rk4")
_FLOAT64 = 8


def _steps(t_max: float, h: float) -> int:
    """Number of steps of size h to t_max (as the integrators count them), refused above `MAX_STEPS`."""
    ratio = t_max / h
    if not ratio <= MAX_STEPS + 0.5:
        raise InputError(
            f"t_max/h = {t_max:g}/{h:g} = {ratio:.3g} steps exceeds the limit of {MAX_STEPS:,} steps; "
            "raise h or lower t_max"
        )
    return int(round(ratio))


def _check_size(work: float, nbytes: float, fields: str) -> None:
    """Refuse a run whose work (`MAX_WORK`) or memory (`MAX_BYTES`) is too big, naming the fields to change."""
    if work > MAX_WORK:
        raise InputError(
            f"{fields} = {work:.3g} token-pair updates exceeds the limit of {MAX_WORK:.0e} "
            "(about two hours on one core); lower one of them"
        )
    if nbytes > MAX_BYTES:
        raise InputError(
            f"{fields} needs about {nbytes / 2**30:.3g} GiB of arrays, over the "
            f"{MAX_BYTES / 2**30:.0f} GiB limit; lower one of them"
        )


def _check_beta(beta: float, what: str) -> None:
    value = check_finite(beta, what)
    check(
        0 <= value <= MAX_BETA,
        f"{what} must be in [0, {MAX_BETA:g}] (an inverse temperature: at {MAX_BETA:g} softmax is already an "
        f"argmax and metastable states outlast any run), got {beta:g}",
    )


def _check_workers(workers: int, address: str | None) -> None:
    """Ray workers: at most this machine's CPUs for a local instance, `MAX_CLUSTER_WORKERS` on a cluster."""
    if address:
        check_count(workers, 0, "workers", MAX_CLUSTER_WORKERS)
        return
    cpus = max(1, os.cpu_count() or 1)
    try:
        check_count(workers, 0, "workers", cpus)
    except InputError as exc:
        raise InputError(f"{exc} (at most this machine's {cpus} CPUs; give --address for a Ray cluster)") from None


@dataclass(frozen=True)
class SimulateConfig:
    """`attnlab consensus simulate`: `batch` uniform starts of `n` tokens on S^{d-1}, integrated to `t_max`.

    x_i' = P_perp(sum_h sum_j alpha^h_ij V_h x_j) with alpha = softmax (SA) or exp/n (USA) of beta x_i^T P_h x_j
    (RST Eq. 5); P = Q^T K and V follow `schedule` (spec section 3).
    """

    n: int = 32
    d: int = 3
    batch: int = 64
    beta: float = 1.0
    heads: int = 1
    kind: str = "SA"
    mask: str = "full"
    schedule: str = "constant"
    key_query: str = "gaussian"
    value: str = "identity"
    scale: float = 1.0
    omega: float = 1.0
    delta: float = 1.0
    layers: int = 4
    t_max: float = 30.0
    h: float = 0.1
    integrator: str = "rk4"
    record_every: int = 10
    seed: int = 0
    device: str = field(default="cpu", metadata={"omit_if_default": True})  # issue 22 (absent: cpu)

    def __post_init__(self) -> None:
        check_device(self.device)
        check_int(self.n, 2, "n (tokens)")
        check_int(self.d, 2, "d (dimension)")
        check_int(self.batch, 1, "batch (starts)")
        check_int(self.heads, 1, "heads")
        check_count(self.layers, 1, "layers", MAX_LAYERS)
        check_count(self.record_every, 0, "record_every", MAX_STEPS)
        check_count(self.seed, 0, "seed", MAX_SEED)
        check_choice(self.kind, KINDS, "attention kind")
        check_choice(self.mask, MASKS, "mask")
        check_choice(self.schedule, SCHEDULES, "schedule")
        check_choice(self.key_query, ENSEMBLES, "random ensemble")
        check_choice(self.value, VALUES, "value matrix")
        check_choice(self.integrator, METHODS, "integrator")
        _check_beta(self.beta, "beta")
        scale = check_finite(self.scale, "scale")
        check(
            0 <= scale <= MAX_SCALE,
            f"scale must be in [0, {MAX_SCALE:g}] (scores grow like beta x scale^2), got {self.scale:g}",
        )
        check_finite(self.delta, "delta", positive=True)
        check_finite(self.t_max, "t_max", positive=True)
        check_finite(self.h, "h (step)", positive=True)
        omega = check_finite(self.omega, "omega")
        check(
            abs(omega) * self.h <= math.pi,
            f"omega must satisfy |omega| x h <= pi (the step must resolve the periodic schedule's period "
            f"2 pi/omega): |omega| <= {math.pi / self.h:.4g} at h = {self.h:g}, got {self.omega:g}",
        )
        if self.schedule in ("cycle", "random"):
            ratio = self.delta / self.h
            check(
                abs(ratio - round(ratio)) <= 1e-9 and round(ratio) >= 1,
                f"schedule interval delta={self.delta:g} must be a multiple of the step h={self.h:g}",
            )
        self._check_budget()

    def _check_budget(self) -> None:
        steps = _steps(self.t_max, self.h)
        stages = 4 if self.integrator == "rk4" else 1
        work = float(steps) * self.batch * self.heads * self.n**2 * self.d * stages
        records = steps // self.record_every + 2 if self.record_every else 2
        nbytes = _FLOAT64 * self.batch * (3 * (steps + 1) + records * self.n * self.d + 6 * self.heads * self.n**2)
        _check_size(work, nbytes, "t_max/h x batch x heads x n^2 x d")


@dataclass(frozen=True)
class PhaseConfig:
    """`attnlab consensus phase`: mean clustered fraction over (t, beta) for Q = K = V = I (spec 4.5, B2)."""

    n: int = 32
    d: int = 8
    starts: int = 256
    beta_min: float = 0.1
    beta_max: float = 9.0
    num_betas: int = 90
    t_max: float = 30.0
    h: float = 0.1
    integrator: str = "euler"
    kind: str = "SA"
    float32: bool = False
    seed: int = 0
    workers: int = 0  # > 0: beta chunks as Ray tasks on a local instance of this many CPUs
    address: str | None = None  # or on this Ray cluster
    device: str = field(default="cpu", metadata={"omit_if_default": True})  # issue 22 (absent: cpu)

    def __post_init__(self) -> None:
        check_device(self.device)
        check_int(self.n, 2, "n (tokens)")
        check_int(self.d, 2, "d (dimension)")
        check_int(self.starts, 1, "starts")
        _check_workers(self.workers, self.address)
        check_int(self.num_betas, 1, "num_betas")
        check_count(self.seed, 0, "seed", MAX_SEED)
        check_choice(self.integrator, SWEEP_METHODS, "sweep integrator")
        check_choice(self.kind, KINDS, "attention kind")
        lo, hi = check_finite(self.beta_min, "beta_min"), check_finite(self.beta_max, "beta_max")
        check(0 <= lo <= hi, f"need 0 <= beta_min <= beta_max, got {self.beta_min}, {self.beta_max}")
        _check_beta(hi, "beta_max")
        check(self.kind != "USA" or hi <= 700, f"USA with beta_max = {hi:g} > 700 would overflow float64")
        check_finite(self.t_max, "t_max", positive=True)
        check_finite(self.h, "h (step)", positive=True)
        steps = _steps(self.t_max, self.h)
        stages = 4 if self.integrator == "rk4" else 1
        work = float(steps) * self.num_betas * self.starts * self.n**2 * self.d * stages
        chunk = max(64 * 2**20, self.starts * self.n**2 * _FLOAT64)  # sweeps.phase_diagram's score chunks
        nbytes = self.num_betas * (steps + 1) * _FLOAT64 + 4 * chunk
        _check_size(work, nbytes, "t_max/h x num_betas x starts x n^2 x d")


@dataclass(frozen=True)
class ModelConfig:
    """`attnlab consensus model`: iterate the decoder stack of any supported causal LM (found by
    `attnlab.tracing.adapters.arch.get_arch`) for `passes` passes (spec section 8).

    h <- Block_l(h) (its MLP's output zeroed without MLPs; for Llama h <- h + Attn_l(RMSNorm(h)) (+ MLP_l(RMSNorm(h))))
    for layer l(k) of each schedule: constant (one layer), periodic (the stack cycled) or random (a fresh stack per
    pass); prompts from `attnlab.hf.texts`. model: "smollm2", a local HF folder or a hub id org/name.
    """

    model: str = "smollm2"
    passes: int = 20
    schedules: tuple[str, ...] = ("periodic",)
    layer: int = 20
    mlp: tuple[bool, ...] = (True,)
    domains: tuple[str, ...] = DOMAINS
    prompts: int = 3
    seq_len: int = 32
    feedback_final_norm: bool = False
    depth_view: bool = True
    cache_dir: str | None = None
    seed: int = 0
    device: str = field(default="cpu", metadata={"omit_if_default": True})  # issue 22 (absent: cpu)

    def __post_init__(self) -> None:
        check_device(self.device)
        check(isinstance(self.model, str) and self.model.strip() != "", "model must be a name or a folder path")
        object.__setattr__(self, "schedules", names(self.schedules, "schedules"))
        object.__setattr__(self, "domains", names(self.domains, "domains"))
        check(len(self.schedules) > 0, "schedules must name at least one of " + ", ".join(VARIANTS))
        for name in self.schedules:
            check_choice(name, VARIANTS, "schedule")
        check(len(self.domains) > 0, "domains must name at least one of " + ", ".join(DOMAINS))
        for dom in self.domains:
            check_choice(dom, DOMAINS, "domain")
        check(
            len(self.mlp) > 0 and all(isinstance(m, bool) for m in self.mlp),
            f"mlp must be a non-empty list of true/false, got {self.mlp!r}",
        )
        check_int(self.passes, 1, "passes")
        check_int(self.seq_len, 2, "seq_len (T)", maximum=MAX_SEQ_LEN)
        check_int(self.prompts, 1, "prompts per domain")
        check_count(self.layer, 0, "layer", MAX_LAYERS)
        check_count(self.seed, 0, "seed", MAX_SEED)
        token_passes = (
            self.passes
            * len(self.schedules)
            * len(self.mlp)
            * self.prompts
            * len(self.domains)
            * self.seq_len
            * (2 if self.depth_view else 1)
        )
        check(
            token_passes <= MAX_TOKEN_PASSES,
            f"passes x schedules x mlp x prompts x domains x seq_len = {token_passes:.3g} token-passes exceeds "
            f"the limit of {MAX_TOKEN_PASSES:.0e}; lower one of them",
        )


@dataclass(frozen=True)
class NormConfig:
    """`attnlab consensus norm` (spec R13): each layer's pre-attention RMSNorm against its idealisation as a
    projection onto a translated, scaled sphere, then `passes` periodic passes with the real and the idealised
    norms (MLPs on or off) to see whether the consensus conclusion changes."""

    model: str = "smollm2"
    passes: int = 10
    mlp: bool = False
    domains: tuple[str, ...] = DOMAINS
    prompts: int = 4
    seq_len: int = 32
    fall: float = 0.5
    cache_dir: str | None = None
    seed: int = 0

    def __post_init__(self) -> None:
        check(isinstance(self.model, str) and self.model.strip() != "", "model must be a name or a folder path")
        object.__setattr__(self, "domains", names(self.domains, "domains"))
        check(len(self.domains) > 0, "domains must name at least one of " + ", ".join(DOMAINS))
        for dom in self.domains:
            check_choice(dom, DOMAINS, "domain")
        check_int(self.passes, 2, "passes")
        check_int(self.prompts, 2, "prompts per domain (half fit the sphere, half measure it)")
        check_int(self.seq_len, 2, "seq_len (T)", maximum=MAX_SEQ_LEN)
        check(0 <= check_finite(self.fall, "fall") <= 300, f"fall must be in [0, 300] decades, got {self.fall}")
        check_count(self.seed, 0, "seed", MAX_SEED)
        token_passes = 2 * (self.passes + 1) * self.prompts * len(self.domains) * self.seq_len
        check(
            token_passes <= MAX_TOKEN_PASSES,
            f"passes x prompts x domains x seq_len = {token_passes:.3g} token-passes exceeds the limit of "
            f"{MAX_TOKEN_PASSES:.0e}; lower one of them",
        )
