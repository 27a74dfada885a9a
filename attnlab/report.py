"""Self-contained HTML reports: figures embedded as base64 PNG, tables, short paragraphs."""

from __future__ import annotations

import base64
import html
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence


def _fmt(value: Any) -> str:
    if isinstance(value, float):
        if value == 0 or 1e-3 <= abs(value) < 1e5:
            return f"{value:.4g}"
        return f"{value:.3e}"
    return html.escape(str(value))


@dataclass
class Report:
    """An ordered list of HTML blocks; `write(path)` produces one file with everything embedded."""

    title: str
    blocks: list[str] = field(default_factory=list)

    def heading(self, text: str, level: int = 2) -> "Report":
        self.blocks.append(f"<h{level}>{html.escape(text)}</h{level}>")
        return self

    def paragraph(self, text: str) -> "Report":
        self.blocks.append(f"<p>{html.escape(text)}</p>")
        return self

    def table(self, rows: Sequence[dict], caption: str | None = None) -> "Report":
        """A table from a list of dicts (columns: the union of keys in first-seen order)."""
        if not rows:
            return self
        cols: list[str] = []
        for r in rows:
            cols += [k for k in r if k not in cols]
        head = "".join(f"<th>{html.escape(str(c))}</th>" for c in cols)
        body = "".join("<tr>" + "".join(f"<td>{_fmt(r.get(c, ''))}</td>" for c in cols) + "</tr>" for r in rows)
        cap = f"<caption>{html.escape(caption)}</caption>" if caption else ""
        self.blocks.append(f"<table>{cap}<thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>")
        return self

    def figure(self, png: str | Path, caption: str = "") -> "Report":
        png = Path(png)
        if not png.exists():
            return self
        data = base64.b64encode(png.read_bytes()).decode()
        self.blocks.append(f'<figure><img src="data:image/png;base64,{data}" alt="{html.escape(png.stem)}">'
                           f"<figcaption>{html.escape(caption or png.stem)}</figcaption></figure>")
        return self

    def extend(self, other: "Report", level: int = 2) -> "Report":
        """Append another report's blocks under a heading with its title."""
        self.heading(other.title, level)
        self.blocks.extend(other.blocks)
        return self

    def html(self) -> str:
        style = ("body{font-family:system-ui,sans-serif;max-width:1100px;margin:2em auto;padding:0 1em;color:#222}"
                 "table{border-collapse:collapse;margin:1em 0;font-size:0.9em}"
                 "td,th{border:1px solid #bbb;padding:3px 8px;text-align:right}th{background:#eee}"
                 "caption{font-weight:bold;text-align:left;padding:4px 0}"
                 "img{max-width:100%}figure{margin:1em 0}figcaption{color:#555;font-size:0.9em}")
        return (f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>{html.escape(self.title)}</title>"
                f"<style>{style}</style></head><body><h1>{html.escape(self.title)}</h1>"
                + "\n".join(self.blocks) + "</body></html>\n")

    def write(self, path: str | Path) -> Path:
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(self.html())
        return path
