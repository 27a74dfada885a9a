"""Theory, solver and predictor (spec §5-6; tests T4-T10 and the issue's fast tests)."""

import math

import numpy as np
import pytest
import torch
from scipy.optimize import brentq, minimize_scalar

from attnlab.paths.theory.action import U_a_closed_form, action_value, entropy_gp_gradient, evaluate, scalar_reference
from attnlab.paths.theory.predictor import gp_U, predict
from attnlab.paths.theory.solver import solve_saddle_point
from tests.numerics import assert_close
from tests.paths.conftest import problem, tiny


@pytest.mark.numerics
@pytest.mark.parametrize("form", ["chain", "simple"])
def test_gp_point_is_stationary_for_the_entropy(form):  # T4 (first half)
    _, _, y, gram = tiny((2, 2))
    prob = problem(gram, y, (2, 2), N=7.0, form=form, variances=[1.0, 1.3, 0.7, 1.1])
    # exactly 0 at the GP point: what is left is float64 rounding (matrix worst 2.2e-16, 4.5e+05x inside)
    assert_close(entropy_gp_gradient(prob), 0.0, atol=1e-10, label=f"T4 entropy gradient at GP {form}", kind="observed")


@pytest.mark.numerics
def test_solver_at_huge_width_returns_gp_point():  # T4 (second half)
    _, _, y, gram = tiny((2, 2))
    sp = solve_saddle_point(problem(gram, y, (2, 2), N=1e12), hessian=False)
    # U* - I = O(1/N) = O(1e-12); the solver's own distance is set by its stop (matrix worst 5.1e-12, 1.9e+03x inside)
    assert_close(sp.U, np.eye(4), atol=1e-8, label="T4 U at N = 1e12", kind="observed")


@pytest.mark.numerics
def test_U_a_closed_form_equals_bounded_minimiser():  # T5
    for H_L, N_L, N_a, trace in [(2, 10.0, 10.0, 3.0), (1, 5.0, 20.0, 0.4), (4, 30.0, 7.0, 9.0)]:
        s2L, s2a = 1.3, 0.8
        f = lambda u, N_a=N_a, N_L=N_L, H_L=H_L, trace=trace, s2L=s2L, s2a=s2a: (
            N_a * (u / s2a - math.log(u)) + N_L * (trace / (u * s2L) + H_L * math.log(u))
        )
        df = lambda u, N_a=N_a, N_L=N_L, H_L=H_L, trace=trace, s2L=s2L, s2a=s2a: (
            N_a / s2a - N_a / u - N_L * trace / (s2L * u**2) + N_L * H_L / u
        )
        rough = minimize_scalar(f, bounds=(1e-6, 1e3), method="bounded", options={"xatol": 1e-13}).x
        # a bounded minimiser of f is good to ~sqrt(eps) only (measured 1.5e-8, within 10x of the 1e-7 once used);
        # the root of f' bracketed within 1e-4 of it is good to eps: the spec's 1e-10 holds (measured 4e-16)
        ref = brentq(df, rough * (1 - 1e-4), rough * (1 + 1e-4), xtol=1e-15, rtol=1e-15)
        cf = float(U_a_closed_form(torch.tensor(trace, dtype=torch.float64), H_L, N_L, N_a, s2L, s2a))
        # spec T5's 1e-10 (matrix worst 4.4e-16, 2.3e+05x inside)
        assert_close(cf, ref, atol=1e-10 * max(1, ref), label="T5 closed form vs root of f'", kind="observed")
        # the closed form is an exact root of the stationarity condition (matrix worst 1.4e-14, 7e+03x inside)
        assert_close(df(cf), 0.0, atol=1e-10, label="T5 f'(closed form)", kind="observed")


@pytest.mark.numerics
@pytest.mark.parametrize("form", ["chain", "simple"])
def test_analytic_gradient_equals_autograd_and_fd(form):  # T7
    _, _, y, gram = tiny((2, 2))
    prob = problem(gram, y, (2, 2), N=4.0, form=form)
    rng = np.random.default_rng(0)
    Us = []
    for n in prob.sizes():
        A = torch.tensor(rng.standard_normal((n, n)))
        Us.append((A @ A.T / n + torch.eye(n, dtype=torch.float64)).requires_grad_(True))
    ev = evaluate(prob, Us)
    auto = torch.autograd.grad(action_value(prob, Us), Us)
    for l, (g, a) in enumerate(zip(ev.grads, auto)):  # two float64 evaluations (matrix worst 7.8e-16, 1.3e+05x inside)
        assert_close(g, 0.5 * (a + a.T), atol=1e-10, label=f"T7 analytic vs autograd {form} {l}", kind="observed")
    # central finite differences along a random symmetric direction
    h = 1e-5
    for l, U in enumerate(Us):
        D = torch.tensor(rng.standard_normal(U.shape))
        D = D + D.T
        plus = [u.detach() + (h * D if k == l else 0) for k, u in enumerate(Us)]
        minus = [u.detach() - (h * D if k == l else 0) for k, u in enumerate(Us)]
        fd = float(action_value(prob, plus) - action_value(prob, minus)) / (2 * h)
        an = float((ev.grads[l].detach() * D).sum())
        # truncation h^2/6 |S'''| plus cancellation u |S| / h (matrix worst 2.7e-09, 9.6e+02x inside)
        assert_close(fd, an, atol=1e-6 * max(1.0, abs(an)), label=f"T7 finite difference {form} {l}", kind="observed")


@pytest.mark.numerics
@pytest.mark.parametrize("L", [1, 2])
@pytest.mark.parametrize("form", ["chain", "simple"])
def test_H1_reduction_equals_root_finder(L, form):  # T8
    _, _, y, gram = tiny((1,) * L, P=12)
    for N in [3.0, 30.0]:
        prob = problem(gram, y, (1,) * L, N=N, T=0.05, form=form)
        # |U - ref| ~ max|grad| / curvature: at the default tol 1e-8 Newton stopped at 7.7e-9, 3.4e-9 from ref
        # (within 10x of 1e-8); at 1e-11 (Newton's floor is below 1e-14 here) it is <= 6e-13
        sp = solve_saddle_point(prob, tol=1e-11, hessian=False)
        ref = scalar_reference(gram.path_kernels()[0, 0], prob.Y, 0.05, prob.alpha, L, form)
        assert sp.converged  # spec T8's 1e-8 (matrix worst 5.8e-13, 1.7e+04x inside)
        assert_close(sp.U[0, 0], ref, atol=1e-8 * max(1, ref), label=f"T8 solver vs root L{L} {form}", kind="observed")
    small = solve_saddle_point(problem(gram, y, (1,) * L, N=1e10, T=0.05, form=form), hessian=False)
    # spec T8 (alpha = 1.2e-9 here; matrix worst 2e-11, 4.9e+02x inside)
    assert_close(small.U[0, 0], 1.0, atol=1e-8, label=f"T8 U at N = 1e10 L{L} {form}", kind="observed")


@pytest.mark.numerics
def test_predictor_at_gp_point_is_gp_regression():  # T9
    _, x, y, gram = tiny((2, 2))
    T = 0.1
    Kgp = sum(gram.xit[:, p] @ gram.xit[:, p].T for p in range(4))
    pred = predict(gp_U(4), gram, y, T, gram.xit)
    A = torch.linalg.solve(Kgp + T * torch.eye(10, dtype=torch.float64), torch.tensor(y))
    # two float64 solves of K + T I (matrix worst 2.2e-15, 4.5e+04x inside)
    assert_close(pred.mean, (Kgp @ A).numpy(), atol=1e-10, label="T9 predictor mean", kind="observed")
    var = torch.diag(Kgp - Kgp @ torch.linalg.solve(Kgp + T * torch.eye(10, dtype=torch.float64), Kgp))
    assert_close(pred.var, var.numpy(), atol=1e-10, label="T9 predictor variance", kind="observed")
    assert np.all(pred.var >= 0)


@pytest.mark.numerics
def test_methods_agree_and_solution_is_spd_with_pd_hessian():  # T10
    _, _, y, gram = tiny((2, 2))
    prob = problem(gram, y, (2, 2), N=5.0, T=0.1)
    # |U - U*| <= max|grad| / lambda_min(Hessian) = 26 max|grad| here: at the spec's 1e-8 L-BFGS stood 3.3e-8 from
    # Newton (within 10x of 1e-7), so every method runs to 1e-10 (L-BFGS stalls near 4e-10 and is Newton-polished;
    # measured 1.8e-9 for fixed_point, 5e-15 for lbfgs) and the reference to 1e-12 (Newton's floor: 2e-16)
    tols = {"newton": 1e-12, "lbfgs": 1e-10, "fixed_point": 1e-10}
    sols = {m: solve_saddle_point(prob, m, tol=t, max_iter=3000) for m, t in tols.items()}
    ref = sols["newton"]
    assert ref.converged and ref.hessian_min_eig > 0  # max_grad < 1e-12 by convergence; 1e-10 below is T10's
    assert_close(
        ref.max_grad, 0.0, atol=1e-10, label="T10 reference max|grad|", kind="observed"
    )  # matrix worst 7.3e-16, 1.4e+05x inside
    for l, U in enumerate(ref.chain):  # matrix worst 0
        assert_close(U, U.T, atol=1e-12, label=f"T10 U symmetric {l}", kind="observed")
        assert np.linalg.eigvalsh(U)[0] > 0
    for m, s in sols.items():
        assert s.converged, m  # spec T10's 1e-7 (matrix worst 1.8e-09, 55x inside)
        assert_close(s.U, ref.U, atol=1e-7, label=f"T10 {m} vs newton", kind="observed")


@pytest.mark.numerics
def test_stalled_lbfgs_is_polished_by_newton_to_the_spec_tolerance(monkeypatch):  # T10, any floating-point path
    """An L-BFGS whose line search stops above tol (1.2e-8 against 1e-8 on one CPU) must still reach tol: here the
    stall is forced by stopping L-BFGS at 1e-6, and Newton must finish to the spec's 1e-8 at the Newton point."""
    from attnlab.paths.theory import solver as solver_module

    real = solver_module._lbfgs
    monkeypatch.setattr(solver_module, "_lbfgs", lambda prob, par, th, stop, *a: real(prob, par, th, 1e-6, *a))
    _, _, y, gram = tiny((2, 2))
    prob = problem(gram, y, (2, 2), N=5.0, T=0.1)
    s = solve_saddle_point(prob, "lbfgs", tol=1e-8, max_iter=3000)
    assert s.converged and s.max_grad < 1e-8
    assert "stalled" in s.note and any(row["phase"] == "newton_polish" for row in s.trace)
    ref = solve_saddle_point(prob, "newton", tol=1e-10, max_iter=3000)
    # spec T10's 1e-7 (matrix worst 0)
    assert_close(s.U, ref.U, atol=1e-7, label="T10 polished lbfgs vs newton", kind="observed")


@pytest.mark.numerics
@pytest.mark.parametrize("form", ["chain", "simple"])
def test_numpy_fast_path_equals_torch_action(form):
    from attnlab.paths.theory.fast import FastAction

    _, _, y, gram = tiny((2, 2))
    prob = problem(gram, y, (2, 2), N=4.0, form=form)
    rng = np.random.default_rng(1)
    Us = []
    for n in prob.sizes():
        A = rng.standard_normal((n, n))
        Us.append(A @ A.T / n + np.eye(n))
    S, grads = FastAction(prob)(Us)
    ev = evaluate(prob, [torch.tensor(u) for u in Us])
    # numpy and torch float64: the same formula in another order (matrix worst 1.2e-15, 8.6e+02x inside)
    assert_close(S, float(ev.S), atol=1e-12 * max(1, abs(S)), label=f"fast action vs torch {form}", kind="observed")
    for l, (g, h) in enumerate(zip(grads, ev.grads)):
        assert_close(g, h.numpy(), atol=1e-12, label=f"fast gradient vs torch {form} {l}", kind="observed")
