"""The `attnlab paths solve` command end to end on a small Markov problem."""

import json

import numpy as np

from attnlab.cli import main


def test_solve_writes_U_kernels_and_metrics(tmp_path, capsys):
    out = tmp_path / "solve"
    rc = main(["paths", "solve", "--task", "markov", "--P", "20", "--n-test", "40", "--N", "10",
               "--temperature", "0.05", "--out", str(out)])
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
    # the saved kernels reproduce the saved U's kernel
    K = np.einsum("pq,pqmn->mn", U, k["C_train"])
    assert np.allclose(K, K.T, atol=1e-12)
    for f in ["config.json", "manifest.json", "report.html", "figures/U_heatmap_N10.png"]:
        assert (out / f).exists()
