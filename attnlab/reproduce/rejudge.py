"""Judging a saved reproduction table again, without running anything: `attnlab reproduce --rejudge TABLE` applies
today's targets (texts, groups, checks, intervals) to the numbers the table saved, and `--merge RUN` first puts the
rows of a later `--targets` run into it, as a row rerun alone (a timing on a quiet machine) or as one more seed of
its seeded rows (issue 39)."""

from __future__ import annotations

from pathlib import Path

from attnlab.errors import InputError
from attnlab.reproduce import report
from attnlab.reproduce.run import judged_row, rejudge_row, seed_plan
from attnlab.reproduce.targets import TARGETS


def rejudge(record: dict) -> dict:
    """`record` (a saved reproduction.json) judged again by the current registry without running anything: each
    measured row's saved numbers against the target's current group, checks, second reading and intervals; a
    not-run row keeps its reason; a target no longer in the registry (a second reading folded into its row) is
    dropped; a new target reads "not run" (no saved numbers). Returns the new record (`rejudged` dated)."""
    import datetime as dt

    old = {(r["study"], r["id"]): r for r in record["rows"]}
    rows = []
    for t in TARGETS:
        if t.study not in record["studies"]:
            continue
        row = old.get((t.study, t.id))
        if (row is None or row["numbers"] is None) and t.recorded is not None:
            rows.append(judged_row(t, t.recorded.as_dict(), "", {}, recorded=True))
        elif row is None or row["numbers"] is None:
            reason = row["why"] if row is not None else "not run: a target added after this run (no saved numbers)"
            rows.append(judged_row(t, None, reason, {}))
        else:
            rows.append(rejudge_row(t, row))
    now = dt.datetime.now(dt.UTC).isoformat(timespec="seconds")
    return record | {"rows": rows, "counts": report.counts(rows), "rejudged": now, "seed_plan": seed_plan(record)}


def merge_rerun(record: dict, other: dict, source: str) -> dict:
    """`record` with the rows of `other` (a later `attnlab reproduce --targets` run of the same profile, in its own
    folder `source`) in place of its own: a row rerun alone, as a timing on a quiet machine; or, where `other` is a
    one-seed run of a seed the table has not run (`--seed s`), that seed added to the seeded rows it measured
    (`_add_seed`: one more replicate where an interval straddles its bar). The record lists each such run
    (`reruns`: its folder, rows, end, machine and seconds, and `added_seed`), and the table's header says so."""
    if other.get("profile") != record.get("profile"):
        raise InputError(f"--merge {source}: profile {other.get('profile')!r}, not the table's {record['profile']!r}")
    if other.get("partial"):
        raise InputError(f"--merge {source}: that run has not finished; merge a finished run")
    new = {(r["study"], r["id"]): r for r in other["rows"]}
    unknown = sorted(f"{s} {i}" for s, i in set(new) - {(r["study"], r["id"]) for r in record["rows"]})
    if unknown:
        raise InputError(f"--merge {source}: rows {', '.join(unknown)} are not in the table")
    entry = {"folder": source, "rows": [f"{s} {i}" for s, i in new], "finished": other.get("finished"),
             "machine": other.get("machine"), "seconds": other.get("seconds")}  # fmt: skip
    if _is_new_seed(record, other):
        rows = _add_seed(record["rows"], new, int(other["seed"]), source)
        entry["added_seed"] = int(other["seed"])
    else:
        rows = [new.get((r["study"], r["id"]), r) for r in record["rows"]]
    return record | {"rows": rows, "reruns": [*record.get("reruns", []), entry]}


def _is_new_seed(record: dict, other: dict) -> bool:
    """Whether `other` is one more seed of `record`'s seeded claim rows: a one-seed run (`--seed s`) whose seed lies
    outside the table's seeds (seed .. seed + seeds − 1)."""
    first, n = int(record.get("seed", 0)), int(record.get("seeds", 1))
    return n > 1 and int(other.get("seeds", 1)) == 1 and not first <= int(other.get("seed", 0)) < first + n


def _add_seed(rows: list[dict], new: dict, seed: int, source: str) -> list[dict]:
    """`rows` with each of `new`'s measured rows added as seed `seed` of the table's row (`seeds_numbers`), so the
    row's t-interval runs over one more seed; a row the table does not replicate over seeds is refused."""
    out = []
    for r in rows:
        add = new.get((r["study"], r["id"]))
        if add is not None and add.get("numbers") is not None:
            if "seeds_numbers" not in r or str(seed) in r["seeds_numbers"]:
                raise InputError(f"--merge {source}: {r['study']} {r['id']} is not replicated over seeds in the "
                                 f"table, or already has seed {seed}")  # fmt: skip
            r = r | {"seeds_numbers": r["seeds_numbers"] | {str(seed): add["numbers"]}}
        out.append(r)
    return out


def rejudge_file(path: Path, docs: Path | None = None, merge: tuple[Path, ...] = ()) -> dict:
    """`rejudge` of the reproduction.json at `path`, with the rows of each finished `--targets` run in `merge`
    (its reproduction.json or its folder) in place of its own (`merge_rerun`); with `docs`, the table exported
    there (the figures already under `docs` are linked). Returns the new record."""
    from attnlab.runs import read_json

    if not path.is_file():
        raise InputError(f"--rejudge {path}: no such file (give a reproduction.json)")
    others = [(m / "reproduction.json" if m.is_dir() else m, m) for m in merge]
    for file, m in others:
        if not file.is_file():
            raise InputError(f"--merge {m}: no reproduction.json there (give a finished reproduce run)")
    if docs is not None:
        report.check_docs_folder(docs)
    record = read_json(path, "reproduction.json")
    for file, m in others:
        record = merge_rerun(record, read_json(file, "reproduction.json"), str(m))
    record = rejudge(record)
    if docs is not None:
        report.export_docs(None, docs, record)
    return record
