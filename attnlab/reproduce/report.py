"""The reproduction table from a `reproduce` run folder only (reproduction.json and the study runs' files):
reproduction.md, report.html, and `export_docs` (docs/reproduction.md plus figures under docs/figures/<study>/)."""

from __future__ import annotations

import html
from collections.abc import Mapping
from pathlib import Path

from attnlab.core.registry import STUDY_DOCS, STUDY_TITLES
from attnlab.core.targets import CHECK, CLAIM, GROUPS, TIMING
from attnlab.errors import check
from attnlab.reports.page import Report
from attnlab.reproduce.figures import copy_figure, figure_of
from attnlab.reproduce.verdict import INCONCLUSIVE, MET, MISSED, NOT_RUN, REPORTED, VERDICTS, fmt
from attnlab.runs import read_json, write_json, write_text

METRIC_DEBT = [
    "extreme-tokens §6: `col_entropy` (max column entropy) is not computed by `bb` metrics.",
    "extreme-tokens §6.7 / §10.4: sink-logit concentration (box plots of the last query's logits) is not implemented.",
    "extreme-tokens §10.4: the sink-set variant of the sink score ({0} ∪ massive-activation tokens) is not "
    "implemented (issue 14's R24 covers the authors' procedure).",
]


GROUP_WORDS = {CLAIM: "claims of the papers", CHECK: "library checks", TIMING: "timings"}
COUNTED = (MET, MISSED, INCONCLUSIVE, NOT_RUN)  # a reported row (no bar) is shown and not counted
COUNTS_MARKS = (
    "<!-- reproduction counts: written by `attnlab reproduce --docs docs` from reproduction.json; do not edit -->",
    "<!-- end of the reproduction counts -->",
)


def counts(rows: list[dict]) -> dict[str, dict[str, dict[str, int]]]:
    """Per study, per group (claim, check, timing), how many rows have each of the five verdicts. Each row is in
    one study and one group, so no target is counted twice (a second reading is part of its row)."""
    out: dict[str, dict[str, dict[str, int]]] = {}
    for r in rows:
        study = out.setdefault(r["study"], {g: dict.fromkeys(VERDICTS, 0) for g in GROUPS})
        study[r.get("group", CLAIM)][r["verdict"]] += 1
    return out


def count_text(c: Mapping[str, Mapping[str, int]]) -> str:
    """One study's counts in words, the one text the table header, README and study docs print: per group, each
    verdict that occurs (reported rows named apart: shown, not counted)."""
    parts = []
    for g in GROUPS:
        n = c[g]
        words = [f"{n[v]} {v}" for v in COUNTED if n[v]]
        if n[REPORTED]:
            words.append(f"{n[REPORTED]} reported (no bar, not counted)")
        parts.append(f"{GROUP_WORDS[g]}: {', '.join(words) if words else 'none'}")
    return "; ".join(parts)


def counts_block(record: dict) -> str:
    """The counts of every study as a Markdown list between `COUNTS_MARKS` (README and docs/reproduction.md)."""
    lines = [f"- {s}: {count_text(c)}" for s, c in record["counts"].items()]
    return "\n".join([COUNTS_MARKS[0], *lines, COUNTS_MARKS[1]])


def verdict_summary(c: Mapping[str, Mapping[str, int]]) -> str:
    """A short line of one study's counts for the command line: claims, checks and timings by verdict."""
    return count_text(c)


def _numbers(row: dict) -> str:
    nums = row.get("numbers") or {}
    return "; ".join(f"{k} = {fmt(v)}" for k, v in nums.items()) or "—"


def _cell(text: str) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def _interval_cell(row: dict) -> str:
    """How the row's numbers were judged: the interval method and replicates, or that it is one run."""
    if row["verdict"] in (NOT_RUN, REPORTED):
        return "—"
    if row.get("interval_method"):
        return f"{row['interval_method']}, n = {row.get('replicates', 1)}"
    return "single run, no interval"


def counts_table(record: dict) -> list[str]:
    """The header's Markdown table: per study and group, the rows of each verdict."""
    lines = ["| study | group | " + " | ".join(VERDICTS) + " |", "|---|---|" + "---|" * len(VERDICTS)]
    for study, c in record["counts"].items():
        for g in GROUPS:
            if any(c[g].values()):
                lines.append(f"| {study} | {GROUP_WORDS[g]} | " + " | ".join(str(c[g][v]) for v in VERDICTS) + " |")
    return lines


def markdown(record: dict, links: Mapping[str, tuple[str | None, str | None]], run_note: str) -> str:
    """The table as Markdown; `links[id]` = (figure path, run folder path) as they should appear."""
    from attnlab.reproduce.findings import findings

    lines = ["# Reproduction: the specs' targets, each verdict computed by code", "", run_note, ""]
    lines += [*findings(record), ""]
    lines += ["## Counts", "", COUNTS_NOTE, "", *counts_table(record), "", counts_block(record), "", SEEDS_NOTE]
    if record.get("seed_plan"):
        lines += ["", plan_text(record["seed_plan"])]
    for study in record["counts"]:
        lines += ["", f"## {STUDY_TITLES.get(study, study)}", ""]
        lines += [
            "| id | group | claim | spec threshold | our numbers | verdict | interval | why | links |",
            "|---|---|---|---|---|---|---|---|---|",
        ]
        for r in (r for r in record["rows"] if r["study"] == study):
            fig, run = links.get(f"{study}/{r['id']}", (None, None))
            link = " ".join(x for x in (f"[figure]({fig})" if fig else "", f"[run]({run})" if run else "") if x)
            why = r["why"] + (f" — {r['note']}" if r["note"] else "")
            cells = [r["id"], r.get("group", CLAIM), r["claim"], r["threshold"], _numbers(r), f"**{r['verdict']}**",
                     _interval_cell(r), why, link or "—"]  # fmt: skip
            lines.append("| " + " | ".join(_cell(c) for c in cells) + " |")
    lines += ["", "## Spec metrics not implemented (fidelity debt)", ""] + [f"- {d}" for d in METRIC_DEBT]
    return "\n".join(lines) + "\n"


def plan_text(p: dict) -> str:
    """The seeded run's budget in words (`run.seed_plan`): one-thread hours per wave and the wall time with two
    workers, the timed experiments counted alone at their one-thread minutes (an upper bound: they use two)."""
    parts = ", ".join(f"{n} {m:.0f}" for n, m in sorted(p["replicated"].items(), key=lambda x: -x[1]) if m >= 1)
    compute = p["first_hours"] + p["added_hours"] + p["last_hours"]
    wall = (p["first_hours"] + p["added_hours"]) / 2 + p["last_hours"]
    per_seed = p["added_hours"] / max(p["seeds"] - 1, 1)
    grown = ", ".join(p["estimated"]) or "none"
    return (
        f"**Plan for the seeded run** ({p['seeds']} seeds). One-seed minutes come from the last full-profile run, "
        f"or from today's estimate (`MINUTES`) where that is more than twice as long (grown since: {grown}). "
        f"Replicated, minutes per seed: {parts}. The first seed's experiments take {p['first_hours']:.1f} h of "
        f"one-thread compute, each further seed {per_seed:.1f} h, and the timed experiments (B2, B4), run alone at "
        f"the end, {p['last_hours']:.1f} h: {compute:.1f} h in all, about {wall:.1f} h of wall time with --workers 2 "
        f"on the 2-core machine ({'inside' if wall <= 12 else 'over'} issue 39's 12 h budget). Library checks, "
        "timings and the experiments that hold their own replicates (a sweep's seeds, windows or prompts resampled) "
        "run once."
    )


SEEDS_NOTE = (
    "**Seeds.** `attnlab reproduce --seeds N` runs the experiments behind the claim rows N times, with seeds "
    "`--seed` to `--seed` + N − 1 (default 1 seed): the first into `runs/<experiment>/`, seed s into "
    "`seeds/<s>/runs/<experiment>/` (its marks in `seeds/<s>/experiments/`, so seeds never share a folder and "
    "`--resume` keeps each seed's finished runs). Only experiments whose configs change with the seed are "
    "replicated (a trained model's initialisation and data; SmolLM2's prompt windows; the sphere dynamics' "
    "starts); a direct computation or a run that ignores the seed stays one replicate and its row says so. Each "
    "judged number of a replicated row is the mean over seeds with its 95 % t-interval (n − 1 degrees of "
    "freedom), in its why; its numbers column is the first seed's, each other seed's are in reproduction.json "
    "(`seeds_numbers`). A rerun of one seed s is one command: `attnlab reproduce STUDY --profile full --seed s "
    "--targets ID --out DIR` (or `attnlab rerun` of the study run's folder); `attnlab reproduce --rejudge "
    "docs/reproduction.json --merge DIR --docs docs` then adds a new seed to the table's rows as one more replicate, "
    "or puts a row rerun at one of the table's seeds (a timing on a quiet machine) in place of its own, and the "
    "header says which."
)
COUNTS_NOTE = (
    "Each row is in one group: a claim of the papers, a library check (the spec's CI tier: reducers, gradients, "
    "error lines, solvers on tiny or closed-form cases) or a timing. A verdict follows from the 95 % interval of "
    "each judged number (`attnlab.core.intervals`): met when it clears the bar, missed when it lies on the wrong "
    "side, inconclusive when it straddles it; a row run once (one seed) is judged on its point estimate and says "
    "so in its interval column. A judged number without sampling error (a count of a sweep's runs, a sampler's "
    "gate, a deterministic theory solve, a measured time budget) has its point as its interval, and the row's "
    "method says `exact` and why. Reported rows have no bar and are not counted. A second reading of a target (the "
    "spec's literal bar beside ours) is shown in its row, never counted."
)


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
    if record.get("rejudged"):
        note += (f" Judged again {record['rejudged']} by `attnlab reproduce --rejudge` from the run's saved numbers "
                 "(nothing rerun) with the verdict code of issue 39: groups, intervals, one peak bar, chance "
                 "baselines, second readings folded into their rows.")  # fmt: skip
    for rerun in record.get("reruns", []):
        what = ("rerun later in its own folder" if "added_seed" not in rerun else
                f"seed {rerun['added_seed']} added later, its own folder")  # fmt: skip
        note += (f" {what[0].upper()}{what[1:]} (`attnlab reproduce --targets`, merged by `--rejudge --merge`): "
                 f"{', '.join(rerun['rows'])}, {rerun['seconds']:.0f} s, finished {rerun['finished']} on "
                 f"{rerun['machine']}; " + ("its row replaces the run's." if "added_seed" not in rerun else
                 "each row's interval runs over its seeds with this one."))  # fmt: skip
    if record.get("seeds", 1) > 1:
        note += f" Claim rows on trained models ran {record['seeds']} seeds (seed {record.get('seed', 0)} on)."
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
    rep.table(
        [{"study": s, "group": GROUP_WORDS[g], **c[g]} for s, c in record["counts"].items() for g in GROUPS],
        caption="verdicts per study and group",
    )
    for study in record["counts"]:
        rep.heading(STUDY_TITLES.get(study, study))
        rows = []
        for r in (r for r in record["rows"] if r["study"] == study):
            fig, run = links[f"{study}/{r['id']}"]
            anchors = " ".join(f'<a href="{html.escape(u)}">{t}</a>' for t, u in (("figure", fig), ("run", run)) if u)
            rows.append({"id": r["id"], "group": r.get("group", CLAIM), "claim": r["claim"],
                         "threshold": r["threshold"], "numbers": _numbers(r), "verdict": r["verdict"],
                         "interval": _interval_cell(r), "why": r["why"], "note": r["note"],
                         "links": anchors})  # fmt: skip
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


def export_docs(folder: Path | None, docs: Path, record: dict | None = None) -> Path:
    """Copy the table to docs/reproduction.md and each row's figure to docs/figures/<study>/<run>-<name>.png;
    links to run folders name the path a `make reproduce` run creates (runs/reproduce/...). `record`: the table
    of an unfinished run (`run.table_so_far`) or a re-judged record (`rejudge.rejudge`), else the folder's
    reproduction.json. Without a run folder (`folder` None: a re-judged record) the figures already under docs/
    are linked. The counts also go into the README beside docs/ where it holds `COUNTS_MARKS`."""
    if record is None:
        assert folder is not None
        record = read_json(folder / "reproduction.json", "reproduction.json")
    links: dict[str, tuple[str | None, str | None]] = {}
    for r in record["rows"]:
        fig = copy_figure(folder, r, docs) if folder is not None else docs_figure(docs, r)
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
    readme = docs.parent / "README.md"
    if readme.is_file() and COUNTS_MARKS[0] in readme.read_text():
        write_text(readme, replace_between(readme.read_text(), COUNTS_MARKS, counts_block(record)))
    return write_text(docs / "reproduction.md", markdown(record, links, note))


def docs_figure(docs: Path, row: dict) -> str | None:
    """The figure already copied under docs/figures/<study>/ for `row` (as `copy_figure` names it), else None."""
    if row["verdict"] == NOT_RUN or not row.get("runs") or row.get("recorded"):
        return None
    if row.get("figure"):
        parts = [p for p in Path(row["figure"]).parts[1:] if p != "figures"]
        dest = docs / "figures" / row["study"] / "-".join(parts)
        if dest.is_file():
            return dest.relative_to(docs).as_posix()
    run = Path(row["runs"][0]).name
    found = sorted((docs / "figures" / row["study"]).glob(f"{run}-*.png"))
    return found[0].relative_to(docs).as_posix() if found else None


def replace_between(text: str, marks: tuple[str, str], block: str) -> str:
    """`text` with the part from marks[0] to marks[1] (both included) replaced by `block` (which holds both)."""
    head, rest = text.split(marks[0], 1)
    return head + block + rest.split(marks[1], 1)[1]


SECTION_MARKS = (
    "<!-- reproduction rows: written by `attnlab reproduce --docs docs` from reproduction.json; do not edit -->",
    "<!-- end of the reproduction rows -->",
)


def study_section(record: dict, study: str) -> str:
    """The study's rows as a Markdown block (between `SECTION_MARKS`): counts, then id, claim, our numbers and
    verdict of each row, as the committed reproduce run measured them."""
    c = record["counts"][study]
    lines = [SECTION_MARKS[0], "",
             f"{count_text(c)} (profile `{record['profile']}`, finished "
             f"{record.get('finished', '?')}; the thresholds, why and links: [reproduction.md](reproduction.md)).",
             "", "| id | group | claim | our numbers | verdict |", "|---|---|---|---|---|"]  # fmt: skip
    for r in (r for r in record["rows"] if r["study"] == study):
        mark = " (recorded)" if r.get("recorded") else ""
        cells = [r["id"], r.get("group", CLAIM), r["claim"], _numbers(r), f"**{r['verdict']}**{mark}"]
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
