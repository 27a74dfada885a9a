"""Issue 38: the architecture is discovered once a trace session (`get_arch` walks the module tree), held on the
session and handed to what needs it: one walk for `trace_windows` (recorder and session), one for
`check_traceable`."""

from __future__ import annotations

import torch

from attnlab.tracing.adapters import arch as arch_module
from attnlab.tracing.adapters import hf
from tests.real.families import tiny_family


def _counted(monkeypatch) -> list[int]:
    calls: list[int] = []
    real = arch_module.get_arch

    def counting(model):
        calls.append(1)
        return real(model)

    monkeypatch.setattr(hf, "get_arch", counting)
    return calls


def test_trace_windows_discovers_the_architecture_once(monkeypatch):
    model = tiny_family("llama")
    ids = torch.randint(0, 16, (3, 8))
    calls = _counted(monkeypatch)
    hf.trace_windows(model, ids, batch_size=2, desc="")
    assert len(calls) == 1


def test_check_traceable_discovers_the_architecture_once(monkeypatch):
    model = tiny_family("llama")
    calls = _counted(monkeypatch)
    hf.check_traceable(model)
    assert len(calls) == 1


def test_a_scan_discovers_the_architecture_once(monkeypatch, tmp_path):
    """A whole scan of two domains (load check, traceability check, shape checks, every domain's windows and the
    kept patterns) walks the module tree once: `load_checked` discovers it and hands it on (it walked 4 times before
    the first window and once more per domain before issue 38)."""
    from attnlab.scan import ScanConfig, scan
    from tests.real.conftest import save_tiny_hf_folder

    folder = save_tiny_hf_folder(tmp_path / "m", "llama")
    calls: list[int] = []
    real = arch_module.get_arch

    def counting(model):
        calls.append(1)
        return real(model)

    monkeypatch.setattr(hf, "get_arch", counting)
    monkeypatch.setattr(arch_module, "get_arch", counting)
    config = ScanConfig(model=str(folder), domains=("prose", "code"), samples=2, tokens=16, pattern_heads=((0, 0),))
    scan(config, tmp_path / "run")
    assert len(calls) == 1


def test_repeated_trace_calls_on_a_loaded_model_reuse_its_architecture_and_factors(monkeypatch):
    """Issue 41's one-call goal: a notebook's repeated `attnlab.trace(loaded, ids)` walks the module tree once and
    computes the value-norm factors once (they are the same numbers: the statistics of both calls are equal), and
    again only when W_O changes in place (then the value norms change with it). A bare module walks once a call.
    The wrapper is what `attnlab.load_model` makes of a model object; it traces to the same statistics as the
    module itself."""
    import numpy as np

    import attnlab
    from attnlab.tracing.adapters import hf_attention

    model = tiny_family("llama")
    loaded = attnlab.load_model(model)
    assert loaded.model is model and loaded.tokenizer is None
    ids = torch.randint(0, 16, (2, 8))
    walks: list[int] = []
    factors: list[int] = []
    real_arch, real_factor = arch_module.get_arch, hf_attention.value_factor
    monkeypatch.setattr(arch_module, "get_arch", lambda m: walks.append(1) or real_arch(m))
    monkeypatch.setattr(hf, "get_arch", lambda m: walks.append(1) or real_arch(m))
    monkeypatch.setattr(hf, "value_factor", lambda w, n: factors.append(1) or real_factor(w, n))
    first, second = attnlab.trace(loaded, ids), attnlab.trace(loaded, ids)
    n_layers = model.config.num_hidden_layers
    assert len(walks) == 1 and len(factors) == n_layers
    np.testing.assert_array_equal(first.value_norm, second.value_norm)
    with torch.no_grad():
        loaded.arch.out_proj[0].weight.mul_(2.0)  # in place: the factors' stamp (_version) changes
    third = attnlab.trace(loaded, ids)
    assert len(factors) == n_layers + 1  # layer 0's recomputed, the others kept
    assert not np.allclose(third.value_norm[0], first.value_norm[0])
    walks.clear()
    bare = [attnlab.trace(model, ids), attnlab.trace(model, ids)]
    assert len(walks) == 2
    assert bare[0].heads.equals(third.heads) and bare[0].residuals.equals(third.residuals)


def test_load_model_refuses_what_it_cannot_wrap_in_one_line():
    import pytest

    import attnlab
    from attnlab.errors import InputError
    from attnlab.toy.model import ToyConfig, ToyTransformer

    toy = ToyTransformer(ToyConfig(vocab=16, d_model=16, n_heads=2, n_layers=2, max_len=8).validate())
    for bad, kwargs, says in ((toy, {}, "ToyTransformer"), (tiny_family("llama"), {"dtype": "bfloat16"}, ".to()"),
                              ("smollm2", {"tokenizer": object()}, "tokenizer=")):  # fmt: skip
        with pytest.raises(InputError, match=says):
            attnlab.load_model(bad, **kwargs)
