"""Bad input (spec §12, T16): each raises a one-line AttnlabError naming the value; memory refusal before allocation."""

import numpy as np
import pytest
import torch

from attnlab.cli import main
from attnlab.errors import AttnlabError, InputError
from attnlab.paths.networks.architecture import HeadSpec, PathConfig, PathNetwork
from attnlab.paths.networks.kernels import check_memory
from attnlab.paths.tasks.markov import markov_data
from attnlab.paths.theory.predictor import add_jitter, predict
from tests.paths.conftest import problem, tiny


def _one_line(exc) -> str:
    msg = str(exc.value)
    assert "\n" not in msg and isinstance(exc.value, AttnlabError)
    return msg


@pytest.mark.parametrize("T", [0.0, -1.0])
def test_temperature_must_be_positive(T):
    _, _, y, gram = tiny((2, 2))
    with pytest.raises(InputError) as e:
        problem(gram, y, (2, 2), T=T)
    assert "temperature" in _one_line(e) and str(T) in str(e.value)


def test_cli_refuses_bad_temperature_in_one_line(capsys, tmp_path):
    rc = main(["paths", "solve", "--temperature", "0", "--out", str(tmp_path / "r")])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 1 and len(err) == 1 and "--temperature must be a finite positive number, got 0.0" in err[0]
    assert not (tmp_path / "r").exists()


def test_too_few_examples():
    with pytest.raises(InputError) as e:
        markov_data(1, seed=0)
    assert "P" in _one_line(e) and "got 1" in str(e.value)
    _, _, y, gram = tiny((2, 2), P=1)
    with pytest.raises(InputError) as e:
        problem(gram, y, (2, 2))
    assert "at least 2" in _one_line(e)


def test_mismatched_shapes():
    _, _, y, gram = tiny((2, 2))
    with pytest.raises(InputError) as e:
        problem(gram, y[:-1], (2, 2))
    assert "Y: expected shape [P] = [10], got (9,)" in _one_line(e)
    with pytest.raises(InputError) as e:
        predict(np.eye(3), gram, y, 0.1, gram.xit)
    assert "U: expected [4, 4], got (3, 3)" in _one_line(e)
    net = PathNetwork(PathConfig([[HeadSpec("bilinear", W=np.eye(5))]]))
    with pytest.raises(InputError) as e:
        net.attention(torch.zeros(2, 3, 6, dtype=torch.float64))
    assert "bilinear W: expected [N0, N0] = [6, 6], got (5, 5)" in _one_line(e)
    with pytest.raises(InputError) as e:
        PathConfig([[HeadSpec("bilinear", W=np.eye(5))]], widths=(3.0,))
    assert "widths: need L+1 = 2 entries" in _one_line(e)


@pytest.mark.parametrize("w", [0.0, -3.0, 2.5])
def test_non_positive_or_fractional_widths(w):
    with pytest.raises(InputError) as e:
        PathConfig([[HeadSpec("bilinear", W=np.eye(5))]], widths=(w, 4.0))
    assert f"got {w}" in _one_line(e)


def test_cli_refuses_non_positive_width(capsys, tmp_path):
    rc = main(["paths", "solve", "--N", "-5", "--out", str(tmp_path / "r")])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 1 and len(err) == 1 and "--N: widths must be >= 1 (or inf for the GP limit), got -5.0" in err[0]


def test_memory_refused_before_allocation():
    with pytest.raises(InputError) as e:
        check_memory(P=100, n_paths=8**4 + 1, N0=10, n_tok=5, sum_heads=32)
    assert "exceeds the cap 4096" in _one_line(e)
    with pytest.raises(InputError) as e:  # 10^6 examples with 256 paths: petabytes, refused at once
        check_memory(P=10**6, n_paths=256, N0=10**4, n_tok=5, sum_heads=8, mode="gram", budget=1e9)
    assert "exceeds the budget" in _one_line(e)
    assert check_memory(P=600, n_paths=16, N0=8, n_tok=5, sum_heads=8, mode="auto", budget=1e12) == "factor"


def test_kernel_needing_jitter_says_how_much():
    v = np.random.default_rng(0).standard_normal((6, 2))
    K = v @ v.T  # rank 2: Cholesky fails without jitter
    with pytest.warns(UserWarning, match=r"added jitter .* x mean\(diag\)"):
        Kj, info = add_jitter(K)
    assert info["absolute"] > 0 and info["relative"] <= 1e-6
    np.linalg.cholesky(Kj)
    with pytest.raises(InputError) as e:
        add_jitter(np.diag([1.0, -1e-3, 0.0]))
    assert "lambda_min = -0.001" in _one_line(e) and "not PSD" in str(e.value)
    with pytest.raises(InputError) as e:
        add_jitter(np.array([[1.0, 0.5], [0.4, 1.0]]))
    assert "not symmetric" in _one_line(e)


def test_ill_conditioned_kernel_is_refused():
    from attnlab.paths.theory.solver import solve_saddle_point

    _, _, y, gram = tiny((2, 2), P=12, N0=2)  # K has rank <= N0 n_paths = 8 < P: singular
    with pytest.raises(InputError) as e:  # at the start point: only the data and T decide, so it is bad input
        solve_saddle_point(problem(gram, y, (2, 2), T=1e-14))
    assert "cond(K+TI)" in _one_line(e) and "> 1e+12" in str(e.value)
