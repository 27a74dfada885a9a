"""Configs of `attnlab paths {solve, sweep, sample, prune}`: frozen dataclasses validated on construction.

Every field the user can type is checked in `__post_init__` against a finite range; a bad value raises a one-line
`InputError` that names the option (`--temperature`, `--N`, ...). The sampler's and the GD network's memory and
a lower bound on their run time are checked here too (`attnlab.runs.budget`); the kernels' memory, which needs the
task's shapes, is checked by the run functions before anything is drawn (`attnlab.paths.tasks.data.check_sizes`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

from attnlab.core.device import check_device
from attnlab.errors import check, check_choice, check_count, check_finite, check_int
from attnlab.runs import budget

TASKS = ("markov", "digits")
VARIANTS = ("4path", "2path", "good1", "good2")
ENTROPY_FORMS = ("chain", "simple")
METHODS = ("newton", "lbfgs", "fixed_point")
SAMPLERS = ("hmc", "mala")
TARGETS = ("collapsed", "full")
DEFAULT_NS = (10, 30, 50, 100, 300, 500, 1000)
RENORMS = ("matrix", "scalar")
ATTENTIONS = ("task", "precomputed")
# Finite ranges: iteration counts (steps, warmup, draws) far above the spec's defaults (300-3000); examples (P,
# n_test) and sizes are further held to the memory estimates.
MAX_ITERATIONS = 10**8
MAX_EXAMPLES = 2**40  # left to the memory estimates (attnlab.paths.tasks.data.check_sizes), which give both numbers
MAX_SEED = 2**63 - 1
MAX_TEMPERATURE = 1e6  # K + T I: far above any kernel's scale the posterior is the prior
MAX_LR = 10.0
MAX_DOUBLINGS = 6  # `paths sample --doublings`: at most 127 times --draws in all
GD_BATCH = 128  # attnlab.paths.pruning.gradient_descent.train_gd's batch


def _check_width(N: float, what: str) -> None:
    """A theory width: a number >= 1, or inf for the GP limit (a width below one neuron has no meaning, and
    N -> 0 overflows alpha = P/N)."""
    try:
        x = float(N)
    except (TypeError, ValueError):
        x = math.nan
    check(x >= 1, f"{what}: widths must be >= 1 (or inf for the GP limit), got {N}")


def _check_examples(P: int, n_test: int) -> None:
    check_count(P, 2, "--P", MAX_EXAMPLES)
    check(P % 2 == 0, f"--P: the balanced tasks need an even number of training examples, got {P}")
    check_count(n_test, 2, "--n-test", MAX_EXAMPLES)
    check(n_test % 2 == 0, f"--n-test: the balanced tasks need an even number of test examples, got {n_test}")


def _check_outputs(cfg: SolveConfig | SampleConfig) -> None:
    """--outputs M: 1..4 Markov targets (attnlab.paths.sampling.outputs), chain or simple form, not fixed_point."""
    check_int(cfg.outputs, 1, "--outputs", maximum=4)
    if cfg.outputs > 1:
        check(cfg.task == "markov", f"--outputs {cfg.outputs}: multiple outputs are built on the Markov task only")
        check(cfg.method != "fixed_point", "--outputs: use --method newton or lbfgs (fixed_point has one output)")


def _check_attention(cfg: SolveConfig) -> None:
    """--attention task | precomputed (--from a `paths prune` run: its trained network's maps, digits only)."""
    check_choice(cfg.attention, ATTENTIONS, "--attention")
    if cfg.attention == "task":
        check(cfg.from_run is None, "--from: only with --attention precomputed")
        return
    check(cfg.from_run is not None, "--attention precomputed: give the trained network's run folder with --from")
    check(cfg.task == "digits", "--attention precomputed: the trained network (paths prune) is on --task digits")
    check(cfg.outputs == 1 and cfg.renorm == "matrix", "--attention precomputed: one output, matrix renorm")
    gd = Path(str(cfg.from_run)) / "gd_model.safetensors"
    check(gd.is_file(), f"--from: {cfg.from_run} holds no gd_model.safetensors (give a `paths prune` run folder)")


@dataclass(frozen=True)
class _Common:
    """Task, network and theory settings shared by solve, sweep and sample."""

    task: str = "markov"
    variant: str = "4path"
    heads: int = 2
    layers: int = 2
    P: int = 100
    n_test: int = 1000
    temperature: float = 0.01
    entropy_form: str = "chain"
    memory_budget: float | None = None
    seed: int = 0
    method: str = "newton"

    def _check_common(self) -> None:
        check_choice(self.task, TASKS, "--task")
        check_choice(self.variant, VARIANTS, "--variant")
        check_count(self.heads, 1, "--heads", 4096)
        check_count(self.layers, 1, "--layers", 64)
        _check_examples(self.P, self.n_test)
        _check_temperature(self.temperature, "--temperature")
        check_choice(self.entropy_form, ENTROPY_FORMS, "--entropy-form")
        if self.memory_budget is not None:
            check_finite(self.memory_budget, "--memory-budget", positive=True)
        check_count(self.seed, 0, "--seed", MAX_SEED)
        check_choice(self.method, METHODS, "--method")


@dataclass(frozen=True)
class SolveConfig(_Common):
    """`paths solve`: the order parameter U at one (N, T) point (spec §5.6)."""

    N: float = 10.0
    tol: float = 1e-8
    allow_unconverged: bool = False
    renorm: str = "matrix"
    outputs: int = 1
    attention: str = "task"
    from_run: str | None = None
    device: str = field(default="cpu", metadata={"omit_if_default": True})  # issue 22 (absent: cpu)

    def __post_init__(self) -> None:
        check_device(self.device)
        self._check_common()
        _check_width(self.N, "--N")
        check(0 < check_finite(self.tol, "--tol") <= 1, f"--tol must be in (0, 1], got {self.tol}")
        check_choice(self.renorm, RENORMS, "--renorm")
        check(
            self.renorm == "matrix" or math.isfinite(self.N),
            "--renorm scalar: needs a finite --N (at N = inf both renormalisations are the GP)",
        )
        _check_outputs(self)
        check(self.outputs == 1 or self.renorm == "matrix", "--renorm scalar: supports one output only")
        check(self.outputs == 1 or math.isfinite(self.N), "--outputs: needs a finite --N")
        _check_attention(self)


@dataclass(frozen=True)
class SweepConfig(_Common):
    """`paths sweep`: accuracy vs alpha over widths `Ns` (solved large to small, warm-started), GP baselines."""

    Ns: tuple[float, ...] = DEFAULT_NS
    tol: float = 1e-8
    allow_unconverged: bool = False
    device: str = field(default="cpu", metadata={"omit_if_default": True})  # issue 22 (absent: cpu)

    def __post_init__(self) -> None:
        check_device(self.device)
        self._check_common()
        check(len(self.Ns) >= 1, "--Ns: give at least one width")
        for N in self.Ns:
            _check_width(N, "--Ns")
        check(len(set(self.Ns)) == len(self.Ns), f"--Ns: widths must be distinct, got {list(self.Ns)}")
        check(0 < check_finite(self.tol, "--tol") <= 1, f"--tol must be in (0, 1], got {self.tol}")


@dataclass(frozen=True)
class SampleConfig(_Common):
    """`paths sample`: HMC/MALA posterior sampling at width N against the theory there (spec §7)."""

    N: float = 10.0
    sampler: str = "hmc"
    target: str = "collapsed"
    chains: int = 4
    warmup: int = 1000
    draws: int = 2000
    leapfrog: int = 16
    thin: int = 1
    predict_every: int = 5
    outputs: int = 1
    device: str = field(default="cpu", metadata={"omit_if_default": True})  # issue 22 (absent: cpu)
    doublings: int = field(default=0, metadata={"omit_if_default": True})  # issue 39, S6 (absent: 0)

    @property
    def CPU_ONLY(self) -> str | None:  # noqa: N802 - the name `attnlab.core.device.resolve`'s callers read
        """Why this run computes on the cpu whatever its device (`--outputs > 1`), else None: `auto` then means cpu,
        in the run and in manifest.json."""
        return (
            "paths sample --outputs > 1 samples on the cpu only (its multi-output target is not ported)"
            if (self.outputs > 1)
            else None
        )

    def __post_init__(self) -> None:
        check_device(self.device)
        check(
            self.outputs == 1 or not self.device.startswith("cuda"),
            f"--device {self.device}: --outputs {self.outputs} samples on the cpu only (its multi-output target is "
            "not ported); use --outputs 1 or --device cpu",
        )
        self._check_common()
        check(
            math.isfinite(self.N) and self.N >= 1 and float(self.N).is_integer(),
            f"--N: sampling needs a positive integer width, got {self.N}",
        )
        check_choice(self.sampler, SAMPLERS, "--sampler")
        check_choice(self.target, TARGETS, "--target")
        check_count(self.chains, 1, "--chains", 2**40)
        check_count(self.warmup, 0, "--warmup", MAX_ITERATIONS)
        check_count(self.draws, 4, "--draws", MAX_ITERATIONS)
        check_count(self.leapfrog, 1, "--leapfrog", 10_000)
        check_count(self.thin, 1, "--thin", 10_000)
        check_count(self.predict_every, 1, "--predict-every", MAX_ITERATIONS)
        check_count(self.doublings, 0, "--doublings", MAX_DOUBLINGS)
        check(self.doublings == 0 or self.outputs == 1, "--doublings: multi-output sampling (--outputs > 1) runs once")
        self._check_budget()
        _check_outputs(self)
        check(
            self.outputs == 1 or (self.sampler == "hmc" and self.target == "collapsed" and self.thin == 1),
            "--outputs: multi-output sampling uses --sampler hmc --target collapsed --thin 1",
        )

    def _check_budget(self) -> None:
        """Lower bounds: every chain holds [P, P] kernels (3 copies) and 6 floats a kept draw; every iteration
        (`leapfrog` gradient evaluations) costs at least `budget.STEP_FLOOR_S`."""
        last = self.draws * 2**self.doublings  # the last doubling's draws (`sampling.posterior.until_gates`)
        nbytes = 8.0 * self.chains * (3 * self.P**2 + 6 * last)
        budget.check_memory(nbytes, f"paths sample --chains {self.chains} --draws {last} --P {self.P}")
        # every try: warmup + its draws; all tries together when the gates never pass
        iterations = (self.doublings + 1) * self.warmup + (2 * last - self.draws) * self.thin
        flops = 2.0 * self.leapfrog * self.chains * self.P**3 / 3  # a Cholesky of K [P, P] per gradient
        seconds = budget.min_seconds(iterations, flops)
        budget.check_time(seconds, "paths sample --warmup/--draws/--thin", "lower --draws, --warmup or --thin")


def _check_temperature(T: float, what: str) -> None:
    value = check_finite(T, what, positive=True)
    check(
        value <= MAX_TEMPERATURE,
        f"{what} must be in (0, {MAX_TEMPERATURE:g}] (K + T I: above that the posterior is the prior), got {T:g}",
    )


@dataclass(frozen=True)
class PruneConfig:
    """`paths prune`: GD training on digit episodes, hand-off to the theory, head scores vs pruning drops (§8)."""

    steps: int = 300
    heads: int = 4
    layers: int = 2
    width: int = 128
    d_qk: int = 16
    P: int = 300
    n_test: int = 1000
    Ns: tuple[float, ...] = (20.0, 200.0)
    temperatures: tuple[float, ...] = (0.1, 1.0)
    pool: int = 4000
    seed: int = 42
    device: str = field(default="cpu", metadata={"omit_if_default": True})  # issue 22 (absent: cpu)
    # issue 39, B5 (§15.4's retuning; absent: the spec's provisional Adam settings)
    lr: float = field(default=1e-3, metadata={"omit_if_default": True})
    weight_decay: float = field(default=5e-5, metadata={"omit_if_default": True})
    # issue 39, B5: one random symmetry of the square per training episode of the GD pool (absent: none)
    augment: str = field(default="none", metadata={"omit_if_default": True})

    def __post_init__(self) -> None:
        from attnlab.paths.tasks.digits import check_augment

        check_device(self.device)
        check_augment(self.augment)
        lr = check_finite(self.lr, "--lr", positive=True)
        check(lr <= MAX_LR, f"--lr must be in (0, {MAX_LR:g}] (an Adam step moves each weight by about lr), got {lr:g}")
        wd = check_finite(self.weight_decay, "--weight-decay")
        check(0 <= wd <= 1, f"--weight-decay must be in [0, 1], got {wd:g}")
        limits = {"steps": MAX_ITERATIONS, "layers": 64, "width": 2**40, "d_qk": 2**40}
        for name, hi in limits.items():
            check_count(getattr(self, name), 1, f"--{name.replace('_', '-')}", hi)
        check_count(self.heads, 2, "--heads (pruning needs at least 2 heads per layer)", 4096)
        _check_examples(self.P, self.n_test)
        check_count(self.pool, 2, "--pool", MAX_EXAMPLES)
        check(len(self.Ns) >= 1 and len(self.temperatures) >= 1, "--Ns and --temperatures need one value each")
        for N in self.Ns:
            _check_width(N, "--Ns")
        for T in self.temperatures:
            _check_temperature(T, "--temperatures")
        check_count(self.seed, 0, "--seed", MAX_SEED)
        self._check_budget()

    def gd_bytes(self) -> float:
        """Bytes of training the GD network: float32 weights, grads, two Adam moments and the activations of a
        batch, and the episode pool (8 bytes an entry: float64 drawn, float32 copied)."""
        from attnlab.paths.tasks.digits import N0, N_TOK

        L, H, N, k = self.layers, self.heads, self.width, self.d_qk
        params = N * N0 + L * H * (N * N + 2 * k * N0) + N
        activations = GD_BATCH * N_TOK * L * H * (3 * N + 2 * k + N_TOK)
        return 4.0 * (4 * params + 2 * activations) + 8.0 * self.pool * N_TOK * N0

    def _check_budget(self) -> None:
        """The GD network (`gd_bytes`) against memory, and its training steps against time (`attnlab.runs.budget`)."""
        from attnlab.paths.tasks.digits import N0, N_TOK

        L, H, N, k = self.layers, self.heads, self.width, self.d_qk
        budget.check_memory(self.gd_bytes(), f"paths prune --width {N} --heads {H} --layers {L} --d-qk {k}")
        flops = 6.0 * GD_BATCH * N_TOK * L * H * (N * N + 2 * k * N0)
        budget.check_time(budget.min_seconds(self.steps, flops), f"paths prune --steps {self.steps}", "lower --steps")


@dataclass(frozen=True)
class EnsembleConfig(_Common):
    """`paths ensemble` (spec §16, S7): U_GD from `runs` gradient-descent runs with frozen attention, against the
    theory's U at width N."""

    N: float = 10.0
    runs: int = 16
    steps: int = 3000
    lr: float = 0.03
    sampled: str | None = None

    def __post_init__(self) -> None:
        self._check_common()
        check(
            math.isfinite(self.N) and self.N >= 1 and float(self.N).is_integer(),
            f"--N: gradient-descent training needs a positive integer width, got {self.N}",
        )
        check_count(self.runs, 2, "--runs", 10_000)
        check_count(self.steps, 1, "--steps", MAX_ITERATIONS)
        lr = check_finite(self.lr, "--lr", positive=True)
        check(lr <= MAX_LR, f"--lr must be in (0, {MAX_LR:g}] (an Adam step moves each weight by about lr), got {lr:g}")
        if self.sampled is not None:
            check(
                (Path(self.sampled) / "U_hat.npy").is_file(),
                f"--sampled: {self.sampled} holds no U_hat.npy (give a `paths sample` run folder)",
            )
