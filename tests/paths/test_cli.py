"""The `attnlab paths solve` command end to end on a small Markov problem."""

import json

import numpy as np
import pytest

from attnlab.cli import main
from tests.numerics import assert_close


@pytest.mark.numerics
def test_solve_writes_U_kernels_and_metrics(tmp_path, capsys):
    out = tmp_path / "solve"
    rc = main(
        [
            "paths",
            "solve",
            "--task",
            "markov",
            "--P",
            "20",
            "--n-test",
            "40",
            "--N",
            "10",
            "--temperature",
            "0.05",
            "--out",
            str(out),
        ]
    )
    assert rc == 0
    assert f"run folder: {out}" in capsys.readouterr().out
    m = json.loads((out / "metrics.json").read_text())
    for key in ["accuracy", "accuracy_gp", "max_grad", "iterations", "action", "entropy_form"]:
        assert key in m
    assert m["max_grad"] < 1e-8 and m["entropy_form"] == "chain"
    U = np.load(out / "U.npy", allow_pickle=False)
    k = np.load(out / "kernels.npz", allow_pickle=False)
    assert U.shape == (4, 4) and k["C_train"].shape == (4, 4, 20, 20)
    assert k["y_train"].shape == (20,) and k["y_test"].shape == (40,)
    # the saved path kernels are the contractions of the saved attentioned inputs, and the predictor rebuilt from
    # the saved files with the saved U (spec §6: K = sum_pq U_pq C^pq, mean = K_* (K + T I)^-1 y) gives the
    # saved accuracy
    xt, xs = k["xit_train"], k["xit_test"]
    # C^pq_mn = sum_d xi_mpd xi_nqd, float64 over n = N0 terms in two orders: within 2(n + 1)u·sum|terms|
    # (Higham's gamma_n both ways; was atol 1e-12)
    bound = 2 * (xt.shape[-1] + 1) * 2.0**-53 * np.einsum("mpd,nqd->pqmn", np.abs(xt), np.abs(xt)).max()
    assert_close(np.einsum("mpd,nqd->pqmn", xt, xt), k["C_train"], atol=bound, label="saved C_train", kind="bound")
    K = np.einsum("pq,pqmn->mn", U, k["C_train"])
    mean = np.einsum("pq,mpd,nqd->mn", U, xs, xt) @ np.linalg.solve(K + 0.05 * np.eye(20), k["y_train"])
    assert np.mean(np.sign(mean) == k["y_test"]) == pytest.approx(m["accuracy"], abs=1e-12)  # a count / 40
    for f in ["config.json", "manifest.json", "report.html", "figures/U_heatmap_N10.png"]:
        assert (out / f).exists()


def test_python_api_solve_returns_tables(tmp_path):
    import pandas as pd

    import attnlab.paths as paths
    from attnlab.runs import RunResult

    cfg = paths.SolveConfig(P=20, n_test=40, N=10.0, temperature=0.05)
    res = paths.solve(cfg, out=tmp_path / "api")
    assert isinstance(res, RunResult) and res.path == tmp_path / "api" and res.config is cfg
    table = res.tables["point"]
    assert isinstance(table, pd.DataFrame) and len(table) == 1
    m = json.loads((res.path / "metrics.json").read_text())
    assert table["accuracy"][0] == m["accuracy"] == res.summary["accuracy"]
    assert res.summary["converged"] and res.summary["max_grad"] < 1e-8
    assert table["alpha"][0] == 2.0 and 0.5 < m["accuracy"] <= 1.0
    # the same config from the CLI gives the same numbers
    assert (
        main(
            [
                "paths",
                "solve",
                "--P",
                "20",
                "--n-test",
                "40",
                "--N",
                "10",
                "--temperature",
                "0.05",
                "--out",
                str(tmp_path / "cli"),
            ]
        )
        == 0
    )
    assert np.array_equal(np.load(tmp_path / "cli" / "U.npy"), np.load(res.path / "U.npy"))


def test_config_names_the_bad_field():
    import pytest

    from attnlab.errors import InputError
    from attnlab.paths.config import PruneConfig, SampleConfig

    with pytest.raises(InputError, match=r"--chains must be an integer >= 1, got 0"):
        SampleConfig(chains=0)
    with pytest.raises(InputError, match=r"--P: the balanced tasks need an even number"):
        SampleConfig(P=21)
    with pytest.raises(InputError, match=r"--heads \(pruning needs at least 2 heads per layer\)"):
        PruneConfig(heads=1)


def test_rerun_reproduces_a_sweep(tmp_path):
    """`attnlab rerun` rebuilds the SweepConfig from config.json (Ns back to a tuple) and gives the same points."""
    first, second = tmp_path / "a", tmp_path / "b"
    assert main(["paths", "sweep", "--P", "20", "--n-test", "40", "--Ns", "30", "10", "--temperature", "0.05",
                 "--out", str(first)]) == 0  # fmt: skip
    assert main(["rerun", str(first), "--out", str(second)]) == 0
    texts = [(d / "points.jsonl").read_text().splitlines() for d in (first, second)]
    rows = [[{k: v for k, v in json.loads(line).items() if k != "wall_s"} for line in t] for t in texts]
    assert rows[0] == rows[1] and [r["N"] for r in rows[0]] == [30.0, 10.0]
    assert json.loads((second / "manifest.json").read_text())["command"] == "paths sweep"


def test_sweep_through_the_gp_limit_prints_its_points(tmp_path, capsys):
    """A sweep whose widths include inf (its N is stored as the text "inf") prints every point and exits 0."""
    argv = ["paths", "sweep", "--P", "20", "--n-test", "20", "--Ns", "30", "inf", "--out", str(tmp_path / "s")]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "N=inf: accuracy" in out and "N=30: accuracy" in out
