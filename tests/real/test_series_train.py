"""`attnlab series train` (R25): HF checkpoints the loader reads, a bit-identical resume, one-line errors, and
the series scan's sink dynamics (onsets, verdict) on constructed curves."""

from __future__ import annotations

import json

import numpy as np
import pytest
from safetensors.numpy import load_file

from attnlab.bb.repro.verdicts import verdict_R25
from attnlab.cli import main
from attnlab.core.curves import onset
from attnlab.hf.loader import load_causal_lm
from attnlab.runs import write_json

TINY = ["--layers", "1", "--heads", "2", "--d-model", "16", "--d-mlp", "32", "--seq-len", "12", "--batch", "4",
        "--save-every", "2", "--vocab-chars", "12", "--threads", "1"]  # fmt: skip


def test_checkpoints_load_and_resume_is_bit_identical(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    assert main(["series", "train", "--steps", "6", "--out", str(a)] + TINY) == 0
    assert main(["series", "train", "--steps", "4", "--out", str(b)] + TINY) == 0
    assert main(["series", "train", "--steps", "6", "--out", str(b), "--resume", "--threads", "1"]) == 0
    assert sorted(p.name for p in (a / "checkpoints").iterdir()) == ["step_0", "step_2", "step_4", "step_6"]
    wa, wb = (load_file(str(x / "checkpoints" / "step_6" / "model.safetensors")) for x in (a, b))
    assert wa.keys() == wb.keys() and all(np.array_equal(wa[k], wb[k]) for k in wa)
    ma, mb = ((x / "metrics.jsonl").read_text() for x in (a, b))
    assert ma == mb
    lm = load_causal_lm(str(a / "checkpoints" / "step_6"))  # a HF folder the scan can read
    text = (a / "bb_eval.txt").read_text()[:20]
    ids = lm.tokenizer(text, add_special_tokens=False)["input_ids"]
    assert lm.tokenizer.decode(ids) == text and lm.model.config.num_hidden_layers == 1
    assert lm.tokenizer.bos_token_id == json.loads((a / "summary.json").read_text())["task"]["bos_id"]


@pytest.mark.parametrize(
    "args, words",
    [
        (["--d-model", "30", "--heads", "4"], "d_model=30 is not divisible by n_heads=4"),
        (["--save-every", "0"], "save_every"),
        (["--resume"], "--resume needs --out"),
    ],
)
def test_bad_options_are_one_line(tmp_path, capsys, args, words):
    assert main(["series", "train"] + args) == 1
    err = capsys.readouterr().err.strip()
    assert words in err and len(err.splitlines()) == 1


def test_resume_refuses_a_changed_model(tmp_path, capsys):
    out = tmp_path / "r"
    assert main(["series", "train", "--steps", "2", "--out", str(out)] + TINY) == 0
    assert main(["series", "train", "--steps", "4", "--out", str(out), "--resume", "--layers", "2"]) == 1
    err = capsys.readouterr().err.strip()
    assert "n_layers: 1 -> 2" in err and len(err.splitlines()) == 1


def test_onsets_and_the_r25_verdict(tmp_path):
    steps = [0, 10, 20, 30, 40]
    assert onset(steps, [0.1, 0.2, 0.6, 0.9, 0.8], rising=True) == 20  # half of 0.1 -> 0.9 at 0.5
    assert onset(steps, [3.0, 2.9, 2.1, 1.0, 1.0], rising=False) == 30  # half of 3 -> 1 is 2.0: first at step 30
    assert onset(steps, [1.0, 0.9, 0.8, 0.7, 0.6], rising=True) is None
    rows = [
        {"step": s, "domain": "text", "sink_heads": "1.0", "attn_sink": a, "value_norm_ratio": v, "resid_norm_ratio": r}
        for s, a, v, r in zip(steps, [0.1, 0.7, 0.9, 0.9, 0.9], [1.0, 0.9, 0.3, 0.2, 0.2], [1, 1, 1.2, 3, 3])
    ]
    write_json(tmp_path / "summary.json", {"sink_dynamics": rows})
    gap, met, why = verdict_R25(tmp_path)
    assert met and gap == 30 - 10 and "sink 10" in why
    rows[1]["resid_norm_ratio"] = 5.0  # the residual peaks before the value drains
    write_json(tmp_path / "summary.json", {"sink_dynamics": rows})
    assert not verdict_R25(tmp_path)[1]


def test_llama_series_loads(tmp_path):
    out = tmp_path / "l"
    assert main(["series", "train", "--arch", "llama", "--steps", "2", "--out", str(out)] + TINY) == 0
    lm = load_causal_lm(str(out / "checkpoints" / "step_2"))
    assert lm.model.config.model_type == "llama" and lm.model.config.num_attention_heads == 2
