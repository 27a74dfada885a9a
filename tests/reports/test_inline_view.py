"""The notebook view of a trace (issue 21): `pattern_view(attnlab.trace(...), tokens)` is one HTML snippet that
Jupyter shows inline and that draws each kept head on a canvas, the tokens on hover, offline."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import attnlab
from attnlab.errors import InputError
from attnlab.view.inline import pattern_view
from tests.real.conftest import tiny_llama


def _trace():
    model = tiny_llama()
    ids = torch.randint(3, 64, (2, 12), generator=torch.Generator().manual_seed(0))
    return attnlab.trace(model, ids, keep_patterns=[(1, 0), (0, 3)]), [f"t{i}" for i in range(12)]


def test_pattern_view_draws_each_head_with_token_hover(browse, tmp_path):
    tr, tokens = _trace()
    view = pattern_view(tr, tokens, sample=1)
    assert view._repr_html_() == view.html and "<script" in view.html  # what Jupyter displays, one call
    A = np.asarray(tr.patterns[(0, 3)])[1]
    keys = list(dict(tr.patterns.items()))
    assert sorted(keys) == ["0.3", "1.0"]
    with browse(view.save(tmp_path / "view.html"), tmp_path / "inline.png") as (page, errors):
        canvas = page.locator(".attnlab-view canvas")
        assert canvas.get_attribute("data-head") == keys[0] and canvas.get_attribute("width") == "12"
        page.locator(".attnlab-view button", has_text="L1H0").click()
        assert canvas.get_attribute("data-head") == "1.0"
        page.locator(".attnlab-view button", has_text="L0H3").click()
        assert canvas.get_attribute("data-head") == "0.3"
        box = canvas.bounding_box()
        i, j = 7, 2
        page.mouse.move(box["x"] + (j + 0.5) * box["width"] / 12, box["y"] + (i + 0.5) * box["height"] / 12)
        tip = page.locator(".attnlab-view .tip").inner_text()
        assert tip == f'query {i} "t{i}", key {j} "t{j}": weight {A[i, j]:.4f}'
        assert errors == []


def test_pattern_view_refuses_what_it_cannot_show():
    tr, tokens = _trace()
    with pytest.raises(InputError, match=r"^sample must be in \[0, 1\]"):
        pattern_view(tr, tokens, sample=2)
    with pytest.raises(InputError, match="tokens: 3 given for a sequence of 12"):
        pattern_view(tr, tokens[:3])
    with pytest.raises(InputError, match="kept no pattern"):
        pattern_view(attnlab.trace(tiny_llama(), torch.randint(3, 64, (1, 8))), None)
