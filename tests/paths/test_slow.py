"""Slow: posterior sampling at a small width agrees with the chain-form theory (spec §10 gate, reduced).

4-path Markov network, alpha = 4, N = 8 (P = 32), T = 0.1, collapsed HMC with 4 chains. Tolerance (established
with 300 warmup + 600 draws: e_chain = 0.059, e_simple = 3.7): relative Frobenius error of the sampled U against
the chain theory below 0.15 at N = 8, and at least ten times smaller than against the simple form.
"""

import numpy as np
import pytest

from attnlab.paths.adjudicate import compare_point


@pytest.mark.slow
def test_sampled_U_matches_chain_theory_at_small_width():
    r = compare_point("C3", 4.0, 8, T=0.1, chains=4, warmup=200, draws=300, n_leapfrog=8, n_test=100, seed=1)
    assert r["rhat_max"] < 1.1
    assert r["e_chain"] < 0.15
    assert r["e_chain"] < 0.1 * r["e_simple"]
    assert abs(r["U_a_hat"] - r["U_a_chain"]) < 0.15 * r["U_a_chain"]
    assert np.all(np.linalg.eigvalsh(np.asarray(r["U_hat"])) > 0)
