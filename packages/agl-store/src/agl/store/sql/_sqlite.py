"""SQLite write transactions of the SQL store: one thread's connection, and the block that begins and ends a
write transaction (:class:`Writing`) for single writes and groups of writes alike (see :mod:`._db`)."""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Callable
from typing import Any

import sqlalchemy as sa
from sqlalchemy import exc as sa_exc

__all__ = ["SqliteThread", "WriteLock", "Writing", "is_busy", "is_busy_error"]


class _WouldWait(Exception):
    """An operation tried on the event loop's thread would have to wait for a lock: run it in the pool."""


class _LockHeld(_WouldWait):
    """The one that would have to wait is this process's write lock: another of its threads holds it for a
    moment. Waiting for :meth:`WriteLock.call_when_free` beats a pool thread, which would then hold the lock
    while the loop's next writes arrive, and send those to the pool too."""


class WriteLock:
    """This process's SQLite write lock. A thread that must not block (an event loop's) can instead ask to
    be called back once the lock is free (:meth:`call_when_free`)."""

    __slots__ = ("_lock", "_mutex", "_waiters")

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._mutex = threading.Lock()  # orders a release against a waiter's check-and-register
        self._waiters: list[Callable[[], None]] = []

    def acquire(self, blocking: bool = True) -> bool:
        return self._lock.acquire(blocking)

    def release(self) -> None:
        with self._mutex:
            self._lock.release()
            waiters, self._waiters = self._waiters, []
        for callback in waiters:
            callback()

    def __enter__(self) -> None:
        self._lock.acquire()

    def __exit__(self, *_exc: object) -> None:
        self.release()

    def call_when_free(self, callback: Callable[[], None]) -> None:
        """Call ``callback()`` once the lock is free: at once if it is now, else on the thread that releases
        it (so ``callback`` must be quick and thread-safe, e.g. ``loop.call_soon_threadsafe``)."""
        with self._mutex:
            if self._lock.locked():
                self._waiters.append(callback)
                return
        callback()


def is_busy(error: BaseException) -> bool:
    return "database is locked" in str(error) or "database table is locked" in str(error)


class SqliteThread:
    """One thread's SQLite connection and its driver cursor (valid while ``generation`` is current)."""

    __slots__ = ("conn", "cursor", "generation")

    def __init__(self, conn: sa.Connection, cursor: sqlite3.Cursor, generation: int) -> None:
        self.conn = conn
        self.cursor = cursor
        self.generation = generation


def is_busy_error(error: BaseException) -> bool:
    """A lock held by another connection (from the driver, or wrapped by SQLAlchemy)."""
    return isinstance(error, sqlite3.OperationalError | sa_exc.OperationalError) and is_busy(error)


class Writing:
    """A write transaction on SQLite: this process's write lock, then ``BEGIN IMMEDIATE`` (the database's
    write lock); ``COMMIT`` when the block ends, ``ROLLBACK`` if it raises. ``inline`` (an event-loop
    thread, which must not wait): a lock held by someone else raises :class:`_WouldWait`, nothing written.
    The one place where SQLite write transactions begin and end, for single writes and groups alike."""

    __slots__ = ("committed", "cursor", "inline", "lock", "writes")

    def __init__(
        self,
        lock: WriteLock,
        committed: Callable[[int], None],
        cursor: sqlite3.Cursor,
        inline: bool,
        writes: int = 1,
    ) -> None:
        self.lock = lock
        self.committed = committed
        self.cursor = cursor
        self.inline = inline
        self.writes = writes

    def __enter__(self) -> None:
        lock = self.lock
        if not lock.acquire(blocking=not self.inline):
            raise _LockHeld
        try:
            self.cursor.execute("BEGIN IMMEDIATE")
        except BaseException as error:
            lock.release()
            if self.inline and is_busy_error(error):
                raise _WouldWait from error
            raise

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None, _tb: Any) -> None:
        try:
            if error is None:
                try:
                    self.cursor.execute("COMMIT")
                except BaseException:
                    self.cursor.execute("ROLLBACK")
                    raise
                self.committed(self.writes)
                return
            self.cursor.execute("ROLLBACK")
            if self.inline and is_busy_error(error):  # rolled back: the pool runs it again from scratch
                raise _WouldWait from error
        finally:
            self.lock.release()
