"""Training loop: loss falls, resume equals an uninterrupted run, NaN guard, checkpoints (spec §4, R3)."""

import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from attnlab.cli import main
from attnlab.errors import AttnlabError
from attnlab.extreme.experiment import run_training
from attnlab.train.presets import resolve_config
from attnlab.train.schedule import snapshot_steps

TINY = dict(d_model=32, d_mlp=64, seq_len=32, batch=16, eval_batch=32, lin_every=5, lin_until=10,
            ckpt_every=5, threads=1)


def _errors(capsys) -> list[str]:
    """The error lines the CLI printed (a progress bar or a warning may share stderr)."""
    return [line for line in capsys.readouterr().err.splitlines() if "error:" in line]


def test_snapshot_schedule():
    s = snapshot_steps(2000, 25, 500, 16)
    assert s[:3] == [0, 25, 50] and s[-1] == 2000 and 500 in s
    late = [x for x in s if x > 500]
    assert len(late) == pytest.approx(16 * 0.602, abs=2)   # 16 per decade over log10(2000/500)


def test_loss_falls(tmp_path):
    cfg = resolve_config("cpu", steps=200, **{**TINY, "lin_every": 50, "lin_until": 200, "ckpt_every": 200})
    run = run_training(cfg, tmp_path / "run", progress=False)
    m = run.metrics()
    assert m[-1]["loss"] <= 0.7 * m[0]["loss"]


def test_resume_equals_uninterrupted(tmp_path):
    straight = run_training(resolve_config("cpu", steps=20, **TINY), tmp_path / "a", progress=False)
    first = run_training(resolve_config("cpu", steps=10, **TINY), tmp_path / "b", progress=False)
    cfg = resolve_config("cpu", steps=20, **TINY)
    resumed = run_training(cfg, first.path, resume=True, progress=False)
    wa = load_file(str(tmp_path / "a" / "checkpoints" / "step_20" / "model.safetensors"))
    wb = load_file(str(resumed.path / "checkpoints" / "step_20" / "model.safetensors"))
    for k in wa:
        torch.testing.assert_close(wa[k], wb[k], atol=1e-6, rtol=0)
    ma, mb = straight.metrics(), resumed.metrics()
    assert [r["step"] for r in ma] == [r["step"] for r in mb]
    assert ma[-1]["loss"] == pytest.approx(mb[-1]["loss"], abs=1e-6)


def test_resume_refuses_changed_config(tmp_path):
    run_training(resolve_config("cpu", steps=5, **TINY), tmp_path / "r", progress=False)
    changed = resolve_config("cpu", steps=10, **{**TINY, "d_model": 64})
    with pytest.raises(AttnlabError, match="config changed.*d_model: 32 -> 64"):
        run_training(changed, tmp_path / "r", resume=True, progress=False)


def test_nan_guard_stops_and_names_the_step(tmp_path, capsys):
    args = ["bb", "train", "--optimizer", "sgd", "--lr", "1e12", "--steps", "50", "--d-model", "32", "--d-mlp",
            "64", "--seq-len", "16", "--batch", "8", "--eval-batch", "8", "--threads", "1",
            "--out", str(tmp_path / "nan")]
    assert main(args) == 2
    err = _errors(capsys)
    assert len(err) == 1 and "non-finite" in err[0] and "at step" in err[0]
    saved = list((tmp_path / "nan" / "checkpoints").glob("nan_step_*"))
    assert saved
    w = load_file(str(saved[0] / "model.safetensors"))
    assert all(torch.isfinite(t).all() for t in w.values())     # the last finite state


def test_unreadable_checkpoint_is_one_line(tmp_path, capsys):
    run_training(resolve_config("cpu", steps=5, **TINY), tmp_path / "c", progress=False)
    (tmp_path / "c" / "checkpoints" / "step_5" / "model.safetensors").write_bytes(b"garbage")
    assert main(["bb", "intervene", str(tmp_path / "c")]) == 1
    err = _errors(capsys)
    assert len(err) == 1 and "unreadable checkpoint" in err[0]
    (tmp_path / "empty").mkdir()
    (tmp_path / "empty" / "config.json").write_text("{}")
    with pytest.raises(AttnlabError, match="no complete checkpoint"):
        run_training(resolve_config("cpu", steps=5, **TINY), tmp_path / "empty", resume=True, progress=False)


@pytest.mark.parametrize("argv, message", [
    (["bb", "train", "--preset", "huge"], "unknown preset 'huge'; valid presets: cpu, paper"),
    (["bb", "sample", "--n", "4", "--triggers", "70"], "k=70 triggers but the vocabulary has 64 characters"),
    (["bb", "sample", "--n", "4", "--corpus", "/nonexistent.txt"], "does not exist"),
])
def test_cli_bad_input_one_line(argv, message, capsys, tmp_path):
    assert main(argv + ["--out", str(tmp_path / "o")]) == 1
    err = _errors(capsys)
    assert len(err) == 1 and message in err[0]


def test_sample_command_writes_checkable_data(tmp_path):
    assert main(["bb", "sample", "--n", "6", "--seq-len", "20", "--seed", "3", "--out", str(tmp_path / "s")]) == 0
    import numpy as np

    seqs = np.load(tmp_path / "s" / "sequences.npy")
    bigram = np.load(tmp_path / "s" / "bigram.npy")
    meta = json.loads((tmp_path / "s" / "meta.json").read_text())
    assert seqs.shape == (6, 21) and seqs.dtype == np.int64 and bigram.shape == (66, 66)
    assert (seqs[:, 0] == meta["bos_id"]).all() and [meta["vocabulary"][t] for t in meta["trigger_ids"]] == [" ", "e", "t"]
    assert Path(tmp_path / "s" / "config.json").exists()


def test_ctrl_c_saves_a_checkpoint_and_resume_matches(tmp_path):
    """A KeyboardInterrupt mid-run leaves a complete checkpoint; resuming reaches the uninterrupted weights."""
    from attnlab.extreme import experiment

    cfg = resolve_config("cpu", steps=12, **{**TINY, "ckpt_every": 100})
    straight = run_training(cfg, tmp_path / "straight", progress=False)
    real_train = experiment.train

    def interrupted_train(model, cfg_, run, batch_fn, snapshot_fn, **kw):
        def flaky(step):
            if step == 7:
                raise KeyboardInterrupt
            return batch_fn(step)
        return real_train(model, cfg_, run, flaky, snapshot_fn, **kw)

    experiment.train = interrupted_train
    try:
        with pytest.raises(AttnlabError, match="interrupted at step 7") as info:
            run_training(cfg, tmp_path / "cut", progress=False)
    finally:
        experiment.train = real_train
    assert info.value.exit_code == 130
    assert (tmp_path / "cut" / "checkpoints" / "step_7" / "model.safetensors").exists()
    resumed = run_training(cfg, tmp_path / "cut", resume=True, progress=False)
    wa = load_file(str(straight.path / "checkpoints" / "step_12" / "model.safetensors"))
    wb = load_file(str(resumed.path / "checkpoints" / "step_12" / "model.safetensors"))
    for k in wa:
        torch.testing.assert_close(wa[k], wb[k], atol=1e-6, rtol=0)


def test_three_layer_run_with_options(tmp_path):
    cfg = resolve_config("cpu", steps=5, n_layers=3, no_attn=[2], linear_mlp=[0], **TINY)
    m = run_training(cfg, tmp_path / "three", progress=False).metrics()[-1]
    assert len(m["attn_sink"]) == 3 and m["attn_sink"][2] is None and m["attn_sink"][0] is not None
    assert len(m["resid_norm_bos"]) == 3 and all(v > 0 for v in m["resid_norm_bos"])
