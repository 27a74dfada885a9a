"""The paths report is written from the run folder alone, through its one entry `write_report(run)`."""

import json

import numpy as np
import pytest

from attnlab.errors import InputError
from attnlab.runs import RunDir, open_run
from tests.numerics import assert_close

KERNEL_VIEW = json.dumps("renormalised Σ U C")[1:-1]  # as the page's plotly JSON spells it


@pytest.fixture(scope="module")
def solved(tmp_path_factory):
    import attnlab.paths as paths

    out = tmp_path_factory.mktemp("report") / "solve"
    return paths.solve(paths.SolveConfig(P=20, n_test=40, N=10.0, temperature=0.05), out=out).path


@pytest.mark.numerics
def test_solve_saves_the_renormalised_kernel_its_report_shows(solved):
    """K_train.npy is K(U) = sum_pq U_pq C^pq on the training points (spec K2), from the saved U and C."""
    U = np.load(solved / "U.npy")
    with np.load(solved / "kernels.npz") as z:
        C = z["C_train"]
    K = np.load(solved / "K_train.npy")
    assert K.shape == (20, 20)
    # K_mn = sum_pq U_pq C^pq_mn over n = 16 float64 terms in two orders: within 2(n + 1)u·sum|terms| (was 1e-12)
    bound = 2 * 17 * 2.0**-53 * np.einsum("pq,pqmn->mn", np.abs(U), np.abs(C)).max()
    assert_close(K, np.einsum("pq,pqmn->mn", U, C), atol=bound, label="K_train = sum U C", kind="bound")
    assert KERNEL_VIEW in (solved / "report.html").read_text()


def test_write_report_reads_the_folder_only(solved, tmp_path):
    """A copy of the folder without its report gets the same report from the folder; a run that saved no K(U)
    shows the path kernels only; a run of another command is refused in one line."""
    import shutil

    from attnlab.paths.report import write_report

    copy = tmp_path / "copy"
    shutil.copytree(solved, copy)
    (copy / "report.html").unlink()
    assert write_report(RunDir(copy)) == copy / "report.html"
    page = (copy / "report.html").read_text()
    assert KERNEL_VIEW in page and "Order parameter U" in page
    (copy / "K_train.npy").unlink()
    write_report(RunDir(copy))
    page = (copy / "report.html").read_text()
    assert KERNEL_VIEW not in page and "C[" in page
    with open_run(tmp_path / "other", "bb train", {"seed": 0}) as run:
        run.write_json("metrics.json", {})
    with pytest.raises(InputError, match="not a `paths` run"):
        write_report(RunDir(tmp_path / "other"))


def test_sweep_title_is_saved_in_the_run(tmp_path):
    import attnlab.paths as paths

    cfg = paths.SweepConfig(P=20, n_test=20, Ns=(30.0, 10.0), temperature=0.05)
    path = paths.sweep(cfg, tmp_path / "sweep", title="My sweep").path
    assert json.loads((path / "report_title.json").read_text()) == {"title": "My sweep"}
    assert "<title>My sweep" in (path / "report.html").read_text()
