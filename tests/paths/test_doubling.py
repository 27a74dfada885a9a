"""Spec §10.4's doubling (`sampling.posterior.until_gates`), shared by the §10 protocol (B4) and `paths sample
--doublings` (S6), on constructed gates: a fake run whose gates pass from a known number of draws on."""

from __future__ import annotations

import pytest

from attnlab.errors import InputError
from attnlab.paths.config import SampleConfig
from attnlab.paths.sampling.posterior import until_gates


def _gate_from(threshold: int, calls: list[int]):
    """A run whose gates pass once it has `threshold` draws or more; records the draws of every call."""

    def run(draws: int) -> dict:
        calls.append(draws)
        return {"converged": draws >= threshold, "draws": draws}

    return run


@pytest.mark.parametrize(
    ("threshold", "doublings", "calls", "converged"),
    [
        (100, 2, [100], True),  # passes at once: one try
        (150, 2, [100, 200], True),  # first doubling passes: stops there
        (400, 2, [100, 200, 400], True),  # the last allowed try passes
        (401, 2, [100, 200, 400], False),  # never passes: stops at the budget, the last record kept
        (401, 0, [100], False),  # no doubling: one try whatever its gates
    ],
)
def test_draws_double_until_the_gates_pass_within_the_budget(threshold, doublings, calls, converged):
    seen: list[int] = []
    rec = until_gates(_gate_from(threshold, seen), 100, doublings)
    assert seen == calls
    assert rec["converged"] is converged
    assert rec["draws_used"] == calls[-1] == rec["draws"] and rec["tries"] == len(calls)


def test_a_custom_gate_key_is_read():
    """The §10 protocol's records name their gates `sampler_converged`."""
    rec = until_gates(lambda d: {"sampler_converged": d >= 200}, 50, 3, lambda r: r["sampler_converged"])
    assert (rec["draws_used"], rec["tries"]) == (200, 3)


def test_protocol_point_doubles_through_the_shared_code(monkeypatch):
    """B4's protocol_point reruns compare_point with doubled draws and stops when its gates pass."""
    from attnlab.paths.sampling import protocol

    seen: list[int] = []
    fake = lambda c, a, N, T, ch, w, d, lf, nt, s: seen.append(d) or {"sampler_converged": d >= 40}  # noqa: E731
    monkeypatch.setattr(protocol, "compare_point", fake)
    rec = protocol.protocol_point("C1", 4.0, 8, 0.1, 10, 10, 4, 10, doublings=2)
    assert seen == [10, 20, 40] and rec["tries"] == 3 and rec["draws_used"] == 40


def test_bad_doublings_get_one_line():
    with pytest.raises(InputError, match="--doublings"):
        SampleConfig(doublings=-1)
    with pytest.raises(InputError, match="--doublings"):
        SampleConfig(doublings=1, outputs=2)


def test_paths_sample_doubles_its_draws(tmp_path):
    """`paths sample --doublings 1` with draws too few for the gates (R-hat and ESS need more than 4 draws of one
    chain): it tries twice, the second time with 8 draws, and records both in metrics.json and the config."""
    import json

    from attnlab.cli import main

    out = tmp_path / "sample"
    args = ["paths", "sample", "--P", "12", "--n-test", "20", "--chains", "1", "--warmup", "4", "--draws", "4",
            "--doublings", "1", "--threads", "1", "--out", str(out)]  # fmt: skip
    assert main(args) == 0
    m = json.loads((out / "metrics.json").read_text())
    assert (m["tries"], m["draws_used"], m["draws"], m["converged"]) == (2, 8, 8, False)
    assert json.loads((out / "config.json").read_text())["doublings"] == 1
