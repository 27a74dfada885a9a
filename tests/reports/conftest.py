"""Small runs of every study, built once per session through the Python API, and one shared headless Chromium.

`browse(path, shot)` opens a report in a new page of the shared browser and yields (page, console_errors); the
screenshot goes into the test's tmp folder (and, with ATTNLAB_SCREENSHOTS=FOLDER, its first screen into FOLDER: how
docs/figures/reports/ is made). Without Chromium the browser tests skip (fail under CI).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from attnlab.core.clitools import threads
from tests.browser import launch_browser

TINY_BB = dict(d_model=32, d_mlp=64, seq_len=32, batch=16, eval_batch=32, lin_every=5, lin_until=10, ckpt_every=10)


@pytest.fixture(scope="session")
def runs(tmp_path_factory) -> dict[str, Path]:
    """One small run folder per study page, all under one root (the index page's folder)."""
    from attnlab import bb, paths
    from attnlab.bb.config import resolve_config
    from attnlab.consensus.config import PhaseConfig, SimulateConfig
    from attnlab.consensus.run import phase, simulate
    from attnlab.scan import ScanConfig, scan
    from tests.real.conftest import save_tiny_hf_folder

    root = tmp_path_factory.mktemp("runs")
    model = save_tiny_hf_folder(tmp_path_factory.mktemp("models") / "tiny-llama", "llama")
    out: dict[str, Path] = {}
    with threads(1):
        out["bb"] = bb.train(resolve_config("cpu", steps=20, **TINY_BB), root / "bb", progress=False).path
        out["sim3"] = simulate(SimulateConfig(n=8, d=3, batch=4, t_max=4.0, record_every=2), root / "sim3").path
        out["sim4"] = simulate(SimulateConfig(n=8, d=4, batch=4, t_max=4.0, record_every=4), root / "sim4").path
        out["phase"] = phase(
            PhaseConfig(n=8, d=4, starts=4, num_betas=6, beta_max=4.0, t_max=4.0), root / "phase", progress=False
        ).path
        out["solve"] = paths.solve(paths.SolveConfig(P=20, n_test=40, N=10.0, temperature=0.05), root / "solve").path
        out["sweep"] = paths.sweep(
            paths.SweepConfig(P=20, n_test=40, Ns=(30.0, 10.0), temperature=0.05), root / "paths-sweep"
        ).path
        cfg = ScanConfig(
            model=str(model), domains=("prose", "code"), tokens=16, samples=2, n_auto_pattern_heads=1,
            pattern_heads=((1, 3),), stats="full",  # every per-head column (the row entropy too) for the views
        )  # fmt: skip
        out["scan"] = scan(cfg, root / "scan").path
    return out


@pytest.fixture(scope="module")  # one browser per module; a second sync Playwright may not run beside it
def browser() -> Iterator[Any]:
    with launch_browser() as b:
        yield b


@pytest.fixture
def browse(browser):
    @contextmanager
    def open_report(path: Path, shot: Path) -> Iterator[tuple[Any, list[str]]]:
        page = browser.new_page(viewport={"width": 1280, "height": 900})
        errors: list[str] = []
        page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
        page.on("pageerror", lambda e: errors.append(str(e)))
        page.goto(path.resolve().as_uri())
        page.wait_for_load_state("load")
        try:
            yield page, errors
        finally:
            docs = os.environ.get("ATTNLAB_SCREENSHOTS")  # e.g. docs/figures/reports: the pages as last seen
            if docs:  # before the full-page shot, which moves the page back to its top
                Path(docs).mkdir(parents=True, exist_ok=True)
                page.screenshot(path=str(Path(docs) / shot.name))  # the screen as the test left it: small files
            page.screenshot(path=str(shot), full_page=True)
            page.close()

    return open_report
