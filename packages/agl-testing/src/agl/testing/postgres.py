"""PostgreSQL for tests: where the test database is, whether it is reachable, and fresh schemas in it.

``AGL_TEST_POSTGRES_URL`` names the database (default: the local one `.ci/run` starts). Tests that need it call
:func:`require_postgres`: it skips loudly when no server is reachable, and fails instead when
``AGL_TEST_REQUIRE_POSTGRES=1`` (CI). A store per test lives in a schema of its own, dropped at close.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import secrets
import socket
import warnings
from collections.abc import Awaitable, Callable, Generator
from typing import Any, Protocol, cast
from urllib.parse import urlparse

import pytest
from agl.store import SqlLightningStore

__all__ = [
    "POSTGRES_URL",
    "create_schema",
    "drop_schema",
    "fresh_postgres_database",
    "fresh_postgres_store",
    "postgres_available",
    "require_postgres",
    "schema_connect_args",
]

POSTGRES_URL = os.environ.get(
    "AGL_TEST_POSTGRES_URL", "postgresql://postgres:postgres@127.0.0.1:5432/agl_test"
)
"""The test database (``AGL_TEST_POSTGRES_URL``)."""


def postgres_available() -> bool:
    """Whether something accepts connections at :data:`POSTGRES_URL`'s host and port."""
    parsed = urlparse(POSTGRES_URL)
    try:
        with socket.create_connection((parsed.hostname or "127.0.0.1", parsed.port or 5432), timeout=1):
            return True
    except OSError:
        return False


def require_postgres() -> None:
    """Skip the calling test (with a warning) when PostgreSQL is not reachable; fail under ``AGL_TEST_REQUIRE_POSTGRES=1``."""
    if postgres_available():
        return
    message = f"PostgreSQL is not reachable at {POSTGRES_URL}: PostgreSQL store tests SKIPPED"
    if os.environ.get("AGL_TEST_REQUIRE_POSTGRES") == "1":
        pytest.fail(message + " but AGL_TEST_REQUIRE_POSTGRES=1")
    warnings.warn(message, stacklevel=2)
    pytest.skip(message)


class _Connection(Protocol):
    """What :func:`_admin` uses of an asyncpg connection (asyncpg ships no type information)."""

    async def execute(self, query: str) -> str: ...

    async def close(self) -> None: ...


async def _admin(url: str, sql: str) -> None:
    import asyncpg  # pyright: ignore[reportMissingTypeStubs]  # no stubs; typed by _Connection below

    connect = cast("Callable[[str], Awaitable[_Connection]]", asyncpg.connect)  # pyright: ignore[reportUnknownMemberType]  # untyped: cast right here
    conn = await connect(url.replace("postgresql+asyncpg://", "postgresql://"))
    try:
        await conn.execute(sql)
    finally:
        await conn.close()


class _SchemaScopedStore(SqlLightningStore):
    """A store whose tables live in a schema of their own, dropped with everything in it at close."""

    def __init__(self, url: str, schema: str, **kwargs: Any) -> None:
        connect_args = {"server_settings": {"search_path": schema}}
        super().__init__(url, connect_args=connect_args, **kwargs)
        self._url_for_admin = url
        self.schema = schema
        self._dropped = False

    async def close(self) -> None:
        await super().close()
        if not self._dropped:
            self._dropped = True
            await _admin(self._url_for_admin, f'DROP SCHEMA IF EXISTS "{self.schema}" CASCADE')


async def fresh_postgres_store(
    url: str, clock: Callable[[], float], *, scan_debounce_seconds: float = 0.0, **kwargs: Any
) -> SqlLightningStore:
    """A store on a new, empty schema of ``url``'s database; ``close()`` drops the schema."""
    schema = "agl_test_" + secrets.token_hex(6)
    await _admin(url, f'CREATE SCHEMA "{schema}"')
    return _SchemaScopedStore(url, schema, clock=clock, scan_debounce_seconds=scan_debounce_seconds, **kwargs)


async def create_schema(url: str) -> str:
    """A new empty schema (for tests that open several stores on it); drop it with :func:`drop_schema`."""
    schema = "agl_test_" + secrets.token_hex(6)
    await _admin(url, f'CREATE SCHEMA "{schema}"')
    return schema


async def drop_schema(url: str, schema: str) -> None:
    await _admin(url, f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


@contextlib.contextmanager
def fresh_postgres_database(url: str = POSTGRES_URL, prefix: str = "agl_test_") -> Generator[str, None, None]:
    """The URL of a new, empty database on ``url``'s server, dropped with everything in it after (for a
    server in another process, which creates its own schema). Call it outside a running event loop."""
    name = prefix + secrets.token_hex(5)
    admin = url.replace("postgresql+asyncpg://", "postgresql://")
    asyncio.run(_admin(admin, f'CREATE DATABASE "{name}"'))
    try:
        yield admin.rsplit("/", 1)[0] + "/" + name
    finally:
        asyncio.run(_admin(admin, f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))


def schema_connect_args(schema: str) -> dict[str, Any]:
    """``engine_kwargs`` that put a store's tables in ``schema``."""
    return {"connect_args": {"server_settings": {"search_path": schema}}}
