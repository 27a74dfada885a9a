"""Issue 23, sixth session: three costs of the scan beside what they replace, each timed in one process (2 threads).

    swapped   `stats="full"`'s swapped call (`tracing.fast.fused.swapped_statistics`) against the forward's own fused
              attention call, SmolLM2's shapes (9 query heads, 3 KV heads, d_h = 64), random inputs
    lse       the blocked NLL's log-sum-exp of SmolLM2's head at T = 512: torch.logsumexp on each [511, 4096] block
              against the in-place reduction of `head_nll` (both with the blocks' matrix products), and the plain
              head's full [511, 49152] logits
    recorder  a SmolLM2-sized `TraceRecorder` (30 layers, 9 heads, 49,152 tokens): its setup and its `result()`
              after 8 windows of 512 random tokens

Run: `.venv/bin/python benchmarks/bench_fixed_costs.py swapped lse recorder [--tokens 4096 512]`. Medians of
interleaved repeats; one JSON line per measurement.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def _median_s(fns: dict[str, Callable[[], object]], repeats: int) -> dict[str, float]:
    """Median wall seconds of each function, interleaved in ABBA order after one warm-up call each."""
    times: dict[str, list[float]] = {k: [] for k in fns}
    for f in fns.values():
        f()
    for r in range(repeats):
        for name, f in fns.items() if r % 2 == 0 else reversed(fns.items()):
            t = time.perf_counter()
            f()
            times[name].append(time.perf_counter() - t)
    return {k: round(statistics.median(v), 4) for k, v in times.items()}


def swapped(T: int, repeats: int) -> dict:
    from attnlab.tracing.fast.fused import fused_kernel, swapped_statistics

    g = torch.Generator().manual_seed(0)
    q = torch.randn(1, T, 9, 64, generator=g).transpose(1, 2) * 2  # the projections' layout, as in a forward
    k = torch.randn(1, T, 3, 64, generator=g).transpose(1, 2) * 2
    v = torch.randn(1, T, 3, 64, generator=g).transpose(1, 2)
    _, lse = fused_kernel(q, k, v, None, 0.125)
    got = _median_s(
        {
            "forward_call_s": lambda: fused_kernel(q, k, v, None, 0.125),
            "swapped_s": lambda: swapped_statistics(q, k, (lse, lse), None, 0.125),
        },
        repeats,
    )
    return {"what": "swapped", "tokens": T, **got, "ratio": round(got["swapped_s"] / got["forward_call_s"], 3)}


def lse(repeats: int) -> dict:
    from attnlab.tracing.fast.nll import VOCAB_BLOCK, _logsumexp_in_place

    g = torch.Generator().manual_seed(0)
    x, W = torch.randn(511, 576, generator=g), torch.randn(49152, 576, generator=g) * 0.05
    buf = torch.empty(511, VOCAB_BLOCK)

    def torch_lse() -> None:
        for v0 in range(0, W.shape[0], VOCAB_BLOCK):
            torch.logsumexp(torch.nn.functional.linear(x, W[v0 : v0 + VOCAB_BLOCK]), -1)

    def in_place() -> None:
        for v0 in range(0, W.shape[0], VOCAB_BLOCK):
            _logsumexp_in_place(torch.mm(x, W[v0 : v0 + VOCAB_BLOCK].t(), out=buf))

    got = _median_s(
        {"torch_logsumexp_s": torch_lse, "in_place_s": in_place,
         "full_head_s": lambda: torch.nn.functional.linear(x, W)},
        repeats,
    )  # fmt: skip
    return {"what": "lse", "tokens": 512, **got}


def recorder(repeats: int) -> dict:
    from attnlab.tracing.recorder import TraceRecorder

    L, H, T, V = 30, 9, 512, 49152
    setup, result = [], []
    for r in range(repeats):
        t = time.perf_counter()
        rec = TraceRecorder(L, H, T, V)
        setup.append(time.perf_counter() - t)
        g = torch.Generator().manual_seed(r)
        for _ in range(8):
            rec.begin_batch(torch.randint(0, V, (1, T), generator=g))
            for layer in range(L):
                rec.fused_rows(layer, torch.rand(1, H, T, generator=g))
                rec.logits(layer, torch.randn(1, H, T, generator=g), torch.randn(1, H, T, generator=g))
                rec.value_norms(layer, torch.rand(1, T, H, generator=g))
            for i in range(L + 1):
                rec.residual(i, torch.randn(1, T, 576, generator=g))
        rec._flush_batch()
        t = time.perf_counter()
        rec.result()
        result.append(time.perf_counter() - t)
    return {"what": "recorder", "setup_s": [round(s, 3) for s in setup], "result_s": [round(s, 3) for s in result]}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("what", nargs="+", choices=("swapped", "lse", "recorder"))
    ap.add_argument("--tokens", type=int, nargs="*", default=[4096, 512], help="swapped: sequence lengths")
    ap.add_argument("--repeats", type=int, default=8)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)  # a benchmark process of its own: no library code sets threads
    for what in args.what:
        rows = [swapped(T, args.repeats) for T in args.tokens] if what == "swapped" else []
        rows += [lse(args.repeats)] if what == "lse" else []
        rows += [recorder(args.repeats)] if what == "recorder" else []
        for row in rows:
            print(json.dumps({**row, "threads": args.threads}), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
