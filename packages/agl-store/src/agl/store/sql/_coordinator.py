"""The base of a process's share of one database (see :mod:`._coordination`), one subclass per dialect.

Apart from :mod:`._coordination` (SQLite's :class:`~._coordination.SqliteCoordinator` and the registry) so that
PostgreSQL's :class:`~._pgnews.PostgresCoordinator` builds on it without the two modules importing each other.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable
from typing import Any, TypeVar

from ._waiting import Inbox

__all__ = ["Coordinator"]

T = TypeVar("T")


class Coordinator:
    """A process's share of one database (see the module). Subclasses: one per dialect."""

    def __init__(self, key: tuple[Any, ...]) -> None:
        self.key = key
        self._lock = threading.Lock()
        self._inboxes: list[Inbox] = []

    def add(self, inbox: Inbox) -> None:
        with self._lock:
            self._inboxes.append(inbox)

    def remove(self, inbox: Inbox) -> bool:
        """Forget ``inbox``; True if it was the last one."""
        with self._lock:
            with contextlib.suppress(ValueError):
                self._inboxes.remove(inbox)
            return not self._inboxes

    def inboxes(self) -> list[Inbox]:
        with self._lock:
            return list(self._inboxes)

    def publish(self, queued: bool, finished: set[str], committed: bool) -> None:
        """A write of this process (any store of it on this database): wake the waiters it may satisfy."""
        if queued or finished:
            for inbox in self.inboxes():
                inbox.local(queued, finished, committed)

    def reread_all(self) -> None:
        """Every waiter reads the database again (news may have been missed)."""
        for inbox in self.inboxes():
            inbox.reread()

    def join(self) -> None:
        """Before this process's first write, wait or scan: announce it to the other processes."""

    def covered(self) -> bool:
        """Whether every write that may satisfy a waiter wakes it now (else waiters poll)."""
        return True

    async def lead(self) -> bool:
        """Whether this process runs the watchdog now; takes the lock if it is free. Never waits for it."""
        return True

    def wrap(self, fn: Callable[..., T]) -> Callable[..., T]:
        """``fn(conn, ctx, effects, *args)``, a write, made to announce its effects to other processes."""
        self.join()
        return fn

    def shutdown(self) -> None:
        """Let go of everything (the last store closed): quick, called under the registry's lock."""

    async def finish(self) -> None:
        """Wait for what :meth:`shutdown` started (threads) to end."""
