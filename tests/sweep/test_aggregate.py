"""Seed as a grid axis is aggregated (issue 21): mean and 95 % interval over seeds, checked against the t-interval
written out by hand, and drawn over the other fields only."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from attnlab.sweep.aggregate import axes_without_seed, seed_summary, t_quantile


def test_mean_and_interval_over_seeds():
    table = pd.DataFrame(
        {
            "status": ["done"] * 5 + ["failed"],
            "lr": [0.1, 0.1, 0.1, 0.2, 0.2, 0.2],
            "seed": [0, 1, 2, 0, 1, 2],
            "loss": [1.0, 2.0, 4.0, 3.0, 5.0, 99.0],  # the failed trial's value is not counted
        }
    )
    out = seed_summary(table, "loss", ["lr"]).set_index("lr")
    assert list(out["seeds"]) == [3, 2]
    # lr 0.1: mean 7/3, s^2 = ((1-7/3)^2 + (2-7/3)^2 + (4-7/3)^2) / 2 = 7/3; t_{0.975,2} = 4.302652729911275
    half = 4.302652729911275 * math.sqrt(7 / 3) / math.sqrt(3)
    assert out.loc[0.1, "loss mean"] == pytest.approx(7 / 3, rel=1e-12)
    assert out.loc[0.1, "± (95%)"] == pytest.approx(half, rel=1e-9)
    assert out.loc[0.1, "95% low"] == pytest.approx(7 / 3 - half, rel=1e-9)
    # lr 0.2: two seeds, mean 4, s = sqrt(2); t_{0.975,1} = 12.706204736174698
    assert out.loc[0.2, "± (95%)"] == pytest.approx(12.706204736174698 * math.sqrt(2) / math.sqrt(2), rel=1e-9)
    assert t_quantile(1) != t_quantile(1)  # one seed: no interval (nan)
    assert axes_without_seed(["lr", "seed", "beta"]) == ["lr", "beta"]


def test_only_seeds_swept_gives_one_row():
    table = pd.DataFrame({"status": ["done"] * 3, "seed": [0, 1, 2], "acc": [0.5, 0.6, 0.7]})
    out = seed_summary(table, "acc", [])
    assert len(out) == 1 and out.loc[0, "seeds"] == 3 and out.loc[0, "acc mean"] == pytest.approx(0.6)
