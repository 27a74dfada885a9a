"""The consensus part of `attnlab demo`: a small simulation, a small phase diagram and a 2-pass SmolLM2 run.

Folders under `out/`: `simulate/`, `phase/`, `model/` (the last is skipped, with a note, if SmolLM2 is not
available). Each run writes its own report.html; the demo's section links them (it renders none). Runs with one
torch thread: on a shared 2-core machine two threads are slower than one.
"""

from __future__ import annotations

import time
from pathlib import Path

from attnlab.core.clitools import threads
from attnlab.reports.page import Report


def run_demo(out: Path, seed: int) -> Report:
    """Simulate d = 3 causal tokens under a random schedule, a 24-beta phase diagram and SmolLM2 (periodic, MLP on
    and off, 2 prompts per domain, T = 12, 2 passes); each run writes its own report. Returns the demo's section
    (the wall time, and a note when the SmolLM2 part was skipped)."""
    from attnlab.consensus.config import ModelConfig, PhaseConfig, SimulateConfig
    from attnlab.consensus.run import model, phase, simulate

    out = Path(out)
    rep = Report("Consensus: attention dynamics on the sphere")
    t0 = time.perf_counter()
    with threads(1):
        simulate(
            SimulateConfig(
                n=16, d=3, batch=32, mask="causal", schedule="random", t_max=20.0, record_every=2, seed=seed
            ),
            out / "simulate",
            progress=False,
        )
        phase(
            PhaseConfig(n=16, d=8, starts=32, num_betas=24, beta_max=9.0, t_max=20.0, seed=seed),
            out / "phase",
            progress=False,
        )
        try:
            model(
                ModelConfig(schedules=("periodic",), mlp=(True, False), passes=2, prompts=2, seq_len=12, seed=seed),
                out / "model",
                progress=False,
            )
        except Exception as exc:  # noqa: BLE001 - the toy part of the demo stands on its own
            rep.paragraph(f"SmolLM2 part skipped: {exc}")
    rep.paragraph(f"consensus demo wall time: {time.perf_counter() - t0:.1f} s")
    return rep
