"""The reproduction table from a `reproduce` run folder only (reproduction.json and the study runs' files):
reproduction.md, report.html, and `export_docs` (docs/reproduction.md plus figures under docs/figures/<study>/)."""

from __future__ import annotations

import html
from collections.abc import Mapping
from pathlib import Path

from attnlab.core.registry import STUDY_DOCS, STUDY_TITLES
from attnlab.errors import check
from attnlab.reports.page import Report
from attnlab.reproduce.figures import copy_figure, figure_of
from attnlab.reproduce.verdict import MET, MISSED, NOT_RUN, fmt
from attnlab.runs import read_json, write_json, write_text

METRIC_DEBT = [
    "extreme-tokens §6: `col_entropy` (max column entropy) is not computed by `bb` metrics.",
    "extreme-tokens §6.7 / §10.4: sink-logit concentration (box plots of the last query's logits) is not implemented.",
    "extreme-tokens §10.4: the sink-set variant of the sink score ({0} ∪ massive-activation tokens) is not "
    "implemented (issue 14's R24 covers the authors' procedure).",
]


def counts(rows: list[dict]) -> dict[str, dict[str, int]]:
    """Per study: how many targets are met, missed and not run."""
    out: dict[str, dict[str, int]] = {}
    for r in rows:
        c = out.setdefault(r["study"], {MET: 0, MISSED: 0, NOT_RUN: 0})
        c[r["verdict"]] += 1
    return out


def _numbers(row: dict) -> str:
    nums = row.get("numbers") or {}
    return "; ".join(f"{k} = {fmt(v)}" for k, v in nums.items()) or "—"


def _cell(text: str) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def markdown(record: dict, links: Mapping[str, tuple[str | None, str | None]], run_note: str) -> str:
    """The table as Markdown; `links[id]` = (figure path, run folder path) as they should appear."""
    lines = ["# Reproduction: the specs' targets, each verdict computed by code", "", run_note, ""]
    lines += ["| study | met | missed | not run |", "|---|---|---|---|"]
    for study, c in record["counts"].items():
        lines.append(f"| {study} | {c[MET]} | {c[MISSED]} | {c[NOT_RUN]} |")
    for study in record["counts"]:
        lines += ["", f"## {STUDY_TITLES.get(study, study)}", ""]
        lines += [
            "| id | claim | spec threshold | our numbers | verdict | why | links |",
            "|---|---|---|---|---|---|---|",
        ]
        for r in (r for r in record["rows"] if r["study"] == study):
            fig, run = links.get(f"{study}/{r['id']}", (None, None))
            link = " ".join(x for x in (f"[figure]({fig})" if fig else "", f"[run]({run})" if run else "") if x)
            why = r["why"] + (f" — {r['note']}" if r["note"] else "")
            cells = [r["id"], r["claim"], r["threshold"], _numbers(r), f"**{r['verdict']}**", why, link or "—"]
            lines.append("| " + " | ".join(_cell(c) for c in cells) + " |")
    lines += ["", "## Spec metrics not implemented (fidelity debt)", ""] + [f"- {d}" for d in METRIC_DEBT]
    return "\n".join(lines) + "\n"


def _run_note(record: dict) -> str:
    failed = [f"{k} ({v['error']})" for k, v in record["experiments"].items() if v["error"]]
    note = (f"Profile `{record['profile']}`, studies {', '.join(record['studies'])}; {record['seconds']:.0f} s in all "
            f"({len(record['experiments'])} study runs).")  # fmt: skip
    if record.get("machine") and record.get("partial"):
        started = record.get("started") or (record.get("sessions") or [{}])[0].get("started") or "?"  # the folder's
        note += f" As of {record['finished']} (started {started}) on {record['machine']}."
    elif record.get("machine"):
        sessions = record.get("sessions", [])
        workers = sorted({x.get("workers", 1) for x in sessions})
        note += (f" Finished {record['finished']} on {record['machine']}; wall time {record['wall_seconds']:.0f} s "
                 f"{_sessions_note(sessions)}, --workers {'/'.join(map(str, workers))}.")  # fmt: skip
    if record.get("tabled") and not record.get("partial"):
        note += (f" This table was written {record['tabled']} by `attnlab reproduce --table-only` from the run's "
                 "saved experiments, with the targets' code of that day.")  # fmt: skip
    if record.get("updated"):
        added = record["updated"]
        secs = sum(record["experiments"][n]["seconds"] for n in added)
        note += (f" Study runs added later to the same folder by `attnlab.reproduce.run.update` (targets added "
                 f"since): {', '.join(added)} ({secs:.0f} s).")  # fmt: skip
    if record.get("partial"):
        note = (f"**Partial: the run has not finished** ({len(record['pending'])} of "
                f"{len(record['pending']) + len(record['experiments'])} experiments not ended yet: "
                f"{', '.join(record['pending'])}; their rows read \"not run yet\"). " + note)  # fmt: skip
    return note + (" Failed study runs: " + "; ".join(failed) + "." if failed else "")


def _sessions_note(sessions: list[dict]) -> str:
    """The "over N sessions (…)" text: how many were stopped and resumed, how many have no end (kill -9)."""
    stopped = sum(1 for x in sessions if x.get("interrupted"))
    unknown = sum(1 for x in sessions if x.get("wall_seconds") is None)
    parts = [f"{stopped} stopped and resumed"] if stopped else []
    parts += [f"{unknown} killed with no recorded end, not counted"] if unknown else []
    recovered = sum(1 for x in sessions if x.get("recovered"))
    parts += [f"{recovered} with times recovered from their logs, each saying how"] if recovered else []
    return f"over {len(sessions)} session(s)" + (f" ({'; '.join(parts)})" if parts else "")


def write_all(folder: Path) -> None:
    """reproduction.md and report.html of the run in `folder`, links relative to it."""
    record = read_json(folder / "reproduction.json", "reproduction.json")
    links = {}
    for r in record["rows"]:
        run = r["runs"][0] if r["runs"] else None
        links[f"{r['study']}/{r['id']}"] = (figure_of(folder, r), f"{run}/report.html" if run else None)
    write_text(folder / "reproduction.md", markdown(record, links, _run_note(record)))
    write_html(folder, record, links)


def write_html(folder: Path, record: dict, links: dict) -> None:
    rep = Report("attnlab reproduce: the specs' targets")
    rep.paragraph(_run_note(record))
    rep.table([{"study": s, **c} for s, c in record["counts"].items()], caption="verdicts per study")
    for study in record["counts"]:
        rep.heading(STUDY_TITLES.get(study, study))
        rows = []
        for r in (r for r in record["rows"] if r["study"] == study):
            fig, run = links[f"{study}/{r['id']}"]
            anchors = " ".join(f'<a href="{html.escape(u)}">{t}</a>' for t, u in (("figure", fig), ("run", run)) if u)
            rows.append({"id": r["id"], "claim": r["claim"], "threshold": r["threshold"], "numbers": _numbers(r),
                         "verdict": r["verdict"], "why": r["why"], "note": r["note"], "links": anchors})  # fmt: skip
        rep.raw(_html_table(rows))
    rep.heading("Spec metrics not implemented")
    for d in METRIC_DEBT:
        rep.paragraph(d)
    rep.write(folder / "report.html")


def _html_table(rows: list[dict]) -> str:
    cols = list(rows[0]) if rows else []
    head = "".join(f"<th>{c}</th>" for c in cols)
    body = "".join(
        "<tr>" + "".join(f"<td>{r[c] if c == 'links' else html.escape(str(r[c]))}</td>" for c in cols) + "</tr>"
        for r in rows
    )
    return (
        f'<div class="scroll"><table class="sortable"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table></div>'
    )


def check_docs_folder(docs: Path) -> None:
    """Refuse, before any run starts, a `--docs` that is a file or holds files where the export writes folders."""
    import os

    for path, what in ((docs, "--docs"), (docs / "figures", "--docs figures folder")):
        check(not path.exists() or path.is_dir(), f"{what} {path} is a file, not a folder; choose a folder path")
    parent = next((p for p in [docs, *docs.parents] if p.exists()), Path("."))
    check(os.access(parent, os.W_OK | os.X_OK), f"--docs {docs}: {parent} is not writable")


def export_docs(folder: Path, docs: Path, record: dict | None = None) -> Path:
    """Copy the table to docs/reproduction.md and each row's figure to docs/figures/<study>/<run>-<name>.png;
    links to run folders name the path a `make reproduce` run creates (runs/reproduce/...). `record`: the table
    of an unfinished run (`run.table_so_far`), else the folder's reproduction.json."""
    record = read_json(folder / "reproduction.json", "reproduction.json") if record is None else record
    links: dict[str, tuple[str | None, str | None]] = {}
    for r in record["rows"]:
        fig = copy_figure(folder, r, docs)
        links[f"{r['study']}/{r['id']}"] = (fig, None)
    make, where = (
        ("reproduce-full", "runs/reproduce-full") if record["profile"] == "full" else ("reproduce", "runs/reproduce")
    )
    note = _run_note(record) + (f" Regenerate with `make {make}` (run folder `{where}`: each row's study run is "
                                f"under `{where}/runs/<name>/`).")  # fmt: skip
    write_json(docs / "reproduction.json", record)
    for study, name in STUDY_DOCS.items():
        if (docs / name).is_file() and study in record["counts"]:
            write_study_section(docs / name, record, study)
    return write_text(docs / "reproduction.md", markdown(record, links, note))


SECTION_MARKS = (
    "<!-- reproduction rows: written by `attnlab reproduce --docs docs` from reproduction.json; do not edit -->",
    "<!-- end of the reproduction rows -->",
)


def study_section(record: dict, study: str) -> str:
    """The study's rows as a Markdown block (between `SECTION_MARKS`): counts, then id, claim, our numbers and
    verdict of each row, as the committed reproduce run measured them."""
    c = record["counts"][study]
    lines = [SECTION_MARKS[0], "",
             f"{c[MET]} met, {c[MISSED]} missed, {c[NOT_RUN]} not run (profile `{record['profile']}`, finished "
             f"{record.get('finished', '?')}; the thresholds, why and links: [reproduction.md](reproduction.md)).",
             "", "| id | claim | our numbers | verdict |", "|---|---|---|---|"]  # fmt: skip
    for r in (r for r in record["rows"] if r["study"] == study):
        cells = [r["id"], r["claim"], _numbers(r), f"**{r['verdict']}**" + (" (recorded)" if r.get("recorded") else "")]
        lines.append("| " + " | ".join(_cell(x) for x in cells) + " |")
    return "\n".join([*lines, "", SECTION_MARKS[1]])


def write_study_section(doc: Path, record: dict, study: str) -> None:
    """Replace the generated section of `doc` (or append it under "## Reproduction table" when absent)."""
    text, (begin, end) = doc.read_text(), SECTION_MARKS
    block = study_section(record, study)
    if begin in text and end in text:
        head, rest = text.split(begin, 1)
        text = head + block + rest.split(end, 1)[1]
    else:
        text = text.rstrip("\n") + "\n\n## Reproduction table\n\n" + block + "\n"
    write_text(doc, text)
