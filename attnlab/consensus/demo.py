"""The consensus part of `attnlab demo`: a small simulation, a small phase diagram and a 2-pass SmolLM2 run.

Folders under `out/`: `simulate/`, `phase/`, `model/` (the last is skipped, with a note, if SmolLM2 is not
available). Each run writes its own report.html; the demo's section links them (it renders none). Runs with one
torch thread: on a shared 2-core machine two threads are slower than one.
"""

from __future__ import annotations

import html
import time
from pathlib import Path

from attnlab.clitools import threads
from attnlab.report import Report


def _link(rep: Report, out: Path, folder: Path, what: str) -> None:
    """A link to the report.html that the run in `folder` wrote, relative to the demo page (beside `out`)."""
    href = html.escape(f"{out.name}/{folder.name}/report.html")
    rep.raw(f'<p><a href="{href}">{html.escape(what)}</a></p>')


def run_demo(out: Path, seed: int) -> Report:
    """Simulate d = 3 causal tokens under a random schedule, a 24-beta phase diagram and SmolLM2 (periodic, MLP on
    and off, 2 prompts per domain, T = 12, 2 passes); returns the section linking the three runs' reports."""
    from attnlab.consensus.config import ModelConfig, PhaseConfig, SimulateConfig
    from attnlab.consensus.run import model, phase, simulate

    out = Path(out)
    rep = Report("Consensus: attention dynamics on the sphere")
    t0 = time.perf_counter()
    with threads(1):
        sim = simulate(
            SimulateConfig(
                n=16, d=3, batch=32, mask="causal", schedule="random", t_max=20.0, record_every=2, seed=seed
            ),
            out / "simulate",
            progress=False,
        )
        ph = phase(
            PhaseConfig(n=16, d=8, starts=32, num_betas=24, beta_max=9.0, t_max=20.0, seed=seed),
            out / "phase",
            progress=False,
        )
        _link(rep, out, sim.path, "Simulation: d = 3 causal tokens under a random schedule")
        _link(rep, out, ph.path, "Phase diagram of clustering over (t, beta)")
        try:
            res = model(
                ModelConfig(schedules=("periodic",), mlp=(True, False), passes=2, prompts=2, seq_len=12, seed=seed),
                out / "model",
                progress=False,
            )
            _link(rep, out, res.path, "SmolLM2 iterated: E_first against depth")
        except Exception as exc:  # noqa: BLE001 - the toy part of the demo stands on its own
            rep.paragraph(f"SmolLM2 part skipped: {exc}")
    rep.paragraph(f"consensus demo wall time: {time.perf_counter() - t0:.1f} s")
    return rep
