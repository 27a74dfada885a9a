"""The docs' numbers and verdicts come from the committed reproduce run (issue 18): docs/reproduction.json is the
record behind docs/reproduction.md; each study doc holds its rows as the generated section, equal to what the
record gives; and outside that section no table row of a target states a verdict of its own."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from attnlab.core.registry import STUDY_DOCS
from attnlab.reproduce.report import SECTION_MARKS, counts, counts_table, study_section
from attnlab.reproduce.targets import TARGETS

DOCS = Path(__file__).resolve().parents[2] / "docs"
VERDICT_WORDS = re.compile(r"\b(met|missed|not met|not run)\b", re.I)


@pytest.fixture(scope="module")
def record() -> dict:
    return json.loads((DOCS / "reproduction.json").read_text())


def test_the_committed_table_is_its_record(record) -> None:
    md = (DOCS / "reproduction.md").read_text()
    assert record["counts"] == counts(record["rows"])  # each row counted once, in its study and group
    for line in counts_table(record):
        assert line in md
    for r in record["rows"]:
        assert f"| {r['id']} | " in md and f"**{r['verdict']}**" in md
    assert [(r["study"], r["id"]) for r in record["rows"]] == [(t.study, t.id) for t in TARGETS]


@pytest.mark.parametrize("study", list(STUDY_DOCS))
def test_each_study_doc_holds_its_rows_as_the_record_gives_them(record, study: str) -> None:
    text = (DOCS / STUDY_DOCS[study]).read_text()
    assert text.count(SECTION_MARKS[0]) == 1 and text.count(SECTION_MARKS[1]) == 1
    assert study_section(record, study) in text


@pytest.mark.parametrize("study", list(STUDY_DOCS))
def test_no_hand_typed_verdict_outside_the_generated_rows(study: str) -> None:
    """A table row about a target (its first cell names the target's id) states no verdict of its own: the verdict
    is the generated row's. Hand runs may give numbers; what they mean for the target is the table's to say."""
    text = (DOCS / STUDY_DOCS[study]).read_text()
    head, rest = text.split(SECTION_MARKS[0], 1)
    outside = head + rest.split(SECTION_MARKS[1], 1)[1]
    ids = {t.id for t in TARGETS} | {t.id.split(" ")[0] for t in TARGETS}
    bad = []
    for line in outside.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")] if line.startswith("|") else []
        first = cells[0].split(" ")[0] if cells else ""
        if first in ids and any(VERDICT_WORDS.search(c) for c in cells[1:]):
            bad.append(line[:120])
    assert not bad, f"{STUDY_DOCS[study]}: rows that state their own verdict: {bad}"
