"""B5 and SC-prune over several networks (issue 39): per-seed numbers, t-intervals over seeds, and the rank
correlation judged against what a random head ranking reaches."""

from __future__ import annotations

import argparse
import itertools
import json
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from attnlab.core.intervals import INCONCLUSIVE, MET, MISSED, decide, t_interval
from attnlab.core.targets import Check
from attnlab.paths.repro import measures
from attnlab.paths.repro.runs import B5_PRUNE, EXPERIMENTS


def _exact_null(n: int) -> np.ndarray:
    """Spearman's rho of every ranking of n items against the identity."""
    base = np.arange(n)
    return np.array(
        [1 - 6 * ((base - np.array(p)) ** 2).sum() / (n * (n * n - 1)) for p in itertools.permutations(base)]
    )


def test_chance_range_matches_the_exact_null_for_one_network():
    """One network: the drawn range equals the exact quantiles of rho over all 7! rankings, within one step of
    rho's lattice (6 * 2 / (n (n^2 - 1)): rho moves in steps of that size, and a quantile of 20,000 draws can land
    on the neighbouring value)."""
    n = 7
    step = 12 / (n * (n * n - 1))
    low, high = measures.chance_spearman(n, 1)
    exact = np.quantile(_exact_null(n), [0.025, 0.975])
    assert abs(low - exact[0]) <= step + 1e-12 and abs(high - exact[1]) <= step + 1e-12


def test_chance_range_of_a_mean_shrinks_as_one_over_root_networks():
    """The null is symmetric about 0, and the mean of k independent rhos has a range about 1/sqrt(k) as wide
    (the central limit theorem; 15 % slack for the discreteness and the draws)."""
    one, four = measures.chance_spearman(8, 1), measures.chance_spearman(8, 4)
    assert one[0] == pytest.approx(-one[1], abs=0.05) and four[0] == pytest.approx(-four[1], abs=0.03)
    assert (four[1] - four[0]) / (one[1] - one[0]) == pytest.approx(0.5, rel=0.15)


def _numbers(rhos: list[float], accs: list[float]) -> dict:
    rows = [{"spearman_score_vs_drop": r, "gd_test_accuracy": a, "heads": 8} for r, a in zip(rhos, accs)]
    return measures.per_seed(rows)


def test_per_seed_keeps_each_value_and_the_mean():
    nums = _numbers([0.1, 0.2, 0.6], [0.7, 0.72, 0.74])
    assert nums["networks"] == 3 and nums["spearman_score_vs_drop"] == pytest.approx(0.3)
    assert measures.seed_values(nums, "gd_test_accuracy") == [0.7, 0.72, 0.74]
    iv = measures.prune_intervals(nums)["gd_test_accuracy"]
    ref = t_interval([0.7, 0.72, 0.74])
    assert (iv.low, iv.high, iv.replicates) == (ref.low, ref.high, 3)


@pytest.mark.parametrize(
    ("rhos", "verdict"),
    [
        ([0.9, 0.95, 1.0], MET),  # every network ranks its heads far above chance
        ([0.3, -0.2, 0.1], INCONCLUSIVE),  # around chance
        ([-0.9, -0.95, -1.0], MISSED),  # far below chance
    ],
)
def test_rank_correlation_is_judged_against_random_rankings(rhos, verdict):
    iv = measures.prune_intervals(_numbers(rhos, [0.7, 0.7, 0.7]))["spearman_minus_chance"]
    assert decide(Check("spearman_minus_chance", ">", 0), iv) == verdict


def test_the_interval_subtracts_the_chance_range():
    """rho = 0.5 on each of 3 networks (a t-interval of width ~0): the judged interval is 0.5 minus the chance
    range of the mean of 3 random rankings of 8 heads, [0.5 - chance_high, 0.5 - chance_low]."""
    iv = measures.prune_intervals(_numbers([0.5, 0.5 + 1e-9, 0.5 - 1e-9], [0.7] * 3))["spearman_minus_chance"]
    lo, hi = measures.chance_spearman(8, 3)
    assert iv.low == pytest.approx(0.5 - hi, abs=1e-6) and iv.high == pytest.approx(0.5 - lo, abs=1e-6)


def test_the_b5_experiment_runs_one_network_per_seed(tmp_path: Path):
    runs = EXPERIMENTS["paths_prune"].runs(0, B5_PRUNE, tmp_path)
    assert len(runs) >= 3 and len({r.config["seed"] for r in runs}) == len(runs)
    assert all(r.command == "paths prune" and "seeds" not in r.config for r in runs)


def test_b5_and_sc_prune_read_every_network(tmp_path: Path):
    """p_b5 and p_prune over three prune folders: means, per-seed values, the slowest training."""
    from attnlab.reproduce.execute import Outcome

    subs = {}
    for i, acc in enumerate([0.70, 0.72, 0.74]):
        folder = tmp_path / f"seed{i}"
        folder.mkdir()
        curves = {"ascending score": [acc, acc - 0.01, acc - 0.05], "random 0": [acc, acc - 0.1, acc - 0.2]}
        grid = [{"N": 20.0, "T": 0.1, "val_accuracy": 0.9}]
        m = {"gd_test_accuracy": acc, "gd_train_seconds": 100.0 + i, "grid": grid, "chosen_N": 20.0, "chosen_T": 0.1,
             "spearman_rho": 0.5, "progressive": curves, "score": [0.0] * 8}  # fmt: skip
        (folder / "metrics.json").write_text(json.dumps(m))
        subs[f"seed{i}"] = SimpleNamespace(path=str(folder))
    runs = {"paths_prune": Outcome(runs=subs, seconds={k: 300.0 for k in subs})}  # type: ignore[arg-type]
    b5 = measures.p_b5(runs)
    assert b5["networks"] == 3 and b5["gd_test_accuracy"] == pytest.approx(0.72)
    assert b5["gd_train_seconds"] == 102.0 and b5["pipeline_seconds"] == 900.0 and b5["heads"] == 8
    prune = measures.p_prune(runs)
    assert measures.seed_values(prune, "drop_first_pruned") == pytest.approx([0.01] * 3)
    assert prune["ascending_minus_random_mean"] == pytest.approx((-0.06 / 3) - (-0.3 / 3))


def test_one_network_is_a_permutation_test():
    """A single network: its rho minus one random ranking's range (no seed spread to add)."""
    nums = measures.per_seed([{"spearman_score_vs_drop": 0.9, "heads": 8}])
    iv = measures.prune_intervals(nums)["spearman_minus_chance"]
    lo, hi = measures.chance_spearman(8, 1)
    assert (iv.low, iv.high, iv.replicates) == (pytest.approx(0.9 - hi), pytest.approx(0.9 - lo), 1)


def test_prune_takes_its_adam_settings_from_the_command_line():
    """B5's retuned settings reach the config (`paths prune --lr --weight-decay --width --pool`); bad values get
    one line; at their defaults they stay out of config.json (earlier runs keep their config hash)."""
    from attnlab.errors import InputError
    from attnlab.paths.cli import _prune_args, _prune_config
    from attnlab.paths.config import PruneConfig
    from attnlab.runs.configs import config_to_dict

    parser = argparse.ArgumentParser()
    _prune_args(parser)
    args = parser.parse_args(["--lr", "3e-3", "--weight-decay", "1e-3", "--width", "32", "--pool", "20000"])
    args.device = "cpu"  # added by the prune parser's add_device_arg
    cfg = _prune_config(args)
    assert (cfg.lr, cfg.weight_decay, cfg.width, cfg.pool) == (3e-3, 1e-3, 32, 20000)
    assert "lr" not in config_to_dict(PruneConfig()) and config_to_dict(cfg)["lr"] == 3e-3
    for bad in ({"lr": 0.0}, {"lr": 20.0}, {"weight_decay": -1.0}):
        with pytest.raises(InputError):
            PruneConfig(**bad)  # type: ignore[arg-type]
