"""Checkpoint series (issue 9): a tiny HF model trained here for 30 steps, saved every 15, scanned as a series.

series.csv has one row per checkpoint with its step; each row equals the checkpoint's own scan folder and an
independent trace of the same windows; training lowers the NLL; bad series inputs are one line and leave no folder.
"""

from __future__ import annotations

import csv
import json
import re

import numpy as np
import pytest
import torch

from attnlab.cli import main
from attnlab.hf.loader import load_causal_lm
from attnlab.hf.texts import domain_windows
from attnlab.tracing.adapters.hf import trace_windows
from tests.real.conftest import save_tiny_hf_folder

STEPS = (0, 15, 30)
SMALL = ["--domain", "prose", "--samples", "2", "--tokens", "32"]


def train_checkpoints(root, steps=STEPS, lr=3e-3):
    """Train the tiny llama on prose windows (batch 8, T = 32, AdamW), saving `root`/step-NNN at each of `steps`."""
    src = save_tiny_hf_folder(root / "init", "llama")
    lm = load_causal_lm(str(src))
    model, tok = lm.model, lm.tokenizer
    data = domain_windows(tok, "prose", 64, 32, seed=5)
    opt = torch.optim.AdamW(model.parameters(), lr=lr)
    g = torch.Generator().manual_seed(0)
    model.train()
    for step in range(max(steps) + 1):
        if step in steps:
            model.eval()
            model.save_pretrained(str(root / "ckpts" / f"step-{step:03d}"))
            tok.save_pretrained(str(root / "ckpts" / f"step-{step:03d}"))
            model.train()
        if step == max(steps):
            break
        batch = data[torch.randint(0, len(data), (8,), generator=g)]
        loss = model(input_ids=batch, labels=batch).loss
        opt.zero_grad()
        loss.backward()
        opt.step()
    return root / "ckpts"


@pytest.fixture(scope="module")
def ckpts(tmp_path_factory):
    return train_checkpoints(tmp_path_factory.mktemp("series"))


def _rows(path):
    with open(path) as f:
        return list(csv.DictReader(f))


def test_series_from_a_folder_of_checkpoints(ckpts, tmp_path, capsys):
    out = tmp_path / "series"
    assert main(["scan", "--model", str(ckpts), "--out", str(out)] + SMALL) == 0
    rows = _rows(out / "series.csv")
    assert [int(r["step"]) for r in rows] == list(STEPS)
    assert (out / "figures" / "checkpoint_series.png").stat().st_size > 1000
    subs = sorted((out / "checkpoints").iterdir())
    assert [s.name for s in subs] == [f"{k:03d}-step-{s:03d}" for k, s in enumerate(STEPS)]
    for r, sub in zip(rows, subs):
        heads = _rows(sub / "heads.csv")
        # The table recomputed from the same saved numbers (no other float path): observed 0, here and below.
        assert float(r["mean_sink_score"]) == pytest.approx(np.mean([float(h["sink_score"]) for h in heads]))
        # independently: the same windows traced on the checkpoint itself
        ids = torch.tensor([json.loads(line)["token_ids"] for line in (sub / "samples.jsonl").read_text().splitlines()])
        tr, nll = trace_windows(load_causal_lm(r["model"]).model, ids)
        assert float(r["nll"]) == pytest.approx(float(nll.mean()), rel=1e-6)
        assert float(r["max_abs"]) == pytest.approx(float(tr.max_abs.max()), rel=1e-6)
        assert float(r["value_norm_ratio_median"]) == pytest.approx(float(np.median(tr.value_norm_ratio())), rel=1e-6)
    nlls = [float(r["nll"]) for r in rows]
    assert nlls[2] < nlls[1] < nlls[0]  # the checkpoints really are a training run
    assert "step 30" in capsys.readouterr().out
    page = (out / "report.html").read_text()
    assert page.count('href="checkpoints/') == len(STEPS) and "series-mean_sink_score" in page
    assert all((sub / "report.html").is_file() for sub in subs)


def test_explicit_models_equal_the_folder_series(ckpts, tmp_path):
    a, b = str(ckpts / "step-000"), str(ckpts / "step-030")
    out = tmp_path / "two"
    assert main(["scan", "--model", a, "--model", b, "--out", str(out)] + SMALL) == 0
    rows = _rows(out / "series.csv")
    assert [int(r["step"]) for r in rows] == [0, 30]
    again = tmp_path / "folder"
    assert main(["scan", "--model", str(ckpts), "--out", str(again)] + SMALL) == 0
    whole = {r["step"]: r for r in _rows(again / "series.csv")}
    for r in rows:  # the same checkpoint gives the same row in either series
        assert {k: v for k, v in r.items() if k not in ("checkpoint", "model")} == {
            k: v for k, v in whole[r["step"]].items() if k not in ("checkpoint", "model")
        }


@pytest.mark.parametrize(
    "extra, message",
    [
        (["--model", "{a}", "--model", "{a}"], "repeats a checkpoint"),
        (["--model", "{a}", "--model", "{b}", "--revision", "r1", "--revision", "r2"], "not both"),
        (["--model", "{empty}"], "holds no checkpoint folders"),
    ],
)
def test_bad_series_is_one_line_and_leaves_no_folder(ckpts, tmp_path, capsys, extra, message):
    (tmp_path / "empty").mkdir()
    subs = {"a": str(ckpts / "step-000"), "b": str(ckpts / "step-015"), "empty": str(tmp_path / "empty")}
    out = tmp_path / "o"
    rc = main(["scan"] + [x.format(**subs) for x in extra] + ["--out", str(out)] + SMALL)
    err = capsys.readouterr().err.strip()
    assert rc == 1 and message in err and len(err.splitlines()) == 1, err
    assert not out.exists()


def test_two_checkpoints_of_a_series_compare_side_by_side(ckpts, tmp_path):
    """Issue 21: each checkpoint's folder of a series is a `scan` run of its own, so `attnlab compare` draws two
    checkpoints' grids and their difference (second − first of the sink scores in their heads.csv); statistics
    that neither measured (row entropy under the default fused statistics) get no view."""
    import pandas as pd

    from attnlab.compare import CompareConfig, compare

    out = tmp_path / "series"
    assert main(["scan", "--model", str(ckpts), "--out", str(out)] + SMALL) == 0
    first, last = sorted((out / "checkpoints").iterdir())[:: len(STEPS) - 1]
    assert json.loads((first / "manifest.json").read_text())["command"] == "scan"
    assert json.loads((first / "config.json").read_text())["model"].endswith("step-000")
    res = compare(CompareConfig(run_dirs=(str(first), str(last))), tmp_path / "cmp")
    page = (res.path / "report.html").read_text()
    assert re.search(r'id="[\w-]*scan-pair"', page) and not re.search(r"\bNaN\b", page)
    assert re.findall(r'"label": "([^"]*)"', page) == ["sink score: prose", "value-norm ratio: prose"]
    a, b = (pd.read_csv(p / "heads.csv") for p in (first, last))
    assert (b["sink_score"] - a["sink_score"]).abs().max() > 0  # training moved the sink scores


def test_each_checkpoint_of_a_series_is_loaded_once(ckpts, tmp_path, monkeypatch):
    """Issue 38: a series checks every checkpoint before its folder opens but reads each one's weights once (the
    old code loaded each twice: once to check, once to scan). Checkpoints of one architecture share the check."""
    import attnlab.hf.loader as loader

    loads: list[str] = []
    real = loader._load_weights

    def counted(path, place):
        loads.append(path.name)
        return real(path, place)

    monkeypatch.setattr(loader, "_load_weights", counted)
    assert main(["scan", "--model", str(ckpts), "--out", str(tmp_path / "s")] + SMALL) == 0
    assert sorted(loads) == [f"step-{s:03d}" for s in STEPS]


def test_same_architecture_tells_module_trees_apart(ckpts):
    """The shared check holds only for one module tree: checkpoints of one training run share it, a config that
    builds another tree does not (that checkpoint is then loaded and checked on its own)."""
    from transformers import AutoConfig

    from attnlab.hf.loader import same_architecture

    a = AutoConfig.from_pretrained(str(ckpts / "step-000"))
    b = AutoConfig.from_pretrained(str(ckpts / "step-030"))
    assert same_architecture(a, b)
    b.num_hidden_layers += 1
    assert not same_architecture(a, b)
