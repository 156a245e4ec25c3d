"""Headless Chromium from Debian's package, driven by Playwright, for tests of the web chat page.

Playwright's own browser downloads are not used (`playwright install` needs the internet): the
Python package brings its driver, and the browser is the system's `/usr/bin/chromium`.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest
from playwright.async_api import BrowserContext, async_playwright

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
)
#: Longest wait for the browser to start or for anything on a page, in seconds.
BROWSER_WAIT_S = 30.0


def require_chromium() -> Path:
    """The browser to drive; skips the test when it is missing, except in CI, where it fails."""
    if CHROMIUM.is_file() and os.access(CHROMIUM, os.X_OK):
        return CHROMIUM
    reason = f"{CHROMIUM} is missing: install Debian's browser with `apt-get install chromium`"
    if os.environ.get("CI", "").lower() not in {"", "0", "false"}:
        pytest.fail(f"{reason} (CI must run the browser tests; .ci/run installs it)")
    pytest.skip(reason)


@asynccontextmanager
async def chromium_context(
    executable: Path, *, width: int = 900, height: int = 700
) -> AsyncIterator[BrowserContext]:
    """A fresh browser (its own temporary profile) with one fresh context; closed on exit."""
    async with async_playwright() as playwright:
        browser = await playwright.chromium.launch(
            executable_path=executable,
            args=list(CHROMIUM_ARGS),
            timeout=BROWSER_WAIT_S * 1000,
        )
        try:
            context = await browser.new_context(
                viewport={"width": width, "height": height}, locale="en-US"
            )
            context.set_default_timeout(BROWSER_WAIT_S * 1000)
            try:
                yield context
            finally:
                await context.close()
        finally:
            await browser.close()
