"""Network, paths and kernels (spec §3-4; tests T1-T3, T15)."""

import numpy as np
import torch

from attnlab.paths.networks.architecture import HeadSpec, PathConfig, PathNetwork
from attnlab.paths.networks.kernels import PathGram, cross_kernel
from tests.paths.conftest import tiny


def test_layer_form_equals_path_form():  # T1
    for H, readout in [((2, 2), "last"), ((2, 1), "mean"), ((3,), "first")]:
        net, x, _, _ = tiny(H, readout=readout)
        w = net.init_weights(x.shape[-1], torch.Generator().manual_seed(1))
        f1, f2 = net.forward(x, w), net.forward_paths(x, w)
        assert torch.allclose(f1, f2, atol=1e-10, rtol=0)


def test_attention_rows_sum_to_one_and_depend_only_on_x():  # T2
    net, x, _, _ = tiny((2, 2))
    A = net.attention(x)
    for a in A:
        assert a.shape == (x.shape[0], 2, x.shape[1], x.shape[1])
        assert torch.allclose(a.sum(-1), torch.ones((), dtype=a.dtype), atol=1e-12)
    # layer 2 is softmax(x^T W x) of the raw x, not of the layer-1 output x^(1): recompute it by hand
    for h, head in enumerate(net.cfg.layers[1]):
        W = torch.as_tensor(head.W)
        score = (x @ W @ x.transpose(1, 2)).transpose(1, 2)  # [P, query s, key t] = x_t^T W x_s
        assert torch.allclose(A[1][:, h], torch.softmax(score, -1), atol=1e-12)
    assert not torch.allclose(A[0][:, 0], A[1][:, 0])  # the two layers' heads really differ


def test_qk_head_matches_manual_softmax():
    rng = np.random.default_rng(3)
    Q, K = rng.standard_normal((3, 5)), rng.standard_normal((3, 5))
    net = PathNetwork(PathConfig([[HeadSpec("qk", Q=Q, K=K)]]))
    x = torch.tensor(rng.standard_normal((2, 4, 5)))
    a = net.attention(x)[0][:, 0]
    q, k = x.numpy() @ Q.T, x.numpy() @ K.T
    s = np.einsum("psd,ptd->pst", q, k) / np.sqrt(3)
    e = np.exp(s - s.max(-1, keepdims=True))
    assert np.allclose(a.numpy(), e / e.sum(-1, keepdims=True), atol=1e-12)


def test_gram_mode_equals_factor_mode_and_direct():  # T3
    net, x, _, gram = tiny((2, 2))
    fac = PathGram(gram.xit, mode="factor")
    U = torch.tensor(np.random.default_rng(2).standard_normal((4, 4)))
    U = U @ U.T
    direct = sum(U[p, q] * gram.xit[:, p] @ gram.xit[:, q].T for p in range(4) for q in range(4))
    assert torch.allclose(gram.kernel(U), direct, atol=1e-12)
    assert torch.allclose(fac.kernel(U), direct, atol=1e-12)
    B = torch.tensor(np.random.default_rng(4).standard_normal((10, 10)))
    G = torch.stack(
        [torch.stack([(B * (gram.xit[:, p] @ gram.xit[:, q].T)).sum() for q in range(4)]) for p in range(4)]
    )
    assert torch.allclose(gram.contract(B), G, atol=1e-12)
    assert torch.allclose(fac.contract(B), G, atol=1e-12)
    assert torch.allclose(cross_kernel(U, gram.xit, gram.xit), direct, atol=1e-12)


def test_effective_weights_give_order_parameters():  # N8: U = V_eff V_eff^T / N_1, prior mean Sigma^2 I
    net, x, _, _ = tiny((2, 2))
    g = torch.Generator().manual_seed(0)
    Us = [net.order_parameters(net.init_weights(6, g))[0][0] for _ in range(400)]
    Ubar = torch.stack(Us).mean(0)
    assert torch.allclose(Ubar, torch.eye(4, dtype=torch.float64), atol=0.35)
