"""First contact (issue 21): a string where a tuple of names is expected, and bad CLI input refused before heavy
imports. The refusal is checked by what it imported (torch, transformers, pandas, ...), never by a clock."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from attnlab.errors import InputError, folders, names

ROOT = Path(__file__).resolve().parents[2]
HEAVY = ("torch", "transformers", "pandas", "scipy", "matplotlib")


def test_one_string_is_one_name():
    assert names("prose", "domains") == ("prose",)
    assert names(["prose", "code"], "domains") == ("prose", "code")
    assert names((), "domains") == ()
    with pytest.raises(InputError, match="^domains must be a name or a list of names, got 3$"):
        names(3, "domains")
    with pytest.raises(InputError, match="domains must be a name or a list of names"):
        names(["prose", 3], "domains")
    assert folders("runs/a") == ("runs/a",) and folders([Path("a"), "b"]) == ("a", "b")


def test_configs_take_a_string_for_a_tuple_of_names():
    from attnlab.ablate.config import AblateConfig
    from attnlab.compare.config import CompareConfig
    from attnlab.consensus.config import ModelConfig, NormConfig
    from attnlab.demo import DemoConfig
    from attnlab.deploy.config import QuantizeConfig, SlidingWindowConfig
    from attnlab.reproduce.config import ReproduceConfig
    from attnlab.scan.config import ScanConfig

    assert ScanConfig(domains="prose").domains == ("prose",)
    assert AblateConfig(domains="code", mlps=(0,)).domains == ("code",)
    assert SlidingWindowConfig(domains="random").domains == ("random",)
    q = QuantizeConfig(domains="prose", policies="naive", sites="residual")
    assert (q.domains, q.policies, q.sites) == (("prose",), ("naive",), ("residual",))
    m = ModelConfig(domains="code", schedules="random")
    assert (m.domains, m.schedules) == (("code",), ("random",))
    assert NormConfig(domains="prose").domains == ("prose",)
    assert ReproduceConfig(studies="bb").studies == ("bb",)
    assert DemoConfig(only="paths").only == ("paths",)
    with pytest.raises(InputError, match="compare needs two or more run folders, got 1"):
        CompareConfig(run_dirs="runs/a")
    with pytest.raises(InputError, match="unknown domain 'poetry'"):  # the name, not its first letter
        ScanConfig(domains="poetry")


DRIVER = r"""
import json, sys
from attnlab.cli import main
try:
    rc = main(sys.argv[1:])
except SystemExit as exc:
    rc = exc.code
print(json.dumps({"rc": rc, "heavy": [m for m in HEAVY if m in sys.modules]}))
""".replace("HEAVY", repr(HEAVY))


@pytest.mark.parametrize(
    "argv, message",
    [
        (["bb", "train", "--steps", "-5"], "steps must be an integer >= 1, got -5"),
        (["bb", "train", "--lr", "100"], "lr must be in (0, 10]"),
        (["bb", "sample", "--n", "0"], "n must be an integer >= 1"),
        (["scan", "--tokens", "1"], "tokens must be an integer >= 2"),
        (["scan", "--domain", "poetry"], "invalid choice: 'poetry'"),
        (["ablate", "--samples", "0", "--head", "0.0"], "samples must be an integer >= 1"),
        (["deploy", "quantize", "--bits", "99"], "bits must be an integer in [2, 16]"),
        (["series", "train", "--steps", "0"], "steps must be an integer >= 1"),
        (["consensus", "simulate", "--n", "0"], "n (tokens) must be an integer >= 2"),
        (["consensus", "model", "--passes", "0"], "passes must be an integer >= 1"),
        (["paths", "solve", "--N", "-1"], "widths must be >= 1"),
        (["paths", "sweep", "--P", "0"], "--P must be an integer >= 2"),
        (["reproduce", "--profile", "huge"], "unknown profile 'huge'"),
        (["demo", "--seed", "-1"], "--seed must be an integer in [0, 4294967295]"),
    ],
)
def test_bad_input_is_refused_before_heavy_imports(tmp_path, argv, message):
    """One line, a failing exit code, no folder, and none of torch/transformers/pandas/scipy/matplotlib imported:
    what makes a refusal take seconds (7-18 s on a busy machine) is importing them first."""
    out = tmp_path / "run"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.run(
        [sys.executable, "-c", DRIVER, *argv, "--out", str(out)], capture_output=True, text=True, env=env, cwd=tmp_path
    )
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    errors = [line for line in proc.stderr.splitlines() if "error:" in line]
    assert result["rc"] in (1, 2) and len(errors) == 1 and message in errors[0], proc.stderr
    assert result["heavy"] == [], f"{argv}: refused only after importing {result['heavy']}"
    assert not out.exists()


def _fake_study(monkeypatch, name, run_demo):
    import types

    from attnlab import demo

    module = types.ModuleType(f"tests_fake_demo_{name}")
    module.run_demo = run_demo  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, module.__name__, module)
    monkeypatch.setitem(demo.DEMOS, name, module.__name__)


@pytest.mark.parametrize("code, why", [(130, "demo interrupted;"), (2, "demo stopped: diverged at step 3;")])
def test_a_stopped_demo_names_what_finished_and_suggests_the_demos_resume(tmp_path, monkeypatch, code, why):
    """A study's own "continue with --resume" (of its run alone) must not reach the user: the demo's own
    `attnlab demo --resume` is the way to continue."""
    from attnlab import demo
    from attnlab.errors import AttnlabError
    from attnlab.reports.page import Report

    def finishes(out, seed):
        Path(out).mkdir(parents=True)
        return Report("first")

    def stops(out, seed):
        Path(out).mkdir(parents=True)
        message = "interrupted at step 3" if code == 130 else "diverged at step 3"
        raise AttnlabError(f"{message}; checkpoint saved in {out}; continue with --resume", code)

    monkeypatch.setattr(demo, "DEMOS", {})
    _fake_study(monkeypatch, "first", finishes)
    _fake_study(monkeypatch, "second", stops)
    with pytest.raises(AttnlabError) as info:
        demo.run_demo(demo.DemoConfig(), tmp_path / "demo")
    message = str(info.value)
    assert info.value.exit_code == code and message.count("--resume") == 1  # the demo's hint, not the study's
    assert message.startswith(why) and message.endswith(
        f"the study parts it finished (first) are in {tmp_path / 'demo'}; "
        f"continue with `attnlab demo --resume --out {tmp_path / 'demo'}`"
    )
