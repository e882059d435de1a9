"""Open a fresh, empty store of a named backend for one test.

Backends: ``memory``, ``sqlite`` (a real file under the test's tmp_path), ``postgres`` (a fresh schema in
the test database, dropped afterwards). The HTTP variants (``http-memory``, ``http-sqlite``, ``http-postgres``)
serve one of those through ``LightningStoreServer`` on 127.0.0.1 and hand the test a ``LightningStoreClient``.
All stores use the test's clock and run the watchdog on every call (no debounce), so timeouts are
tested by advancing the clock.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncGenerator, Callable
from pathlib import Path
from typing import Any

from agl.store import LightningStore


@contextlib.asynccontextmanager
async def open_store(
    backend: str, clock: Callable[[], float], tmp_path: Path
) -> AsyncGenerator[LightningStore, None]:
    if backend.startswith("http-"):
        async with open_http_store(backend.removeprefix("http-"), clock, tmp_path) as store:
            yield store
        return
    store = await _make_store(backend, clock, tmp_path)
    try:
        yield store
    finally:
        await store.close()


async def _make_store(backend: str, clock: Callable[[], float], tmp_path: Path) -> Any:
    if backend == "memory":
        from agl.store import InMemoryLightningStore

        return InMemoryLightningStore(clock=clock, scan_debounce_seconds=0.0)
    if backend == "sqlite":
        from agl.store import SqlLightningStore

        return SqlLightningStore(
            f"sqlite:///{tmp_path / 'store.sqlite'}", clock=clock, scan_debounce_seconds=0.0
        )
    if backend == "postgres":
        from agl.testing.postgres import fresh_postgres_store, require_postgres

        return await fresh_postgres_store(require_postgres(), clock)
    raise ValueError(f"unknown store backend {backend!r}")


@contextlib.asynccontextmanager
async def open_http_store(
    inner: str, clock: Callable[[], float], tmp_path: Path
) -> AsyncGenerator[LightningStore, None]:
    from agl.testing.store.http import serve_over_http

    store = await _make_store(inner, clock, tmp_path)
    try:
        async with serve_over_http(store) as client:
            yield client
    finally:
        await store.close()
