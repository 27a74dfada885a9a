"""Dihedral augmentation of training digit episodes (issue 39, B5's retuning under spec §15.4): one symmetry of the
square per episode, the same for its three images; labels and roles kept; off by default; never on val/test."""

import argparse

import numpy as np
import pytest

from attnlab.errors import InputError
from attnlab.paths.tasks.digits import N_DIHEDRAL, digit_episodes, dihedral

PATCH_CORNERS = [(0, 0), (0, 4), (4, 0), (4, 4)]


def _images(x: np.ndarray) -> np.ndarray:
    """Episodes x [P, 12, 23] back to their images [P, 3, 8, 8] (support A, support B, query), each patch placed
    by its one-hot position code (independent of `tokenize`'s loop)."""
    imgs = np.zeros((x.shape[0], 3, 8, 8))
    for i in range(x.shape[0]):
        for t in range(12):
            r, c = PATCH_CORNERS[int(np.argmax(x[i, t, 16:20]))]
            imgs[i, t // 4, r : r + 4, c : c + 4] = x[i, t, :16].reshape(4, 4)
    return imgs


def test_dihedral_is_the_group_of_the_square():
    """Eight distinct pixel permutations, k = 0 the identity, closed under composition (a group of order 8)."""
    img = np.arange(64.0).reshape(8, 8)  # distinct pixels: an element is identified by its image of img
    out = [dihedral(img, k) for k in range(N_DIHEDRAL)]
    assert np.array_equal(out[0], img)
    assert len({o.tobytes() for o in out}) == N_DIHEDRAL
    assert all(np.array_equal(np.sort(o.ravel()), img.ravel()) for o in out)
    keys = {o.tobytes() for o in out}
    assert all(dihedral(out[j], k).tobytes() in keys for j in range(N_DIHEDRAL) for k in range(N_DIHEDRAL))


def test_off_by_default_is_the_earlier_sampler_bit_for_bit():
    """augment="none" (the default) draws the episodes of the code before the option: a weighted checksum of
    seed 5's 64 training episodes, computed with that code (commit 82ad857); any change of draws moves it by O(1),
    float rounding of the standardisation by far less than 1e-9 (64 * 12 * 23 terms of size ~1, relative 1e-16)."""
    x, y = digit_episodes(64, "train", seed=5)
    w = np.random.default_rng(0).standard_normal(x.shape)
    assert float((x * w).sum()) == pytest.approx(5.296783708212587, abs=1e-9)
    assert float(x.sum()) == pytest.approx(1478.1577227186172, abs=1e-9)
    x2, y2 = digit_episodes(64, "train", seed=5, augment="none")
    assert np.array_equal(x, x2) and np.array_equal(y, y2)


def test_one_symmetry_per_episode_on_all_three_images_labels_and_roles_kept():
    """Each augmented episode is the plain episode (same seed) with one dihedral element applied to support A,
    support B and query alike; its labels and its position/role codes are unchanged; all 8 elements occur."""
    P = 400
    x0, y0 = digit_episodes(P, "train", seed=11)
    x1, y1 = digit_episodes(P, "train", seed=11, augment="dihedral")
    assert np.array_equal(y0, y1)
    assert np.array_equal(x0[..., 16:], x1[..., 16:])  # position and role one-hots, token order A, B, query
    im0, im1 = _images(x0), _images(x1)
    used = set()
    for i in range(P):
        fits = [
            k for k in range(N_DIHEDRAL) if all(np.array_equal(dihedral(im0[i, r], k), im1[i, r]) for r in range(3))
        ]
        assert fits, f"episode {i}: no single symmetry maps its three images"
        used.update(fits)
    assert used == set(range(N_DIHEDRAL))
    assert not np.array_equal(x0, x1)


def test_validation_and_test_episodes_are_never_augmented():
    """Asking for augmented val/test episodes is refused in one line; prune's GD pool is its only user."""
    for split in ("val", "test"):
        with pytest.raises(InputError, match="only training episodes"):
            digit_episodes(10, split, augment="dihedral")


def test_prune_augment_option_reaches_the_config_and_bad_values_get_one_line():
    """`paths prune --augment dihedral` reaches PruneConfig; the default stays out of config.json (earlier runs
    keep their config hash); an unknown value is one InputError line naming the valid ones."""
    from attnlab.paths.cli import _prune_args, _prune_config
    from attnlab.paths.config import PruneConfig
    from attnlab.runs.configs import config_to_dict

    parser = argparse.ArgumentParser()
    _prune_args(parser)
    args = parser.parse_args(["--augment", "dihedral"])
    args.device = "cpu"  # added by the prune parser's add_device_arg
    assert _prune_config(args).augment == "dihedral"
    assert "augment" not in config_to_dict(PruneConfig())
    assert config_to_dict(PruneConfig(augment="dihedral"))["augment"] == "dihedral"
    with pytest.raises(InputError) as err:
        PruneConfig(augment="rotate")
    assert "--augment" in str(err.value) and "dihedral" in str(err.value) and "\n" not in str(err.value)


def test_train_network_trains_on_the_augmented_pool(monkeypatch):
    """train_network passes the config's augment to the GD pool (and only there)."""
    from attnlab.paths.config import PruneConfig
    from attnlab.paths.pruning.pipeline import train_network
    from attnlab.paths.tasks import digits

    seen, real = [], digits.digit_episodes

    def spy(P, split="train", seed=None, augment="none"):
        seen.append((split, augment))
        return real(P, split, seed, augment)

    monkeypatch.setattr(digits, "digit_episodes", spy)
    cfg = PruneConfig(steps=2, pool=20, width=8, heads=2, P=20, n_test=20, augment="dihedral")
    _, log = train_network(cfg)
    assert seen == [("train", "dihedral")] and np.isfinite(log[-1]["loss"])
