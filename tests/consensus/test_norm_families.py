"""`consensus norm` (R13) on every tiny family: the pre-attention norm is found by architecture discovery, models
without one with a gain are refused with one line, and `consensus model`'s norm-gain CV reads the same norm."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from attnlab.consensus.normproj import SphereRunner, check_input_norms, consensus_curves, fit_layers
from attnlab.consensus.realmodel import StackRunner, norm_gain_cv
from attnlab.errors import InputError
from tests.numerics import assert_close
from tests.real.families import FAMILIES, V, tiny_family

REFUSED = {"olmo2": "no pre-attention norm", "olmo": "a norm without a learned gain"}
WITH_GAIN = [n for n in [*FAMILIES, "falcon"] if n not in REFUSED]


@pytest.mark.parametrize("name", WITH_GAIN)
def test_norm_fit_and_iteration_on_every_family_with_a_gain(name: str) -> None:
    model = tiny_family(name)
    runner = StackRunner(model)
    ids = torch.randint(3, V, (4, 8), generator=torch.Generator().manual_seed(0))
    norms, err = fit_layers(runner, ids)
    assert len(norms) == runner.n_layers and all(np.isfinite(err["rel_error_mean"]))
    if not name.startswith("gemma"):  # Gemma stores its gain as an offset (x * (1 + w)); w = 0 here, CV = 0/0
        assert np.isfinite(norm_gain_cv(runner)).all()
    curves = consensus_curves(model, norms, ids, passes=2, mlp=False)
    assert curves["real"].shape == curves["ideal"].shape == (4, 2 * runner.n_layers + 1)
    assert np.isfinite(curves["ideal"]).all()


@pytest.mark.numerics
def test_sphere_runner_replaces_exactly_the_discovered_norm() -> None:
    """With the sphere equal to the real norm of an equal-gain RMSNorm (c = 0, s = gain), the idealised pass equals
    the real one; with another scale it differs (GPT-2: the norm is `ln_1`, a LayerNorm, found by discovery)."""
    model = tiny_family("llama")
    runner = StackRunner(model)
    for layer in runner.layers:
        runner.input_norm(layer).weight.data.fill_(1.5)
    ids = torch.randint(3, V, (2, 8), generator=torch.Generator().manual_seed(1))
    norms, _ = fit_layers(runner, ids)
    with torch.no_grad():
        h, ctx = runner.prepare(ids)
        real = runner.layer_step(runner.layers[0], h, ctx, True)
        ideal = SphereRunner(model, norms).layer_step(runner.layers[0], h, ctx, True)
    # float32 model: the sphere's x / rms against RMSNorm's (matrix worst 7.5e-09, 1.4e+03x inside)
    assert_close(ideal, real, atol=1e-5, rtol=1e-5, label="sphere runner vs RMSNorm", kind="observed")
    gpt2 = StackRunner(tiny_family("gpt2"))
    assert gpt2.input_norm(gpt2.layers[0]) is gpt2.layers[0].ln_1


@pytest.mark.parametrize("name", sorted(REFUSED))
def test_models_without_a_gained_input_norm_are_refused(name: str) -> None:
    runner = StackRunner(tiny_family(name))
    with pytest.raises(InputError, match=f"block 0 has {REFUSED[name]}; consensus norm needs one with a gain"):
        check_input_norms(runner)
    if name == "olmo2":
        assert np.isnan(norm_gain_cv(runner)).all()  # post-norm: no pre-attention gain to measure
