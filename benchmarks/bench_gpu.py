"""Issue 22: the same code on a GPU and on the CPU, side by side in one process (run by benchmarks/gpu_check.sh).

  PYTHONPATH=. python benchmarks/bench_gpu.py --device cuda --out timings.json      # the GPU machine
  PYTHONPATH=. python benchmarks/bench_gpu.py --device cpu --tiny --out t.json      # the dry run (CPU, tiny sizes)

Rows: the BB training step at the paper preset (d 256, T 256, batch 512; the update of `Trainer._steps`, NaN guard
included, float32), the phase diagram at the reference size of benchmarks/RESULTS.md B2 (n 32, d 8, 90 betas,
256 starts, t <= 30, h 0.1, Euler, float64), `consensus simulate`'s integration at its defaults (RK4, float64),
`paths sample`'s HMC chains (float64) and a `paths solve` (the command, float64: on the device the torch action
with scipy's L-BFGS on the host; on the cpu its default NumPy fast path). With `--long-only`, on the device only,
issue 23's scans at T = 131,072 (the default and `stats="full"`) beside a plain forward (time and peak GPU memory):
random models of SmolLM2-135M's shape in bfloat16 and float32, and of a 4-layer Llama in float32. Each row
gives the median seconds of `--repeats` runs on each device; CUDA timings synchronise before reading the clock.
The CPU side uses every core torch is given (`--threads`, default all), so the ratio is against this machine's CPU.
With `--issue41` (issue 41 item 4), random bf16 models of Llama-3-8B's shape at T = 32,768 and SmolLM2-135M's at
T = 131,072: the plain forward (last position's logits only), the default scan and `stats="full"`, with peak device
memory (`issue41_row`).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
import traceback
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402
import torch  # noqa: E402


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _median_seconds(fn: Callable[[], None], device: torch.device, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        _sync(device)
        t0 = time.perf_counter()
        fn()
        _sync(device)
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def bb_step(device: torch.device, tiny: bool, steps: int) -> Callable[[], None]:
    """`steps` BB updates at the paper preset (tiny: d 16, T 16, batch 4) on `device`, as `Trainer._steps` does."""
    from attnlab.bb.config import resolve_config
    from attnlab.bb.experiment import build_model, task_for
    from attnlab.bb.training import make_optimizer
    from attnlab.training.loop import norms_finite as _norms_finite

    sizes = dict(d_model=16, d_mlp=32, seq_len=16, batch=4, eval_batch=8) if tiny else {}
    cfg = resolve_config("cpu" if tiny else "paper", steps=steps, **sizes)  # type: ignore[arg-type]
    task = task_for(cfg)
    model = build_model(cfg, task).to(device)
    opt = make_optimizer(model, cfg)
    params = list(model.parameters())
    batches = [torch.as_tensor(task.train_batch(cfg.batch, cfg.seq_len, cfg.seed, k)).to(device) for k in range(2)]

    def run() -> None:
        for k in range(steps):
            x = batches[k % 2]
            logits = model(x[:, :-1])
            loss = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), x[:, 1:].reshape(-1))
            opt.zero_grad(set_to_none=True)
            loss.backward()
            assert _norms_finite([loss.detach(), *(p.grad for p in params if p.grad is not None)])
            opt.step()
            assert _norms_finite(params)

    run()  # warm-up (CUDA kernels, allocator)
    return run


def phase(device: torch.device, tiny: bool) -> Callable[[], None]:
    from attnlab.consensus.sweeps import phase_diagram

    betas = np.linspace(0.1, 9.0, 4 if tiny else 90)
    size = dict(n=8, d=3, starts=8, t_max=2.0) if tiny else dict(n=32, d=8, starts=256, t_max=30.0)
    return lambda: None if phase_diagram(betas, h=0.1, device=device, **size) is None else None  # type: ignore[arg-type]


def simulate(device: torch.device, tiny: bool) -> Callable[[], None]:
    """`consensus simulate`'s integration at its defaults (64 starts, n 32, d 3, RK4, t <= 30, h 0.1, the three
    measures every step; float64), or tiny (4 starts, n 8, t <= 2), on `device`."""
    from attnlab.consensus.config import SimulateConfig
    from attnlab.consensus.integrators import integrate
    from attnlab.consensus.run import simulate_inputs

    cfg = SimulateConfig(batch=4, n=8, t_max=2.0) if tiny else SimulateConfig()
    sch, spec, X0 = simulate_inputs(cfg)
    measures = ("E_first", "E_pair", "clustered_fraction")
    return lambda: None if integrate(X0, sch, spec, cfg.t_max, cfg.h, cfg.integrator, measures=measures,
                                     device=device) is None else None  # fmt: skip


def paths_sample(device: torch.device, tiny: bool) -> Callable[[], None]:
    """`paths sample`'s chains (collapsed HMC, float64): P 50 (tiny 20), 4 chains, 50 warmup + 50 draws (tiny
    10 + 8), 8 leapfrog steps, on `device` (the theory solve of the command is not timed: scipy, cpu)."""
    from attnlab.paths.sampling.posterior import sample_point
    from attnlab.paths.tasks.data import build_data

    data = build_data("markov", 20 if tiny else 50, 20 if tiny else 100)
    warmup, draws = (10, 8) if tiny else (50, 50)
    return lambda: None if sample_point(data, 10, 0.1, 4, warmup, draws, "hmc", 8, progress=False,
                                        device=device) is None else None  # fmt: skip


def paths_solve(device: torch.device, tiny: bool) -> Callable[[], None]:
    """`paths solve` as the command runs it (`--device`, files and report included): the Markov task at its
    defaults (P 100, n_test 1000, newton; tiny: P 20, n_test 20) on `device`."""
    from attnlab.paths.config import SolveConfig

    config = SolveConfig(P=20 if tiny else 100, n_test=20 if tiny else 1000, device=str(device))

    def run(cfg: SolveConfig = config) -> None:
        import tempfile

        from attnlab.paths.run import solve

        with tempfile.TemporaryDirectory() as tmp:
            solve(cfg, Path(tmp) / "run")

    if device.type == "cuda":  # warm-up (CUDA context, cuSOLVER handles) on a tiny problem, not timed
        run(SolveConfig(P=20, n_test=20, device=str(device)))
    return run


LONG_T = 131_072  # issue 23: the scan at this length on the GPU machine (T = 32,768 is the CPU's row in RESULTS.md)
LONG_SHAPES = {  # model sizes of the long-context rows, random weights (real ones do not travel to the GPU machine)
    "llama4": dict(hidden_size=256, intermediate_size=512, num_hidden_layers=4, num_attention_heads=8,
                   num_key_value_heads=4, head_dim=32, vocab_size=1024),
    # SmolLM2-135M-Instruct's config (the GGUF's, as attnlab.hf converts it): the cost of its scan, not its numbers
    "smollm2": dict(hidden_size=576, intermediate_size=1536, num_hidden_layers=30, num_attention_heads=9,
                    num_key_value_heads=3, head_dim=64, vocab_size=49152, rms_norm_eps=1e-5,
                    tie_word_embeddings=True, rope_parameters={"rope_type": "default", "rope_theta": 100000.0}),
}  # fmt: skip


def long_scan(
    device: torch.device,
    tiny: bool,
    shape: str,
    dtype: torch.dtype,
    out: Callable[[dict], None],
    profile: bool = False,
    repeats: int = 1,
) -> None:
    """Issue 23's long context on `device`: a random model of `LONG_SHAPES[shape]` (positions up to T) in `dtype` at
    T = LONG_T (tiny: 256), one plain forward, one scan window (`trace_windows`, the default fused statistics) and
    one with `stats="full"`, each timed once after a short warm-up, with the peak device memory of each (CUDA).
    `out(row)` is called after each measurement, so that a time limit keeps the parts already done; a part that runs
    out of device memory is noted in the row. `profile`: then a cProfile of one more scan (`_profile_scan`) and, on
    CUDA, torch.profiler's kernel table of another (`_cuda_profile`). On CUDA `full` warms up by compiling its flex
    call at T (`_flex_warmup`), not by a 64-token run. `repeats` > 1: the plain forward and the
    default scan warm up at full length (kernels that plan per shape, as cuDNN's, plan there) and give the median
    of `repeats` runs; `stats="full"` stays one run."""
    from attnlab.tracing.adapters.hf import trace_windows
    from tests.real.families import tiny_family

    T = 256 if tiny else LONG_T
    sizes = LONG_SHAPES[shape]
    model = tiny_family("llama", **sizes, max_position_embeddings=T).to(device=device, dtype=dtype)
    ids = torch.randint(3, sizes["vocab_size"], (1, T), generator=torch.Generator().manual_seed(0))
    row: dict = {
        "tokens": T,
        "model": f"random {shape} shape",
        "dtype": str(dtype).removeprefix("torch."),
        "repeats": repeats,
    }

    def plain() -> None:
        with torch.no_grad():
            model(input_ids=ids.to(device), use_cache=False)

    parts = {"plain": plain, "scan": lambda: trace_windows(model, ids, batch_size=1, desc=""),
             "full": lambda: trace_windows(model, ids, batch_size=1, desc="", stats="full")}  # fmt: skip
    for name, fn in parts.items():
        if repeats > 1 and name != "full":
            fn()
        elif name == "plain":  # warm-up: kernels and allocator
            with torch.no_grad():
                model(input_ids=ids[:, :64].to(device), use_cache=False)
        elif name == "full" and device.type == "cuda":  # issue 41: flex compiled at T, not inside the timed run
            _flex_warmup(model, T, device)
        else:
            trace_windows(model, ids[:, :64], batch_size=1, desc="", stats="full" if name == "full" else "fast")
        if device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(device)
        try:
            row[f"{name}_s"] = _median_seconds(fn, device, 1 if name == "full" else repeats)
        except torch.OutOfMemoryError as e:  # the row says so and the next part runs
            row[f"{name}_error"] = str(e).splitlines()[0][:200]
            torch.cuda.empty_cache()
            out(row)
            continue
        if device.type == "cuda":
            row[f"{name}_peak_gib"] = torch.cuda.max_memory_allocated(device) / 2**30
        if name != "plain" and "plain_s" in row:
            row[f"{name}_over_plain"] = row[f"{name}_s"] / row["plain_s"]
        out(row)
    if profile:
        _profile_scan(parts["scan"], device)
        if device.type == "cuda":
            _cuda_profile(parts["scan"], device)


ISSUE41_SHAPES = {  # issue 41 item 4: (config fields, T); random bf16 weights built on the device, no download
    "llama3_8b": (dict(hidden_size=4096, intermediate_size=14336, num_hidden_layers=32, num_attention_heads=32,
                       num_key_value_heads=8, head_dim=128, vocab_size=128256, rms_norm_eps=1e-5,
                       tie_word_embeddings=False, rope_parameters={"rope_type": "default", "rope_theta": 500000.0}),
                  32_768),
    "smollm2": (LONG_SHAPES["smollm2"], LONG_T),
}  # fmt: skip
ISSUE41_TINY = {  # --tiny (the cpu dry run, seconds): the same code at 256 tokens, 2 layers, the heads' ratios kept
    "llama3_8b": dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                      num_key_value_heads=1, head_dim=16, vocab_size=512, tie_word_embeddings=False),
    "smollm2": dict(hidden_size=144, intermediate_size=192, num_hidden_layers=2, num_attention_heads=9,
                    num_key_value_heads=3, head_dim=16, vocab_size=512, tie_word_embeddings=True),
}  # fmt: skip
# bytes per [L,H,T] element a scan keeps on the device (issue 41 item 2): its staged fp32 rows (A_i0, s_i0, mean s_ij,
# value norms; + c_j under full) and the recorder's five float64 sums (column sums, A_i0, s_i0, mean s_ij, value norms)
STAT_BYTES = {"scan": 4 * 4 + 5 * 8, "full": 5 * 4 + 5 * 8}


def issue41_model(shape: str, tiny: bool, device: torch.device) -> tuple[torch.nn.Module, int]:
    """(a random model of `ISSUE41_SHAPES[shape]` in bfloat16 on `device`, T): built there from its config
    (`transformers.LlamaConfig`), so that 8B parameters are never made in float32 on the host."""
    from transformers import AutoModelForCausalLM, LlamaConfig

    sizes, T = ISSUE41_SHAPES[shape]
    if tiny:
        sizes, T = ISSUE41_TINY.get(shape, sizes), 256
    cfg = LlamaConfig(**sizes, max_position_embeddings=T)
    with torch.random.fork_rng(devices=[device] if device.type == "cuda" else []), torch.device(device):
        torch.manual_seed(0)
        model = AutoModelForCausalLM.from_config(cfg, dtype=torch.bfloat16)
    if next(model.parameters()).dtype != torch.bfloat16:  # a transformers that ignores `dtype=`
        model = model.to(torch.bfloat16)
    return model.eval(), T


def _flex_warmup(model: torch.nn.Module, T: int, device: torch.device) -> None:
    """Compile `stats="full"`'s flex call for this model's layer shapes at length T (CUDA), outside the timed run:
    a trace session's compile wrapper then finds the compiled code (`attnlab.tracing.fast.flex`)."""
    from attnlab.tracing.fast.flex import FlexCalls, flex_applies, flex_statistics

    cfg = model.config
    H, Hkv, D = cfg.num_attention_heads, cfg.num_key_value_heads, cfg.head_dim
    dtype = next(model.parameters()).dtype
    q = torch.randn(1, H, T, D, device=device, dtype=dtype)
    k = torch.randn(1, Hkv, T, D, device=device, dtype=dtype)
    if flex_applies(q, k, None):
        lse = torch.zeros(1, H, T, device=device)
        flex_statistics(q, k, (lse, lse), None, D**-0.5, FlexCalls.compiled())
        _sync(device)


def _issue41_parts(model: torch.nn.Module, ids: torch.Tensor, device: torch.device, row: dict) -> dict:
    """{name: fn} of issue 41's three runs: the plain forward with the last position's logits only (the decoder
    and `lm_head` on the last position), the default scan and `stats="full"` (`trace_windows`, one window of T);
    each scan notes the kernels its layers ran in `row`."""
    from attnlab.tracing.adapters.hf import trace_windows

    def plain() -> None:  # as `logits_to_keep=1` does, in any transformers version: the decoder, then one position
        with torch.no_grad():
            hidden = model.model(input_ids=ids.to(device), use_cache=False).last_hidden_state
            model.lm_head(hidden[:, -1:])

    def scan(stats: str) -> Callable[[], None]:
        def run() -> None:
            tr, _ = trace_windows(model, ids, batch_size=1, desc="", stats=stats)
            row[f"{'scan' if stats == 'fast' else stats}_paths"] = sorted(set(tr.attention_paths))

        return run

    return {"plain": plain, "scan": scan("fast"), "full": scan("full")}


def issue41_row(device: torch.device, tiny: bool, shape: str, out: Callable[[dict], None]) -> None:
    """Issue 41 item 4: a random bf16 model of `shape` at its T (tiny: 256): the plain forward, the default scan and
    `stats="full"`, each warmed up (a 64-token run; on CUDA `full`'s flex call compiled at T instead, timed as
    `full_compile_s`) and timed once, with `torch.cuda.max_memory_allocated` after `reset_peak_memory_stats` for
    each, its ratio to the plain forward, and the scans' extra peak memory beside the bytes of their O(L·H·T)
    statistics in fp32.
    `out(row)` after each part, so that a time limit keeps what is done; a part out of memory is noted."""
    model, T = issue41_model(shape, tiny, device)
    cfg = model.config
    L, H = cfg.num_hidden_layers, cfg.num_attention_heads
    ids = torch.randint(3, cfg.vocab_size, (1, T), generator=torch.Generator().manual_seed(0))
    row: dict = {"tokens": T, "model": f"random {shape} shape", "dtype": "bfloat16", "layers": L, "heads": H,
                 "kv_heads": cfg.num_key_value_heads, "head_dim": cfg.head_dim,
                 "plain_note": f"logits of the last position only (as logits_to_keep=1): [T, vocab] bf16 logits "
                               f"would be {T * cfg.vocab_size * 2 / 1e9:.2g} GB"}  # fmt: skip
    parts = _issue41_parts(model, ids, device, row)
    short = _issue41_parts(model, ids[:, :64], device, {})
    for name, fn in parts.items():
        if name == "full":  # CUDA: compiled once at T (a 64-token run first would compile it twice); cpu: no-op
            _measure(row, "full_compile", lambda: _flex_warmup(model, T, device), device)
        if name != "full" or device.type != "cuda":
            short[name]()  # warm-up: kernels, allocator
        _measure(row, name, fn, device)
        if name != "plain":
            row[f"{name}_stats_gib"] = STAT_BYTES[name] * L * H * T / 2**30  # the O(L·H·T) statistics
        if name != "plain" and f"{name}_peak_gib" in row and "plain_peak_gib" in row:
            row[f"{name}_extra_gib"] = row[f"{name}_peak_gib"] - row["plain_peak_gib"]
        out(row)


def _measure(row: dict, name: str, fn: Callable[[], None], device: torch.device) -> None:
    """One timed run of `fn` into row[name_s], its peak device memory (CUDA) and its ratio to the plain forward."""
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    try:
        row[f"{name}_s"] = _median_seconds(fn, device, 1)
    except Exception as e:  # out of memory, a compile that failed: the row says so (traceback in the step's log)
        traceback.print_exc()
        row[f"{name}_error"] = f"{type(e).__name__}: {str(e).splitlines()[0][:200] if str(e) else ''}"
        if device.type == "cuda":
            torch.cuda.empty_cache()
        return
    if device.type == "cuda":
        row[f"{name}_peak_gib"] = torch.cuda.max_memory_allocated(device) / 2**30
    if name in ("scan", "full") and "plain_s" in row:
        row[f"{name}_over_plain"] = row[f"{name}_s"] / row["plain_s"]


def attention_kernels(device: torch.device, tiny: bool) -> dict:
    """Issue 23: one layer's causal attention at T = LONG_T (tiny: 256) in bfloat16, SmolLM2's heads (9 query, 3
    KV, d_h 64), through each CUDA kernel: sdpa as transformers calls it (enable_gqa, and on expanded KV heads)
    with the backend sdpa chooses, each kernel that returns the log-sum-exp, and the fused path's `fused_kernel`;
    median of 5 after a warm-up, and each log-sum-exp against flash-attention's."""
    from torch.nn.attention import SDPBackend
    from torch.nn.functional import scaled_dot_product_attention as sdpa

    from attnlab.tracing.fast.fused import _expand, fused_kernel

    T, s = (256 if tiny else LONG_T), 0.125
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, T, h, 64, generator=g).transpose(1, 2).to(device, torch.bfloat16) for h in (9, 3, 3))
    ke, ve = _expand(k, 9), _expand(v, 9)
    names = {getattr(SDPBackend, n).value: n
             for n in ("MATH", "FLASH_ATTENTION", "EFFICIENT_ATTENTION", "CUDNN_ATTENTION")}  # fmt: skip
    aten = torch.ops.aten
    calls = {
        "sdpa_enable_gqa": lambda: (sdpa(q, k, v, is_causal=True, scale=s, enable_gqa=True), None),
        "sdpa_expanded": lambda: (sdpa(q, ke, ve, is_causal=True, scale=s), None),
        "flash_lse": lambda: aten._scaled_dot_product_flash_attention(q, ke, ve, 0.0, True, False, scale=s)[:2],
        "efficient_lse": lambda: aten._scaled_dot_product_efficient_attention(
            q, ke, ve, None, True, 0.0, True, scale=s
        )[:2],  # fmt: skip
        "cudnn_lse": lambda: aten._scaled_dot_product_cudnn_attention(q, ke, ve, None, True, 0.0, True, False, scale=s)[
            :2
        ],  # fmt: skip
        "fused_kernel": lambda: fused_kernel(q, k, v, None, s),
    }
    choice = torch._fused_sdp_choice
    row: dict = {"tokens": T,
                 "choice_enable_gqa": names.get(choice(q, k, v, None, 0.0, True, scale=s, enable_gqa=True), "other"),
                 "choice_expanded": names.get(choice(q, ke, ve, None, 0.0, True, scale=s), "other")}  # fmt: skip
    ref = None
    for name, fn in calls.items():
        try:
            out, lse = fn()
            row[f"{name}_ms"] = 1e3 * _median_seconds(fn, device, 5)
        except RuntimeError as e:  # a kernel this GPU or build lacks: noted, the next one runs
            row[f"{name}_error"] = str(e).splitlines()[0][:200]
            continue
        if lse is not None:
            lse = lse.reshape(1, 9, -1)[..., :T].float()
            ref = lse if ref is None else ref
            row[f"{name}_lse_max_abs_diff_vs_flash"] = float((lse - ref).abs().max())
    return row


def _cuda_profile(fn: Callable[[], None], device: torch.device) -> None:
    """torch.profiler's table of one scan's CUDA kernels, by total device time (where the GPU's time goes)."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        fn()
        _sync(device)
    print(prof.key_averages().table(sort_by="cuda_time_total", row_limit=25, max_name_column_width=60))


def _profile_scan(fn: Callable[[], None], device: torch.device) -> None:
    """cProfile of one scan, the attnlab functions by cumulative time, printed (where the scan's time goes)."""
    import cProfile
    import pstats

    prof = cProfile.Profile()
    prof.enable()
    fn()
    _sync(device)
    prof.disable()
    pstats.Stats(prof).sort_stats("cumtime").print_stats("attnlab|torch/nn/functional|transformers/models", 45)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--tiny", action="store_true", help="tiny sizes (the dry run)")
    ap.add_argument("--long-only", action="store_true", help="only issue 23's long-context scans (LONG_SHAPES)")
    ap.add_argument("--profile", action="store_true", help="--long-only: a cProfile of the bfloat16 scan, printed")
    ap.add_argument("--long-shapes", default="smollm2:bfloat16,llama4:float32,smollm2:float32",
                    help="--long-only: the rows, as shape:dtype,...")  # fmt: skip
    ap.add_argument("--long-repeats", type=int, default=1, help="--long-only: median of this many runs (see long_scan)")
    ap.add_argument("--kernels", action="store_true", help="only issue 23's attention kernels at T = 131,072")
    ap.add_argument(
        "--issue41",
        action="store_true",
        help="only issue 41's rows: Llama-3-8B-shaped at T = 32,768, SmolLM2-shaped at T = 131,072",
    )
    ap.add_argument("--issue41-shapes", default="llama3_8b,smollm2", help="--issue41: the rows (ISSUE41_SHAPES)")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--threads", type=int, default=0, help="torch CPU threads (default: torch's choice)")
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args()
    from attnlab.core.device import describe, resolve

    device, cpu = resolve(args.device), torch.device("cpu")
    if args.threads:
        torch.set_num_threads(args.threads)
    rows: dict = {"device": describe(device), "cpu_threads": torch.get_num_threads(), "tiny": args.tiny,
                  "load_1min": os.getloadavg()[0]}  # fmt: skip
    gpu_steps, cpu_steps = (3, 3) if args.tiny else (20, 2)
    if args.kernels:
        rows["attention_kernels"] = attention_kernels(device, args.tiny)
        args.out.write_text(json.dumps(rows, indent=2))
        print(json.dumps(rows, indent=2))
        return 0
    if args.issue41:
        for shape in args.issue41_shapes.split(","):

            def keep41(row: dict, key: str = f"issue41_{shape}") -> None:
                rows[key] = row
                args.out.write_text(json.dumps(rows, indent=2))

            issue41_row(device, args.tiny, shape, keep41)
            if device.type == "cuda":  # the model is gone with the call: its memory back before the next one
                torch.cuda.empty_cache()
        print(json.dumps(rows, indent=2))
        return 0
    if args.long_only:  # the device only: at this length the cpu takes hours
        for shape, dtype_name in (item.split(":") for item in args.long_shapes.split(",")):
            dtype = getattr(torch, dtype_name)
            key = f"long_scan_{shape}_{str(dtype).removeprefix('torch.')}"

            def keep(row: dict, key: str = key) -> None:
                rows[key] = row
                args.out.write_text(json.dumps(rows, indent=2))

            long_scan(
                device,
                args.tiny,
                shape,
                dtype,
                keep,
                profile=args.profile and dtype == torch.bfloat16,
                repeats=args.long_repeats,
            )
        print(json.dumps(rows, indent=2))
        return 0

    def timed(row: str, side: str, fn: Callable[[], None], on: torch.device, repeats: int = 1, per: int = 1) -> None:
        """Time one side of a row and rewrite the file at once, so a time limit keeps the rows already done."""
        rows.setdefault(row, {})[side] = _median_seconds(fn, on, repeats) / per
        args.out.write_text(json.dumps(rows, indent=2))

    timed("bb_step_s", "device", bb_step(device, args.tiny, gpu_steps), device, args.repeats, gpu_steps)
    timed("bb_step_s", "cpu", bb_step(cpu, args.tiny, cpu_steps), cpu, args.repeats, cpu_steps)
    rows["bb_10000_steps_estimate_s"] = {k: 10000 * v for k, v in rows["bb_step_s"].items()}
    for row, make in (("simulate_s", simulate), ("paths_sample_s", paths_sample)):  # seconds on either side
        timed(row, "device", make(device, args.tiny), device)
        timed(row, "cpu", make(cpu, args.tiny), cpu)
    timed("phase_diagram_s", "device", phase(device, args.tiny), device)
    rows["paths_solve_s"] = {"note": "device: torch action, scipy L-BFGS on the host; cpu: NumPy fast path"}
    timed("paths_solve_s", "device", paths_solve(device, args.tiny), device)
    timed("paths_solve_s", "cpu", paths_solve(cpu, args.tiny), cpu)
    timed("phase_diagram_s", "cpu", phase(cpu, args.tiny), cpu)  # the longest (B2 on the cpu): last
    print(json.dumps(rows, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
