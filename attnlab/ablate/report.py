"""The ablation's report.html, from the run folder only (never loads a model, never recomputes).

`write_report(run)` is the one entry. The head-state thresholds in the text are the ones the run recorded in its
manifest; the figures are drawn by `attnlab.ablate.figures` from ablation.csv.
"""

from __future__ import annotations

from pathlib import Path

from attnlab.ablate import figures
from attnlab.ablate.tables import read_rows
from attnlab.reports.page import Report
from attnlab.runs import RunDir


def _state_caption(manifest: dict) -> str:
    """The caption of the by-state table, with the thresholds the run used (runs before they were recorded: none)."""
    t = manifest.get("thresholds")
    states = f" (dormant: sink ≥ {t['dormant']}; active: < {t['active']})" if t else ""
    return f"|ΔNLL| of zeroed heads by state on the domain{states}"


def write_report(run: RunDir) -> Path:
    """Write report.html of the ablation in `run` (atomically): clean losses, ΔNLL by head state, every condition
    and the two figures."""
    summary = run.read_json("summary.json")
    rows = read_rows(run.path).to_dict("records")
    rep = Report("Real model ablation")
    rep.paragraph(
        f"Run folder: {run.path.name}. ΔNLL = next-token loss with the intervention minus without, mean ± "
        f"standard error over samples. Heads are zeroed before the output projection."
    )
    rep.table([{"domain": d, **v} for d, v in summary["baseline"].items()], caption="Clean loss per domain")
    rep.table([{"state": k, **v} for k, v in summary["by_state"].items()], caption=_state_caption(run.read_manifest()))
    rep.table(rows, caption="All conditions")
    pngs = figures.ablation_figures(run)
    rep.figure(pngs["ablation_dnll"], "ΔNLL per condition and domain")
    if "ablation_vs_sink" in pngs:
        rep.figure(pngs["ablation_vs_sink"], "ΔNLL of a zeroed head against its sink score on the domain")
    grid = figures.dnll_grid(run)
    if grid is not None:
        rep.plotly(grid, "dnll-grid", "ΔNLL of each ablated head on the layer × head grid (blank: not ablated)")
    return rep.write(run.file("report.html"))
