"""Models users already hold (issue 40 item 9): `attnlab.trace` and `hook_points` take a TransformerLens 4
`TransformerBridge` and an nnsight `LanguageModel` as they are, through the transformers model inside
(`tracing/adapters/held.py`). Each runs in a fresh interpreter: importing TransformerLens changes the process's
logging and warning filters. Skipped where the library is not installed (both are in the lock: `attnlab[lens]`)."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
# A tiny random float64 Llama (built twice from one seed: the wrapper's and a plain one), a saved byte-level tokenizer
# (TransformerLens reloads it from its folder), the plain model's trace as the reference.
SETUP = """
import json, sys, tempfile, warnings
import torch
from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM
import attnlab
from tests.real.conftest import byte_level_tokenizer

warnings.simplefilter("ignore")
folder = tempfile.mkdtemp()
byte_level_tokenizer()[0].save_pretrained(folder)
tok = AutoTokenizer.from_pretrained(folder)

def build():
    with torch.random.fork_rng():
        torch.manual_seed(0)
        config = LlamaConfig(vocab_size=259, hidden_size=32, intermediate_size=48, num_hidden_layers=2,
                             num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64)
        return LlamaForCausalLM(config).eval().double()

ids = torch.randint(3, 259, (2, 12), generator=torch.Generator().manual_seed(1))
plain = build()
ref = attnlab.trace(plain, ids, logits=True, stats="full", keep_patterns=[(1, 2)])

def compare(wrapped):
    tr = attnlab.trace(wrapped, ids, logits=True, stats="full", keep_patterns=[(1, 2)])
    by_text = attnlab.trace(wrapped, ["hello world", "attn sinks!"])  # the wrapper's own tokenizer
    diff = lambda a, b: float(abs(a - b).max())
    return {
        "sink": diff(tr.heads["sink_score"], ref.heads["sink_score"]),
        "entropy": diff(tr.heads["row_entropy"], ref.heads["row_entropy"]),
        "logits": diff(tr.logits, ref.logits),
        "pattern": diff(tr.patterns[(1, 2)], ref.patterns[(1, 2)]),
        "points": attnlab.hook_points(wrapped) == attnlab.hook_points(plain),
        "text_shape": list(by_text.sink_score_per_sample.shape),
    }
"""
BRIDGE = """
from transformer_lens.model_bridge import TransformerBridge

bridge = TransformerBridge.boot_transformers("tiny-llama", hf_model=build(), tokenizer=tok)
tree = [(n, type(m).__name__) for n, m in bridge.original_model.named_modules()]
with torch.no_grad():
    before = bridge(ids, return_type="logits")
result = compare(bridge)
with torch.no_grad():
    after = bridge(ids, return_type="logits")
result["bridge_kept"] = tree == [(n, type(m).__name__) for n, m in bridge.original_model.named_modules()]
result["forward_kept"] = bool(torch.equal(before, after))
results["transformer_lens"] = result
"""
NNSIGHT = """
from nnsight import LanguageModel

lm = LanguageModel(build(), tokenizer=tok)
result = compare(lm)
with lm.trace(ids):
    out = lm.output.save()
with torch.no_grad():
    result["nnsight_kept"] = bool(torch.equal(out.logits, plain(ids).logits))
plain.save_pretrained(folder)  # beside the tokenizer
lazy = LanguageModel(folder, tokenizer=tok, dtype=torch.float64)  # meta tensors until dispatched
result["lazy_undispatched"] = lazy.dispatched is False
loaded = attnlab.trace(LlamaForCausalLM.from_pretrained(folder, dtype=torch.float64).eval(), ids, logits=True)
result["lazy_logits"] = float(abs(attnlab.trace(lazy, ids, logits=True).logits - loaded.logits).max())
results["nnsight"] = result
"""


LIBRARIES = {name: code for name, code in (("transformer_lens", BRIDGE), ("nnsight", NNSIGHT))
             if importlib.util.find_spec(name) is not None}  # fmt: skip


@pytest.fixture(scope="module")
def results(tmp_path_factory) -> dict:
    """{library: what its wrapped model's trace gave}, for the libraries installed, from one fresh interpreter."""
    if not LIBRARIES:
        return {}
    code = SETUP + "results = {}\n" + "".join(LIBRARIES.values()) + "print(json.dumps(results))\n"
    env = dict(os.environ, PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1", HF_HUB_OFFLINE="1")
    out = subprocess.run([sys.executable, "-c", code], cwd=tmp_path_factory.mktemp("held"), env=env,
                         capture_output=True, text=True, timeout=300)  # fmt: skip
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def _same_trace(result: dict) -> None:
    # The transformers forward of the same float64 weights in both: equal up to float64 summation order, 1e-12
    # (observed: 0). The two strings are 11 tokens each under the byte-level tokenizer.
    for key in ("sink", "entropy", "logits", "pattern"):
        assert result[key] <= 1e-12, (key, result[key])
    assert result["points"] and result["text_shape"] == [2, 2, 4]


@pytest.mark.skipif(importlib.util.find_spec("transformer_lens") is None, reason="transformer-lens is not installed")
def test_a_transformerlens_bridge_traces_as_its_transformers_model(results):
    """The trace of a bridge equals the plain model's; the bridge's components and forward are as before after."""
    result = results["transformer_lens"]
    _same_trace(result)
    assert result["bridge_kept"] and result["forward_kept"]


@pytest.mark.skipif(importlib.util.find_spec("nnsight") is None, reason="nnsight is not installed")
def test_an_nnsight_language_model_traces_as_its_transformers_model(results):
    """The trace of a LanguageModel equals the plain model's; nnsight's own trace runs as before after."""
    result = results["nnsight"]
    _same_trace(result)
    assert result["nnsight_kept"]
    # Built from a folder, nnsight loads the weights at its first trace; attnlab's trace loads them too, and traces
    # as the same folder loaded by transformers does.
    assert result["lazy_undispatched"] and result["lazy_logits"] <= 1e-12, result
