"""Network, paths and kernels (spec §3-4; tests T1-T3, T15)."""

import numpy as np
import pytest
import torch

from attnlab.paths.networks.architecture import HeadSpec, PathConfig, PathNetwork
from attnlab.paths.networks.kernels import PathGram, cross_kernel
from tests.numerics import assert_close
from tests.paths.conftest import tiny

U64 = 2.0**-53  # float64 unit roundoff


@pytest.mark.numerics
def test_layer_form_equals_path_form():  # T1
    for H, readout in [((2, 2), "last"), ((2, 1), "mean"), ((3,), "first")]:
        net, x, _, _ = tiny(H, readout=readout)
        w = net.init_weights(x.shape[-1], torch.Generator().manual_seed(1))
        f1, f2 = net.forward(x, w), net.forward_paths(x, w)
        # the same float64 network summed layer by layer or path by path (matrix worst 1.3e-15, 7.5e+04x inside)
        assert_close(f1, f2, atol=1e-10, label=f"T1 layer vs path form {H} {readout}", kind="observed")


@pytest.mark.numerics
def test_attention_rows_sum_to_one_and_depend_only_on_x():  # T2
    net, x, _, _ = tiny((2, 2))
    A = net.attention(x)
    for a in A:
        assert a.shape == (x.shape[0], 2, x.shape[1], x.shape[1])
        # a row of n softmax weights: each exp(s - max) / sum within (n + 3)u of itself (exp's 2u, the sum's
        # (n - 1)u, the division's u), their sum adds (n - 1)u: |row sum - 1| <= (2n + 2)u <= 4nu (was 1e-12)
        n = a.shape[-1]
        assert_close(a.sum(-1), 1.0, atol=4 * n * U64, label="T2 attention row sums", kind="bound")
    # layer 2 is softmax(x^T W x) of the raw x, not of the layer-1 output x^(1): recompute it by hand
    for h, head in enumerate(net.cfg.layers[1]):
        W = torch.as_tensor(head.W)
        score = (x @ W @ x.transpose(1, 2)).transpose(1, 2)  # [P, query s, key t] = x_t^T W x_s
        # the bilinear scores in another order, through the softmax (matrix worst 0)
        assert_close(A[1][:, h], torch.softmax(score, -1), atol=1e-12, label="T2 layer-2 softmax by hand",
                     kind="observed")  # fmt: skip
    assert not torch.allclose(A[0][:, 0], A[1][:, 0])  # the two layers' heads really differ


@pytest.mark.numerics
def test_qk_head_matches_manual_softmax():
    rng = np.random.default_rng(3)
    Q, K = rng.standard_normal((3, 5)), rng.standard_normal((3, 5))
    net = PathNetwork(PathConfig([[HeadSpec("qk", Q=Q, K=K)]]))
    x = torch.tensor(rng.standard_normal((2, 4, 5)))
    a = net.attention(x)[0][:, 0]
    q, k = x.numpy() @ Q.T, x.numpy() @ K.T
    s = np.einsum("psd,ptd->pst", q, k) / np.sqrt(3)
    e = np.exp(s - s.max(-1, keepdims=True))
    # numpy against torch, float64 (matrix worst 2.2e-16, 4.5e+03x inside)
    assert_close(a.numpy(), e / e.sum(-1, keepdims=True), atol=1e-12, label="qk softmax by hand", kind="observed")


@pytest.mark.numerics
def test_gram_mode_equals_factor_mode_and_direct():  # T3
    net, x, _, gram = tiny((2, 2))
    fac = PathGram(gram.xit, mode="factor")
    U = torch.tensor(np.random.default_rng(2).standard_normal((4, 4)))
    U = U @ U.T
    direct = sum(U[p, q] * gram.xit[:, p] @ gram.xit[:, q].T for p in range(4) for q in range(4))
    # K_mn = sum_pq U_pq sum_d xi_mpd xi_nqd: a float64 sum of n = 16·N0 products (two roundings each), so any
    # two orders differ by at most 2(n + 2)u·sum|terms| (Higham's gamma_n, both ways); the same for the contraction
    # G_pq = sum_mn B_mn sum_d xi_mpd xi_nqd over n = 100·N0 terms (was atol 1e-12 for both)
    xi = gram.xit.abs()
    n_k, n_g = 16 * xi.shape[-1], 100 * xi.shape[-1]
    k_mag = float(torch.einsum("pq,mpd,nqd->mn", U.abs(), xi, xi).max())
    k_tol = 2 * (n_k + 2) * U64 * k_mag
    assert_close(gram.kernel(U), direct, atol=k_tol, label="T3 gram kernel vs direct", kind="bound")
    assert_close(fac.kernel(U), direct, atol=k_tol, label="T3 factor kernel vs direct", kind="bound")
    B = torch.tensor(np.random.default_rng(4).standard_normal((10, 10)))
    G = torch.stack(
        [torch.stack([(B * (gram.xit[:, p] @ gram.xit[:, q].T)).sum() for q in range(4)]) for p in range(4)]
    )
    g_tol = 2 * (n_g + 2) * U64 * float(torch.einsum("mn,mpd,nqd->pq", B.abs(), xi, xi).max())
    assert_close(gram.contract(B), G, atol=g_tol, label="T3 gram contraction vs direct", kind="bound")
    assert_close(fac.contract(B), G, atol=g_tol, label="T3 factor contraction vs direct", kind="bound")
    assert_close(cross_kernel(U, gram.xit, gram.xit), direct, atol=k_tol, label="T3 cross kernel", kind="bound")


def test_effective_weights_give_order_parameters():  # N8: U = V_eff V_eff^T / N_1, prior mean Sigma^2 I
    net, x, _, _ = tiny((2, 2))
    g = torch.Generator().manual_seed(0)
    Us = [net.order_parameters(net.init_weights(6, g))[0][0] for _ in range(400)]
    Ubar = torch.stack(Us).mean(0)
    assert torch.allclose(Ubar, torch.eye(4, dtype=torch.float64), atol=0.35)
