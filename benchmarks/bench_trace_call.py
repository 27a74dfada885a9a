"""One `attnlab.trace(model, ids)` call against a plain forward (issue 41's goal: <= 1.05x on SmolLM2, T = 512, CPU,
2 threads): what a notebook user pays for the per-call set-up (recorder, hooks, architecture, value-norm factors).

Each round runs, interleaved in this one process on the same ids:

- plain: the model's own forward under `torch.inference_mode()` (its sdpa attention), logits discarded;
- loaded: `attnlab.trace(loaded, ids)`, `loaded` the `LoadedModel` of `attnlab.load_model` (it keeps its
  architecture and value-norm factors across calls); without `logits=True` it makes no [1, T, V] logits (the base
  model runs, not the unembedding: `TraceSession.forward_statistics`), so it does less than the plain forward;
- bare: `attnlab.trace(loaded.model, ids)`, the bare transformers module (architecture and factors found each call);
- logits: `attnlab.trace(loaded, ids, logits=True)`, the `LoadedModel` call that also hands back the [1, T, V] logits:
  the same work as the plain forward plus the statistics (the like-for-like ratio).

The order of the calls rotates from round to round (round r starts with call r mod 4), so that no call always runs
first or right after the plain forward. Prints the median of each, the ratio to plain (the median of the per-round
ratios, with its 95 % bootstrap interval over rounds and the quartiles) and the load average before and after.
Quiet machine only (`uptime` load under ~1.5).

    .venv/bin/python benchmarks/bench_trace_call.py [--tokens 512] [--rounds 10] [--threads 2] [--model smollm2]
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import time
from collections.abc import Callable


def _timed(fn: Callable[[], object]) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def _median_interval(ratios: list[float], resamples: int = 2000) -> tuple[float, float]:
    """The 95 % percentile-bootstrap interval of the median of `ratios` (resampled rounds, a fixed seed)."""
    rng = random.Random(0)
    meds = sorted(statistics.median(rng.choices(ratios, k=len(ratios))) for _ in range(resamples))
    return meds[int(0.025 * resamples)], meds[int(0.975 * resamples) - 1]


def _ids(loaded: object, tokens: int) -> object:
    """[1, tokens] ids of the embedded prose sample, repeated to length (any ids time the same)."""
    import torch

    from attnlab.hf.texts import prose_text

    text = prose_text()
    ids = loaded.tokenizer(text, return_tensors="pt")["input_ids"][0]  # type: ignore[attr-defined]
    return ids.repeat(tokens // ids.numel() + 1)[:tokens].unsqueeze(0).to(torch.long)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tokens", type=int, default=512)
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--model", default="smollm2")
    args = ap.parse_args()
    import torch

    import attnlab

    torch.set_num_threads(args.threads)  # a benchmark script, not library code
    loaded = attnlab.load_model(args.model)
    ids = _ids(loaded, args.tokens)

    def plain() -> None:
        with torch.inference_mode():
            loaded.model(ids)

    calls = {"plain": plain, "loaded": lambda: attnlab.trace(loaded, ids),
             "bare": lambda: attnlab.trace(loaded.model, ids),
             "logits": lambda: attnlab.trace(loaded, ids, logits=True)}  # fmt: skip
    for fn in calls.values():  # warm-up: first-call costs (allocators, numba) are not the per-call set-up
        fn()
    load0 = os.getloadavg()[0]
    times: dict[str, list[float]] = {k: [] for k in calls}
    names = list(calls)
    for r in range(args.rounds):
        for name in names[r % len(names) :] + names[: r % len(names)]:
            times[name].append(_timed(calls[name]))
    load1 = os.getloadavg()[0]
    print(f"{args.model}, T = {args.tokens}, {args.threads} threads, {args.rounds} interleaved rounds, "
          f"load {load0:.2f} -> {load1:.2f}")  # fmt: skip
    for name in calls:
        ratios = [t / p for t, p in zip(times[name], times["plain"])]
        low, high = _median_interval(ratios)
        q1, _, q3 = statistics.quantiles(ratios, n=4)
        ms, ratio = statistics.median(times[name]) * 1000, statistics.median(ratios)
        print(f"  {name:7s} median {ms:8.1f} ms   ratio {ratio:.3f}x [95 % {low:.3f}, {high:.3f}; "
              f"quartiles {q1:.3f}, {q3:.3f}]")  # fmt: skip


if __name__ == "__main__":
    main()
