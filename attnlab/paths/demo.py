"""This study's part of `attnlab demo`: a small Markov sweep (P = 100, 7 widths, T = 0.01, GP baselines,
alignment); about 10 s on 2 cores. Writes `out/paths-sweep/` (the same layout as `attnlab paths sweep`)."""

from __future__ import annotations

import html
from pathlib import Path

from attnlab.report import Report

TITLE = "Attention paths: Markov sweep (kernel renormalisation vs GP)"


def run_demo(out: Path, seed: int) -> Report:
    """Run the demo sweep into `out/paths-sweep` with one torch thread (restored afterwards); return the demo's
    section, which links the report the run wrote (never rendered again here)."""
    from attnlab.clitools import threads
    from attnlab.paths.config import SweepConfig
    from attnlab.paths.run import sweep

    with threads(1):
        result = sweep(SweepConfig(seed=seed), Path(out) / "paths-sweep", title=TITLE)
    href = html.escape(f"{Path(out).name}/{result.path.name}/report.html")  # relative to the demo's report.html
    rep = Report(TITLE)
    rep.raw(f'<p>Run folder: {html.escape(result.path.name)}; its report: <a href="{href}">{href}</a></p>')
    return rep
