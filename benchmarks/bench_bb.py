"""Benchmarks of the BB study, each against a baseline run side by side (numbers go to benchmarks/RESULTS.md).

1. Generator: the vectorised inverse-CDF sampler vs a straightforward per-token loop (same law, 512 × 257).
2. Training step (AdamW, one update) at the `cpu` preset's size (d 128, T 64, batch 64) and, with
   `--paper`, at the paper's (d 256, d_mlp 1024, T 256, batch 512): attnlab's toy model *with the Trainer's NaN
   guard* vs the reference model, re-implemented from the paper's description of its 1-layer transformer (pre-LN,
   separate W_Q, W_K, W_V, W_O, causal mask, softmax attention, ReLU MLP, untied unembedding; no code copied).
   The two sides run interleaved in one process (A, B, A, B ...); medians and their ratio are printed.
3. Time until the 1-layer phenomena appear with the `cpu` preset (Attn⟨s⟩ ≥ 0.6 and excess backcopy risk < 0.05).

Run:  .venv/bin/python benchmarks/bench_bb.py [--threads 2] [--skip-phenomena] [--skip-generator] [--paper]
      [--rounds 7] [--steps 3] [--paper-rounds 3] [--paper-steps 1]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

import attnlab.bb as bb
from attnlab.bb.config import resolve_config
from attnlab.core.clitools import threads
from attnlab.toy.model import ToyConfig, ToyTransformer
from attnlab.toy.task import build_bb_task


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
    """The reference block, written from the paper's description of its model: pre-LN, separate W_Q, W_K, W_V,
    W_O (no biases), the causal mask built per call, softmax attention, a ReLU MLP."""

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


def make_step(model: nn.Module, x: torch.Tensor, y: torch.Tensor, guard: bool):
    """One AdamW update as the Trainer does it (with `guard`: the Trainer's NaN guard and last-finite copy)."""
    from attnlab.training.loop import norms_finite as _norms_finite

    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=1e-4, betas=(0.9, 0.99))
    params = list(model.parameters())
    last = [p.detach().clone() for p in params]

    def step() -> None:
        logits = model(x)
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1))
        if guard and not math.isfinite(loss.item()):
            raise RuntimeError("non-finite loss")
        opt.zero_grad(set_to_none=True)
        loss.backward()
        if guard:
            assert _norms_finite([p.grad for p in params if p.grad is not None])
            with torch.no_grad():
                torch._foreach_copy_(last, [p.detach() for p in params])
        opt.step()
        if guard:
            assert _norms_finite(params)

    return step


def interleaved(fns: dict, rounds: int, steps: int) -> dict[str, list[float]]:
    """Per-step seconds of each fn, `rounds` times, the sides alternating (A, B, A, B ...)."""
    times: dict[str, list[float]] = {k: [] for k in fns}
    for _ in range(rounds):
        for name, fn in fns.items():
            t0 = time.perf_counter()
            for _ in range(steps):
                fn()
            times[name].append((time.perf_counter() - t0) / steps)
    return times


def step_ratio(V: int, d: int, d_mlp: int, T: int, batch: int, rounds: int, steps: int, warm: int) -> dict:
    """attnlab (guarded) vs the reference model, same init seed and batch; medians over interleaved rounds."""
    x = torch.randint(0, V, (batch, T), generator=torch.Generator().manual_seed(0))
    with torch.random.fork_rng(devices=[]):  # module initialisers draw from the global generator
        torch.manual_seed(0)
        ours = ToyTransformer(ToyConfig(vocab=V, d_model=d, d_mlp=d_mlp, max_len=T))
        torch.manual_seed(0)
        ref = PlainModel(V, d, d_mlp, T)
    fns = {"attnlab": make_step(ours, x, x, guard=True), "reference": make_step(ref, x, x, guard=False)}
    for fn in fns.values():
        for _ in range(warm):
            fn()
    load0 = os.getloadavg()[0]
    times = interleaved(fns, rounds, steps)
    med = {k: statistics.median(v) for k, v in times.items()}
    return {
        "size": f"d {d}, d_mlp {d_mlp}, T {T}, batch {batch}",
        "params": sum(p.numel() for p in ours.parameters()),
        "attnlab_s": med["attnlab"],
        "reference_s": med["reference"],
        "ratio_reference_over_attnlab": med["reference"] / med["attnlab"],
        "all": times,
        "load_before_after": (load0, os.getloadavg()[0]),
    }


def _print_step(r: dict, goal: float) -> None:
    ratio = r["ratio_reference_over_attnlab"]
    print(
        f"training step {r['size']} ({r['params']:,} parameters): attnlab {r['attnlab_s'] * 1e3:.1f} ms, "
        f"reference {r['reference_s'] * 1e3:.1f} ms, reference/attnlab {ratio:.3f} "
        f"(goal >= {goal}: {'met' if ratio >= goal else 'NOT met'}); load {r['load_before_after'][0]:.2f} -> "
        f"{r['load_before_after'][1]:.2f}"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--threads", type=int, default=2, help="torch threads (default 2)")
    ap.add_argument("--skip-phenomena", action="store_true", help="skip the (minutes-long) cpu-preset run")
    ap.add_argument("--json", type=Path, default=None, help="also write the numbers to this JSON file")
    ap.add_argument("--skip-generator", action="store_true", help="skip the generator comparison")
    ap.add_argument("--paper", action="store_true", help="also time the step at the paper's size (GiBs, slow)")
    ap.add_argument("--rounds", type=int, default=7, help="interleaved rounds at the cpu size (median)")
    ap.add_argument("--steps", type=int, default=3, help="steps per round at the cpu size")
    ap.add_argument("--paper-rounds", type=int, default=3, help="interleaved rounds at the paper size")
    ap.add_argument("--paper-steps", type=int, default=1, help="steps per round at the paper size")
    args = ap.parse_args()
    with threads(args.threads):
        res = measure(args)
    if args.json:
        args.json.write_text(json.dumps(res, indent=1))


def generator(task, res: dict) -> None:
    """The vectorised sampler vs the per-token loops (fills `res`)."""
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


def measure(args: argparse.Namespace) -> dict:
    task = build_bb_task()
    res: dict = {"threads": args.threads}

    if not args.skip_generator:
        generator(task, res)
    cpu = step_ratio(task.V, 128, 512, 64, 64, args.rounds, args.steps, warm=3)
    res["train_step_cpu"] = cpu
    _print_step(cpu, 1.3)
    if args.paper:
        paper = step_ratio(task.V, 256, 1024, 256, 512, args.paper_rounds, args.paper_steps, warm=1)
        res["train_step_paper"] = paper
        _print_step(paper, 1.5)

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
