"""A pytest plugin every test run loads (`-p tests.support.isolated_env` in pyproject.toml): settings all tests share."""

from __future__ import annotations

import os

import pytest


@pytest.fixture(autouse=True)
def _no_agl_settings_from_the_shell(monkeypatch: pytest.MonkeyPatch) -> None:
    """A developer's ``AGL_*`` variables (store URL, token, backend...) must not change what a test sees.

    ``AGL_TEST_*`` (which PostgreSQL the tests may use) is the exception; a test that needs a variable sets it
    with ``monkeypatch.setenv``.
    """
    for name in os.environ:
        if name.startswith("AGL_") and not name.startswith("AGL_TEST_"):
            monkeypatch.delenv(name)
