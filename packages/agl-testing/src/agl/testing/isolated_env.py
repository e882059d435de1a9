"""A pytest plugin every test run of the workspace loads (agl-testing's ``pytest11`` entry point).

It keeps a developer's shell out of the tests: ``AGL_*`` variables are cleared for every test.
"""

from __future__ import annotations

import os

import pytest


@pytest.fixture(autouse=True)
def _no_agl_settings_from_the_shell(monkeypatch: pytest.MonkeyPatch) -> None:  # pyright: ignore[reportUnusedFunction]  # pytest finds it by its decorator
    """A developer's ``AGL_*`` variables (store URL, token, backend...) must not change what a test sees.

    ``AGL_TEST_*`` (which PostgreSQL the tests may use) is the exception; a test that needs a variable sets it
    with ``monkeypatch.setenv``.
    """
    for name in os.environ:
        if name.startswith("AGL_") and not name.startswith("AGL_TEST_"):
            monkeypatch.delenv(name)
