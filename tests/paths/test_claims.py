"""The machinery of the authors' claims S8 (multiple outputs) and S9 (scalar vs matrix renormalisation)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
import torch

from attnlab.cli import main
from attnlab.paths.networks.kernels import PathGram, scaled_paths
from attnlab.paths.sampling.outputs import MultiOutputTarget, augment, markov_targets
from attnlab.paths.tasks.data import PathData
from attnlab.paths.theory.action import Problem, action_value, entropy_gp_gradient, evaluate, scalar_reference
from attnlab.paths.theory.predictor import gp_U, predict
from attnlab.paths.theory.renorm import renorm_record, scalar_saddle
from attnlab.paths.theory.solver import solve_saddle_point
from tests.numerics import assert_close
from tests.paths.conftest import problem, tiny


def _path_data(H=(2, 2), P=10, n_test=8) -> PathData:
    net, x, y, gram = tiny(H, P=P + n_test)
    xit = gram.xit
    tr, te = torch.arange(P), torch.arange(P, P + n_test)
    ys = np.where(np.arange(P + n_test) % 2 == 0, 1.0, -1.0)
    return PathData(net.cfg, PathGram(xit[tr]), xit[te], ys[:P], ys[P:], {}, "tiny")


# --- S9 -----------------------------------------------------------------------------------------------------------
@pytest.mark.numerics
def test_scalar_renormalisation_is_the_gp_at_matched_temperature() -> None:
    data = _path_data()
    prob = problem(data.gram, data.y_train, (2, 2), N=3.0, T=0.05)
    sp = solve_saddle_point(prob, tol=1e-10)
    rec = renorm_record(data, prob, sp.U)
    # the scalar solve's stop (matrix worst 6.7e-12, 1.5e+04x inside)
    assert_close(rec["scalar_max_grad"], 0.0, atol=1e-7, label="S9 scalar max|grad|", kind="observed")
    assert rec["u_scalar"][0] != pytest.approx(1.0, abs=1e-3)  # a real rescaling, not the GP point itself
    # an identity up to the solves' rounding (matrix worst 6.4e-16, 1.2e+07x inside)
    assert_close(rec["rms_pred_scalar_vs_gp_matched_T"], 0.0, atol=1e-8 * rec["rms_pred_gp"],
                 label="S9 scalar = GP at matched T", kind="observed")  # fmt: skip
    assert rec["rms_pred_scalar_vs_gp"] > 1e-4 * rec["rms_pred_gp"]  # at the same finite T they differ
    assert rec["rms_pred_matrix_vs_gp"] > 1e-3 * rec["rms_pred_gp"]  # the matrix changes the predictor


def test_scalar_predictor_tends_to_the_gp_as_T_goes_to_zero() -> None:
    data = _path_data()
    U_gp = gp_U(data.cfg.n_paths)
    gaps = []
    for T in (1e-2, 1e-6, 1e-10):
        f_s = predict(3.0 * U_gp, data.gram, data.y_train, T, data.xit_test).mean
        f_g = predict(U_gp, data.gram, data.y_train, T, data.xit_test).mean
        gaps.append(float(np.abs(f_s - f_g).max()))
    # not a rounding tolerance: the gap is a property of the limit, linear in T (8.2 T here, 8.2e-10 at T = 1e-10)
    assert gaps[0] > gaps[1] > gaps[2] and gaps[2] < 1e-8


@pytest.mark.numerics
@pytest.mark.parametrize("L", [1, 2])
def test_H1_scalar_saddle_is_the_full_saddle(L: int) -> None:
    """With one path the scalar restriction loses nothing: u_1 = U (and the H = 1 root finder)."""
    H = (1,) * L
    _, _, y, gram = tiny(H)
    prob = problem(gram, y, H, N=4.0, T=0.1)
    u, _, g = scalar_saddle(prob)
    ref = scalar_reference(gram.path_kernels()[0, 0], torch.tensor(y), 0.1, gram.P / 4.0, L, "chain")
    # solver against root finder and against the full solver (matrix worst 6.1e-11, 1.6e+02x inside)
    assert_close(g, 0.0, atol=1e-8, label=f"H1 scalar max|grad| L{L}", kind="observed")
    assert_close(u[0], ref, rtol=1e-7, label=f"H1 scalar vs root L{L}", kind="observed")
    full = float(solve_saddle_point(prob, tol=1e-10).U[0, 0])
    assert_close(u[0], full, rtol=1e-7, label=f"H1 scalar vs full saddle L{L}", kind="observed")


# --- S8 -----------------------------------------------------------------------------------------------------------
def test_augment_block_structure() -> None:
    xit = torch.randn(3, 2, 4, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    aug = augment(xit, 3)
    assert aug.shape == (9, 6, 4)
    for mu in range(3):
        for a in range(3):
            for pi in range(2):
                for m in range(3):
                    expect = xit[mu, pi] if a == m else torch.zeros(4, dtype=torch.float64)
                    torch.testing.assert_close(aug[mu * 3 + a, pi * 3 + m], expect, rtol=0, atol=0)


@pytest.mark.numerics
@pytest.mark.parametrize("H", [(2,), (2, 1), (2, 2)])
def test_multi_output_kernel_equals_direct_covariance(H: tuple[int, ...]) -> None:
    """K_{(mu m),(nu m')} = sum U^{(pi m),(pi' m')} C^{pi pi'}_{mu nu} equals sigma0^2 J J^T, J the Jacobian of
    the network outputs f_m(x_mu) (readout a = A[m]) in V^(0), computed by the layer recursion [N1-N4]."""
    M, P, N = 3, 5, 4
    net, x, y, _ = tiny(H, P=P)
    cfg = net.cfg.with_widths(N)
    N0 = x.shape[-1]
    gram = PathGram(augment(scaled_paths(net.paths(x)), M))
    target = MultiOutputTarget(cfg, gram, np.zeros(P * M), 0.1, M)
    theta = target.prior_draw(1, torch.Generator().manual_seed(3))
    U = target.order_parameters(theta)[0][0][0]
    w = target.unpack(theta[0])
    A = w["a"].reshape(M, N)
    rows = []
    for mu in range(P):
        for m in range(M):

            def f(V0: torch.Tensor, mu: int = mu, m: int = m) -> torch.Tensor:
                return net.forward(x[mu : mu + 1], {"V0": V0, "V": w["V"], "a": A[m]})[0]

            V0 = torch.zeros(N, N0, dtype=torch.float64)
            rows.append(torch.autograd.functional.jacobian(f, V0).reshape(-1))
    J = torch.stack(rows)
    # the kernel against autograd's Jacobian, float64 (matrix worst 4.4e-16, 3.7e+04x inside)
    assert_close(gram.kernel(U), J @ J.T, rtol=1e-10, atol=1e-12, label=f"S8 kernel vs J J^T {H}", kind="observed")


@pytest.mark.numerics
def test_multi_output_gradient_equals_autograd_and_gp_point_is_stationary() -> None:
    M = 2
    _, _, y, g1 = tiny((2, 2))
    gram = PathGram(augment(g1.xit, M))
    Y = torch.tensor(np.stack([y, np.roll(y, 1)], 1).reshape(-1))
    prob = Problem(gram, Y, 0.1, [2, 2], (4.0, 5.0, 3.0), (1.0, 1.3, 0.8, 1.2), "chain", outputs=M)
    assert prob.sizes() == [8, 4, 2]
    # exactly 0 at the GP point: float64 rounding (matrix worst 2.2e-16, 4.5e+03x inside)
    assert_close(entropy_gp_gradient(prob), 0.0, atol=1e-12, label="S8 entropy gradient at GP", kind="observed")
    rng = np.random.default_rng(0)
    Us = []
    for n in prob.sizes():
        B = torch.tensor(rng.standard_normal((n, n)))
        Us.append((B @ B.T / n + torch.eye(n, dtype=torch.float64)).requires_grad_(True))
    ev = evaluate(prob, Us)
    auto = torch.autograd.grad(action_value(prob, Us), Us)
    for l, (g, a) in enumerate(zip(ev.grads, auto)):  # matrix worst 8e-16, 1.2e+05x inside
        assert_close(g, 0.5 * (a + a.T), atol=1e-10, label=f"S8 gradient vs autograd {l}", kind="observed")
    sp = solve_saddle_point(prob, tol=1e-9)
    assert sp.converged and sp.chain[-1].shape == (2, 2)


@pytest.mark.numerics
def test_one_output_reduces_to_the_single_output_theory() -> None:
    _, _, y, gram = tiny((2, 2))
    one = solve_saddle_point(problem(gram, y, (2, 2), N=4.0), tol=1e-10)
    aug = Problem(PathGram(augment(gram.xit, 1)), torch.tensor(y), 0.1, [2, 2], (4.0,) * 3, (1.0,) * 4, outputs=1)
    # two solves to max|grad| < 1e-10 of the same problem in another layout (matrix worst 0)
    assert_close(solve_saddle_point(aug, tol=1e-10).U, one.U, atol=1e-12, label="S8 one output", kind="observed")


def test_markov_targets_are_signs_of_observed_states() -> None:
    from attnlab.paths.tasks.markov import markov_data

    x, y = markov_data(6, 5)
    Y = markov_targets(x, y, 4)
    assert Y.shape == (6, 4) and set(np.unique(Y)) <= {-1.0, 1.0}
    np.testing.assert_array_equal(Y[:, 0], y)
    obs = np.sign(x[:, 1:, :100].sum(-1) - x[:, 1:, 100:200].sum(-1))
    np.testing.assert_array_equal(Y[:, 1], obs[:, -1])
    np.testing.assert_array_equal(Y[:, 2], obs[:, 0])


# --- bad inputs ---------------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["solve", "--renorm", "vector"], "unknown --renorm 'vector'; valid: matrix, scalar"),
        (["solve", "--renorm", "scalar", "--N", "inf"], "--renorm scalar: needs a finite --N"),
        (["solve", "--outputs", "5"], "--outputs must be an integer in [1, 4], got 5"),
        (["solve", "--outputs", "2", "--task", "digits"], "--outputs 2: multiple outputs are built on the Markov"),
        (["solve", "--outputs", "2", "--renorm", "scalar"], "--renorm scalar: supports one output only"),
        (["solve", "--outputs", "2", "--method", "fixed_point"], "--outputs: use --method newton or lbfgs"),
        (["sample", "--outputs", "2", "--sampler", "mala"], "--outputs: multi-output sampling uses --sampler hmc"),
    ],
)
def test_bad_claims_inputs_one_line_nothing_changed(
    tmp_path: Path, capsys: pytest.CaptureFixture, argv: list[str], message: str
) -> None:
    keep = tmp_path / "earlier.txt"
    keep.write_text("keep me\n")
    before = (keep.read_bytes(), keep.stat().st_mtime_ns)
    capsys.readouterr()
    assert main(["paths", *argv, "--out", str(tmp_path / "r")]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("attnlab: error: " + message), err
    assert (keep.read_bytes(), keep.stat().st_mtime_ns) == before and not (tmp_path / "r").exists()
    assert math.isfinite(1.0)


# --- S6 -----------------------------------------------------------------------------------------------------------
def test_offdiag_fraction_on_constructed_matrices() -> None:
    from attnlab.paths.repro.verdicts import offdiag_fraction

    assert offdiag_fraction(np.diag([1.0, 2.0, 3.0])) == 0.0
    U = np.array([[3.0, 4.0], [4.0, 0.0]])
    # sqrt(32)/sqrt(41) = 0.88: a few roundings of numbers below 41, within 4u·0.88 < 1e-15 each way
    assert offdiag_fraction(U) == pytest.approx(math.sqrt(32.0) / math.sqrt(41.0), abs=1e-15)


@pytest.mark.numerics
def test_three_layer_theory_converges_and_gp_is_diagonal() -> None:
    H = (2, 2, 2)
    _, _, y, gram = tiny(H, P=8)
    prob = problem(gram, y, H, N=4.0, T=0.1)
    sp = solve_saddle_point(prob, tol=1e-9)
    assert sp.converged and sp.U.shape == (8, 8) and len(sp.chain) == 3
    big = solve_saddle_point(problem(gram, y, H, N=1e9, T=0.1), tol=1e-9)
    # U* - I = O(1/N) = O(1e-9) plus the solver's stop (matrix worst 1.7e-08, 59x inside)
    assert_close(big.U, np.eye(8), atol=1e-6, label="three layers U at N = 1e9", kind="observed")


# --- S7 -----------------------------------------------------------------------------------------------------------
@pytest.mark.numerics
def test_gd_ensemble_reaches_the_same_posterior_mode_from_every_start() -> None:
    """On a tiny problem every run reaches the MAP (the same loss; U is invariant under the weights' symmetries,
    so every run's U agrees), and the loss fell from the prior draw."""
    from attnlab.paths.sampling.gd_ensemble import gd_ensemble, run_spread
    from attnlab.paths.sampling.sampler import FullTarget

    data = _path_data(H=(2,), P=8)
    # 3000 steps: at 1500 one run's loss was 1.1e-7 (relative) above the others, within 10x of the rtol 1e-6 below;
    # at 3000 the runs agree to 3e-16 (and their U to 1e-11), at the same test time
    r = gd_ensemble(data, 3, 0.05, runs=4, steps=3000, lr=0.05, seed=0)
    assert r["U_runs"].shape == (4, 2, 2) and r["U_gd"].shape == (2, 2)
    # U_gd is that mean (the same numpy reduction: assert_allclose's default rtol 1e-7 never needed)
    np.testing.assert_allclose(r["U_gd"], r["U_runs"].mean(0))
    # every run at the same mode (matrix worst 3.6e-15, 3.8e+09x inside)
    assert_close(r["final_loss"], r["final_loss"].min(), rtol=1e-6, label="S7 GD ensemble losses", kind="observed")
    assert run_spread(r["U_runs"]) < 1e-3 and float(np.trace(r["U_gd"])) > 0.1
    target = FullTarget(data.cfg.with_widths(3), data.gram, data.y_train, 0.05)
    lp0, _ = target.log_prob(target.prior_draw(4, torch.Generator().manual_seed(0)))
    assert np.all(-lp0.numpy() > r["final_loss"])


# --- S10 ----------------------------------------------------------------------------------------------------------
@pytest.mark.numerics
def test_precomputed_maps_equal_the_qk_handoff_and_rows_sum_to_one() -> None:
    from attnlab.paths.pruning.gradient_descent import GDNetwork
    from attnlab.paths.pruning.plugin import handoff_gap, precomputed_config, trained_maps
    from attnlab.paths.tasks.digits import N0, digit_episodes

    model = GDNetwork(N0, H=2, L=2, N=8, d_qk=4, seed=1)
    x, _ = digit_episodes(6, "test")
    maps = trained_maps(model, x)
    assert len(maps) == 2 and maps[0].shape == (6, 2, 12, 12)
    # a softmax row of n = 12 float64 weights sums to 1 within (2n + 2)u <= 4nu (see tests/paths/test_network T2)
    assert_close(maps[1].sum(-1), 1.0, atol=4 * 12 * 2.0**-53, label="S10 map row sums", kind="bound")
    cfg = precomputed_config(model, maps)
    assert cfg.layers[0][1].kind == "precomputed" and cfg.readout == model.readout
    # the same maps recomputed through the hand-off (matrix worst 2.2e-16, 4.5e+03x inside)
    assert_close(handoff_gap(model, x), 0.0, atol=1e-12, label="S10 hand-off gap", kind="observed")


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["solve", "--attention", "learned"], "unknown --attention 'learned'; valid: task, precomputed"),
        (["solve", "--attention", "precomputed", "--task", "digits"], "--attention precomputed: give the trained"),
        (["solve", "--attention", "precomputed", "--from", "."], "--attention precomputed: the trained network"),
        (["solve", "--from", "."], "--from: only with --attention precomputed"),
        (["ensemble", "--runs", "1"], "--runs must be an integer >= 2, got 1"),
        (["ensemble", "--N", "2.5"], "--N: gradient-descent training needs a positive integer width, got 2.5"),
        (["ensemble", "--lr", "0"], "--lr must be a finite positive number, got 0.0"),
        (["ensemble", "--sampled", "nowhere"], "--sampled: nowhere holds no U_hat.npy"),
    ],
)
def test_bad_plugin_and_ensemble_inputs(
    tmp_path: Path, capsys: pytest.CaptureFixture, argv: list[str], message: str
) -> None:
    test_bad_claims_inputs_one_line_nothing_changed(tmp_path, capsys, argv, message)


def test_plugin_from_a_folder_without_a_model_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    argv = ["solve", "--attention", "precomputed", "--task", "digits", "--from", str(empty)]
    test_bad_claims_inputs_one_line_nothing_changed(tmp_path, capsys, argv, f"--from: {empty} holds no gd_model")


def test_cli_renorm_scalar_and_outputs_runs_and_verdicts(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    from attnlab.paths.repro.verdicts import verdict_S9

    small = ["--P", "20", "--n-test", "40", "--temperature", "0.1"]
    out = tmp_path / "s9"
    assert main(["paths", "solve", "--renorm", "scalar", *small, "--out", str(out)]) == 0
    assert f"run folder: {out}" in capsys.readouterr().out
    U = np.load(out / "U.npy")
    np.testing.assert_allclose(U, U[0, 0] * np.eye(4), atol=1e-12)  # the scalar U = u Sigma^2 I is what is saved
    number, _, why = verdict_S9(out)
    assert "= GP at T/u_1 to" in why and -1 <= number <= 1
    out = tmp_path / "s8"
    assert main(["paths", "solve", "--outputs", "3", *small, "--out", str(out)]) == 0
    m = json.loads((out / "metrics.json").read_text())
    assert np.load(out / "U.npy").shape == (12, 12) and len(m["accuracy_per_output"]) == 3
    assert np.asarray(m["U_outputs"]).shape == (3, 3)
    assert json.loads((out / "paths.json").read_text())["path_names"][1] == "good>uniform|last"


def test_verdicts_read_saved_metrics(tmp_path: Path) -> None:
    from attnlab.paths.repro.verdicts import verdict_S7, verdict_S9, verdict_S10

    def folder(name: str, metrics: dict) -> Path:
        (tmp_path / name).mkdir()
        (tmp_path / name / "metrics.json").write_text(json.dumps(metrics))
        return tmp_path / name

    cmp = {"u_scalar": [2.0], "rms_pred_scalar_vs_gp_matched_T": 1e-15, "rms_pred_gp": 1.0,
           "rms_pred_scalar_vs_gp": 0.1, "accuracy_scalar": 0.8, "accuracy_gp": 0.8,
           "accuracy_matrix": 0.9}  # fmt: skip
    number, met, _ = verdict_S9(folder("s9", {"renorm_comparison": cmp}))
    assert met and number == pytest.approx(0.1)
    cmp_bad = cmp | {"rms_pred_scalar_vs_gp_matched_T": 1e-3}
    assert not verdict_S9(folder("s9b", {"renorm_comparison": cmp_bad}))[1]
    ens = {"rel_frob_err_gd": 0.5, "runs": 16, "N": 10, "run_spread": 0.01, "accuracy_U_gd": 0.8,
           "theory": {"accuracy": 0.9}}  # fmt: skip
    assert verdict_S7(folder("s7", ens)) == (0.5, False, verdict_S7(tmp_path / "s7")[2])
    assert verdict_S7(folder("s7b", ens | {"rel_frob_err_gd": 0.1}))[1]
    plug = {"accuracy": 0.6, "accuracy_gp": 0.55, "network_accuracy": 0.7, "N": 20, "T": 0.1}
    number, met, why = verdict_S10(folder("s10", plug))
    assert met and number == pytest.approx(0.05) and "network itself 0.700" in why


def test_verdict_s6_reads_a_sample_without_r_hat(tmp_path):
    """A sample with too few draws saves rhat_max = null: S6 is judged (off-diagonal growth, error, gates) and
    says R-hat is n/a instead of failing on the format."""
    import json

    import numpy as np

    from attnlab.paths.repro.verdicts import S6_ERR, verdict_S6

    (tmp_path / "sweep").mkdir()
    (tmp_path / "sample").mkdir()
    Us = [np.diag([1.0, 1.0]), np.array([[1.0, 0.4], [0.4, 1.0]])]
    lines = [json.dumps({"alpha": a, "U": U.tolist()}) for a, U in zip((0.1, 2.0), Us)]
    (tmp_path / "sweep" / "points.jsonl").write_text("\n".join(lines) + "\n")
    sample = {"rel_frob_err": S6_ERR / 2, "converged": False, "N": 8, "alpha": 2.0, "rhat_max": None}
    (tmp_path / "sample" / "metrics.json").write_text(json.dumps(sample))
    err, met, why = verdict_S6(tmp_path)
    assert err == S6_ERR / 2 and not met  # the sampler's gates failed
    assert "R-hat n/a: too few draws" in why and "0.000 at alpha = 0.1" in why
