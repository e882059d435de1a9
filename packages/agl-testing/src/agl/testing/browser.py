"""Which Chromium the browser tests drive, or why they are skipped."""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

import pytest

__all__ = ["CHROMIUM_ARGS", "CHROMIUM_VARIABLE", "find_chromium"]

CHROMIUM_VARIABLE = "AGL_TEST_CHROMIUM"
"""The environment variable naming a Chromium (or Chrome) executable for the browser tests."""

CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    # without these, Chromium reaches for Google's services at start (refused on a closed network, many at once)
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
"""How the tests and benchmarks launch it: headless, and quiet on the network."""

_ON_PATH = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")


def find_chromium(playwright: Any) -> str:
    """The Chromium to launch: ``AGL_TEST_CHROMIUM``, else one on ``PATH`` (Debian's ``chromium``...), else
    Playwright's own download. Skips the calling test, saying how to get one, when there is none."""
    configured = os.environ.get(CHROMIUM_VARIABLE)
    if configured:
        if not Path(configured).is_file():
            pytest.fail(f"{CHROMIUM_VARIABLE}={configured} is not a file: point it at a Chromium executable")
        return configured
    for name in _ON_PATH:
        found = shutil.which(name)
        if found:
            return found
    bundled = Path(str(playwright.chromium.executable_path))
    if bundled.is_file():
        return str(bundled)
    pytest.skip(
        "no Chromium found: install one (apt install chromium, or uv run playwright install chromium) "
        f"or set {CHROMIUM_VARIABLE} to run the browser tests"
    )
