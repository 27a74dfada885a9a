"""Benchmark: the default scan's statistics of one SmolLM2 window, piece by piece (issue 23).

One window of T tokens is traced once while its per-layer q, k, v, log-sum-exp and residual streams are captured;
then the statistics the fused path computes from them are replayed `--repeats` times into fresh recorders, each
piece timed in place (logit statistics, key-0 weights and their bookkeeping, value norms, residual statistics, the
NLL, the recorder's `result()`). Prints the median milliseconds a window of each piece and their sum: the part of
a scan window that is not the forward itself.

`--in-situ`: instead, `--repeats` scans of 8 windows (what `attnlab scan` does per domain), each statistic's function
wrapped with a timer where the scan calls it, between the model's own matrix products (the statistics cost more
there than in a loop of their own); the cpu kernels (`tracing.fast.cpu_kernels`) are timed inside their callers.

Usage: .venv/bin/python benchmarks/bench_scan_parts.py --tokens 512 --repeats 20 --threads 2
       .venv/bin/python benchmarks/bench_scan_parts.py --in-situ --repeats 5 --threads 2
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _capture(model, ids):
    """(layers [(q, k, v, lse, scale)], streams [(index, hidden)], the final hidden state [1,T,d] (after the final
    norm, what the scan's NLL reads: `head_nll`), value factors) of one traced window."""
    import torch

    import attnlab.tracing.adapters.hf as hf
    import attnlab.tracing.fast.fused as fused
    from attnlab.tracing.recorder import TraceRecorder

    layers, streams = [], []
    kernel, residual = fused.fused_kernel, TraceRecorder.residual

    def capture_kernel(q, k, v, mask, scale):
        out, lse = kernel(q, k, v, mask, scale)
        layers.append((q.clone(), k.clone(), v.clone(), lse.clone(), scale))
        return out, lse

    def capture_residual(self, index, hidden):
        streams.append((index, hidden.detach().clone()))
        return residual(self, index, hidden)

    fused.fused_kernel, TraceRecorder.residual = capture_kernel, capture_residual
    try:
        rec = hf.new_recorder(model, ids.shape[1])
        with hf.traced(model, rec) as sess:
            sess.forward(ids)
            factors = [sess.value_factor(layer, layers[layer][2].shape[1]) for layer in range(len(layers))]
    finally:
        fused.fused_kernel, TraceRecorder.residual = kernel, residual
    base = model.base_model
    with torch.no_grad():
        hidden = base(input_ids=ids, use_cache=False).last_hidden_state
    return layers, streams, hidden, factors


def _window(model, ids, captured) -> dict[str, float]:
    """Seconds of each piece of one window's statistics, replayed into a fresh recorder."""
    import torch

    import attnlab.tracing.adapters.hf as hf
    import attnlab.tracing.fast.fused as fused
    from attnlab.tracing.fast import head_nll, head_of

    layers, streams, hidden, factors = captured
    _, head, post = head_of(model)
    rec = hf.new_recorder(model, ids.shape[1])
    rec.begin_batch(ids)
    t: dict[str, float] = {}

    def timed(name, fn, *args):
        t0 = time.perf_counter()
        out = fn(*args)
        t[name] = t.get(name, 0.0) + time.perf_counter() - t0
        return out

    for layer, (q, k, v, lse, scale) in enumerate(layers):
        s0, rest = timed("logit statistics", fused.logit_stats, q, k, scale)
        key0 = timed("key-0 weights, bookkeeping", torch.exp, s0 - lse)
        timed("key-0 weights, bookkeeping", rec.fused_rows, layer, key0)
        timed("logit bookkeeping", rec.logits, layer, s0, rest)
        norms = timed("value norms", fused.value_norms, v, factors[layer])
        timed("value-norm bookkeeping", rec.value_norms, layer, norms)
    for index, stream in streams:
        timed("residual statistics", rec.residual, index, stream)
    timed("NLL (vocabulary blocks of the head, its GEMM included)", head_nll, hidden, ids, head, post)
    timed("result()", rec.result)
    return t


def _timed_in_place(targets: list[tuple[object, str, str]], acc: dict[str, float]) -> list[tuple[object, str, object]]:
    """Wrap each (owner, attribute, label) with a timer adding its seconds to acc[label]; the originals, to restore."""
    import functools

    saved = []
    for owner, name, label in targets:
        fn = getattr(owner, name)

        def wrapper(*a, _fn=fn, _label=label, **k):
            t0 = time.perf_counter()
            try:
                return _fn(*a, **k)
            finally:
                acc[_label] = acc.get(_label, 0.0) + time.perf_counter() - t0

        setattr(owner, name, functools.wraps(fn)(wrapper))
        saved.append((owner, name, fn))
    return saved


def in_situ(model, tokenizer, T: int, repeats: int, windows: int = 8) -> dict[str, float]:
    """Median ms a window of each statistic inside `repeats` scans of `windows` windows (after one warm-up)."""
    import attnlab.tracing.adapters.hf as hf
    import attnlab.tracing.fast.fused as fused
    import attnlab.tracing.recorder as recorder
    from attnlab.hf.texts import domain_windows

    ids = domain_windows(tokenizer, "prose", windows, T, 0)
    acc: dict[str, float] = {}
    targets = [
        (fused, "fused_kernel", "fused attention kernel"),
        (fused, "logit_stats", "logit statistics"),
        (fused, "value_norms", "value norms"),
        (recorder.TraceRecorder, "fused_rows", "key-0 bookkeeping"),
        (recorder.TraceRecorder, "logits", "logit bookkeeping"),
        (recorder.TraceRecorder, "value_norms", "value-norm bookkeeping"),
        (recorder.TraceRecorder, "residual", "residual statistics"),
        (hf, "head_nll", "NLL (head blocks)"),
    ]
    saved = _timed_in_place(targets, acc)
    runs, factors = [], {}
    try:
        for i in range(repeats + 1):
            acc.clear()
            t0 = time.perf_counter()
            hf.trace_windows(model, ids, batch_size=1, desc="", factors=factors)
            if i:
                runs.append({**acc, "whole scan": time.perf_counter() - t0})
    finally:
        for owner, name, fn in saved:
            setattr(owner, name, fn)
    return {k: statistics.median(r.get(k, 0.0) for r in runs) / windows * 1e3 for k in runs[0]}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tokens", type=int, default=512)
    ap.add_argument("--repeats", type=int, default=20)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--in-situ", action="store_true", help="time the statistics inside scans (module docstring)")
    args = ap.parse_args()
    import torch

    torch.set_num_threads(args.threads)  # a benchmark process of its own: no library code sets threads
    sys.path.insert(0, str(ROOT))
    from attnlab.hf.loader import load_causal_lm
    from attnlab.hf.texts import domain_windows

    lm = load_causal_lm("smollm2")
    if args.in_situ:
        for name, ms in in_situ(lm.model, lm.tokenizer, args.tokens, args.repeats).items():
            print(f"{name:28s} {ms:8.2f} ms a window (inside the scan)")
        return 0
    ids = domain_windows(lm.tokenizer, "prose", 1, args.tokens, 0)
    captured = _capture(lm.model, ids)
    _window(lm.model, ids, captured)  # warm-up
    runs = [_window(lm.model, ids, captured) for _ in range(args.repeats)]
    total = 0.0
    for name in runs[0]:
        ms = statistics.median(r[name] for r in runs) * 1e3
        total += ms
        print(f"{name:28s} {ms:8.2f} ms a window")
    print(f"{'sum':28s} {total:8.2f} ms a window (T = {args.tokens}, {args.threads} threads)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
