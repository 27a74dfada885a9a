"""Tasks (T15): Markov shapes, balance and stay rates; digit episodes."""

import numpy as np

from attnlab.paths.tasks.digits import digit_episodes, episode_classes
from attnlab.paths.tasks.markov import N_FEAT, markov_data


def test_markov_shapes_balance_and_stay_rates():
    x, y = markov_data(400, seed=5)
    assert x.shape == (400, 31, 231) and y.shape == (400,)
    assert y.sum() == 0 and np.all(y[:200] == 1)
    assert np.all(x[:, 0, :N_FEAT] == 0)  # BOS
    assert np.allclose(x[:, :, N_FEAT:], np.eye(31))
    proj = x[:, 1:, :100].mean(-1) - x[:, 1:, 100:N_FEAT].mean(-1)  # ~ +-sqrt2 plus small noise
    s = np.sign(proj)
    stay = (s[:, 1:] == s[:, :-1]).mean(1)
    assert abs(stay[:200].mean() - 0.7) < 0.02 and abs(stay[200:].mean() - 0.3) < 0.02


def test_digit_episodes_disjoint_balanced_deterministic():
    assert set(episode_classes("train")).isdisjoint(episode_classes("test"))
    x, y = digit_episodes(40, "test")
    x2, y2 = digit_episodes(40, "test")
    assert x.shape == (40, 12, 23) and y.sum() == 0
    assert np.array_equal(x, x2) and np.array_equal(y, y2)
    # role codes: tokens 0-3 support A, 4-7 support B, 8-11 query
    assert np.all(x[:, :4, 20] == 1) and np.all(x[:, 4:8, 21] == 1) and np.all(x[:, 8:, 22] == 1)
