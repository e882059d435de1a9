"""Store fixtures: every contract test runs against every backend.

``store`` is parametrized over the backends listed in ``BACKENDS``; each test gets a fresh, empty
store whose clock is the test's ``clock`` (a :class:`ManualClock`), so timeouts are tested without sleeping.
PostgreSQL tests need a server: ``AGL_TEST_POSTGRES_URL`` (default: the local one `.ci/run` starts). They are
skipped loudly when none is reachable, and fail instead when ``AGL_TEST_REQUIRE_POSTGRES=1`` (CI).
"""

from __future__ import annotations

import os
import time
import warnings
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest

POSTGRES_URL = os.environ.get(
    "AGL_TEST_POSTGRES_URL", "postgresql://postgres:postgres@127.0.0.1:5432/agl_test"
)


class ManualClock:
    """A clock that moves only when told to."""

    def __init__(self, start: float | None = None) -> None:
        self.now = time.time() if start is None else start

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


def postgres_available() -> bool:
    import socket
    from urllib.parse import urlparse

    parsed = urlparse(POSTGRES_URL)
    try:
        with socket.create_connection((parsed.hostname or "127.0.0.1", parsed.port or 5432), timeout=1):
            return True
    except OSError:
        return False


def require_postgres() -> None:
    if postgres_available():
        return
    message = f"PostgreSQL is not reachable at {POSTGRES_URL}: PostgreSQL store tests SKIPPED"
    if os.environ.get("AGL_TEST_REQUIRE_POSTGRES") == "1":
        pytest.fail(message + " but AGL_TEST_REQUIRE_POSTGRES=1")
    warnings.warn(message, stacklevel=2)
    pytest.skip(message)


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


# Backend factories: name -> async context that yields a fresh store using ``clock``.
# Each backend module registers itself here; the HTTP variants wrap the others.
StoreFactory = Callable[[ManualClock, Any], Any]


@pytest.fixture(params=["memory", "sqlite", "postgres", "http-memory", "http-sqlite", "http-postgres"])
def backend(request: pytest.FixtureRequest) -> str:
    return request.param


@pytest.fixture
async def store(backend: str, clock: ManualClock, tmp_path: Any) -> AsyncIterator[Any]:
    from _store_backends import open_store

    async with open_store(backend, clock, tmp_path) as s:
        yield s
