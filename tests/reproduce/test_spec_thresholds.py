"""Every target's threshold in code is the spec's (issue 18): each bound of each `Check` is a number the spec states
for that target, read from its row in ../shared/specs/ (the table row `| R4 | ... |` or the list item `**S1** ...`,
with the sections it or our threshold text cites, e.g. §9.4; for a seed claim `SC-*`, the sections its `spec`
cites). Bounds of 0 and 1 are signs and yes/no flags. Thresholds that are not the spec's are listed in
`DIFFERENT`, each with the reason its row's note gives."""

from __future__ import annotations

import math
import re
from pathlib import Path

import pytest

from attnlab.reproduce.targets import TARGETS, Target

SPEC_FILES = {"bb": "extreme-tokens.md", "real": "extreme-tokens.md", "consensus": "consensus.md",
              "paths": "attention-paths.md"}  # fmt: skip
OURS = "the spec states no number; the bound is attnlab's first guess (repro/verdicts.py)"
DIFFERENT = {  # (study, id) -> why its bounds are not numbers of the spec (the row's note says so too)
    ("bb", "R6"): "'about linearly in log t' has no number: read as R² ≥ 0.9",
    ("bb", "R20"): "one peak bar (issue 39): a peak is ρ > 1.5 (R9's bar); the spec's literal ρ ≤ 1 is shown",
    ("bb", "R21"): "'gone' has no number: read with R9's bar, peak ratio ≤ 1.5",
    ("bb", "R22"): "'final risks' has no number: ReLU's within 0.02 of softmax's (R19's 'within 0.02')",
    ("bb", "R25"): OURS,
    ("real", "R23"): OURS,
    ("real", "R24"): OURS,
    ("consensus", "R13"): OURS,
    ("consensus", "R14"): OURS,
    ("paths", "B3"): "R̂ ≤ 1.01 is §7.3's gate, not B3's text: a time goal counts only from converged chains (issue 39)",
    ("paths", "S7"): OURS,
    ("paths", "S8"): OURS,
    ("bb", "SC-relu"): "'does not affect performance' has no number: read as within 0.02 (R19's bar)",
    ("bb", "SC-3layer"): "'makes / keeps / removes the peak' has no number: read with R9's bar, ρ > 1.5",
    ("paths", "SC-prune"): "'minimal performance loss' has no number: read as a drop ≤ 0.02 (B3's 2 points)",
}
# Targets whose spec is still an issue ("the issue is the spec until the spec gains the section"): the issue's text
ISSUE_ROWS = {
    ("real", "R26"): "issue 41, §13.14: the share of windows with a secondary sink; a share above 0.25 is a match",
    ("real", "R27"): "issue 41, §13.14: Spearman of the MLP norm with score and lifetime; above 0.3 is a match",
}
SUPERSCRIPTS = str.maketrans("⁰¹²³⁴⁵⁶⁷⁸⁹⁻−", "0123456789--")
NUMBER = re.compile(r"(?<![\w.])-?\d[\d,]*(?:\.\d+)?(?:e-?\d+)?k?%?")


def spec_item(text: str, tid: str) -> str | None:
    """The spec's text for target `tid` ("R8 (ours)" is R8): its table row, or its list item up to the next."""
    base = re.escape(tid.split(" ")[0])
    row = re.search(rf"^\| {base} \|.*$", text, flags=re.M)
    if row:
        return row.group(0)
    item = re.search(rf"^\s*- \*\*{base}(?:\*\*| —).*?(?=^\s*- \*\*|^\s*$|^#)", text, flags=re.M | re.S)
    return item.group(0) if item else None


def section(text: str, ref: str) -> str:
    """The body of section `ref` ("9.4"), or of its top-level section when it is a numbered point ("15.4")."""
    for r in (ref, ref.split(".")[0]):
        m = re.search(rf"^#+ {re.escape(r)}[ .].*?(?=^#)", text, flags=re.M | re.S)
        if m:
            return m.group(0)
    return ""


def numbers(text: str) -> set[float]:
    """Every number `text` states, with the ones it implies: ±-ranges (also 'a / b (± d)' lists), percentages
    as fractions, 'k' thousands, minutes in seconds, products 'n seeds × m', and both signs."""
    s = text.translate(SUPERSCRIPTS).replace("10-", "1e-")
    out: set[float] = set()
    for m in NUMBER.finditer(s):
        t = m.group(0).replace(",", "")
        pct, kilo = t.endswith("%"), t.rstrip("%").endswith("k")
        x = float(t.rstrip("%").rstrip("k")) * (1000 if kilo else 1)
        out |= {x, -x} | ({x / 100} if pct else set())
    for a, d in re.findall(r"(\d+(?:\.\d+)?) ± (\d+(?:\.\d+)?)", s):
        out |= {float(a) - float(d), float(a) + float(d)}
    for group, d in re.findall(r"((?:\d+(?:\.\d+)? / )+\d+(?:\.\d+)?) \(± (\d+(?:\.\d+)?)\)", s):
        out |= {float(a) + sign * float(d) for a in group.split(" / ") for sign in (-1, 1)}
    out |= {60 * float(a) for a in re.findall(r"(\d+(?:\.\d+)?) min\b", s)}
    out |= {float(a) * float(b) for a, b in re.findall(r"(\d+) [a-z]+ ×\s+(\d+)", s)}
    return out


def spec_numbers(specs: Path, t: Target) -> set[float] | None:
    """The numbers the spec states for `t` (None: no row or item for it in the spec)."""
    text = (specs / SPEC_FILES[t.study]).read_text()
    item = "" if t.id.startswith(("SC-", "C-")) else spec_item(text, t.id)  # no row: the sections its spec cites
    if item is None and (t.study, t.id) in ISSUE_ROWS:
        return numbers(ISSUE_ROWS[(t.study, t.id)])
    if item is None:
        return None
    refs = set(re.findall(r"§(\d+(?:\.\d+)*)", " ".join((item, t.threshold, t.spec if not item else ""))))
    return numbers(item + "".join(section(text, r) for r in sorted(refs)))


def _has(found: set[float], *xs: float) -> bool:
    """Whether every x is (to 1e-9 relative) one of the numbers `found`."""
    return all(any(math.isclose(x, n, rel_tol=1e-9) for n in found) for x in xs)


def off_spec(specs: Path, t: Target) -> list[str]:
    """The bounds of `t`'s checks that are not numbers of the spec's text for it."""
    found = spec_numbers(specs, t)
    assert found is not None, f"{t.study} {t.id}: no row or item in {SPEC_FILES[t.study]}"
    bounds = [(c.key, b) for c in t.checks for b in (c.bound if c.op == "in" else (c.bound,))]
    return [f"{k} {b:g}" for k, b in bounds if float(b) not in (0.0, 1.0) and not _has(found, float(b))]


def test_the_number_reader() -> None:
    assert _has(numbers("fraction 0.29 ± 0.02 and oracle 2.09 ± 0.05"), 0.27, 0.31, 2.04, 2.14)
    assert _has(numbers("Attn 0.22 / 0.63 / 0.78 / 0.81 (± 0.07) at 200 steps"), 0.15, 0.29, 0.74, 0.88)
    found = numbers("falls ≥ 30%; in [15k, 30k]; ≤ 10⁻¹⁴; < 3 min; ≥ 3 seeds ×\n 4 lrs; GP − 0.5")
    assert _has(found, 0.3, 15000.0, 1e-14, 180.0, 12.0, -0.5)
    assert not _has(numbers("within 0.25 and 1.5×"), 0.2)


def test_a_bound_moved_off_the_spec_is_caught(specs: Path) -> None:
    from dataclasses import replace

    from attnlab.reproduce.verdict import Check

    r4 = next(t for t in TARGETS if (t.study, t.id) == ("bb", "R4"))
    assert off_spec(specs, r4) == []
    looser = replace(r4, checks=(Check("attn_sink", ">=", 0.55), *r4.checks[1:]))
    assert off_spec(specs, looser) == ["attn_sink 0.55"]


@pytest.mark.parametrize("t", [t for t in TARGETS if t.checks], ids=lambda t: f"{t.study}-{t.id}")
def test_every_threshold_in_code_is_the_specs(specs: Path, t: Target) -> None:
    off = off_spec(specs, t)
    if (t.study, t.id) in DIFFERENT:
        assert off, f"{t.study} {t.id} is listed as different but every bound is the spec's: drop it from DIFFERENT"
        assert t.note, f"{t.study} {t.id}: a threshold that is not the spec's needs its reading in the row's note"
    else:
        assert not off, f"{t.study} {t.id}: {off} are not numbers of the spec's target text"
