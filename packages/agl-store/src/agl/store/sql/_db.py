"""Connections and transactions of the SQL store, for SQLite and PostgreSQL.

Every store operation is one plain function ``fn(conn, *args)`` written with SQLAlchemy Core against a
synchronous :class:`sqlalchemy.Connection`; :class:`Database` runs it in one transaction:

- **SQLite**: on the stdlib driver, each thread with its own connection. An operation first runs right on
  the calling (event-loop) thread if it need not wait for any lock (it then takes well under a
  millisecond); otherwise it runs on a small thread pool, where waiting does not block the loop. A
  write that finds only this process's write lock held (by another of its threads, for a moment) waits
  for it on the loop instead, as a group that the writes arriving meanwhile join.
  (aiosqlite costs several thread hops per statement and was about 3x slower.) Writers take an
  in-process lock, then ``BEGIN IMMEDIATE`` (which serializes them against other processes; in the pool
  they wait up to ``busy_timeout``, 60 s): :class:`._sqlite.Writing`, for lone writes and groups alike.
  **Group commit** (:class:`agl.store.GroupWriter`, one per thread and loop): when a second task writes
  in the same turn of the loop (other writers are coming) or a group is in flight, a write joins the
  group that runs at the loop's next turn as one transaction with one commit: the writes run one after
  another; if one raises, all are rolled back and run again each in its own savepoint (the one that
  raises is undone alone and gets its exception); every writer is answered only after that commit. A
  lone writer on an idle loop runs at once.
  The file is in WAL mode with ``synchronous=NORMAL`` by default: a commit is written to the WAL file
  (in the operating system's hands) before the call returns, so an acknowledged write survives the
  process being killed (kill -9); only an operating-system crash or power loss may lose the last
  commits, which ``synchronous=FULL`` avoids by syncing every commit (``?synchronous=FULL`` in the URL;
  far slower per commit, where group commit matters most). Readers never block writers. Checkpoints
  run on the pool; one that cannot keep up with a steady stream of commits is finished under the
  write lock, so that the WAL starts over instead of growing without bound.
- **PostgreSQL**: on asyncpg through SQLAlchemy's async engine (``AsyncConnection.run_sync``); one engine
  per event loop, because asyncpg connections belong to the loop that opened them. Writers run in READ
  COMMITTED transactions and lock the rows they change (``FOR UPDATE``; the queue uses ``SKIP LOCKED``);
  multi-statement readers use REPEATABLE READ for a consistent snapshot. Deadlocks and serialization
  failures are retried.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import threading
import time
import weakref
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal, TypeVar

import sqlalchemy as sa
from agl.types.timeouts import wait_within
from sqlalchemy import event
from sqlalchemy import exc as sa_exc
from sqlalchemy.engine import URL, make_url

from ..group_writer import GroupWriter, Outcome
from . import schema
from ._batch import STICKY_BATCHING, Write, never, worth_batching
from ._codec import json_dumps, json_loads
from ._sqlite import SqliteThread as _SqliteThread
from ._sqlite import (
    WriteLock,
    Writing,
    _LockHeld,  # pyright: ignore[reportPrivateUsage]  (internal to the SQL store)
    _WouldWait,  # pyright: ignore[reportPrivateUsage]
    is_busy_error,
)
from ._steps import sqlite_cursor
from ._writelog import logged

__all__ = ["Database", "Dialect", "parse_url"]

T = TypeVar("T")
Dialect = Literal["sqlite", "postgresql"]

_SQLITE_DRIVERS = {"sqlite", "sqlite+pysqlite", "sqlite+aiosqlite"}
_POSTGRES_DRIVERS = {"postgresql", "postgres", "postgresql+asyncpg"}
_SYNCHRONOUS = ("OFF", "NORMAL", "FULL", "EXTRA")
_RETRIED_SQLSTATES = {"40001", "40P01"}  # serialization failure, deadlock detected
_SQLITE_THREADS = 4
_CHECKPOINT_EVERY = 512
"""Writes committed between WAL checkpoints (a group of writes counts each; a write adds ~5 pages to the
WAL). SQLite's own checkpoints would run (and fsync) inside a committing transaction; ours run on a pool
thread, off the writers' path, without blocking them. Each copies every page changed since the last one
once, however often it changed: fewer checkpoints copy fewer pages (128 cost 1.7x the CPU of 512)."""
_WAL_CATCH_UP_FRAMES = 4096
"""WAL frames (pages, 4 KiB each) after which a checkpoint briefly holds the writers back to finish."""


def parse_url(url: str) -> tuple[Dialect, URL, str]:
    """The dialect, the SQLAlchemy URL to open and (SQLite) the ``synchronous`` level of a store URL."""
    try:
        parsed = make_url(url)
    except sa_exc.ArgumentError as error:
        raise ValueError(f"invalid database URL {url!r}: {error}") from error
    driver = parsed.drivername
    if driver in _SQLITE_DRIVERS:
        database = parsed.database
        if not database or database == ":memory:" or parsed.query.get("mode") == "memory":
            raise ValueError(
                f"{url!r} is an in-memory SQLite database, which the SQL store cannot share between its "
                "connections; give a file path (sqlite:///path/to/store.db) or use InMemoryLightningStore"
            )
        synchronous = str(parsed.query.get("synchronous", "NORMAL")).upper()
        if synchronous not in _SYNCHRONOUS:
            raise ValueError(f"synchronous={synchronous!r} in {url!r} is invalid; use one of {_SYNCHRONOUS}")
        parsed = parsed.set(drivername="sqlite+pysqlite").difference_update_query(["synchronous"])
        return "sqlite", parsed, synchronous
    if driver in _POSTGRES_DRIVERS:
        return "postgresql", parsed.set(drivername="postgresql+asyncpg"), ""
    raise ValueError(
        f"unsupported database URL {url!r}: use sqlite:///path/to/file.db or "
        "postgresql://user:password@host:port/database (driver asyncpg, extra 'postgres')"
    )


def _is_retryable(exc: BaseException) -> bool:
    orig = getattr(exc, "orig", None)
    return getattr(orig, "sqlstate", None) in _RETRIED_SQLSTATES


class Database:
    """Runs operations (``fn(conn, *args)``) in read or write transactions; creates the schema on first use.

    The schema is checked once per ``Database`` (:meth:`ensure_schema`), however many operations,
    threads and loops start at once; a database already at the current version costs one read.
    """

    def __init__(self, url: str, engine_kwargs: dict[str, Any]) -> None:
        self.dialect, self._url, self._synchronous = parse_url(url)
        self._engine_kwargs: dict[str, Any] = {
            "json_serializer": json_dumps,
            "json_deserializer": json_loads,
            **engine_kwargs,
        }
        self._schema_ready = False
        self._schema_check: concurrent.futures.Future[bool] | None = None
        self._closed = False
        self._lock = threading.Lock()
        # SQLite
        self._sync_engine: sa.Engine | None = None
        self._executor: concurrent.futures.ThreadPoolExecutor | None = None
        self._write_lock = WriteLock()
        self._writes_since_checkpoint = 0
        self._local = threading.local()
        self._thread_connections: list[sa.Connection] = []
        self._generation = 0
        self._checkpoint: concurrent.futures.Future[None] | None = None
        self._group_commit = True
        self.commits = 0
        """Write transactions committed by this object (for measurements)."""
        self.reads = 0
        """Read operations run by this object (for measurements)."""
        self.batched_writes = 0
        """Writes committed as part of a group of several (for measurements)."""
        self.flush_seconds = 0.0
        """CPU seconds spent running groups of writes on event-loop threads, outside the writers' calls."""
        self.pooled = 0
        """Operations that ran on the pool: snapshot reads, and writes that had to wait for a lock."""
        self.pool_seconds = 0.0
        """CPU seconds of the pool's threads running operations (for measurements)."""
        # PostgreSQL: one async engine per event loop
        self._engines: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, Any] = weakref.WeakKeyDictionary()
        if self.dialect == "sqlite":
            self._open_sqlite()

    # -- public -------------------------------------------------------------------------------

    async def write(self, fn: Callable[..., T], *args: Any, write_of: Callable[..., Any] | None = None) -> T:
        """Run ``fn(conn, *args)`` in a write transaction; committed when it returns, rolled back if it raises.

        A store operation's write made for a request answered under an idempotency key logs its result
        under the key in the same transaction, or returns the result an earlier try of the request logged
        (:class:`._writelog.LoggedWrite`); ``write_of`` names the operation where ``fn`` wraps it."""
        if not self._schema_ready:
            await self.ensure_schema()
        step = logged(fn, args, write_of or fn)
        if step is None:
            return await self._run(fn, args, write=True)
        found, result = step.replayed(args)
        if not found:
            result = await self._run(step, args, write=True)
            step.committed()
        return result

    async def read(self, fn: Callable[..., T], *args: Any, snapshot: bool = False) -> T:
        """Run ``fn(conn, *args)`` for reading; with ``snapshot``, its statements see one consistent state."""
        if not self._schema_ready:
            await self.ensure_schema()
        self.reads += 1
        return await self._run(fn, args, write=False, snapshot=snapshot)

    async def close(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
            engines = list(self._engines.items())
            self._engines.clear()
        if self._executor is not None and self._sync_engine is not None:
            running = self._checkpoint  # its connection is about to be closed: let it finish first
            if running is not None and not running.done():
                with contextlib.suppress(Exception):
                    await asyncio.wrap_future(running)
            await asyncio.get_running_loop().run_in_executor(self._executor, self._checkpoint_wal)
            await asyncio.get_running_loop().run_in_executor(self._executor, self._dispose_sqlite)
            self._executor.shutdown(wait=True)
        current = asyncio.get_running_loop()
        for loop, engine in engines:
            if loop is current:
                await engine.dispose()
            elif loop.is_running():  # another thread's loop: its connections must be closed there
                future = asyncio.run_coroutine_threadsafe(engine.dispose(), loop)
                try:
                    await wait_within(asyncio.wrap_future(future), 10)
                except (asyncio.TimeoutError, RuntimeError):
                    await engine.dispose(close=False)
            else:  # that loop is gone: drop the connections without talking to the server
                await engine.dispose(close=False)

    async def release_loop(self) -> None:
        """Close the running loop's PostgreSQL connections (asyncpg ties them to the loop that opened them);
        the loop's next operation opens new ones. SQLite holds nothing per loop."""
        with self._lock:
            engine = self._engines.pop(asyncio.get_running_loop(), None)
        if engine is not None:
            await engine.dispose()

    # -- engines ------------------------------------------------------------------------------

    def _open_sqlite(self) -> None:
        connect_args = {"check_same_thread": False, **self._engine_kwargs.pop("connect_args", {})}
        engine = sa.create_engine(
            self._url,
            isolation_level="AUTOCOMMIT",  # transactions are begun explicitly (BEGIN IMMEDIATE for writers)
            poolclass=sa.pool.NullPool,  # each thread keeps its own connection (see _thread_connection)
            connect_args=connect_args,
            **self._engine_kwargs,
        )
        synchronous = self._synchronous

        @event.listens_for(engine, "connect")
        def _configure(dbapi_connection: Any, _record: Any) -> None:
            cursor = dbapi_connection.cursor()
            cursor.execute("PRAGMA busy_timeout = 60000")
            cursor.execute("PRAGMA journal_mode = WAL")
            cursor.execute(f"PRAGMA synchronous = {synchronous}")
            cursor.execute("PRAGMA wal_autocheckpoint = 0")  # see _CHECKPOINT_EVERY
            cursor.execute("PRAGMA cache_size = -32768")  # 32 MiB of pages per connection (default 2 MiB)
            cursor.close()

        self._sync_engine = engine
        self._executor = concurrent.futures.ThreadPoolExecutor(
            _SQLITE_THREADS, thread_name_prefix="agl-sqlite"
        )

    def _async_engine(self) -> Any:
        from sqlalchemy.ext.asyncio import create_async_engine

        loop = asyncio.get_running_loop()
        with self._lock:
            if self._closed:
                raise RuntimeError("the SQL store is closed")
            engine = self._engines.get(loop)
            if engine is None:
                engine = create_async_engine(self._url, **self._engine_kwargs)
                self._engines[loop] = engine
            return engine

    # -- transactions -------------------------------------------------------------------------

    async def ensure_schema(self) -> None:
        """Create or migrate the schema unless done already; concurrent callers (any thread) share one check.

        A database at the current version is only read (no DDL, so no locks that fight writers).
        """
        while not self._schema_ready:
            with self._lock:
                check = self._schema_check
                mine = check is None
                if mine:
                    check = self._schema_check = concurrent.futures.Future()
            assert check is not None
            if not mine:
                if await asyncio.wrap_future(check):
                    return
                continue  # the first caller failed (or was cancelled): try again here
            ok = False
            try:
                found = await self._run(schema.read_version, (), write=False)
                if not schema.check_version(found):
                    await self._run(schema.migrate, (), write=True)
                ok = True
            finally:
                self._schema_ready = ok
                with self._lock:
                    self._schema_check = None
                check.set_result(ok)

    async def _run(
        self, fn: Callable[..., T], args: tuple[Any, ...], *, write: bool, snapshot: bool = False
    ) -> T:
        if self._closed:
            raise RuntimeError("the SQL store is closed")
        if self.dialect == "sqlite":
            loop = asyncio.get_running_loop()
            writer = self._group_writer(loop) if write and self._group_commit else None
            if writer is not None and (writer.busy or worth_batching(self._local, loop)):
                return await self._write_in_group(writer, fn, args)
            if not snapshot:  # short operations run right here when they need not wait for anyone
                try:
                    return self._sqlite_transaction(fn, args, write, snapshot, inline=True)
                except _LockHeld:  # another thread of ours writes: wait for it in a group (not the pool)
                    if writer is not None:
                        return await self._write_in_group(writer, fn, args)
                except _WouldWait:
                    pass
            assert self._executor is not None
            self.pooled += 1
            try:
                return await loop.run_in_executor(
                    self._executor, self._pooled, self._sqlite_transaction, fn, args, write, snapshot, False
                )
            except RuntimeError as exc:  # the executor was shut down by close() meanwhile
                if self._closed:
                    raise RuntimeError("the SQL store is closed") from exc
                raise
        return await self._postgres_transaction(fn, args, write, snapshot)

    # -- group commit (SQLite) -----------------------------------------------------------------

    def _group_writer(self, loop: asyncio.AbstractEventLoop) -> GroupWriter[Write]:
        """This thread's group writer for ``loop`` (writes of one loop are committed together)."""
        mine: tuple[asyncio.AbstractEventLoop, GroupWriter[Write]] | None = getattr(
            self._local, "writer", None
        )
        if mine is None or mine[0] is not loop:  # none yet, or left by a loop that closed first
            mine = self._local.writer = (loop, GroupWriter(self._commit_group, refused=never))
        return mine[1]

    async def _write_in_group(
        self, writer: GroupWriter[Write], fn: Callable[..., T], args: tuple[Any, ...]
    ) -> T:
        """Run a write as part of the group the loop commits at its next turn (or after the one in flight)."""
        write = Write(fn, args)
        error = await writer.write(write, gather=True)
        if error is not None:
            raise error
        return write.result

    async def _commit_group(self, writes: list[Write]) -> list[Outcome] | None:
        """The group writer's sink: the writes in one transaction, right here on the loop, or in the pool
        if it would wait for another process's lock; a lock held by another of our threads for a moment (a
        checkpoint catching up, a write that waited in the pool) is waited for on the loop. In the pool,
        the group would hold the lock while the loop's next writes came, sending those there too."""
        local = self._local
        batching: int = getattr(local, "batching", 0)
        if batching:  # (see worth_batching) still several writers at once, or one fewer turn to go
            local.batching = STICKY_BATCHING if len(writes) > 1 else batching - 1
        loop = asyncio.get_running_loop()
        while True:
            if self._closed:
                raise RuntimeError("the SQL store is closed")
            started = time.thread_time()
            try:
                outcomes = self._sqlite_batch(writes, inline=True)
            except _LockHeld:
                await self._write_lock_free(loop)
                continue
            except _WouldWait:
                break
            finally:
                self.flush_seconds += time.thread_time() - started
            self.batched_writes += len(writes) if len(writes) > 1 else 0
            return outcomes
        assert self._executor is not None
        self.pooled += len(writes)
        try:
            return await loop.run_in_executor(self._executor, self._pooled, self._sqlite_batch, writes, False)
        except RuntimeError as exc:  # the executor was shut down by close() meanwhile
            if self._closed:
                raise RuntimeError("the SQL store is closed") from exc
            raise

    async def _write_lock_free(self, loop: asyncio.AbstractEventLoop) -> None:
        """Wait (on the loop) until this process's write lock is free."""
        free: asyncio.Future[None] = loop.create_future()

        def wake() -> None:
            if not free.done():
                free.set_result(None)

        def wake_threadsafe() -> None:
            with contextlib.suppress(RuntimeError):  # the loop closed meanwhile: nobody waits
                loop.call_soon_threadsafe(wake)

        self._write_lock.call_when_free(wake_threadsafe)
        await free

    def _sqlite_batch(self, writes: list[Write], inline: bool) -> list[Outcome] | None:
        """Several writes in one transaction, one commit for all; each writer is answered only after the
        commit, so an acknowledged write is a committed one. They run first without savepoints; if one
        raises, all are rolled back and run again each in its own savepoint, so that the one that raises is
        undone alone and gets its exception while the others commit together. ``None``: all written (the
        common case); else one outcome per write. ``inline``: raise :class:`_WouldWait` (nothing written)
        instead of waiting for a lock."""
        thread = self._thread(inline)
        conn = thread.conn
        if len(writes) == 1:  # a lone write: its own transaction, which its error rolls back
            write = writes[0]
            try:
                with Writing(self._write_lock, self._after_commit, thread.cursor, inline):
                    write.result = write.fn(conn, *write.args)
            except _WouldWait:
                raise
            except Exception as error:
                return [error]
            return None
        try:
            with Writing(self._write_lock, self._after_commit, thread.cursor, inline, len(writes)):
                for write in writes:
                    write.result = write.fn(conn, *write.args)
            return None
        except _WouldWait:
            raise
        except Exception:  # one of them raised (or BEGIN/COMMIT did): all undone; again, one by one
            pass
        cursor = thread.cursor
        outcomes: list[Outcome] = []
        with Writing(self._write_lock, self._after_commit, cursor, inline, len(writes)):
            for write in writes:
                cursor.execute("SAVEPOINT agl_op")
                try:
                    write.result = write.fn(conn, *write.args)
                except Exception as error:
                    if inline and is_busy_error(error):
                        raise _WouldWait from error  # the whole group is run again in the pool
                    cursor.execute("ROLLBACK TO agl_op")
                    cursor.execute("RELEASE agl_op")
                    outcomes.append(error)
                else:
                    cursor.execute("RELEASE agl_op")
                    outcomes.append(None)
        return outcomes

    def _thread(self, inline: bool = False) -> _SqliteThread:
        """This thread's own connection, kept across operations (a pool checkout per operation costs as
        much as a statement). Connections used on event-loop threads never wait for a lock."""
        thread: _SqliteThread | None = getattr(self._local, "sqlite", None)
        if thread is not None and thread.generation == self._generation:
            return thread
        assert self._sync_engine is not None and self._url.database
        Path(self._url.database).expanduser().parent.mkdir(parents=True, exist_ok=True)  # on first use
        conn = self._sync_engine.connect()
        if inline:
            conn.exec_driver_sql("PRAGMA busy_timeout = 0").close()
        with self._lock:
            self._thread_connections.append(conn)
        thread = self._local.sqlite = _SqliteThread(conn, sqlite_cursor(conn), self._generation)
        return thread

    def _thread_connection(self, inline: bool = False) -> sa.Connection:
        """This thread's connection (see :meth:`_thread`)."""
        return self._thread(inline).conn

    def _dispose_sqlite(self) -> None:
        assert self._sync_engine is not None
        with self._lock:
            connections, self._thread_connections = self._thread_connections, []
            self._generation += 1  # every thread opens a new connection if it comes back
        for conn in connections:
            conn.close()
        self._sync_engine.dispose()

    def _pooled(self, fn: Callable[..., T], *args: Any) -> T:
        """``fn(*args)`` on a pool thread, its CPU time counted in :attr:`pool_seconds`."""
        started = time.thread_time()
        try:
            return fn(*args)
        finally:
            self.pool_seconds += time.thread_time() - started

    def _sqlite_transaction(
        self, fn: Callable[..., T], args: tuple[Any, ...], write: bool, snapshot: bool, inline: bool
    ) -> T:
        """One transaction on this thread's connection. ``inline`` (on an event-loop thread): raise
        :class:`_WouldWait` instead of waiting for another thread or process; nothing is changed then."""
        thread = self._thread(inline)
        conn = thread.conn
        if write:
            with Writing(self._write_lock, self._after_commit, thread.cursor, inline):
                return fn(conn, *args)
        try:
            if not snapshot:  # one statement is consistent by itself
                return fn(conn, *args)
            cursor = thread.cursor  # BEGIN/COMMIT straight to sqlite3: cheaper
            cursor.execute("BEGIN")
            try:
                return fn(conn, *args)
            finally:
                cursor.execute("COMMIT")
        except Exception as error:
            if inline and is_busy_error(error):
                raise _WouldWait from error
            raise

    def _after_commit(self, writes: int) -> None:
        self.commits += 1
        self._writes_since_checkpoint += writes
        previous = self._checkpoint  # a done future once it ran (it may finish before it is stored)
        due = self._writes_since_checkpoint >= _CHECKPOINT_EVERY and not self._closed
        if due and (previous is None or previous.done()):
            self._writes_since_checkpoint = 0
            assert self._executor is not None
            with contextlib.suppress(RuntimeError):  # shut down by close(), which checkpoints itself
                self._checkpoint = self._executor.submit(self._checkpoint_wal)

    def _checkpoint_wal(self) -> None:
        """Copy committed pages from the WAL into the database file (PASSIVE: never waits for anyone).

        The WAL starts over from its beginning only when a checkpoint has copied all of it; under a
        steady stream of writes it never has (they append while it runs) and the file would grow without
        bound (and every commit extend it, every read search more of it). So once the WAL holds
        :data:`_WAL_CATCH_UP_FRAMES` frames, the copy is finished holding this process's write lock:
        only the frames written meanwhile are left to copy, and the next writer starts the WAL over.
        """
        assert self._sync_engine is not None
        try:
            conn = self._thread_connection()
            busy, frames, _ = conn.exec_driver_sql("PRAGMA wal_checkpoint(PASSIVE)").one()
            if not busy and frames >= _WAL_CATCH_UP_FRAMES:
                with self._write_lock:
                    conn.exec_driver_sql("PRAGMA wal_checkpoint(PASSIVE)").close()
        except sa_exc.OperationalError:  # busy: the next checkpoint will catch up
            pass

    async def _postgres_transaction(
        self, fn: Callable[..., T], args: tuple[Any, ...], write: bool, snapshot: bool
    ) -> T:
        engine = self._async_engine()
        attempt = 0
        while True:
            try:
                async with engine.connect() as conn:
                    if write:
                        async with conn.begin():
                            result = await conn.run_sync(fn, *args)
                        self.commits += 1
                        return result
                    level = "REPEATABLE READ" if snapshot else "AUTOCOMMIT"
                    conn = await conn.execution_options(isolation_level=level)
                    return await conn.run_sync(fn, *args)
            except sa_exc.DBAPIError as error:
                attempt += 1
                if attempt >= 10 or not _is_retryable(error):
                    raise
                await asyncio.sleep(0.005 * attempt)
