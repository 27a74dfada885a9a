"""`attnlab.load_run` (issue 19): a finished run folder read back as the `RunResult` its run function returned."""

from __future__ import annotations

import json

import pytest

import attnlab
import attnlab.consensus as consensus
from attnlab.errors import InputError


@pytest.fixture(scope="module")
def simulated(tmp_path_factory):
    out = tmp_path_factory.mktemp("load") / "sim"
    return consensus.simulate(consensus.SimulateConfig(n=8, d=3, batch=2, beta=1.0, t_max=1.0), out=out)


def test_load_run_gives_back_the_config_summary_and_tables(simulated):
    back = attnlab.load_run(simulated.path)
    assert back.config == simulated.config and back.path == simulated.path
    assert set(back.summary) == set(simulated.summary)
    for name in simulated.tables:
        if name in back.tables:
            assert back.tables[name].shape[0] == simulated.tables[name].shape[0], name
    assert set(back.tables) & set(simulated.tables), (list(back.tables), list(simulated.tables))


def test_load_run_refuses_what_is_not_a_finished_run(tmp_path, simulated):
    with pytest.raises(InputError, match="not found"):
        attnlab.load_run(tmp_path / "absent")
    (tmp_path / "plain").mkdir()
    with pytest.raises(InputError, match="manifest.json not found"):
        attnlab.load_run(tmp_path / "plain")
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "manifest.json").write_text(json.dumps({"command": "bb nonsense"}))
    with pytest.raises(InputError, match="unknown command"):
        attnlab.load_run(bad)
