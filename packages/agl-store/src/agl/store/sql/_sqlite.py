"""SQLite write transactions of the SQL store: one thread's connection, and the block that begins and ends a
write transaction (:class:`Writing`) for single writes and groups of writes alike (see :mod:`._db`)."""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Callable
from typing import Any

import sqlalchemy as sa
from sqlalchemy import exc as sa_exc

__all__ = ["SqliteThread", "Writing", "is_busy", "is_busy_error"]


class _WouldWait(Exception):
    """An operation tried on the event loop's thread would have to wait for a lock: run it in the pool."""


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
        lock: threading.Lock,
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
            raise _WouldWait
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
