"""Headless Chromium for the page tests (Playwright driving Debian's ``/usr/bin/chromium``).

Shared by ``test_web_browser.py`` and ``test_web_map.py``: import ``sync_api``
(which skips the importing module, with the reason, when Playwright or Chromium
is missing) and the ``browser`` fixture, and open pages with :func:`open_page`,
which fails the test on any error the page throws.
"""

from __future__ import annotations

import contextlib
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]

sync_api = pytest.importorskip("playwright.sync_api", reason="playwright is not installed (pip install -e '.[test]')")
if not Path(CHROMIUM).exists():
    pytest.skip(f"Chromium not found at {CHROMIUM} (Debian: apt-get install -y chromium)", allow_module_level=True)


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    with sync_api.sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            yield b
        finally:
            b.close()


@contextlib.contextmanager
def open_page(browser: Any, *, width: int, height: int, timeout_ms: int) -> Iterator[Any]:
    """A page in a fresh context; page errors and failed requests (but the event stream) fail the test."""
    context = browser.new_context(viewport={"width": width, "height": height})
    pg = context.new_page()
    pg.set_default_timeout(timeout_ms)
    errors: list[str] = []
    pg.on("pageerror", lambda exc: errors.append(str(exc)))
    pg.on(
        "requestfailed",
        lambda req: errors.append(f"request failed: {req.url}") if not req.url.endswith("/api/events") else None,
    )
    yield pg
    context.close()
    assert not errors, f"errors in the page: {errors}"


def log_in(pg: Any, daemon: Any) -> None:
    """Follow a one-time link from the daemon's socket (as `ctxos open` does); it redirects to the page."""
    link = daemon.call("web_login")["url"]
    assert link.startswith(daemon.http_url + "/login?code=")
    pg.goto(link)
    assert pg.url == daemon.http_url + "/", pg.url  # the code is gone from the address bar
