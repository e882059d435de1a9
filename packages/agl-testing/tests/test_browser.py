"""Which Chromium the browser tests drive: the configured one, one on PATH, Playwright's, or a skip saying how."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from agl.testing.browser import find_chromium


@pytest.fixture
def playwright(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """Playwright with its browsers looked for in an empty folder, and nothing on PATH."""
    from playwright.sync_api import sync_playwright

    monkeypatch.setenv("PLAYWRIGHT_BROWSERS_PATH", str(tmp_path / "browsers"))
    with sync_playwright() as pw:
        empty = tmp_path / "bin"
        empty.mkdir()
        monkeypatch.setenv(
            "PATH", str(empty)
        )  # after the driver started (it needs node from its own package)
        yield pw


def _executable(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("#!/bin/sh\n")
    path.chmod(0o755)
    return path


def test_none_found_skips_saying_how_to_get_one(playwright: Any) -> None:
    with pytest.raises(pytest.skip.Exception, match=r"apt install chromium.*AGL_TEST_CHROMIUM"):
        find_chromium(playwright)


def test_one_on_path_is_used(playwright: Any, tmp_path: Path) -> None:
    chromium = _executable(tmp_path / "bin" / "chromium")
    assert find_chromium(playwright) == str(chromium)


def test_playwrights_own_download_is_used(playwright: Any) -> None:
    bundled = _executable(Path(str(playwright.chromium.executable_path)))
    assert find_chromium(playwright) == str(bundled)


def test_the_configured_one_wins_and_a_wrong_one_fails(
    playwright: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _executable(tmp_path / "bin" / "chromium")
    mine = _executable(tmp_path / "mine" / "chrome")
    monkeypatch.setenv("AGL_TEST_CHROMIUM", str(mine))
    assert find_chromium(playwright) == str(mine)
    monkeypatch.setenv("AGL_TEST_CHROMIUM", str(tmp_path / "missing"))
    with pytest.raises(pytest.fail.Exception, match="not a file"):
        find_chromium(playwright)
