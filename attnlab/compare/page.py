"""The page of a comparison and of the index: one table per command with one row per run (key config fields, final
metrics, a link to its report), the first two scans side by side and the runs' metric curves overlaid.

`comparison` builds it from `RunInfo`s (read from the runs by `collect`, or back from a compare run's runs.json) and
the commands' config defaults (`command_defaults`; a compare run saves them). Links and run names are paths
relative to the page's folder, so pages hold no machine paths and survive a move.
"""

from __future__ import annotations

import dataclasses
import html
import os
from pathlib import Path
from typing import Any

from attnlab.compare.collect import RunInfo
from attnlab.compare.figures import curves_figure, relative
from attnlab.reports.page import Report, cell, element_id

MAX_METRIC_COLUMNS = 20  # final-metric columns per table (the most common first)
MAX_FIELDS_SINGLE = 8  # config fields shown for a command with one run and no known defaults


def shown(value: Any) -> Any:
    """A config value for a table cell: absolute paths shortened to their last name, lists as short text."""
    if isinstance(value, str) and os.path.isabs(value):
        return Path(value).name
    if isinstance(value, (list, tuple, dict)):
        text = str(value)
        return text if len(text) <= 60 else text[:57] + "..."
    return value


def command_defaults(command: str) -> dict[str, Any] | None:
    """The default values of the command's config class (None for an unknown command)."""
    from attnlab.core.registry import resolve

    try:
        cls, _ = resolve(command)
    except Exception:  # noqa: BLE001 - an unknown or unimportable command: no defaults
        return None
    out = {}
    for f in dataclasses.fields(cls):
        if f.default is not dataclasses.MISSING:
            out[f.name] = f.default
        elif f.default_factory is not dataclasses.MISSING:
            out[f.name] = f.default_factory()
    return out


def key_fields(runs: list[RunInfo], defaults: dict[str, Any] | None) -> list[str]:
    """Config fields worth a column for runs of one command: those that differ between the runs or from the
    config's `defaults` (lists compared as lists; None: an unknown command), the seed always first."""
    names: list[str] = []
    for r in runs:
        names += [k for k in r.config if k not in names]
    norm = lambda v: list(v) if isinstance(v, tuple) else v  # noqa: E731
    varying = [k for k in names if len({repr(r.config.get(k)) for r in runs}) > 1]
    if defaults is not None:
        changed = [k for k in names if k in defaults and any(r.config.get(k) != norm(defaults[k]) for r in runs)]
    else:
        changed = names[:MAX_FIELDS_SINGLE]
    keys = [k for k in names if k in varying or k in changed]
    return (["seed"] if "seed" in names else []) + [k for k in keys if k != "seed"]


def metric_columns(runs: list[RunInfo], limit: int | None = MAX_METRIC_COLUMNS) -> list[str]:
    """The final metrics of the runs in first-seen order: plain names before indexed ones (`U[0.1]`), those most
    runs have first when there are more than `limit` (None: all)."""
    counts: dict[str, int] = {}
    for r in runs:
        for k in r.final:
            counts[k] = counts.get(k, 0) + 1
    ranked = sorted(counts, key=lambda k: ("[" in k, -counts[k]))
    keep = set(ranked if limit is None else ranked[:limit])
    return sorted((k for k in counts if k in keep), key=lambda k: "[" in k)


def result_columns(runs: list[RunInfo], fields: list[str], limit: int | None = MAX_METRIC_COLUMNS) -> dict[str, str]:
    """Final-metric name -> its column title. A metric named like a config field (`N`, `P`, `tokens`) is left
    out when it equals the config value in every run (it repeats the setting) and is titled `final <name>`
    otherwise, so that no two columns share a title."""
    out: dict[str, str] = {}
    for k in metric_columns(runs, limit):
        if k not in fields and k != "status":
            out[k] = k
        elif any(k in r.final and _differs(r.final[k], r.config.get(k)) for r in runs):
            out[k] = f"final {k}"
    return out


def _differs(final: Any, setting: Any) -> bool:
    try:
        return float(final) != float(setting)
    except (TypeError, ValueError):
        return str(final) != str(setting)


def runs_table(rep: Report, runs: list[RunInfo], page_dir: Path, table_id: str, defaults: dict | None) -> None:
    """One sortable table for runs of one command: run (link), status, key config fields, final metrics."""
    fields = key_fields(runs, defaults)
    metrics = result_columns(runs, fields)
    head = ["run", "status", *fields, *metrics.values()]
    rows = []
    for r in runs:
        name = html.escape(relative(r.path, page_dir))
        link = f'<a href="{name}/report.html">{name}</a>' if r.has_report else name
        cells = (
            [link, cell(r.status)]
            + [cell(shown(r.config.get(k, ""))) for k in fields]
            + [cell(r.final.get(k, "")) for k in metrics]
        )
        rows.append("<tr>" + "".join(c if c.startswith("<td") else f'<td class="t">{c}</td>' for c in cells) + "</tr>")
    th = "".join(f"<th>{html.escape(h)}</th>" for h in head)
    caption = f"attnlab {html.escape(runs[0].command)} ({len(runs)} run{'s' if len(runs) > 1 else ''})"
    rep.raw(
        f'<div class="scroll"><table class="sortable" id="{table_id}"><caption>{caption}</caption>'
        f"<thead><tr>{th}</tr></thead><tbody>{''.join(rows)}</tbody></table></div>"
    )


def comparison(
    runs: list[RunInfo],
    page_dir: Path,
    title: str,
    defaults: dict[str, dict | None],
    pair: dict | None = None,
    curves: bool = True,
) -> Report:
    """The page: one table per command (in first-seen order; `defaults`: command -> its config defaults), the scan
    pair view `pair` (plotly JSON, `figures.scan_pair_figure`) and, with `curves`, the overlaid curves."""
    rep = Report(title)
    groups: dict[str, list[RunInfo]] = {}
    for r in runs:
        groups.setdefault(r.command, []).append(r)
    rep.paragraph(
        f"{len(runs)} runs of {len(groups)} command(s). Each table lists the config fields that differ between its "
        "runs or from the defaults, then the final metrics; click a header to sort, a run to open its report."
    )
    for i, (command, group) in enumerate(groups.items()):
        runs_table(rep, group, page_dir, element_id(page_dir, f"runs{i}"), defaults.get(command))
    if pair is not None:
        rep.plotly(pair, element_id(page_dir, "scan-pair"),
                   "The first two scans side by side and their difference (menu: statistic and domain)")  # fmt: skip
    fig = curves_figure(runs, page_dir) if curves else None
    if fig is not None:
        rep.plotly(fig, element_id(page_dir, "curves"), "Metrics over steps, one line per run (menu: metric)")
    return rep
