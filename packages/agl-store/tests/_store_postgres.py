"""A fresh, empty PostgreSQL store per test: its own schema in the test database, dropped at close."""

from __future__ import annotations

import secrets
from collections.abc import Callable
from typing import Any

from agl.store import SqlLightningStore


async def _admin(url: str, sql: str) -> None:
    import asyncpg

    conn = await asyncpg.connect(url.replace("postgresql+asyncpg://", "postgresql://"))
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


def schema_connect_args(schema: str) -> dict[str, Any]:
    """``engine_kwargs`` that put a store's tables in ``schema``."""
    return {"connect_args": {"server_settings": {"search_path": schema}}}
