"""Which attention kernel ran (issue 41): `Trace.attention_paths` per layer, saved and loaded, and the refusal of a
forward that sdpa would run through its T×T math kernel when the scores do not fit."""

from __future__ import annotations

import pytest
import torch

import attnlab
from attnlab.errors import InputError
from attnlab.runs import budget
from attnlab.tracing.adapters.hf import windows_nll
from attnlab.tracing.kernels import KERNELS, check_math_fallback, math_scores_bytes, sdpa_choice
from attnlab.tracing.recorder import TraceRecorder
from tests.real.conftest import tiny_llama
from tests.real.families import tiny_family

IDS = torch.randint(3, 64, (2, 40), generator=torch.Generator().manual_seed(0))


@pytest.mark.parametrize(("stats", "want"), [("fast", "flash"), ("full", "blocked"), ("chunked", "eager")])
def test_each_path_names_its_kernel(stats: str, want: str, tmp_path) -> None:
    """The cpu's three paths: the flash kernel (default), the blocked full-row path, the chunked eager function;
    the record survives save and load."""
    tr = attnlab.trace(tiny_llama(layers=2), IDS, stats=stats)
    assert tr.attention_paths == [want, want]
    tr.save(tmp_path / "t")
    assert attnlab.load_trace(tmp_path / "t").attention_paths == [want, want]


def test_kept_pattern_layer_is_eager_others_flash() -> None:
    tr = attnlab.trace(tiny_llama(layers=2), IDS, keep_patterns=[(1, 0)])
    assert tr.attention_paths == ["flash", "eager"]


def test_learned_sink_full_takes_the_flash_kernel() -> None:
    """A learned sink (gpt-oss) rules out the blocked path: stats="full" runs the flash kernel and the swapped
    call; a sliding window transformers gave a mask for stays fused too."""
    model = tiny_family("gpt-oss")
    tr = attnlab.trace(model, torch.randint(3, 60, (1, 12)), stats="full")
    assert set(tr.attention_paths) == {"flash"}
    assert all(p in KERNELS for p in tr.attention_paths)


def test_layers_taking_several_kernels_are_joined() -> None:
    rec = TraceRecorder(2, 1, 4)
    for path in ("flash", "flash", "eager", "flash"):
        rec.attention_path(0, path)
    rec.attention_path(1, "blocked")
    assert rec.paths == ["flash+eager", "blocked"]


def test_sdpa_choice_on_the_cpu() -> None:
    """Dropout (training) or value heads of another size leave sdpa only its math kernel; plain inputs take flash."""
    q = torch.randn(1, 2, 8, 16)
    assert sdpa_choice(q, q, q, None, 0.0, True) == "flash"
    assert sdpa_choice(q, q, q, None, 0.1, True) == "math"
    assert sdpa_choice(q, q, torch.randn(1, 2, 8, 12), None, 0.0, True) == "math"
    assert math_scores_bytes(2, 3, 10, torch.bfloat16) == 2 * 2 * 3 * 100 * 4


def _dropout_llama() -> torch.nn.Module:
    model = tiny_llama(layers=2)
    model.config.attention_dropout = 0.1
    return model


def test_math_fallback_refused_before_the_forward(monkeypatch) -> None:
    """Dropout in training mode forces sdpa's math kernel; with a memory budget below its scores the forward is
    refused in one line before it runs (no hook, no layer ran), and runs when the scores fit or in eval mode."""
    model = _dropout_llama().train()
    ran: list[int] = []
    model.model.layers[0].register_forward_pre_hook(lambda m, a: ran.append(1))
    need = math_scores_bytes(2, model.config.num_attention_heads, 40, torch.float32)
    monkeypatch.setattr(budget, "memory_limit", lambda: need - 1)
    with pytest.raises(InputError, match=r"math kernel.*\[2,4,40,40\] scores") as err:
        windows_nll(model, IDS, batch_size=2)
    assert "\n" not in str(err.value) and not ran
    monkeypatch.setattr(budget, "memory_limit", lambda: need)
    assert windows_nll(model, IDS, batch_size=2).shape == (2,)
    monkeypatch.setattr(budget, "memory_limit", lambda: 1)
    model.eval()  # no dropout: the flash kernel takes it
    assert windows_nll(model, IDS, batch_size=2).shape == (2,)


def test_math_check_only_for_sdpa(monkeypatch) -> None:
    """A model on eager attention (chosen by the user) or a trace (our own kernels) is never refused."""
    model = _dropout_llama().train()
    monkeypatch.setattr(budget, "memory_limit", lambda: 1)
    model.set_attn_implementation("eager")
    check_math_fallback(model, (4, 2, 8), (2, 40), False)
    model.set_attn_implementation("sdpa")
    with pytest.raises(InputError):
        check_math_fallback(model, (4, 2, 8), (2, 40), False)
    assert attnlab.trace(model, IDS).attention_paths == ["flash", "flash"]
