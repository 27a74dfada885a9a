"""Issue 13: the fused attention path and the cheaper NaN guard change no result beyond a stated tolerance."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from attnlab.toy.model import FUSED_MIN_LEN, ToyConfig, ToyTransformer
from attnlab.training import loop as training
from tests.numerics import assert_close


def _model(T: int, attn: str = "softmax", seed: int = 0, **kw) -> ToyTransformer:
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return ToyTransformer(
            ToyConfig(vocab=20, d_model=32, d_mlp=64, n_heads=2, n_layers=2, max_len=T, attn=attn, **kw)
        )


def _explicit(model: ToyTransformer) -> dict:
    """Hooks that read the scores (returning None) force the explicit path without changing a value."""
    return {f"blocks.{i}.attn.hook_attn_scores": (lambda x, name: None) for i in range(model.cfg.n_layers)}


def _loss_and_grads(model: ToyTransformer, x: torch.Tensor, hooks: dict | None) -> tuple[torch.Tensor, dict]:
    model.zero_grad(set_to_none=True)
    with model.hooks(hooks):
        logits = model(x)
    loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), x.reshape(-1))
    loss.backward()
    return logits.detach(), {n: p.grad.clone() for n, p in model.named_parameters()}


def test_short_sequences_keep_the_explicit_path_bit_identical() -> None:
    model = _model(64)
    x = torch.randint(0, 20, (4, FUSED_MIN_LEN // 2), generator=torch.Generator().manual_seed(1))
    a, ga = _loss_and_grads(model, x, None)
    b, gb = _loss_and_grads(model, x, _explicit(model))
    assert torch.equal(a, b) and all(torch.equal(ga[k], gb[k]) for k in ga)


@pytest.mark.numerics
def test_fused_path_matches_explicit_within_tolerance() -> None:
    T = FUSED_MIN_LEN
    model = _model(T)
    x = torch.randint(0, 20, (3, T), generator=torch.Generator().manual_seed(2))
    fused, gf = _loss_and_grads(model, x, None)
    explicit, ge = _loss_and_grads(model, x, _explicit(model))
    assert not torch.equal(fused, explicit)  # the fused kernel really ran (other rounding)
    # float32, the fused kernel's other summation order through two layers (matrix worst 6e-07, 17x inside)
    assert_close(fused, explicit, atol=1e-5, label="fused logits", kind="observed")
    for k in gf:  # each gradient relative to its largest entry (matrix worst 1.4e-09, 2.2e+02x inside)
        scale = float(ge[k].abs().max().clamp_min(1e-6))
        assert_close(gf[k], ge[k], atol=1e-4 * scale, label=f"fused grad {k}", kind="observed")


def test_relu_attention_never_fused() -> None:
    T = FUSED_MIN_LEN
    model = _model(T, attn="relu")
    x = torch.randint(0, 20, (2, T), generator=torch.Generator().manual_seed(3))
    a, ga = _loss_and_grads(model, x, None)
    b, gb = _loss_and_grads(model, x, _explicit(model))
    assert torch.equal(a, b) and all(torch.equal(ga[k], gb[k]) for k in ga)


@pytest.mark.numerics
def test_training_with_fused_attention_tracks_the_explicit_run() -> None:
    """Ten AdamW steps at T = FUSED_MIN_LEN: the losses agree to 1e-4 (the reordered sums do not grow)."""
    T = FUSED_MIN_LEN
    x = torch.randint(0, 20, (4, T), generator=torch.Generator().manual_seed(4))
    losses = []
    for hooked in (False, True):
        model = _model(T)
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
        run = []
        for _ in range(10):
            with model.hooks(_explicit(model) if hooked else None):
                loss = F.cross_entropy(model(x).reshape(-1, 20), x.reshape(-1))
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            run.append(loss.item())
        losses.append(run)
    assert losses[0][-1] < losses[0][0] - 0.05  # it trains
    # float32, the two summation orders through ten AdamW steps (matrix worst 2.4e-07, 4.2e+02x inside)
    assert_close(losses[0], losses[1], atol=1e-4, label="fused training losses", kind="observed")


@pytest.mark.parametrize("bad", [float("nan"), float("inf")])
def test_norm_guard_sees_every_non_finite_value(bad: float) -> None:
    ts = [torch.ones(3, 4), torch.zeros(5)]
    assert training.norms_finite(ts)
    ts[1][2] = bad
    assert not training.norms_finite(ts)


def test_norm_guard_false_alarm_is_settled_by_name_lookup() -> None:
    """A finite 1e30 overflows the fp32 norm; the exact look-up then finds no non-finite parameter."""
    model = _model(8)
    with torch.no_grad():
        model.unembed.weight[0, 0] = 1e30
    assert not training.norms_finite(list(model.parameters()))
    assert training.first_nonfinite(model) is None
    with torch.no_grad():
        model.unembed.weight[0, 1] = float("nan")
    assert training.first_nonfinite(model) == "unembed.weight"
