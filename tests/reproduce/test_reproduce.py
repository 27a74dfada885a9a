"""`attnlab reproduce`: every spec target has a row; each verdict follows from its number and threshold, and a
number just past a threshold flips it; bad input is one line and leaves no folder (spec targets, issue 11)."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import pytest

from attnlab.cli import main
from attnlab.errors import InputError
from attnlab.reproduce import report
from attnlab.reproduce.run import judge_recorded, row_intervals
from attnlab.reproduce.targets import TARGETS
from attnlab.reproduce.verdict import MET, MISSED, NOT_RUN, Check, verdict

TINY_STUDIES = ("bb", "consensus", "paths")  # real needs SmolLM2: the quick profile runs it


def _spec_ids(specs: Path, name: str) -> set[str]:
    """Target ids of one spec: table rows (| R4 |, | T10 |, | B2 |) and bold items (**S1**, **R19 —, **B3**)."""
    text = (specs / name).read_text()
    rows = re.findall(r"^\| (R\d+[a-z]?|T\d+|B\d+) \|", text, flags=re.M)
    bold = re.findall(r"\*\*([RSB]\d+[a-z]?)(?:\*\*| —)", text)
    return set(rows) | set(bold)


@pytest.mark.parametrize(
    "spec,studies",
    [("extreme-tokens.md", ("bb", "real")), ("consensus.md", ("consensus",)), ("attention-paths.md", ("paths",))],
)
def test_every_spec_target_has_a_row(specs: Path, spec: str, studies: tuple[str, ...]) -> None:
    ours = {t.id for t in TARGETS if t.study in studies}
    spec_ids = _spec_ids(specs, spec)
    assert len(spec_ids) >= 19
    assert spec_ids <= ours, sorted(spec_ids - ours)


def test_registry_rows_are_complete() -> None:
    keys = [(t.study, t.id) for t in TARGETS]
    assert len(keys) == len(set(keys))
    for t in TARGETS:
        assert t.claim and t.threshold
        # a measured row has a bar, or shows numbers with none (reported: consensus B3, B4)
        assert (t.measure is not None and (t.checks or t.shown) and t.needs) or (t.measure is None and t.not_run), t.id


@pytest.mark.parametrize(
    "op,bound,inside,past",
    [
        ("<", 0.05, 0.0499, 0.05),
        ("<=", 1e-14, 1e-14, 1.0000001e-14),
        (">", 2.0, 2.0001, 2.0),
        (">=", 0.6, 0.6, 0.5999999),
        ("abs<=", 0.1, -0.1, -0.1000001),
        ("in", (0.27, 0.31), 0.31, 0.3100001),
    ],
)
def test_check_boundaries(op: str, bound, inside: float, past: float) -> None:
    c = Check("x", op, bound)
    assert c.passes(inside) and not c.passes(past)
    assert not c.passes(math.nan) and not c.passes(math.inf)
    assert verdict((c,), {"x": inside}) == (MET, f"{c.text()}: {inside:.4g} yes")
    assert verdict((c,), {"x": past})[0] == MISSED
    assert verdict((c,), {})[0] == MISSED  # a missing number is a miss, never a pass
    assert verdict((c,), None, "why not") == (NOT_RUN, "why not")


def _just_past(c: Check, value: float, make_pass: bool) -> float:
    """A number next to the check's bound: the closest one that passes (make_pass) or fails."""
    if c.op == "in":
        hi = float(c.bound[1])
        return hi if make_pass else math.nextafter(hi, math.inf)
    b = float(c.bound)
    if c.op == "abs<=":
        return (b if make_pass else math.nextafter(b, math.inf)) * (-1 if value < 0 else 1)
    up = c.op in (">", ">=")  # passing lies above the bound
    strict = c.op in ("<", ">")
    if make_pass:
        return math.nextafter(b, math.inf if up else -math.inf) if strict else b
    return b if strict else math.nextafter(b, -math.inf if up else math.inf)


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory) -> dict:
    from attnlab.core.clitools import threads

    out = tmp_path_factory.mktemp("repro") / "tiny"
    with threads(1):
        assert main(["reproduce", *TINY_STUDIES, "--profile", "tiny", "--out", str(out)]) == 0
    return {"path": out, "record": json.loads((out / "reproduction.json").read_text())}


def test_tiny_run_has_a_row_per_target_and_the_files(tiny_run) -> None:
    record, path = tiny_run["record"], tiny_run["path"]
    expected = [(t.study, t.id) for t in TARGETS if t.study in TINY_STUDIES]
    assert [(r["study"], r["id"]) for r in record["rows"]] == expected
    md = (path / "reproduction.md").read_text()
    html = (path / "report.html").read_text()
    for _, tid in expected:
        assert f"| {tid} |" in md and f"<td>{tid}</td>" in html
    assert not any(v["error"] for v in record["experiments"].values()), record["experiments"]
    measured = [r for r in record["rows"] if r["numbers"] is not None]
    assert len(measured) >= 15
    for study, c in record["counts"].items():
        assert sum(n for g in c.values() for n in g.values()) == sum(1 for s, _ in expected if s == study)
    for line in report.counts_table(record):  # per study and group, each verdict
        assert line in md


def test_each_verdict_follows_from_its_number_and_flips_past_the_threshold(tiny_run) -> None:
    targets = {(t.study, t.id): t for t in TARGETS}
    flipped = 0
    for row in tiny_run["record"]["rows"]:
        t = targets[(row["study"], row["id"])]
        assert row["checks"] == [c.text() for c in t.checks]
        if row["numbers"] is None:
            assert row["verdict"] == NOT_RUN and row["why"]
            continue
        nums = {k: (float(v) if isinstance(v, str) else v) for k, v in row["numbers"].items()}
        nums = {k: v for k, v in nums.items() if k not in row["derived"]}  # measured, not read off an interval
        ivs = row_intervals(t, nums, {})
        if row["recorded"]:  # a hand run's numbers, judged by the same checks (issue 18)
            assert t.recorded is not None and nums == t.recorded.as_dict()
            assert judge_recorded(t) == (row["verdict"], row["why"])
            assert verdict(t.checks, nums, "", ivs, t.shown)[0] == row["verdict"]
        else:
            assert verdict(t.checks, nums, "", ivs, t.shown) == (row["verdict"], row["why"])
        if not t.checks or ivs:  # reported (no bar), or judged by an interval: the point flips below do not apply
            continue
        # move every number just inside its bound: met; then one just past: missed
        inside = dict(nums)
        for c in t.checks:
            inside[c.key] = _just_past(c, nums.get(c.key) or 0.0, True)
        assert verdict(t.checks, inside)[0] == MET, (t.id, inside)
        for c in t.checks:
            past = dict(inside, **{c.key: _just_past(c, inside[c.key], False)})
            assert verdict(t.checks, past)[0] == MISSED, (t.id, c)
            flipped += 1
    assert flipped >= 30


def test_known_values_of_the_tiny_run(tiny_run) -> None:
    """Numbers a bug in a measure would change: the theory targets are exact at any profile."""
    rows = {(r["study"], r["id"]): r for r in tiny_run["record"]["rows"]}
    r13 = rows[("bb", "R13")]["numbers"]
    assert r13["alpha_slope_min"] == pytest.approx(0.5009, abs=2e-3) and rows[("bb", "R13")]["verdict"] == MET
    assert rows[("bb", "R14")]["numbers"]["adam_m"] == pytest.approx(63.98, abs=0.05)
    r1 = rows[("bb", "R1")]["numbers"]
    assert r1["triggers_are_space_e_t"] == 1 and 0.25 < r1["trigger_fraction"] < 0.35
    assert rows[("consensus", "R1a")]["numbers"]["first_token_drift"] == 0.0  # bitwise: causal token 0 is fixed
    assert rows[("consensus", "R5a")]["verdict"] == MET
    assert rows[("paths", "T10")]["numbers"]["max_grad"] < 1e-8


def test_registry_resolves_the_command() -> None:
    from attnlab.core.registry import resolve
    from attnlab.reproduce.config import ReproduceConfig
    from attnlab.reproduce.run import reproduce

    assert resolve("reproduce") == (ReproduceConfig, reproduce)


def _error_line(capsys: pytest.CaptureFixture) -> str:
    lines = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("attnlab: error: "), lines
    return lines[0][len("attnlab: error: ") :]


@pytest.mark.parametrize(
    "argv,message",
    [
        (["extreme"], "unknown study 'extreme'; valid: bb, real, consensus, paths"),
        (["bb", "bb"], "studies: ['bb', 'bb'] repeats a study"),
        (["--profile", "quik"], "unknown profile 'quik'; valid: tiny, quick, full (did you mean 'quick'?)"),
        (["--seed", "-1"], "seed must be"),
    ],
)
def test_bad_input_is_one_line_and_leaves_no_folder(tmp_path, capsys, argv, message) -> None:
    out = tmp_path / "r"
    assert main(["reproduce", *argv, "--out", str(out)]) == 1
    assert _error_line(capsys).startswith(message)
    assert not out.exists()


def test_existing_folder_is_refused_and_unchanged(tmp_path, capsys) -> None:
    out = tmp_path / "r"
    out.mkdir()
    (out / "keep.txt").write_text("mine")
    before = (out / "keep.txt").stat().st_mtime_ns
    assert main(["reproduce", "consensus", "--profile", "tiny", "--out", str(out)]) == 1
    assert _error_line(capsys).startswith(f"--out {out} is not empty")
    assert (out / "keep.txt").read_text() == "mine" and (out / "keep.txt").stat().st_mtime_ns == before
    assert [p.name for p in out.iterdir()] == ["keep.txt"]


def test_full_profile_runs_every_measured_target_and_its_configs_build(tmp_path) -> None:
    """At --profile full every target with a measure has its study runs, and every study run's config (the
    table's (command, config) rows) is a valid config of its registry command."""
    from attnlab.core.registry import resolve
    from attnlab.reproduce.config import ReproduceConfig
    from attnlab.reproduce.experiments import EXPERIMENTS, PAPER_SCALE, SIZES, sized
    from attnlab.reproduce.run import plan
    from attnlab.runs.configs import config_from_dict

    targets, names = plan(ReproduceConfig(profile="full", device="cuda"))
    measured = {n for t in targets if t.measure is not None for n in t.needs}
    assert measured <= set(names) <= set(EXPERIMENTS)
    on_cpu = plan(ReproduceConfig(profile="full"))[1]
    assert set(names) - set(on_cpu) == set(PAPER_SCALE) >= {"bb_paper"}  # paper scale (R11, R12): only on a GPU
    built = waits = 0
    for name in names:
        exp = EXPERIMENTS[name]
        assert (exp.runs is None) != (exp.compute is None), name
        for run in exp.runs(0, sized(name, "full", "cpu"), tmp_path) if exp.runs else []:
            if not callable(run.config):  # a callable config needs an earlier run's files (series_scan's scan)
                try:
                    config = config_from_dict(resolve(run.command)[0], dict(run.config))
                except InputError as exc:  # a config that checks an earlier experiment's run folder when built
                    assert str(tmp_path) in str(exc) and "run folder" in str(exc), (name, str(exc))
                    assert any(str(v).startswith(str(tmp_path)) for v in dict(run.config).values()), name
                    waits += 1
                    continue
                built += 1
                if run.command == "bb train" and "steps" in SIZES["full"][name]:
                    assert config.steps == SIZES["full"][name]["steps"], name
    assert built >= 40 and waits <= 5
    assert SIZES["quick"]["bb_softmax"]["steps"] == 600  # the slow tests' scale (tests/bb/test_phenomena_slow.py)


def _fail(*args, **kwargs):
    raise RuntimeError("solver exploded\nsecond line")


def _interrupt(*args, **kwargs):
    from attnlab.errors import AttnlabError

    raise AttnlabError("interrupted at step 3; checkpoint saved", exit_code=130)


def test_a_failed_study_run_is_reported_and_an_interrupt_ends_the_run(tmp_path, monkeypatch) -> None:
    from attnlab.errors import AttnlabError
    from attnlab.reproduce import experiments
    from attnlab.reproduce.config import ReproduceConfig
    from attnlab.reproduce.experiments import Experiment
    from attnlab.reproduce.run import reproduce

    for name in ("cons_causal", "cons_full", "cons_cluster", "cons_tails", "cons_late", "cons_phase", "cons_counter"):
        monkeypatch.setitem(experiments.EXPERIMENTS, name, Experiment(compute=lambda seed, size: {}))
    monkeypatch.setitem(experiments.EXPERIMENTS, "cons_rho", Experiment(compute=_fail))
    res = reproduce(ReproduceConfig(studies=("consensus",), profile="tiny"), tmp_path / "r")
    rows = {r["id"]: r for r in json.loads((res.path / "reproduction.json").read_text())["rows"]}
    assert rows["R5a"]["verdict"] == NOT_RUN
    assert rows["R5a"]["why"] == "cons_rho failed: RuntimeError: solver exploded"
    assert rows["R1a"]["verdict"] == NOT_RUN and rows["R1a"]["why"].startswith("measure failed: ")
    monkeypatch.setitem(experiments.EXPERIMENTS, "cons_rho", Experiment(compute=_interrupt))
    with pytest.raises(AttnlabError) as exc:
        reproduce(ReproduceConfig(studies=("consensus",), profile="tiny"), tmp_path / "r2")
    assert exc.value.exit_code == 130


def test_every_study_run_is_a_registry_command_that_rerun_redoes(tiny_run, tmp_path) -> None:
    """Each study run folder of the tiny run names its command and config, and `attnlab rerun` of one (here the
    consensus phase diagram) writes the same numbers (issue 20: every experiment goes through a run function)."""
    from attnlab.core.registry import resolve

    manifests = sorted((tiny_run["path"] / "runs").rglob("manifest.json"))
    assert len(manifests) >= 20
    for m in manifests:
        resolve(json.loads(m.read_text())["command"])  # a known command, or InputError
    phase = tiny_run["path"] / "runs" / "cons_phase"
    assert main(["rerun", str(phase), "--out", str(tmp_path / "again"), "--threads", "1"]) == 0
    assert (tmp_path / "again" / "frac.npy").read_bytes() == (phase / "frac.npy").read_bytes()


def test_update_adds_missing_study_runs_and_keeps_the_other_rows(tiny_run, tmp_path) -> None:
    """`update` on a saved folder that predates a target (here: R12's study run removed from the record) runs only
    that study run (and the direct computations, whose numbers a folder without marks lacks), evaluates its row as the
    full run did, keeps every other measured row and rewrites the table."""
    import shutil

    from attnlab.reproduce.experiments import EXPERIMENTS
    from attnlab.reproduce.run import update

    folder = tmp_path / "saved"
    shutil.copytree(tiny_run["path"], folder)
    record = json.loads((folder / "reproduction.json").read_text())
    del record["experiments"]["cons_counter"]
    record["rows"] = [r for r in record["rows"] if (r["study"], r["id"]) != ("consensus", "R12")]
    (folder / "reproduction.json").write_text(json.dumps(record))
    shutil.rmtree(folder / "runs" / "cons_counter")
    shutil.rmtree(folder / "experiments")  # a folder saved before reproduce wrote marks
    new = update(folder)
    computed = sorted(n for n in record["experiments"] if EXPERIMENTS[n].compute is not None)
    assert computed and new["updated"] == sorted(["cons_counter", *computed])  # their numbers were not saved
    assert (folder / "runs" / "cons_counter" / "R12.png").is_file()
    rows = {(r["study"], r["id"]): r for r in new["rows"]}
    full = {(r["study"], r["id"]): r for r in tiny_run["record"]["rows"]}
    assert rows[("consensus", "R12")]["numbers"] == full[("consensus", "R12")]["numbers"]
    kept = {(r["study"], r["id"]): r for r in record["rows"] if r["numbers"] is not None}
    assert all(rows[k] == r for k, r in kept.items())
    assert [(r["study"], r["id"]) for r in new["rows"]] == [(r["study"], r["id"]) for r in tiny_run["record"]["rows"]]
    assert "added later" in (folder / "reproduction.md").read_text()
