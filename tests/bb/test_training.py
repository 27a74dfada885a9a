"""Training loop: loss falls, resume equals an uninterrupted run, NaN guard, checkpoints (spec §4, R3)."""

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
from safetensors.torch import load_file

import attnlab.bb as bb
from attnlab.bb.config import TrainConfig, resolve_config
from attnlab.bb.schedule import snapshot_steps
from attnlab.cli import main
from attnlab.errors import AttnlabError, InputError
from attnlab.runs import RunResult
from attnlab.runs.resume import Resume
from attnlab.toy.task import BBTask

TINY = dict(d_model=32, d_mlp=64, seq_len=32, batch=16, eval_batch=32, lin_every=5, lin_until=10, ckpt_every=5)


def _errors(capsys) -> list[str]:
    """The error lines the CLI printed (a progress bar or a warning may share stderr)."""
    return [line for line in capsys.readouterr().err.splitlines() if "error:" in line]


def _train(tmp: Path, steps: int, mode: str = "new", **kw) -> RunResult:
    return bb.train(resolve_config("cpu", steps=steps, **{**TINY, **kw}), tmp, mode=mode, progress=False)


def test_snapshot_schedule():
    s = snapshot_steps(2000, 25, 500, 16)
    assert s[:3] == [0, 25, 50] and s[-1] == 2000 and 500 in s
    late = [x for x in s if x > 500]
    assert len(late) == pytest.approx(16 * 0.602, abs=2)  # 16 per decade over log10(2000/500)


def test_python_api_returns_dataframes(tmp_path):
    cfg = TrainConfig(
        steps=6, d_model=16, d_mlp=32, seq_len=16, batch=8, eval_batch=8, lin_every=3, lin_until=6, ckpt_every=6
    )
    rng = torch.get_rng_state()
    result = bb.train(cfg, out=tmp_path / "api", progress=False)
    assert torch.equal(rng, torch.get_rng_state())  # the global generator is untouched
    assert isinstance(result, RunResult) and result.path == tmp_path / "api"
    table = result.tables["metrics"]
    assert isinstance(table, pd.DataFrame) and list(table["step"]) == [0, 3, 6]
    assert table["loss"].iloc[-1] == pytest.approx(result.summary["loss"])
    assert (tmp_path / "api" / "report.html").exists() and (tmp_path / "api" / "final" / "value_norms.npy").exists()


def test_loss_falls(tmp_path):
    run = _train(tmp_path / "run", 200, lin_every=50, lin_until=200, ckpt_every=200)
    m = run.tables["metrics"]
    assert m["loss"].iloc[-1] <= 0.7 * m["loss"].iloc[0]


def test_resume_equals_uninterrupted(tmp_path):
    straight = _train(tmp_path / "a", 20)
    _train(tmp_path / "b", 10)
    resumed = _train(tmp_path / "b", 20, mode="resume")
    wa = load_file(str(tmp_path / "a" / "checkpoints" / "step_20" / "model.safetensors"))
    wb = load_file(str(resumed.path / "checkpoints" / "step_20" / "model.safetensors"))
    for k in wa:
        assert torch.equal(wa[k], wb[k]), k
    assert (straight.path / "metrics.jsonl").read_bytes() == (resumed.path / "metrics.jsonl").read_bytes()


def test_resume_refuses_changed_config(tmp_path):
    _train(tmp_path / "r", 5)
    before = (tmp_path / "r" / "metrics.jsonl").read_bytes()
    with pytest.raises(InputError, match="d_model: 32 -> 64"):
        _train(tmp_path / "r", 10, mode="resume", d_model=64)
    assert (tmp_path / "r" / "metrics.jsonl").read_bytes() == before


def test_nan_guard_stops_and_names_the_step(tmp_path, capsys):
    args = [
        "bb",
        "train",
        "--optimizer",
        "sgd",
        "--lr",
        "10",
        "--steps",
        "50",
        "--d-model",
        "32",
        "--d-mlp",
        "64",
        "--seq-len",
        "16",
        "--batch",
        "8",
        "--eval-batch",
        "8",
        "--threads",
        "1",
        "--out",
        str(tmp_path / "nan"),
    ]
    assert main(args) == 2
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if "error:" in line]
    assert len(lines) == 1 and "non-finite" in lines[0] and "at step" in lines[0]
    assert lines[0].startswith("attnlab: error:")  # on its own line, not after the bar
    assert "parameter" in lines[0] or "the loss" in lines[0]
    saved = list((tmp_path / "nan" / "checkpoints").glob("nan_step_*"))
    assert saved
    w = load_file(str(saved[0] / "model.safetensors"))
    assert all(torch.isfinite(t).all() for t in w.values())  # the last finite state


def _interrupt_batch(monkeypatch, at: int) -> None:
    """Ctrl-C while update `at` draws its batch (before that update: the run has reached step `at`)."""
    real = BBTask.train_batch

    def flaky(self, batch, seq_len, seed, step):
        if step == at:
            raise KeyboardInterrupt
        return real(self, batch, seq_len, seed, step)

    monkeypatch.setattr(BBTask, "train_batch", flaky)


def test_ctrl_c_saves_a_checkpoint_and_resume_matches(tmp_path, monkeypatch):
    """A KeyboardInterrupt mid-run leaves a complete checkpoint; resuming reaches the uninterrupted weights."""
    straight = _train(tmp_path / "straight", 12, ckpt_every=100)
    with monkeypatch.context() as m:
        _interrupt_batch(m, 7)
        with pytest.raises(AttnlabError, match="interrupted at step 7") as info:
            _train(tmp_path / "cut", 12, ckpt_every=100)
    assert info.value.exit_code == 130
    assert (tmp_path / "cut" / "checkpoints" / "step_7" / "model.safetensors").exists()
    resumed = _train(tmp_path / "cut", 12, mode="resume", ckpt_every=100)
    wa = load_file(str(straight.path / "checkpoints" / "step_12" / "model.safetensors"))
    wb = load_file(str(resumed.path / "checkpoints" / "step_12" / "model.safetensors"))
    for k in wa:
        assert torch.equal(wa[k], wb[k]), k
    assert (straight.path / "metrics.jsonl").read_bytes() == (resumed.path / "metrics.jsonl").read_bytes()


def test_resume_from_python_and_from_the_cli_say_the_same(tmp_path, capsys):
    """The resume check lives in the run function: a notebook's full config and the CLI's flags get one message."""
    run = _train(tmp_path / "r", 5).path
    before = (run / "metrics.jsonl").read_bytes()
    with pytest.raises(InputError) as api:
        _train(run, 10, mode="resume", d_model=64, seed=3)
    argv = ["bb", "train", "--resume", "--out", str(run), "--steps", "10", "--d-model", "64", "--seed", "3"]
    assert main(argv) == 1
    assert _errors(capsys) == [f"attnlab: error: {api.value}"]
    assert (
        str(api.value) == f"--resume: the config differs from the saved one in {run}: d_model: 32 -> 64; seed: 0 -> 3"
    )
    with pytest.raises(InputError) as none:
        bb.train(Resume(changes={"steps": 10}), None, mode="resume")
    assert main(["bb", "train", "--resume", "--steps", "10"]) == 1
    assert _errors(capsys) == [f"attnlab: error: {none.value}"] and "needs --out" in str(none.value)
    with pytest.raises(InputError, match="pass mode='resume'"):
        bb.train(Resume(changes={"steps": 10}), tmp_path / "new")
    assert (run / "metrics.jsonl").read_bytes() == before and not (tmp_path / "new").exists()


def test_resume_of_changes_equals_resume_of_the_full_config(tmp_path):
    _train(tmp_path / "a", 6)
    _train(tmp_path / "b", 6)
    full = _train(tmp_path / "a", 12, mode="resume")
    changes = bb.train(Resume(changes={"steps": 12}), tmp_path / "b", mode="resume", progress=False)
    assert changes.config == full.config
    assert (tmp_path / "a" / "metrics.jsonl").read_bytes() == (tmp_path / "b" / "metrics.jsonl").read_bytes()


def test_three_layer_run_with_options(tmp_path):
    from attnlab.bb.metrics import metric

    run = _train(tmp_path / "three", 5, n_layers=3, no_attn=(2,), linear_mlp=(0,))
    m = run.tables["metrics"]
    assert m["attn_sink[2.0]"].isna().all() and m["attn_sink[0.0]"].notna().all()
    last = [json.loads(x) for x in (run.path / "metrics.jsonl").read_text().splitlines()][-1]
    assert len(last["attn_sink"]) == 3 and last["attn_sink"][2] is None
    assert metric(last, "attn_sink", 2) is None and metric(last, "attn_sink", 0) == last["attn_sink"][0]
    assert all(metric(last, "resid_norm_bos", l) > 0 for l in range(3))


def test_sample_command_writes_checkable_data(tmp_path):
    assert main(["bb", "sample", "--n", "6", "--seq-len", "20", "--seed", "3", "--out", str(tmp_path / "s")]) == 0
    seqs = np.load(tmp_path / "s" / "sequences.npy")
    bigram = np.load(tmp_path / "s" / "bigram.npy")
    meta = json.loads((tmp_path / "s" / "meta.json").read_text())
    assert seqs.shape == (6, 21) and seqs.dtype == np.int64 and bigram.shape == (66, 66)
    assert (seqs[:, 0] == meta["bos_id"]).all() and [meta["vocabulary"][t] for t in meta["trigger_ids"]] == [
        " ",
        "e",
        "t",
    ]
    assert Path(tmp_path / "s" / "config.json").exists()
