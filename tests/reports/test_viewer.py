"""The scan's attention view (issue 21, first steps): the layer × head grid coloured by any per-head statistic of
heads.csv (menu), and the pattern's axes labelled with the window's tokens."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd

from attnlab.report import element_id


def test_grid_switches_statistic_and_patterns_show_tokens(runs, browse, tmp_path):
    run = runs["scan"]
    grid, view = element_id(run, "grid"), element_id(run, "pattern")
    heads = pd.read_csv(run / "heads.csv")
    with browse(run / "report.html", tmp_path / "viewer.png") as (page, errors):
        page.wait_for_selector(f"#{grid} .main-svg")
        page.locator(f"#{grid} .updatemenu-header-group").click()
        labels = page.evaluate(f"document.getElementById('{grid}').layout.updatemenus[0].buttons.map(b => b.label)")
        page.locator(f"#{grid} .updatemenu-dropdown-button").nth(labels.index("row entropy: code")).click()
        page.wait_for_function(f"document.getElementById('{grid}')._fullLayout.title.text === 'row entropy: code'")
        z = np.array(page.evaluate(f"document.getElementById('{grid}').data[0].z"), dtype=float)
        code = heads[heads["domain"] == "code"]
        want = np.zeros_like(z)
        want[code["layer"], code["head"]] = code["row_entropy"]
        assert np.allclose(z, want, rtol=1e-3, atol=1e-6)  # the grid shows heads.csv's entropy of that domain
        tokens = json.loads((run / "patterns" / "prose" / "tokens.json").read_text())
        page.wait_for_selector(f"#{view}-0 .main-svg")
        data = page.evaluate(f"document.getElementById('{view}-0').data[0]")
        assert data["x"] == data["y"] == [f"{i} {json.dumps(t)}" for i, t in enumerate(tokens)]
        assert page.locator(f"#{view}-0 .xtick").count() > 0
        assert errors == []
