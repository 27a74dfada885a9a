"""This study's part of `attnlab demo`: a small Markov sweep (P = 100, 7 widths, T = 0.01, GP baselines,
alignment); about 10 s on 2 cores. Writes `out/paths-sweep/` (the same layout as `attnlab paths sweep`)."""

from __future__ import annotations

from pathlib import Path

from attnlab.reports.page import Report

TITLE = "Attention paths: Markov sweep (kernel renormalisation vs GP)"


def run_demo(out: Path, seed: int) -> Report:
    """Run the demo sweep into `out/paths-sweep` with one torch thread (restored afterwards); return the demo's
    section (the sweep wrote its own report, linked from the demo's)."""
    from attnlab.core.clitools import threads
    from attnlab.paths.config import SweepConfig
    from attnlab.paths.run import sweep

    with threads(1):
        result = sweep(SweepConfig(seed=seed), Path(out) / "paths-sweep", title=TITLE)
    rep = Report(TITLE)
    rep.paragraph(f"Run folder: {result.path.name} (its report is linked below)")
    return rep
