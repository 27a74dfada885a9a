"""Open report pages in a real headless Chromium (Playwright driving the system browser, no download)."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

CHROMIUM_PATHS = ("/usr/bin/chromium", "/usr/bin/chromium-browser", "/usr/bin/google-chrome")


def chromium_path() -> str | None:
    found = [p for p in CHROMIUM_PATHS if Path(p).exists()]
    return found[0] if found else shutil.which("chromium")


@contextmanager
def launch_browser() -> Iterator[Any]:
    """A headless system Chromium under Playwright; skips (fails under CI) when none is installed."""
    exe = chromium_path()
    if exe is None:
        if os.environ.get("CI"):
            pytest.fail("no Chromium: `make test` installs it (apt-get install chromium)")
        pytest.skip("no Chromium installed (apt-get install chromium)")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=exe, args=["--no-sandbox", "--disable-gpu"])
        try:
            yield browser
        finally:
            browser.close()


@contextmanager
def open_page(path: Path, screenshot: Path | None = None) -> Iterator[tuple[Any, list[str]]]:
    """Yield (page, console_errors) for a local HTML file, in a fresh browser."""
    with launch_browser() as browser:
        page = browser.new_page(viewport={"width": 1280, "height": 900})
        errors: list[str] = []
        page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
        page.on("pageerror", lambda e: errors.append(str(e)))
        page.goto(path.resolve().as_uri())
        page.wait_for_load_state("load")
        try:
            yield page, errors
        finally:
            if screenshot is not None:
                page.screenshot(path=str(screenshot), full_page=True)
