"""R14 ("all tokens become one token"): decoding every position at every pass end, on tiny random Llamas."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM

from attnlab.consensus.modelrun import decode_summary
from attnlab.consensus.realmodel import StackRunner, iterate_stack, top1_stats
from attnlab.consensus.repro.verdicts import R14_SHARE, verdict_R14


def _tiny(seed: int = 0) -> LlamaForCausalLM:
    cfg = LlamaConfig(
        vocab_size=101,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=64,
    )
    with torch.random.fork_rng():  # the library initialisers draw from the global generator
        torch.manual_seed(seed)
        return LlamaForCausalLM(cfg).eval()


def _direct(model: LlamaForCausalLM, h: torch.Tensor) -> torch.Tensor:
    return model.lm_head(model.model.norm(h)).argmax(-1)


@pytest.mark.parametrize("mlp", [False, True])
def test_decoded_tokens_are_the_head_argmax_at_every_pass_end(mlp: bool) -> None:
    model = _tiny()
    ids = torch.randint(0, 101, (3, 10), generator=torch.Generator().manual_seed(4))
    runner = StackRunner(model)
    res = iterate_stack(runner, ids, "periodic", 3, mlp=mlp, depth_view=False, decode=True)
    assert res.top1 is not None and res.top1.shape == (3, 4, 10)
    with torch.no_grad():
        h, ctx = runner.prepare(ids)
        assert np.array_equal(res.top1[:, 0], _direct(model, h).numpy())  # pass 0: the embeddings
        for p in range(1, 4):
            for lay in runner.layers:
                h = runner.layer_step(lay, h, ctx, mlp)
            assert np.array_equal(res.top1[:, p], _direct(model, h).numpy()), p
        if mlp:  # one pass with MLPs is the model's own forward: its greedy tokens
            own = model(ids).logits.argmax(-1).numpy()
            assert np.array_equal(res.top1[:, 1], own)
    plain = iterate_stack(runner, ids, "periodic", 3, mlp=mlp, depth_view=False)
    assert plain.top1 is None  # decoding is opt-in and changes no curve
    assert all(np.array_equal(plain.curves[k], res.curves[k]) for k in plain.curves)


def test_identical_hidden_states_decode_to_one_token() -> None:
    model = _tiny(1)
    runner = StackRunner(model)
    x = torch.randn(2, 1, 32, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        top1 = runner.top1(x.expand(2, 9, 32)).numpy()
    st = top1_stats(top1)
    assert np.array_equal(st["share"], [1.0, 1.0]) and np.array_equal(st["distinct"], [1, 1])
    assert np.array_equal(st["mode"], top1[:, 0])


def test_share_distinct_and_mode_by_hand() -> None:
    st = top1_stats(np.array([[[5, 5, 3, 7], [2, 1, 1, 2]]]))  # [prompt, pass, T]
    assert st["share"].tolist() == [[0.5, 0.5]]
    assert st["distinct"].tolist() == [[3, 2]]
    assert st["mode"].tolist() == [[5, 1]]  # a tie goes to the smallest id


def _decode_json(folder: Path, shares: dict[str, float]) -> None:
    """A `decode.json` whose last pass has the given share of positions on token 7 (10 positions, 2 prompts)."""
    groups = {}
    for name, share in shares.items():
        k = round(share * 10)
        last = np.array([[7] * k + list(range(20, 30 - k))] * 2)
        top1 = np.stack([np.tile(np.arange(10), (2, 1)), last], 1)  # [prompt, 2, T]
        groups[name] = decode_summary(top1, {7: " the"})
    (folder / "decode.json").write_text(json.dumps({"groups": groups}))


def test_verdict_R14_reads_decode_json(tmp_path: Path) -> None:
    _decode_json(tmp_path, {"periodic, MLP on": 1.0, "periodic, MLP off": R14_SHARE})
    share, met, why = verdict_R14(tmp_path)
    assert (share, met) == (pytest.approx(R14_SHARE), True)
    assert "' the'" in why and "after 1 passes" in why
    _decode_json(tmp_path, {"periodic, MLP on": 1.0, "periodic, MLP off": 0.8})
    assert verdict_R14(tmp_path)[:2] == (pytest.approx(0.8), False)
    g = json.loads((tmp_path / "decode.json").read_text())["groups"]["periodic, MLP off"]
    assert g["share_mean"] == [0.1, 0.8] and g["distinct_mean"] == [10, 3]
    assert g["final"]["mode_token_text"] == " the" and g["final"]["prompts_with_that_mode"] == 2
