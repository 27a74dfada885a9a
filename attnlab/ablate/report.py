"""The ablation's report.html, from the run folder only (never loads a model, never recomputes)."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from attnlab.ablate import figures
from attnlab.hf.heads import ACTIVE, DORMANT
from attnlab.report import Report
from attnlab.runs import RunDir


def read_rows(path: str | Path) -> pd.DataFrame:
    """ablation.csv as a DataFrame (empty "head" / "sink_score" / "state" cells kept as "")."""
    return pd.read_csv(Path(path) / "ablation.csv", keep_default_na=False, na_values=["nan", "NaN"])


def write_report(path: str | Path, title: str = "Real model ablation") -> Report:
    """Draw the ablation figures into path/figures, write path/report.html and return the report section."""
    run = RunDir(path)
    summary = run.read_json("summary.json")
    rows = read_rows(run.path).to_dict("records")
    rep = Report(title)
    rep.paragraph(
        f"Run folder: {run.path.name}. ΔNLL = next-token loss with the intervention minus without, mean ± "
        f"standard error over samples. Heads are zeroed before the output projection."
    )
    rep.table([{"domain": d, **v} for d, v in summary["baseline"].items()], caption="Clean loss per domain")
    rep.table(
        [{"state": k, **v} for k, v in summary["by_state"].items()],
        caption=f"|ΔNLL| of zeroed heads by state on the domain (dormant: sink ≥ {DORMANT}; active: < {ACTIVE})",
    )
    rep.table(rows, caption="All conditions")
    rep.figure(figures.ablation_bars(rows, run.figure_path("ablation_dnll")), "ΔNLL per condition and domain")
    sc = figures.ablation_scatter(rows, run.figure_path("ablation_vs_sink"))
    if sc:
        rep.figure(sc, "ΔNLL of a zeroed head against its sink score on the domain")
    rep.write(run.file("report.html"))
    return rep
