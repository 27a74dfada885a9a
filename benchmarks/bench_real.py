"""Benchmark: the streaming scan against a plain sdpa forward and an eager `output_attentions=True` forward on
SmolLM2-135M-Instruct (time and peak memory, as ratios; issue "Real LLMs", spec extreme-tokens §10).

Each (mode, T) runs in a fresh subprocess: load the model, touch every weight (the safetensors file is memory-
mapped), note the resident set size (RSS), run one forward and
read the peak RSS (VmHWM) -> extra peak memory of that forward over the loaded model; then time `--repeats`
further forwards (median, process CPU time and wall time). Modes:
  sdpa   plain forward (transformers' default sdpa attention), no hooks;
  scan   attnlab's traced forward (chunked eager attention + TraceRecorder rows + residual/value hooks);
  eager  eager attention with output_attentions=True (all [L,H,T,T] patterns kept).
TransformerLens `run_with_cache` is measured only if `transformer_lens` is importable (it is an optional extra).

Usage: .venv/bin/python benchmarks/bench_real.py [--tokens 128 512] [--long 4096] [--repeats 3] [--out FILE]
       .venv/bin/python benchmarks/bench_real.py --long-context 8192 --model smollm2 --threads 2
       .venv/bin/python benchmarks/bench_real.py --long-context 32768 --model tiny --threads 2
       .venv/bin/python benchmarks/bench_real.py --interleaved --tokens 512 4096 --repeats 5 --threads 2
       .venv/bin/python benchmarks/bench_real.py --families llama gemma2 gpt-oss --tokens 512 4096 --threads 2

`--families` (issue 9): one small random model per family kind (d = 256, 8 heads, 4 layers, the family's own
features from tests/real/families.py), plain forward (the family's default attention: sdpa, or eager where the
family has no sdpa) and scan timed interleaved in this one process, median wall-time ratio scan / plain.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _rss_kib(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    return 0


def _long_model(kind: str, T: int):
    """(model, ids [1,T]) for `--long-context`: SmolLM2 with its position limit raised to T where T exceeds it
    (RoPE positions past the trained 8192 are extrapolated: the numbers mean nothing there, the cost is what is
    measured), or "tiny": a random 4-layer Llama of the `SMALL` sizes whose positions reach T."""
    import torch

    if kind == "tiny":
        sys.path.insert(0, str(ROOT))
        from tests.real.families import tiny_family

        model = tiny_family("llama", **{**SMALL, "max_position_embeddings": max(T, 8192)})
        return model, torch.randint(3, SMALL["vocab_size"], (1, T), generator=torch.Generator().manual_seed(0))
    from attnlab.hf.loader import load_causal_lm
    from attnlab.hf.texts import domain_windows

    lm = load_causal_lm("smollm2")
    ids = domain_windows(lm.tokenizer, "prose", 1, min(T, 8192), 0)
    if T > ids.shape[1]:  # the prose domain repeated: the cost does not depend on the text
        ids = ids.repeat(1, -(-T // ids.shape[1]))[:, :T]
    lm.model.config.max_position_embeddings = max(T, lm.model.config.max_position_embeddings)
    return lm.model, ids


def child(mode: str, T: int, repeats: int, threads: int, kind: str = "smollm2") -> dict:
    """Run inside the subprocess: one measured forward for memory, then `repeats` timed forwards. `kind`: the model
    ("smollm2", or the `_long_model` kinds; "window" mode: one `trace_windows` window, what the scan does)."""
    import torch

    torch.set_num_threads(threads)  # a benchmark subprocess of its own: no library code sets threads
    from attnlab.tracing.adapters.hf import new_recorder, trace_windows, traced

    model, all_ids = _long_model(kind, T)

    def run_once(ids: torch.Tensor = all_ids) -> None:
        with torch.no_grad():
            if mode == "sdpa":
                model(input_ids=ids, use_cache=False)
            elif mode == "scan":
                rec = new_recorder(model, ids.shape[1])
                with traced(model, rec) as session:
                    session.forward(ids)
                rec.result()
            elif mode == "window":
                trace_windows(model, ids, desc="")
            elif mode == "eager":
                model.set_attn_implementation("eager")
                out = model(input_ids=ids, use_cache=False, output_attentions=True)
                del out
                model.set_attn_implementation("sdpa")
            else:
                raise SystemExit(f"unknown mode {mode}")

    with torch.no_grad():  # page in the memory-mapped weights first
        for p in model.parameters():
            p.sum()
    run_once(all_ids[:, :64])  # one-time set-up (kernels, allocator) outside the measured forward
    rss0 = _rss_kib("VmRSS")
    try:
        Path("/proc/self/clear_refs").write_text("5")  # reset the peak-RSS high-water mark
    except OSError:
        pass
    t0, c0 = time.perf_counter(), time.process_time()
    run_once()
    first, first_cpu = time.perf_counter() - t0, time.process_time() - c0
    peak = _rss_kib("VmHWM")
    cpu, wall = [], []
    for _ in range(repeats):
        c, w = time.process_time(), time.perf_counter()
        run_once()
        cpu.append(time.process_time() - c)
        wall.append(time.perf_counter() - w)
    return {
        "mode": mode,
        "tokens": T,
        "rss_model_mib": rss0 / 1024,
        "peak_rss_mib": peak / 1024,
        "extra_peak_mib": (peak - rss0) / 1024,
        "first_s": first,
        "cpu_s": statistics.median(cpu) if cpu else first_cpu,
        "wall_s": statistics.median(wall) if wall else first,
        "repeats": repeats,
        "threads": threads,
        "model": kind,
        "load": f"{os.getloadavg()[0]:.1f}",
    }


def measure(mode: str, T: int, repeats: int, threads: int, kind: str = "smollm2") -> dict:
    cmd = [sys.executable, __file__, "--child", mode, str(T), str(repeats), str(threads), kind]
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    out = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=ROOT)
    if out.returncode:
        return {"mode": mode, "tokens": T, "error": out.stderr.strip().splitlines()[-1:]}
    return json.loads(out.stdout.strip().splitlines()[-1])


SMALL = {
    "hidden_size": 256,
    "intermediate_size": 512,
    "num_hidden_layers": 4,
    "num_attention_heads": 8,
    "num_key_value_heads": 4,
    "head_dim": 32,
    "vocab_size": 1024,
    "max_position_embeddings": 8192,
}


def families_bench(names: list[str], tokens: list[int], repeats: int, threads: int) -> list[dict]:
    """Interleaved plain / scan forwards per family and T; one row each with the median wall times and ratio."""
    import torch

    torch.set_num_threads(threads)  # a benchmark process of its own: no library code sets threads
    sys.path.insert(0, str(ROOT))
    from attnlab.tracing.adapters.hf import new_recorder, traced
    from tests.real.families import tiny_family

    rows = []
    for name in names:
        extra = {k: v for k, v in SMALL.items() if name not in ("gpt2", "gpt-neox", "opt") or k != "head_dim"}
        model = tiny_family(name, **extra)
        for T in tokens:
            ids = torch.randint(3, 1024, (1, T), generator=torch.Generator().manual_seed(0))
            plain, scan = [], []
            for _ in range(repeats + 1):  # the first pair warms up
                with torch.no_grad():
                    t = time.perf_counter()
                    model(input_ids=ids, use_cache=False)
                    plain.append(time.perf_counter() - t)
                    rec = new_recorder(model, T)
                    t = time.perf_counter()
                    with traced(model, rec) as session:
                        session.forward(ids)
                    rec.result()
                    scan.append(time.perf_counter() - t)
            p, s_ = statistics.median(plain[1:]), statistics.median(scan[1:])
            rows.append(
                {
                    "family": name,
                    "tokens": T,
                    "attn": model.config._attn_implementation,
                    "plain_s": round(p, 4),
                    "scan_s": round(s_, 4),
                    "ratio": round(s_ / p, 2),
                }
            )
            print(json.dumps(rows[-1]), flush=True)
    return rows


def _round_ratios(wall: dict[str, list[float]], names: tuple[str, ...]) -> dict[str, list[float]]:
    """Per name: [lowest, median, highest] of the rounds' own ratios (its time / the plain forward's time in the same
    round), which a machine whose speed drifts over minutes moves less than the ratio of medians, and the 95 %
    percentile-bootstrap interval of their median over rounds (`core.intervals.bootstrap_interval`, seed 0)."""
    import numpy as np

    from attnlab.core.intervals import bootstrap_interval

    out = {}
    for name in names:
        r = sorted(a / b for a, b in zip(wall[name], wall["sdpa"]))
        out[f"{name}_round_ratios"] = [round(r[0], 3), round(statistics.median(r), 3), round(r[-1], 3)]
        if len(r) >= 3:
            iv = bootstrap_interval(r, np.random.default_rng(0), over="rounds", statistic=lambda a: np.median(a, -1))
            out[f"{name}_median_ci95"] = [round(iv.low, 3), round(iv.high, 3)]
    return out


def smollm2_interleaved(
    tokens: list[int], repeats: int, threads: int, windows: int = 1, modes: tuple[str, ...] = ("full", "chunked")
) -> list[dict]:
    """SmolLM2 in this one process: `windows` plain sdpa forwards against the scan's work on the same windows (one
    traced session: traced forwards, recorder result, next-token NLL; what `attnlab scan` does per domain; its
    default is 8 windows a domain), alternated `repeats` times after one warm-up pair; median wall and CPU seconds
    per window. The value norms' factors are computed in the warm-up round and kept, as `attnlab scan` keeps them
    across its domains (`traced(factors=...)`). `modes`: the other `stats=` paths timed beside the default one
    ("full", "chunked"), and "sdpa_nll": the plain sdpa forward of the base model with the NLL from vocabulary blocks
    of the head (`head_nll`), which gives what the scan gives but the statistics: scan / sdpa_nll is their cost."""
    import torch

    torch.set_num_threads(threads)  # a benchmark process of its own: no library code sets threads
    from attnlab.hf.loader import load_causal_lm
    from attnlab.hf.texts import domain_windows
    from attnlab.tracing.adapters.hf import trace_windows
    from attnlab.tracing.fast import head_nll, head_of

    model, tok = (lambda lm: (lm.model, lm.tokenizer))(load_causal_lm("smollm2"))
    rows, factors = [], {}
    for T in tokens:
        ids = domain_windows(tok, "prose", windows, T, 0)

        def sdpa(ids: torch.Tensor = ids) -> None:
            with torch.no_grad():
                for w in range(ids.shape[0]):
                    model(input_ids=ids[w : w + 1], use_cache=False)

        def sdpa_nll(ids: torch.Tensor = ids) -> None:
            base, head, post = head_of(model)
            with torch.no_grad():
                for w in range(ids.shape[0]):
                    hidden = base(input_ids=ids[w : w + 1], use_cache=False).last_hidden_state
                    head_nll(hidden, ids[w : w + 1], head, post)

        def scan(ids: torch.Tensor = ids, stats: str = "fast") -> None:
            trace_windows(model, ids, batch_size=1, stats=stats, desc="", factors=factors)

        others = {m: (sdpa_nll if m == "sdpa_nll" else (lambda m=m: scan(stats=m))) for m in modes}
        fns = {"sdpa": sdpa, "scan": scan, **others}
        wall: dict[str, list[float]] = {k: [] for k in fns}
        cpu: dict[str, list[float]] = {k: [] for k in fns}
        load0 = os.getloadavg()[0]
        for i in range(repeats + 1):
            for name, fn in fns.items() if i % 2 else reversed(fns.items()):  # ABBA: drift cancels within pairs
                t, c = time.perf_counter(), time.process_time()
                fn()
                if i:  # the first pair warms up
                    wall[name].append(time.perf_counter() - t)
                    cpu[name].append(time.process_time() - c)
        w = {k: statistics.median(v) / windows for k, v in wall.items()}
        c = {k: statistics.median(v) for k, v in cpu.items()}
        extra = {}
        if "sdpa_nll" in modes:  # per round: the statistics' own cost
            per_round = [a / b for a, b in zip(wall["scan"], wall["sdpa_nll"])]
            extra["scan_over_sdpa_nll"] = round(statistics.median(per_round), 3)
        rows.append({"tokens": T, "threads": threads, "windows": windows, "sdpa_s": round(w["sdpa"], 3),
                     "scan_s": round(w["scan"], 3),
                     "wall_ratio": round(w["scan"] / w["sdpa"], 3), "cpu_ratio": round(c["scan"] / c["sdpa"], 3),
                     **{f"{m}_ratio": round(w[m] / w["sdpa"], 3) for m in modes},
                     **_round_ratios(wall, ("scan", *modes)), **extra,
                     "load": f"{load0:.1f} -> {os.getloadavg()[0]:.1f}"})  # fmt: skip
        print(json.dumps(rows[-1]), flush=True)
    return rows


def long_context(tokens: list[int], threads: int, kind: str, out: Path | None) -> int:
    """`--long-context`: per T, a plain forward and a scan window, each once in a fresh process (time, peak RSS)."""
    rows = []
    for T in tokens:
        for mode in ("sdpa", "window"):
            rows.append(measure(mode, T, 0, threads, kind))
            print(json.dumps(rows[-1]), flush=True)
    print("\n| model | T | threads | mode | wall s | extra peak MiB | peak RSS MiB | load |")
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        if "error" in r:
            print(f"| {kind} | {r['tokens']} | {threads} | {r['mode']} | error: {r['error']} | | | |")
            continue
        print(f"| {kind} | {r['tokens']} | {threads} | {r['mode']} | {r['first_s']:.1f} | {r['extra_peak_mib']:.0f} | "
              f"{r['peak_rss_mib']:.0f} | {r['load']} |")  # fmt: skip
    if out:
        out.write_text(json.dumps(rows, indent=2))
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tokens", type=int, nargs="*", default=[128, 512], help="sequence lengths (default 128 512)")
    ap.add_argument("--long", type=int, nargs="*", default=[], help="extra lengths measured for the scan only")
    ap.add_argument("--repeats", type=int, default=3, help="timed forwards per measurement (default 3)")
    ap.add_argument("--threads", type=int, default=1, help="torch threads (default 1)")
    ap.add_argument("--out", type=Path, default=None, help="write the results as JSON here")
    ap.add_argument("--child", nargs=5, default=None, help=argparse.SUPPRESS)
    ap.add_argument("--long-context", nargs="*", type=int, default=None, metavar="T",
                    help="one plain forward and one scan window (trace_windows) per T, each in its own process: "
                         "time and peak memory (--model smollm2 or tiny)")  # fmt: skip
    ap.add_argument("--model", default="smollm2", choices=("smollm2", "tiny"), help="--long-context: the model")
    ap.add_argument("--families", nargs="*", default=None, help="family kinds (tests/real/families.py) instead")
    ap.add_argument("--interleaved", action="store_true", help="SmolLM2 sdpa and scan alternated in one process")
    ap.add_argument("--windows", type=int, default=1, help="--interleaved: windows per scan session (default 1)")
    ap.add_argument("--modes", nargs="*", default=["full", "chunked"], choices=("full", "chunked", "sdpa_nll"),
                    help="--interleaved: other stats= paths timed beside the default (full chunked), and sdpa_nll "
                         "(a plain forward with the scan's NLL)")  # fmt: skip
    args = ap.parse_args()
    if args.interleaved:
        rows = smollm2_interleaved(args.tokens, args.repeats, args.threads, args.windows, tuple(args.modes))
        print("\n| T | threads | windows | sdpa s / window | scan s / window | wall ratio | CPU ratio | "
              + " | ".join(f"{m} ratio" for m in args.modes) + " | load |")  # fmt: skip
        print("|---|---|---|---|---|---|---|" + "---|" * len(args.modes) + "---|")
        for r in rows:
            print(f"| {r['tokens']} | {r['threads']} | {r['windows']} | {r['sdpa_s']} | {r['scan_s']} | "
                  f"{r['wall_ratio']} | {r['cpu_ratio']} | " + "".join(f"{r[m + '_ratio']} | " for m in args.modes)
                  + f"{r['load']} |")  # fmt: skip
        if args.out:
            args.out.write_text(json.dumps(rows, indent=2))
        return 0
    if args.families is not None:
        rows = families_bench(args.families, args.tokens, args.repeats, args.threads)
        print("\n| family | attention | T | plain s | scan s | scan / plain |\n|---|---|---|---|---|---|")
        for r in rows:
            print(f"| {r['family']} | {r['attn']} | {r['tokens']} | {r['plain_s']} | {r['scan_s']} | {r['ratio']} |")
        if args.out:
            args.out.write_text(json.dumps(rows, indent=2))
        return 0
    if args.child:
        mode, T, rep, thr, kind = args.child
        print(json.dumps(child(mode, int(T), int(rep), int(thr), kind)))
        return 0
    if args.long_context is not None:
        return long_context(args.long_context, args.threads, args.model, args.out)
    try:
        import transformer_lens  # noqa: F401

        lens = True
    except ImportError:
        lens = False
    rows = []
    for T in args.tokens:
        for mode in ("sdpa", "scan", "eager"):
            rows.append(measure(mode, T, args.repeats, args.threads))
            print(json.dumps(rows[-1]), flush=True)
    for T in args.long:
        for mode in ("sdpa", "scan"):
            rows.append(measure(mode, T, 0, args.threads))
            print(json.dumps(rows[-1]), flush=True)
    summary = []
    for T in sorted({r["tokens"] for r in rows}):
        base = next((r for r in rows if r["tokens"] == T and r["mode"] == "sdpa" and "error" not in r), None)
        for r in rows:
            if r["tokens"] != T or "error" in r or base is None:
                continue
            summary.append(
                {
                    "tokens": T,
                    "mode": r["mode"],
                    "cpu_s": round(r["cpu_s"], 3),
                    "cpu_ratio_vs_sdpa": round(r["cpu_s"] / base["cpu_s"], 3),
                    "wall_ratio_vs_sdpa": round(r["wall_s"] / base["wall_s"], 3),
                    "extra_peak_mib": round(r["extra_peak_mib"], 1),
                    "extra_over_sdpa_mib": round(r["extra_peak_mib"] - base["extra_peak_mib"], 1),
                    "peak_rss_mib": round(r["peak_rss_mib"], 1),
                }
            )
    print("\n| T | mode | CPU s | CPU ratio vs sdpa | wall ratio | extra peak MiB | over sdpa MiB | peak RSS MiB |")
    print("|---|---|---|---|---|---|---|---|")
    for s in summary:
        print(
            f"| {s['tokens']} | {s['mode']} | {s['cpu_s']} | {s['cpu_ratio_vs_sdpa']} | {s['wall_ratio_vs_sdpa']} | "
            f"{s['extra_peak_mib']} | {s['extra_over_sdpa_mib']} | {s['peak_rss_mib']} |"
        )
    print(f"TransformerLens: {'installed' if lens else 'not installed - not measured'}")
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps({"rows": rows, "summary": summary, "transformer_lens": lens}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
