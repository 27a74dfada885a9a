"""The one training layer (issue 20): `attnlab.training.loop.Trainer` on a tiny model, the one checkpoint format
(`attnlab.training.checkpoint`, legacy series checkpoints included) and a bit-identical resume after `kill -9`."""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from attnlab.errors import AttnlabError, InputError, NumericalError
from attnlab.runs import RunDir
from attnlab.training.checkpoint import LEGACY_STATE, STATE, latest_checkpoint, load_checkpoint
from attnlab.training.loop import INTERRUPTED, Job, Schedule, Trainer

ROOT = Path(__file__).resolve().parents[2]


@dataclasses.dataclass(frozen=True)
class Cfg:
    steps: int = 12
    lr: float = 0.05
    width: int = 3

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


def _job(cfg: Cfg, stop: dict | None = None) -> Job:
    """A linear model fitted by Adam on batches drawn from (k): update k's loss; `stop` = {step: what} raises
    KeyboardInterrupt ("interrupt") or returns a NaN loss ("nan") at that update."""
    with torch.random.fork_rng():
        torch.manual_seed(0)
        model = torch.nn.Linear(cfg.width, 1)
    opt = torch.optim.Adam(model.parameters(), lr=cfg.lr)
    w_true = torch.arange(1.0, cfg.width + 1)

    def loss(k: int) -> torch.Tensor:
        what = (stop or {}).get(k)
        if what == "interrupt":
            raise KeyboardInterrupt
        x = torch.randn(8, cfg.width, generator=torch.Generator().manual_seed(k))
        value = ((model(x).squeeze(-1) - x @ w_true) ** 2).mean()
        return value * float("nan") if what == "nan" else value

    def record(step: int, last: float) -> dict:
        return {"train_loss": last, "w0": float(model.weight[0, 0].detach())}

    return Job(model, opt, loss, record, cfg, frozenset({"steps"}))


def _schedule(cfg: Cfg, series: bool) -> Schedule:
    every = frozenset(range(0, cfg.steps, 4))
    return Schedule(cfg.steps, every | {cfg.steps}, every - {0} if not series else every, series=series)


def _train(path: Path, cfg: Cfg, series: bool, stop: dict | None = None, resume: bool = False) -> Trainer:
    path.mkdir(exist_ok=True)
    trainer = Trainer(RunDir(path), _job(cfg, stop), _schedule(cfg, series))
    if resume:
        trainer.resume()
    trainer.run_loop()
    return trainer


def _same_run(a: Path, b: Path, step: int) -> None:
    assert (a / "metrics.jsonl").read_bytes() == (b / "metrics.jsonl").read_bytes()
    wa, wb = (load_file(str(x / "checkpoints" / f"step_{step}" / "model.safetensors")) for x in (a, b))
    assert wa.keys() == wb.keys() and all(torch.equal(wa[k], wb[k]) for k in wa)
    oa, ob = (load_file(str(x / "checkpoints" / f"step_{step}" / "optim.safetensors")) for x in (a, b))
    assert oa.keys() == ob.keys() and all(torch.equal(oa[k], ob[k]) for k in oa)


@pytest.mark.parametrize("series", [False, True], ids=["checkpoints", "series"])
@pytest.mark.parametrize("at", [1, 4, 6])
def test_an_interrupt_saves_the_step_reached_and_resume_is_bit_identical(tmp_path, series, at):
    cfg = Cfg()
    _train(tmp_path / "straight", cfg, series)
    cut = tmp_path / "cut"
    with pytest.raises(AttnlabError, match=f"interrupted at step {at}; checkpoint saved in") as info:
        _train(cut, cfg, series, stop={at: "interrupt"})
    assert info.value.exit_code == 130
    scheduled = at % 4 == 0
    folder = cut / "checkpoints" / f"step_{at}" if scheduled or not series else cut / INTERRUPTED
    assert str(folder) in str(info.value) and (folder / STATE).is_file()
    expected = {f"step_{s}" for s in range(0 if series else 4, at + 1, 4)} | ({f"step_{at}"} if not series else set())
    assert {p.name for p in (cut / "checkpoints").iterdir()} == expected  # a series holds what it would uninterrupted
    resumed = _train(cut, cfg, series, resume=True)
    assert resumed.resumed_step == at and not (cut / INTERRUPTED).exists()
    _same_run(tmp_path / "straight", cut, cfg.steps)


def test_steps_may_grow_on_resume_and_other_fields_are_refused(tmp_path):
    _train(tmp_path / "a", Cfg(steps=12), series=True)
    run = tmp_path / "b"
    _train(run, Cfg(steps=8), series=True)
    _train(run, Cfg(steps=12), series=True, resume=True)
    _same_run(tmp_path / "a", run, 12)
    with pytest.raises(InputError, match=r"the config changed since .*step_12: lr: 0.05 -> 0.1"):
        _train(run, Cfg(steps=16, lr=0.1), series=True, resume=True)
    with pytest.raises(InputError, match="--steps 4 is below the run's current step 12"):
        _train(run, Cfg(steps=4), series=True, resume=True)
    empty = tmp_path / "empty"
    with pytest.raises(InputError, match=f"no complete checkpoint in {empty / 'checkpoints'}"):
        _train(empty, Cfg(), series=True, resume=True)


@pytest.mark.parametrize("series", [False, True], ids=["checkpoints", "series"])
def test_the_nan_guard_names_the_step_and_the_tensor_and_keeps_the_last_finite_state(tmp_path, series):
    run = tmp_path / "nan"
    with pytest.raises(NumericalError) as info:
        _train(run, Cfg(), series, stop={6: "nan"})
    message = str(info.value)
    assert "\n" not in message and message.startswith("non-finite value in the loss") and "at step 6" in message
    kept = (run if series else run / "checkpoints") / "nan_step_6"
    assert f"last finite state saved in {kept}" in message
    assert all(torch.isfinite(t).all() for t in load_file(str(kept / "model.safetensors")).values())
    assert [json.loads(line)["step"] for line in (run / "metrics.jsonl").read_text().splitlines()] == [0, 4]


def test_an_update_that_overflows_a_parameter_is_undone_and_named(tmp_path):
    run = tmp_path / "inf"
    run.mkdir()
    job = _job(Cfg())
    job.optimizer = torch.optim.SGD(job.model.parameters(), lr=1e38)  # gradients ~10: a step past float32's 3.4e38
    with pytest.raises(NumericalError, match="non-finite value in parameter weight after the update at step 0"):
        Trainer(RunDir(run), job, _schedule(Cfg(), series=False)).run_loop()
    initial = _job(Cfg()).model.state_dict()
    kept = load_file(str(run / "checkpoints" / "nan_step_0" / "model.safetensors"))
    assert kept.keys() == initial.keys() and all(torch.equal(kept[k], initial[k]) for k in kept)  # the update undone


def test_a_series_checkpoint_of_the_earlier_format_resumes_bit_identically(tmp_path):
    """`series train` checkpoints written before issue 20 name their JSON trainer_state.json and hold no config
    hash: they load as they are, and a run resumed from one ends where an uninterrupted run does."""
    cfg = Cfg()
    _train(tmp_path / "straight", cfg, series=True)
    old = tmp_path / "old"
    _train(old, Cfg(steps=8), series=True)
    for folder in (old / "checkpoints").iterdir():
        state = json.loads((folder / STATE).read_text())
        del state["config_hash"]
        (folder / LEGACY_STATE).write_text(json.dumps(state, indent=1))
        (folder / STATE).unlink()
    assert latest_checkpoint(old) == old / "checkpoints" / "step_8"
    _train(old, cfg, series=True, resume=True)
    _same_run(tmp_path / "straight", old, cfg.steps)
    (old / "checkpoints" / "step_12" / STATE).unlink()  # back to the legacy step 8
    with pytest.raises(InputError, match="the config changed since .*step_8: width: 3 -> 4"):
        _train(old, Cfg(width=4), series=True, resume=True)


def test_an_unusable_checkpoint_is_one_line(tmp_path):
    run = tmp_path / "r"
    _train(run, Cfg(steps=4), series=False)
    folder = run / "checkpoints" / "step_4"
    model = torch.nn.Linear(5, 1)  # another shape: the weights do not fit
    with pytest.raises(InputError, match=f"unreadable checkpoint {folder}: RuntimeError: ") as info:
        load_checkpoint(folder, model)
    assert "\n" not in str(info.value)
    (folder / STATE).write_text('{"config": {}}')
    with pytest.raises(InputError, match="state.json is corrupt \\(no step\\)"):
        load_checkpoint(folder, torch.nn.Linear(3, 1))


BB = ["bb", "train", "--d-model", "32", "--d-mlp", "64", "--seq-len", "16", "--batch", "8", "--eval-batch", "16",
      "--threads", "1", "--steps", "300", "--ckpt-every", "10"]  # fmt: skip


@pytest.mark.slow
def test_kill_9_then_resume_is_bit_identical(tmp_path):
    """A `kill -9` can land anywhere (mid-checkpoint, between a metrics line and its checkpoint); the resumed run
    ends byte for byte where an uninterrupted one does."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    cli = [sys.executable, "-m", "attnlab.cli"]
    straight, cut = tmp_path / "straight", tmp_path / "cut"
    done = subprocess.run([*cli, *BB, "--out", str(straight)], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    proc = subprocess.Popen([*cli, *BB, "--out", str(cut)], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.time() + 120
    while time.time() < deadline and proc.poll() is None:
        if (cut / "metrics.jsonl").exists() and (cut / "metrics.jsonl").read_text().count("\n") >= 3:
            break
        time.sleep(0.02)
    proc.send_signal(signal.SIGKILL)
    proc.communicate(timeout=60)
    assert proc.returncode == -signal.SIGKILL, "the run ended before it could be killed"
    resumed = subprocess.run([*cli, "bb", "train", "--resume", "--out", str(cut)], env=env, capture_output=True,
                             text=True, timeout=300)  # fmt: skip
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    assert (cut / "metrics.jsonl").read_bytes() == (straight / "metrics.jsonl").read_bytes()
    _same_run(straight, cut, 300)
