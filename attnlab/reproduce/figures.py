"""The reproduction table's figures: each row links one figure its study run drew (reproduce draws none itself),
and `--docs` copies them under docs/figures/<study>/."""

from __future__ import annotations

from pathlib import Path

from attnlab.runs import write_bytes


def figure_of(folder: Path, row: dict) -> str | None:
    """The row's figure (relative to `folder`), else the first PNG (sorted) under its first run folder."""
    if row.get("figure") and (folder / row["figure"]).is_file():
        return str(row["figure"])
    for run in row.get("runs", []):
        pngs = sorted((folder / run).rglob("*.png"))
        if pngs:
            return pngs[0].relative_to(folder).as_posix()
    return None


def copy_figure(folder: Path, row: dict, docs: Path) -> str | None:
    """Copy the row's figure to docs/figures/<study>/<run>-<name>.png; returns its path relative to `docs`."""
    fig = figure_of(folder, row)
    if not fig:
        return None
    parts = [p for p in Path(fig).parts[1:] if p != "figures"]  # runs/<run>/[sub/]figures/<name>.png
    dest = docs / "figures" / row["study"] / "-".join(parts)
    write_bytes(dest, (folder / fig).read_bytes())  # atomic: a full disk leaves no half-copied figure
    return dest.relative_to(docs).as_posix()
