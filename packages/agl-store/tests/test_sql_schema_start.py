"""Schema creation at start: once per store however many operations start at once, and no DDL (no locks
that fight ordinary writes) when the database already has the current schema (issue 12, defect 1)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from agl.store import SqlLightningStore
from agl.store.sql import schema
from agl.testing.store.sql import SQL_BACKENDS, fresh_database
from sqlalchemy import event


@contextlib.contextmanager
def ddl_statements() -> Iterator[list[str]]:
    """Every CREATE/ALTER/DROP statement any SQLAlchemy engine runs meanwhile (async engines included)."""
    seen: list[str] = []

    def record(_conn: Any, _cursor: Any, statement: str, *_: Any) -> None:
        if statement.lstrip().split(None, 1)[0].upper() in ("CREATE", "ALTER", "DROP"):
            seen.append(statement)

    event.listen(sa.engine.Engine, "before_cursor_execute", record)
    try:
        yield seen
    finally:
        event.remove(sa.engine.Engine, "before_cursor_execute", record)


async def _first_operations(store: SqlLightningStore, n: int) -> None:
    """``n`` operations started at once on a store that has not been used yet (like a server's first
    requests after a start)."""
    await asyncio.gather(*(store.enqueue_rollout({"i": i}) for i in range(n)))


@pytest.mark.parametrize("backend", SQL_BACKENDS)
def test_concurrent_first_operations_create_the_schema_once(backend: str, tmp_path: Path) -> None:
    with fresh_database(backend, tmp_path) as (url, kwargs):

        async def main() -> int:
            store = SqlLightningStore(url, **kwargs)
            try:
                await _first_operations(store, 16)
                return (await store.query_rollouts(limit=0)).total
            finally:
                await store.close()

        with ddl_statements() as ddl:
            assert asyncio.run(main()) == 16
        created = [s for s in ddl if "CREATE TABLE" in s and "agl_rollouts" in s]
        assert len(created) == 1, f"agl_rollouts created {len(created)} times"
        tables = sum(len(t.indexes) + 1 for t in schema.metadata.sorted_tables)
        assert len(ddl) == tables, ddl


@pytest.mark.parametrize("backend", SQL_BACKENDS)
def test_a_store_on_a_current_schema_runs_no_ddl(backend: str, tmp_path: Path) -> None:
    """A restarted server's store, hit by 16 clients at once while another store keeps writing, only reads
    the schema version: CREATE ... IF NOT EXISTS would take table locks that deadlock with the writes."""
    with fresh_database(backend, tmp_path) as (url, kwargs):

        async def main() -> None:
            writer = SqlLightningStore(url, **kwargs)
            await writer.enqueue_rollout("first")  # creates the schema
            stop = asyncio.Event()

            async def keep_writing() -> None:
                while not stop.is_set():
                    await writer.enqueue_rollout("load")
                    await asyncio.sleep(0)  # SQLite writes may complete without yielding

            load = asyncio.create_task(keep_writing())
            try:
                with ddl_statements() as ddl:
                    for _ in range(3):  # three restarts
                        store = SqlLightningStore(url, **kwargs)
                        try:
                            await store.ensure_schema()
                            await _first_operations(store, 16)
                        finally:
                            await store.close()
                assert ddl == []
            finally:
                stop.set()
                await load
                await writer.close()

        asyncio.run(main())


def test_an_older_schema_is_migrated_step_by_step(tmp_path: Path) -> None:
    """A database at version 1 (written by an older agl-store) gains the later tables, then works."""
    url = f"sqlite:///{tmp_path / 'store.db'}"
    engine = sa.create_engine(url)
    with engine.begin() as conn:
        schema.MIGRATIONS[0](conn)
        conn.execute(sa.insert(schema.schema_meta).values(key="schema_version", value="1"))
    engine.dispose()

    async def main() -> list[str]:
        store = SqlLightningStore(url)
        try:
            await store.enqueue_rollout("kept")
            await store.ensure_schema()
            return [r.input for r in await store.query_rollouts()]
        finally:
            await store.close()

    assert asyncio.run(main()) == ["kept"]
    engine = sa.create_engine(url)
    with engine.connect() as conn:
        assert schema.read_version(conn) == schema.SCHEMA_VERSION
        tables = set(sa.inspect(conn).get_table_names())
    engine.dispose()
    assert {t.name for t in schema.metadata.sorted_tables} <= tables
