"""PostgreSQL's share of a process (see :mod:`._coordination`): one connection of its own, on a thread of its
own, that holds the watchdog's session advisory lock while this process leads and ``LISTEN``s for the other
processes' writes.

- The lock (``pg_try_advisory_lock``, keyed by database and schema) is released by the server when the
  connection ends: the store closed, or the process died (kill -9 included), so the next process to scan
  takes over at once. A lost connection loses leadership at once here too, and is opened again.
- A write that may satisfy a waiting call runs ``pg_notify`` in its own transaction (:meth:`wrap`): sent on
  commit, never for a rolled-back write. Its payload says which process wrote (a process hears its own
  writes through :meth:`Coordinator.publish`) and which rollouts finished.
- While the connection is down (or not yet up) waiters poll the database; every waiter reads again when it
  comes back or goes, since news may have been missed. A ping every 10 s finds a connection that died
  silently.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import threading
import uuid
from collections.abc import Callable
from typing import Any, Protocol, TypeVar, cast

import sqlalchemy as sa
from agl.types.timeouts import wait_within
from sqlalchemy.engine import URL

from ._coordinator import Coordinator
from ._steps import Effects

__all__ = ["APPLICATION_NAME", "PostgresCoordinator"]

APPLICATION_NAME = "agl-store-news"
"""The ``application_name`` of the connection (``pg_stat_activity``), unless ``server_settings`` set one."""

T = TypeVar("T")

logger = logging.getLogger("agl.store.sql")

_WHERE = "current_database() || '.' || coalesce(current_schema(), '')"
_CHANNEL = f"'agl_' || to_hex(hashtextextended({_WHERE}, 0))"
_NOTIFY = sa.text(f"SELECT pg_notify({_CHANNEL}, :payload)")
_TAKE = f"SELECT pg_try_advisory_lock(hashtextextended('agl-watchdog:' || {_WHERE}, 0))"
_MAX_PAYLOAD = 7900  # PostgreSQL refuses payloads of 8000 bytes and more
_PING_SECONDS = 10.0
_CONNECT_SECONDS = 10.0
_TAKE_WAIT_SECONDS = 5.0
"""How long a scan waits for the connection (first use) before it gives up leading this time."""


class _Connection(Protocol):
    """What this module uses of an asyncpg connection (asyncpg ships no type information)."""

    async def fetchval(self, query: str) -> Any: ...

    async def add_listener(self, channel: str, callback: Callable[..., None]) -> None: ...

    def add_termination_listener(self, callback: Callable[..., None]) -> None: ...

    def is_closed(self) -> bool: ...


def _payload(token: str, effects: Effects) -> str:
    finished: list[str] | None = sorted(effects.finished)
    text = json.dumps({"p": token, "q": effects.queued, "f": finished})
    if len(text.encode()) > _MAX_PAYLOAD:  # too many to name: the listeners read them back
        text = json.dumps({"p": token, "q": effects.queued, "f": None})
    return text


class PostgresCoordinator(Coordinator):
    """PostgreSQL: an advisory lock for leadership and ``LISTEN``/``NOTIFY`` for news (see the module)."""

    def __init__(self, key: tuple[Any, ...], url: URL, connect_args: dict[str, Any]) -> None:
        super().__init__(key)
        self._url = url
        self._connect_args = connect_args
        self._token = uuid.uuid4().hex
        self._start_lock = threading.Lock()
        self._closed = False
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._wakeup = asyncio.Event()  # (bound to the thread's loop on first use)
        self._connected = asyncio.Event()
        self._busy = asyncio.Lock()  # one statement at a time on the connection
        self._conn: _Connection | None = None
        self._listening = False
        self._leading = False

    # -- called by the stores, on any thread ----------------------------------------------------

    def join(self) -> None:
        if self._thread is not None:
            return
        with self._start_lock:
            if self._thread is not None or self._closed:
                return
            self._loop = asyncio.new_event_loop()
            thread = threading.Thread(target=self._serve, name="agl-postgres-news", daemon=True)
            thread.start()
            self._thread = thread

    def covered(self) -> bool:
        return self._listening

    async def lead(self) -> bool:
        self.join()
        if self._leading:  # (dropped as soon as the connection is lost)
            return True
        loop = self._loop
        if loop is None or self._closed:
            return False
        try:
            future = asyncio.run_coroutine_threadsafe(self._take(), loop)
        except RuntimeError:  # its loop closed meanwhile
            return False
        taking = asyncio.wrap_future(future)
        await asyncio.wait({taking}, timeout=_TAKE_WAIT_SECONDS + 2 * _PING_SECONDS)
        if not taking.done() or taking.cancelled() or taking.exception() is not None:
            future.cancel()  # (closed meanwhile: the thread's loop cancelled it, or never ran it)
            return False
        return taking.result()

    def wrap(self, fn: Callable[..., T]) -> Callable[..., T]:
        self.join()
        token = self._token

        def announced(conn: sa.Connection, ctx: Any, effects: Effects, *args: Any) -> T:
            result = fn(conn, ctx, effects, *args)
            if effects.queued or effects.finished:
                conn.execute(_NOTIFY, {"payload": _payload(token, effects)})
            return result

        return announced

    def shutdown(self) -> None:
        with self._start_lock:
            self._closed = True
        loop = self._loop
        if loop is not None:
            with contextlib.suppress(RuntimeError):  # its thread has ended already
                loop.call_soon_threadsafe(self._wakeup.set)

    async def finish(self) -> None:
        thread = self._thread
        if thread is not None:
            await asyncio.get_running_loop().run_in_executor(None, thread.join, 30)

    # -- the connection's thread ----------------------------------------------------------------

    def _serve(self) -> None:
        loop = self._loop
        assert loop is not None
        asyncio.set_event_loop(loop)
        try:
            loop.run_until_complete(self._run())
        finally:
            left = asyncio.all_tasks(loop)  # scans that asked for the lock as the last store closed
            for task in left:
                task.cancel()
            with contextlib.suppress(Exception):
                loop.run_until_complete(asyncio.gather(*left, return_exceptions=True))
                loop.run_until_complete(loop.shutdown_asyncgens())
            loop.close()

    async def _run(self) -> None:
        delay, failures = 0.25, 0
        while not self._closed:
            try:
                await self._session()
                delay, failures = 0.25, 0
            except Exception as error:
                failures += (
                    1  # the first failure of a row is a warning, the next ones are told at debug level
                )
                level = logging.WARNING if failures == 1 else logging.DEBUG
                logger.log(level, "store news: PostgreSQL connection failed (%s); trying again", error)
            if self._closed:
                return
            with contextlib.suppress(asyncio.TimeoutError):
                await wait_within(self._wakeup.wait(), delay)
            self._wakeup.clear()
            delay = min(delay * 2, 10.0)

    async def _session(self) -> None:
        """One connection, from opening to loss or close."""
        from sqlalchemy.ext.asyncio import create_async_engine

        settings = {"application_name": APPLICATION_NAME, **self._connect_args.get("server_settings", {})}
        connect_args = {**self._connect_args, "server_settings": settings}
        engine = create_async_engine(self._url, poolclass=sa.pool.NullPool, connect_args=connect_args)
        try:
            async with engine.connect() as connection:
                raw = await wait_within(connection.get_raw_connection(), _CONNECT_SECONDS)
                conn = cast(_Connection, raw.driver_connection)
                conn.add_termination_listener(lambda *_: self._wakeup.set())
                channel = await conn.fetchval(f"SELECT {_CHANNEL}")
                await conn.add_listener(channel, self._heard)
                await self._serve_connection(conn)
        finally:
            with contextlib.suppress(Exception):
                await engine.dispose()

    async def _serve_connection(self, conn: _Connection) -> None:
        self._conn, self._listening = conn, True
        self._connected.set()
        self.reread_all()  # what was written while nobody listened
        try:
            while not self._closed and not conn.is_closed():
                try:
                    await wait_within(self._wakeup.wait(), _PING_SECONDS)
                    self._wakeup.clear()
                except asyncio.TimeoutError:
                    async with self._busy:
                        await wait_within(conn.fetchval("SELECT 1"), _PING_SECONDS)
        finally:
            leading = self._leading
            self._conn, self._listening, self._leading = None, False, False
            self._connected.clear()
            self.reread_all()  # poll until listening again
            if leading and not self._closed:
                logger.info("watchdog: this process lost its PostgreSQL connection and with it the watchdog")

    async def _take(self) -> bool:
        """On the connection's thread: take the advisory lock if it is free."""
        with contextlib.suppress(asyncio.TimeoutError):
            await wait_within(self._connected.wait(), _TAKE_WAIT_SECONDS)
        conn = self._conn
        if conn is None or self._closed:
            return False
        try:
            async with self._busy:
                taken = bool(await wait_within(conn.fetchval(_TAKE), _PING_SECONDS))
        except Exception as error:
            logger.warning("watchdog: could not ask PostgreSQL for the watchdog's lock (%s)", error)
            return False
        if taken and self._conn is conn:
            self._leading = True
        return self._leading

    def _heard(self, _conn: Any, _pid: int, _channel: str, payload: str) -> None:
        """A notification: another process's write committed."""
        try:
            news = json.loads(payload)
            if news.get("p") == self._token:
                return  # this process's own: told already
            finished = news.get("f")
            names = None if finished is None else {str(rollout_id) for rollout_id in finished}
            queued = bool(news.get("q"))
        except (ValueError, AttributeError, TypeError):
            queued, names = True, None  # unreadable: read everything again
        for inbox in self.inboxes():
            inbox.remote(queued, names)
