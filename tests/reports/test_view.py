"""`attnlab view`: the report served on 127.0.0.1 only, and a scan head's pattern recomputed on demand equal to
the pattern the scan saved."""

from __future__ import annotations

import json
import threading
import urllib.error
import urllib.request

import numpy as np
import pytest

from attnlab.cli import main
from attnlab.view.server import make_server


@pytest.fixture
def served(runs):
    server = make_server(runs["scan"], 0)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def _get(url):
    with urllib.request.urlopen(url, timeout=60) as r:
        return r.status, r.read()


def test_view_serves_the_report_and_recomputes_patterns(runs, served):
    status, body = _get(served + "/")
    assert status == 200 and body == (runs["scan"] / "report.html").read_bytes()
    assert _get(served + "/plotly.min.js")[0] == 200
    status, body = _get(served + "/api/pattern?layer=1&head=3")
    res = json.loads(body)
    saved = np.load(runs["scan"] / "patterns" / "code" / "1.3.npy")
    served_pattern = np.array(res["patterns"]["code"], dtype=float)  # masked cells come as null -> NaN
    masked = np.triu(np.ones_like(saved, dtype=bool), k=1)  # the causal mask: keys after the query
    assert np.isnan(served_pattern[masked]).all() and not np.isnan(served_pattern[~masked]).any()
    assert np.allclose(served_pattern[~masked], saved[~masked], atol=1e-5)
    assert res["tokens"]["prose"] == json.loads((runs["scan"] / "patterns" / "prose" / "tokens.json").read_text())
    with pytest.raises(urllib.error.HTTPError) as exc:
        _get(served + "/api/pattern?layer=9&head=0")
    assert exc.value.code == 400
    assert json.loads(exc.value.read())["error"] == "layer 9 is out of range; the model has layers 0..1"
    with pytest.raises(urllib.error.HTTPError) as exc:
        _get(served + "/../manifest.json/../../etc/passwd")
    assert exc.value.code == 404


def test_view_binds_to_loopback_only_and_refuses_a_folder_without_report(runs, tmp_path, capsys):
    server = make_server(runs["bb"], 0)
    assert server.server_address[0] == "127.0.0.1"
    server.server_close()
    assert main(["view", str(tmp_path)]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [
        f"attnlab: error: {tmp_path.resolve()} has no report.html; give a run folder written by an attnlab command"
    ]
