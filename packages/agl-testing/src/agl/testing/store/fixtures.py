"""The store fixtures: a pytest plugin that a suite opts into with ``pytest_plugins`` (the workspace's root
``conftest.py`` does).

``store`` is parametrized over every backend (:data:`BACKENDS`), so every contract test runs against every
backend: each test gets a fresh, empty store whose clock is the test's ``clock`` (a :class:`ManualClock`), so
timeouts are tested without sleeping. PostgreSQL backends need a server (see :mod:`agl.testing.postgres`).
A ``conftest.py`` or test module that defines its own ``store``/``clock`` fixture overrides these.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from agl.store import LightningStore
from agl.testing.clock import ManualClock

__all__ = ["BACKENDS", "backend", "clock", "store"]

BACKENDS = ["memory", "sqlite", "postgres", "http-memory", "http-sqlite", "http-postgres"]
"""The backends ``store`` runs over (see :func:`agl.testing.store.backends.open_store`)."""


@pytest.fixture
def clock() -> ManualClock:
    """A :class:`ManualClock` starting now."""
    return ManualClock()


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest) -> str:
    """The name of the backend this run of the test uses."""
    return str(request.param)


@pytest.fixture
async def store(backend: str, clock: ManualClock, tmp_path: Path) -> AsyncIterator[LightningStore]:
    """A fresh, empty store of ``backend`` using ``clock``."""
    from agl.testing.store.backends import open_store

    async with open_store(backend, clock, tmp_path) as s:
        yield s
