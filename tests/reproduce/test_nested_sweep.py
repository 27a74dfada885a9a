"""A sweep inside a Ray task: `attnlab reproduce --workers N` runs R22's sweep (bb_stability) as one of its Ray
tasks, and the sweep joins that Ray instance instead of starting a second one (which fails in a worker)."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("ray")


def test_sweep_inside_a_ray_task_joins_its_instance(tmp_path) -> None:
    from attnlab.core.parallel import parallel_map
    from attnlab.reproduce.execute import run_experiment

    size = dict(d_model=16, d_mlp=32, seq_len=16, batch=4, eval_batch=8, steps=4, ckpt_every=1000, lrs=(1e-3,),
                seeds=(0,))  # fmt: skip
    root, marks = tmp_path / "runs", tmp_path / "experiments"
    [mark] = parallel_map(run_experiment, [("bb_stability", root, marks, 0, size)], workers=2)
    assert mark["error"] is None, mark["error"]
    trials = sorted((root / "bb_stability" / "trials").iterdir())
    assert len(trials) == 2  # softmax and relu at one lr and one seed
    assert all(json.loads((t / "trial.json").read_text())["status"] == "done" for t in trials)
