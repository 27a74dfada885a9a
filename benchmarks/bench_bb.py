"""Benchmarks of the BB study, each against a baseline run side by side (numbers go to benchmarks/RESULTS.md).

1. Generator: the vectorised inverse-CDF sampler vs a straightforward per-token loop (same law, 512 × 257).
2. Training step at d=128, T=64, batch 64 (AdamW): attnlab's toy model vs a straightforward implementation
   (separate q/k/v projections, the causal mask rebuilt per call, nn.Sequential MLP).
3. Time until the 1-layer phenomena appear with the `cpu` preset (Attn⟨s⟩ ≥ 0.6 and excess backcopy risk < 0.05).

Run:  .venv/bin/python benchmarks/bench_bb.py [--threads 2] [--skip-phenomena]
"""

from __future__ import annotations

import argparse
import json
import math
import tempfile
import time
from pathlib import Path

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

import attnlab.bb as bb
from attnlab.bb.config import resolve_config
from attnlab.bb.model import ToyConfig, ToyTransformer
from attnlab.bb.task import build_bb_task
from attnlab.clitools import threads


def per_token_sampler(task, batch: int, seq_len: int, seed: int, fast_draw: bool = False) -> np.ndarray:
    """The baseline: one token at a time, one sequence at a time.

    `fast_draw=False` draws with `rng.choice(n, p=row)` (the straightforward way); `fast_draw=True` uses a
    cumulative sum and a binary search per token (a tuned loop), so the speed-up is reported against both.
    """
    rng = np.random.default_rng(seed)
    law = task.bigram_matrix()[:, : task.vocab.n_chars]
    n = task.vocab.n_chars
    out = np.empty((batch, seq_len + 1), dtype=np.int64)
    for b in range(batch):
        out[b, 0] = task.vocab.bos
        for t in range(1, seq_len + 1):
            prev = out[b, t - 1]
            if t >= 2 and task.is_trigger[prev]:
                out[b, t] = out[b, t - 2]
            elif fast_draw:
                out[b, t] = min(int(np.searchsorted(np.cumsum(law[prev]), rng.random(), side="right")), n - 1)
            else:
                out[b, t] = rng.choice(n, p=law[prev])
    return out


def best_of(fn, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


class PlainBlock(nn.Module):
    """A straightforward pre-LN block: separate projections, mask built per call."""

    def __init__(self, d: int, h: int, d_mlp: int) -> None:
        super().__init__()
        self.h = h
        self.q, self.k, self.v, self.o = (nn.Linear(d, d, bias=False) for _ in range(4))
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.mlp = nn.Sequential(nn.Linear(d, d_mlp, bias=False), nn.ReLU(), nn.Linear(d_mlp, d, bias=False))

    def forward(self, x):
        B, T, D = x.shape
        y = self.ln1(x)
        q, k, v = (f(y).view(B, T, self.h, -1).transpose(1, 2) for f in (self.q, self.k, self.v))
        s = q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])
        mask = torch.triu(torch.ones(T, T, dtype=torch.bool), 1)
        a = F.softmax(s.masked_fill(mask, float("-inf")), -1)
        x = x + self.o((a @ v).transpose(1, 2).reshape(B, T, D))
        return x + self.mlp(self.ln2(x))


class PlainModel(nn.Module):
    def __init__(self, V: int, d: int, d_mlp: int, T: int) -> None:
        super().__init__()
        self.emb, self.pos = nn.Embedding(V, d), nn.Embedding(T, d)
        self.block = PlainBlock(d, 1, d_mlp)
        self.ln, self.out = nn.LayerNorm(d), nn.Linear(d, V, bias=False)

    def forward(self, x):
        h = self.emb(x) + self.pos(torch.arange(x.shape[1]))
        return self.out(self.ln(self.block(h)))


def step_time(model: nn.Module, x: torch.Tensor, y: torch.Tensor, n: int = 30) -> float:
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=1e-4, betas=(0.9, 0.99))

    def step():
        logits = model(x)
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()

    for _ in range(5):
        step()
    return best_of(lambda: [step() for _ in range(n)], 3) / n


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--threads", type=int, default=2, help="torch threads (default 2)")
    ap.add_argument("--skip-phenomena", action="store_true", help="skip the (minutes-long) cpu-preset run")
    ap.add_argument("--json", type=Path, default=None, help="also write the numbers to this JSON file")
    args = ap.parse_args()
    with threads(args.threads):
        res = measure(args)
    if args.json:
        args.json.write_text(json.dumps(res, indent=1))


def measure(args: argparse.Namespace) -> dict:
    task = build_bb_task()
    res: dict = {"threads": args.threads}

    vec = best_of(lambda: task.sample(512, 256, seed=0), 5)
    loop = best_of(lambda: per_token_sampler(task, 512, 256, seed=0), 1)
    tuned = best_of(lambda: per_token_sampler(task, 512, 256, seed=0, fast_draw=True), 1)
    res.update(
        generator_vectorised_s=vec,
        generator_loop_s=loop,
        generator_speedup=loop / vec,
        generator_tuned_loop_s=tuned,
        generator_speedup_vs_tuned=tuned / vec,
    )
    print(
        f"generator 512x257: vectorised {vec * 1e3:.1f} ms; per-token loop (rng.choice) {loop:.2f} s, ratio "
        f"{loop / vec:.0f}x; tuned per-token loop (cumsum+searchsorted) {tuned:.2f} s, ratio {tuned / vec:.0f}x"
    )

    x = torch.randint(0, task.V, (64, 64), generator=torch.Generator().manual_seed(0))
    with torch.random.fork_rng(devices=[]):  # module initialisers draw from the global generator
        torch.manual_seed(0)
        ours = ToyTransformer(ToyConfig(vocab=task.V, d_model=128, d_mlp=512, max_len=64))
        base = PlainModel(task.V, 128, 512, 64)
    t_ours, t_base = step_time(ours, x, x), step_time(base, x, x)
    res.update(train_step_ms=t_ours * 1e3, baseline_step_ms=t_base * 1e3, step_ratio=t_base / t_ours)
    print(
        f"training step d=128 T=64 B=64: attnlab {t_ours * 1e3:.1f} ms, plain {t_base * 1e3:.1f} ms, "
        f"baseline/attnlab {t_base / t_ours:.2f}"
    )

    if not args.skip_phenomena:
        with tempfile.TemporaryDirectory() as tmp:
            cfg = resolve_config("cpu", steps=2000)
            t0 = time.perf_counter()
            run = bb.train(cfg, Path(tmp) / "run", progress=False)
            total = time.perf_counter() - t0
            m = run.tables["metrics"].to_dict("records")
        hit = next((r for r in m if r["attn_sink"] >= 0.6 and r["excess_risk_backcopy"] < 0.05), None)
        res.update(
            cpu_preset_total_s=total,
            phenomena_step=hit and hit["step"],
            phenomena_s_estimate=hit and total * hit["step"] / cfg.steps,
            final=m[-1] and {k: m[-1][k] for k in ("attn_sink", "excess_risk_backcopy", "value_norm_bos")},
        )
        print(
            f"cpu preset 2000 steps: {total:.0f} s; phenomena from step {res['phenomena_step']} "
            f"(≈ {res['phenomena_s_estimate']:.0f} s)"
        )
    return res


if __name__ == "__main__":
    main()
