"""The workspace's pytest plugin, opted into by the root ``conftest.py`` (``pytest_plugins``); never loaded by
merely installing agl-testing, so no other test suite in the environment sees it.

- A developer's shell stays out of the tests: ``AGL_*`` variables are cleared for every test.
- A leak is reported by the test that made it: garbage is collected after each test, so an object left open
  (a socket, a client) warns there (``ResourceWarning``, an error like every warning), never in a later test.
- The embedded PostgreSQL server (:mod:`agl.testing.postgres`), if a test started one, stops with the session.
"""

from __future__ import annotations

import gc
import os
from collections.abc import Iterator

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


@pytest.fixture(autouse=True)
def _garbage_collected_after_each_test() -> Iterator[None]:
    """Collect what this test left behind while it is still the current test (an unclosed object warns now).

    What survives is frozen (``gc.freeze``): the next test's collection then scans only the objects made since,
    which keeps this cheap (a full collection of a process that imported torch takes about half a second).
    """
    yield
    gc.collect()
    gc.freeze()


@pytest.fixture(scope="module", autouse=True)
def _garbage_collected_after_each_module() -> Iterator[None]:
    """Once per module, a full collection (frozen objects included): what module fixtures left is reported by
    the module's last test, and cyclic garbage does not pile up in the frozen generation."""
    yield
    gc.unfreeze()
    gc.collect()
    gc.freeze()


def pytest_sessionfinish(session: pytest.Session) -> None:
    """Give the frozen objects back to the collector; stop the embedded PostgreSQL server, if one was started."""
    del session
    gc.unfreeze()
    from agl.testing.postgres import stop_test_server

    stop_test_server()
