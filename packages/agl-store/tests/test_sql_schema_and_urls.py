"""SQL store: URL forms, schema creation on first use (also by processes starting at once), indexes."""

from __future__ import annotations

import asyncio
import multiprocessing
import sqlite3
from pathlib import Path
from typing import Any

import pytest
from agl.store import SqlLightningStore
from agl.store.sql._db import parse_url
from agl.store.sql.schema import SCHEMA_VERSION
from agl.testing.postgres import require_postgres
from agl.testing.spans import make_span
from agl.testing.store.sql import SQL_BACKENDS, fresh_database
from agl.testing.store.sql_workers import open_and_enqueue
from agl.types import RolloutConfig

# -- URLs ------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("url", "dialect", "driver"),
    [
        ("sqlite:///relative/store.db", "sqlite", "sqlite+pysqlite"),
        ("sqlite:////abs/store.db", "sqlite", "sqlite+pysqlite"),
        ("sqlite+aiosqlite:///store.db", "sqlite", "sqlite+pysqlite"),
        ("postgresql://u:p@127.0.0.1:5432/db", "postgresql", "postgresql+asyncpg"),
        ("postgres://u:p@127.0.0.1/db", "postgresql", "postgresql+asyncpg"),
        ("postgresql+asyncpg://u:p@127.0.0.1/db", "postgresql", "postgresql+asyncpg"),
    ],
)
def test_accepted_urls(url: str, dialect: str, driver: str) -> None:
    parsed_dialect, parsed, _ = parse_url(url)
    assert (parsed_dialect, parsed.drivername) == (dialect, driver)


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("sqlite://", "in-memory"),
        ("sqlite:///:memory:", "in-memory"),
        ("sqlite:///x.db?synchronous=sometimes", "synchronous"),
        ("mysql://u:p@127.0.0.1/db", "unsupported database URL"),
        ("postgresql+psycopg2://u:p@127.0.0.1/db", "unsupported database URL"),
        ("not a url", "invalid database URL"),
    ],
)
def test_rejected_urls_say_why(url: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        SqlLightningStore(url)


@pytest.mark.parametrize("synchronous", [None, "full"])
async def test_sqlite_file_settings(tmp_path: Path, synchronous: str | None) -> None:
    path = tmp_path / "nested" / "dir" / "store.db"  # missing directories are created
    url = f"sqlite:///{path}" + (f"?synchronous={synchronous}" if synchronous else "")
    store = SqlLightningStore(url)
    try:
        await store.enqueue_rollout("x")
        settings = await store._db.read(
            lambda conn: [
                conn.exec_driver_sql(f"PRAGMA {name}").scalar() for name in ("journal_mode", "synchronous")
            ]
        )
    finally:
        await store.close()
    assert settings == ["wal", 2 if synchronous == "full" else 1]  # FULL = 2, NORMAL = 1


async def test_every_postgres_url_form_works() -> None:
    postgres_url = require_postgres()
    for url in (
        postgres_url,
        postgres_url.replace("postgresql://", "postgres://"),
        postgres_url.replace("postgresql://", "postgresql+asyncpg://"),
    ):
        from agl.testing.postgres import fresh_postgres_store

        store = await fresh_postgres_store(url, clock=lambda: 1.0)
        try:
            rollout = await store.enqueue_rollout("x")
            assert (await store.get_rollout_by_id(rollout.rollout_id)) == rollout
            assert store.dialect == "postgresql"
        finally:
            await store.close()


# -- schema ----------------------------------------------------------------------------------------


def test_schema_is_created_on_first_use_only(tmp_path: Path) -> None:
    path = tmp_path / "new" / "store.db"
    store = SqlLightningStore(f"sqlite:///{path}")
    assert not path.parent.exists(), "constructing a store touches nothing"

    async def use() -> None:
        await store.get_latest_resources()
        await store.close()

    asyncio.run(use())
    with sqlite3.connect(path) as conn:
        tables = {row[0] for row in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        version = conn.execute("SELECT value FROM agl_schema WHERE key = 'schema_version'").fetchone()
    assert {"agl_rollouts", "agl_attempts", "agl_spans", "agl_resources", "agl_workers"} <= tables
    assert version == (str(SCHEMA_VERSION),)


def test_a_newer_schema_is_refused(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'store.db'}"

    async def open_once() -> None:
        store = SqlLightningStore(url)
        try:
            await store.get_latest_resources()
        finally:
            await store.close()

    asyncio.run(open_once())
    with sqlite3.connect(tmp_path / "store.db") as conn:
        conn.execute("UPDATE agl_schema SET value = '99' WHERE key = 'schema_version'")
    with pytest.raises(RuntimeError, match="schema version 99"):
        asyncio.run(open_once())


@pytest.mark.parametrize("backend", SQL_BACKENDS)
def test_processes_starting_at_once_create_the_schema_once(backend: str, tmp_path: Path) -> None:
    with fresh_database(backend, tmp_path) as (url, kwargs):
        ctx = multiprocessing.get_context("spawn")
        queue, go = ctx.Queue(), ctx.Event()
        procs = [ctx.Process(target=open_and_enqueue, args=(url, kwargs, queue, go)) for _ in range(3)]
        for proc in procs:
            proc.start()
        go.set()
        results = [queue.get(timeout=120) for _ in procs]
        for proc in procs:
            proc.join(timeout=60)
        assert all(r.startswith("ro-") for r in results), results

        async def count() -> int:
            store = SqlLightningStore(url, **kwargs)
            try:
                return (await store.query_rollouts(limit=0)).total
            finally:
                await store.close()

        assert asyncio.run(count()) == 3


# -- indexes ---------------------------------------------------------------------------------------


async def test_store_operations_never_scan_a_table(tmp_path: Path) -> None:
    """Every statement of the lifecycle and of id/status/rollout-filtered queries searches an index, so
    its cost follows the rows it touches, not the size of the store."""
    store = SqlLightningStore(f"sqlite:///{tmp_path / 'store.db'}", scan_debounce_seconds=0)
    statements: list[str] = []
    try:
        from sqlalchemy import event

        engine = store._db._sync_engine
        assert engine is not None

        @event.listens_for(engine, "connect")
        def _trace(dbapi_connection: Any, _record: Any) -> None:  # every statement, values inlined
            dbapi_connection.set_trace_callback(statements.append)

        rollout = await store.enqueue_rollout("x", config=RolloutConfig(timeout_seconds=5))
        claimed = await store.dequeue_rollout(worker_id="w")
        assert claimed is not None
        await store.add_many_spans([make_span(rollout.rollout_id, claimed.attempt.attempt_id, 1)])
        await store.update_attempt(rollout.rollout_id, "latest", status="failed")
        await store.query_rollouts(status_in=["running"], limit=5)
        await store.query_rollouts(rollout_id_in=[rollout.rollout_id])
        await store.query_spans(rollout.rollout_id, "latest")
        await store.query_spans(rollout.rollout_id)
        await store.query_attempts(rollout.rollout_id)
        await store.get_rollout_by_id(rollout.rollout_id)
        await store.wait_for_rollouts(rollout_ids=[rollout.rollout_id], timeout=0)
    finally:
        await store.close()

    checked = 0
    with sqlite3.connect(tmp_path / "store.db") as conn:
        for stmt in dict.fromkeys(statements):
            if not stmt.lstrip().upper().startswith(("SELECT", "UPDATE")):
                continue
            plan = " | ".join(row[3] for row in conn.execute("EXPLAIN QUERY PLAN " + stmt))
            for table in ("agl_rollouts", "agl_attempts", "agl_spans", "agl_workers"):
                assert f"SCAN {table}" not in plan, (stmt, plan)
            checked += 1
    assert checked >= 10
