"""What the SQL stores of one process on one database share: who runs the watchdog, and news of writes.

One :class:`Coordinator` per process and database (:func:`attach` keeps them), shared by every store of the
process on that database:

- **Leadership.** One process at a time among all that share the database runs the watchdog: the one holding
  a lock that dies with it. SQLite: an OS file lock next to the database (:mod:`._oslock`); PostgreSQL: a
  session advisory lock held on a connection of its own (:mod:`._pgnews`). Nothing expires: a leader keeps
  the lock until its stores close or it dies, and then the next process to scan takes it at once.
- **News.** A committed write that may satisfy a waiting call (:mod:`._waiting`) wakes the waiters of every
  store of the process (:meth:`Coordinator.publish`), and of other processes: PostgreSQL ``NOTIFY`` in the
  write's transaction, heard through ``LISTEN``; SQLite cannot notify another process, so while another
  process uses the file, a thread here watches it (``PRAGMA data_version``, ten times a second: one cheap
  statement for all waiters) and has every waiter read again when it changed. Alone on the file, it only
  looks (a few system calls) for another process that came.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import sqlite3
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import quote

from ._coordinator import Coordinator
from ._db import parse_url
from ._oslock import LockFile, lock_path
from ._waiting import Inbox

__all__ = ["Coordinator", "SqliteCoordinator", "attach", "detach"]

logger = logging.getLogger("agl.store.sql")

_LOOK_SECONDS = 0.1
"""How often a SQLite database is looked at for other processes: for one that came (and maybe went), and for
changes to the file while another is there (three system calls and, with another there, one statement)."""


class SqliteCoordinator(Coordinator):
    """SQLite: an OS file lock for leadership and presence; a watch on the file while others use it."""

    def __init__(self, key: tuple[Any, ...], database: Path) -> None:
        super().__init__(key)
        self._database = database
        self._file = LockFile(lock_path(str(database)))
        self._stop = threading.Event()
        self._watcher: threading.Thread | None = None
        self._look_lock = threading.Lock()
        self._conn: sqlite3.Connection | None = None
        self._joins = 0
        self._present = False
        self._version: object = None

    def join(self) -> None:
        if self._watcher is not None:
            return
        with self._look_lock:
            if self._watcher is not None or self._stop.is_set():
                return
            self._file.join()
            self._joins, self._present = self._file.joins(), self._file.others_present()
            self._version = self._data_version() if self._present else None
            watcher = threading.Thread(target=self._watch, name="agl-sqlite-watch", daemon=True)
            watcher.start()
            self._watcher = watcher

    async def lead(self) -> bool:
        self.join()
        return self._file.try_lead()

    def shutdown(self) -> None:
        self._stop.set()
        self._file.close()

    async def finish(self) -> None:
        watcher = self._watcher
        if watcher is not None:
            await asyncio.get_running_loop().run_in_executor(None, watcher.join, 10)

    def _watch(self) -> None:
        try:
            while not self._stop.wait(_LOOK_SECONDS):
                try:
                    changed = self._look()
                except Exception:  # (a look that failed: the next one tries again)
                    logger.debug("watching %s failed", self._database, exc_info=True)
                    changed = True
                if changed:
                    self.reread_all()
        finally:
            with self._look_lock:
                conn, self._conn = self._conn, None
            if conn is not None:
                conn.close()

    def _look(self) -> bool:
        """Whether another process may have written since the last look: one came (the count of comers
        moved), or one was or is present and the file changed."""
        with self._look_lock:
            joins, present = self._file.joins(), self._file.others_present()
            changed = joins != self._joins
            if present or self._present:
                version = self._data_version()
                changed = changed or version != self._version
                self._version = version
            self._joins, self._present = joins, present
            return changed

    def _data_version(self) -> object:
        """SQLite's ``data_version`` of the file (changes when another connection commits), ``None`` while
        the file does not exist, a new object (never equal) when it cannot be read now."""
        try:
            if self._conn is None:
                uri = f"file:{quote(str(self._database))}?mode=rw"
                self._conn = sqlite3.connect(uri, uri=True, timeout=0, check_same_thread=False)
            return self._conn.execute("PRAGMA data_version").fetchone()[0]
        except sqlite3.Error:
            if not self._database.exists():
                return None
            return object()


_registry: dict[tuple[Any, ...], Coordinator] = {}
_registry_lock = threading.Lock()


def _key(url: str, engine_kwargs: dict[str, Any]) -> tuple[tuple[Any, ...], Callable[[], Coordinator]]:
    dialect, parsed, _ = parse_url(url)
    if dialect == "sqlite":
        assert parsed.database
        database = Path(parsed.database).expanduser().resolve()
        key = (os.getpid(), dialect, str(database))
        return key, lambda: SqliteCoordinator(key, database)
    from ._pgnews import PostgresCoordinator

    connect_args: dict[str, Any] = dict(engine_kwargs.get("connect_args") or {})
    rendered = parsed.render_as_string(hide_password=False)
    key = (os.getpid(), dialect, rendered, json.dumps(connect_args, sort_keys=True, default=repr))
    return key, lambda: PostgresCoordinator(key, parsed, connect_args)


def attach(url: str, engine_kwargs: dict[str, Any], inbox: Inbox) -> Coordinator:
    """The coordinator of this process for the database at ``url``, with ``inbox`` (a store's) attached."""
    key, make = _key(url, engine_kwargs)
    with _registry_lock:
        coordinator = _registry.get(key)
        if coordinator is None:
            coordinator = _registry[key] = make()
        coordinator.add(inbox)
        return coordinator


async def detach(coordinator: Coordinator, inbox: Inbox) -> None:
    """Take a closing store's ``inbox`` away; the last one lets go of the locks and connections."""
    with _registry_lock:
        if not coordinator.remove(inbox) or _registry.get(coordinator.key) is not coordinator:
            return
        del _registry[coordinator.key]
        coordinator.shutdown()  # (under the lock: a SQLite lock file is closed before another opens it)
    await coordinator.finish()
