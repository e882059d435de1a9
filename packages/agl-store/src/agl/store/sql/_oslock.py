"""OS file locks next to a SQLite database: which process runs the watchdog, and which processes use the file.

The file ``<database>.watchdog.lock`` (created next to the database) holds, as POSIX record locks (``fcntl``):

- byte 0, exclusive: the watchdog's leader. The operating system releases it when its process ends, however
  it ends (kill -9 included), so the next process to try takes over at once; a live leader keeps it for as
  long as its store is open, even paused (no lease to expire, no split brain);
- byte 1, shared: one per process that uses the database. A process asks whether any other holds one by
  trying to turn its own into an exclusive lock (POSIX lock changes are atomic: refused, it keeps the shared
  one; granted, it turns it back at once);
- bytes 8-15: a counter that every process adds one to as it comes (under an exclusive lock on byte 2), so
  that a process that came and went between two looks is not missed.

POSIX record locks belong to the process (all threads, every store of it) and are not inherited by a forked
child; closing any descriptor of the file releases them all, so a process opens it once
(:class:`LockFile` objects are kept one per path and process by :mod:`._coordination`).

Windows has byte 0 only (``msvcrt``, per handle): there every other process is taken to be present.
"""

from __future__ import annotations

import errno
import logging
import os
import sys
import threading
from pathlib import Path

__all__ = ["LockFile", "lock_path"]

_LEADER, _PRESENT, _JOINING, _COUNTER = 0, 1, 2, 8

logger = logging.getLogger("agl.store.sql")


def lock_path(database: str) -> Path:
    """The lock file of the SQLite database at ``database``."""
    return Path(database).expanduser().with_name(Path(database).expanduser().name + ".watchdog.lock")


def _refused(error: OSError) -> bool:
    return error.errno in (errno.EACCES, errno.EAGAIN)


class LockFile:
    """This process's hold on one database's lock file. Thread-safe; opened on first use."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._fd: int | None = None
        self._leading = False
        self._closed = False
        self._failed = False
        self._lock = threading.Lock()

    def join(self) -> None:
        """Mark this process as a user of the database (byte 1) and count it in (bytes 8-15). Idempotent.

        A file that cannot be opened or locked (a read-only directory) is logged once; this process then
        runs the watchdog and takes every other process to be present: duplicate scans (each verdict is
        checked again under a lock) rather than none."""
        with self._lock:
            if self._fd is not None or self._closed or self._failed:
                return
            fd = -1
            try:
                self.path.parent.mkdir(parents=True, exist_ok=True)
                fd = os.open(self.path, os.O_RDWR | os.O_CREAT | getattr(os, "O_CLOEXEC", 0), 0o644)
                _join(fd)
            except OSError as error:
                if fd >= 0:
                    os.close(fd)
                self._failed = True
                logger.warning(
                    "watchdog: cannot lock %s (%s): this process scans regardless", self.path, error
                )
                return
            self._fd = fd

    def try_lead(self) -> bool:
        """Whether this process holds the leader's lock now: taken now if it is free. Never waits."""
        self.join()
        with self._lock:
            if self._fd is None:
                return self._failed and not self._closed
            if not self._leading:
                try:
                    self._leading = _try_lock(self._fd, _LEADER)
                except OSError as error:  # (a file system without locks)
                    logger.warning("watchdog: cannot lock %s (%s): this process scans", self.path, error)
                    self._leading = True
            return self._leading

    def others_present(self) -> bool:
        """Whether another process uses the database now (holds its byte 1)."""
        with self._lock:
            if self._fd is None:
                return True
            try:
                return _others_present(self._fd)
            except OSError:
                return True

    def joins(self) -> int:
        """The count of processes that have come so far (changes when one comes)."""
        with self._lock:
            return 0 if self._fd is None else _read_counter(self._fd)

    def close(self) -> None:
        """Release every lock of this process on the file (leadership included), for good."""
        with self._lock:
            fd, self._fd, self._leading, self._closed = self._fd, None, False, True
        if fd is not None:
            os.close(fd)


def _read_counter(fd: int) -> int:
    data = os.pread(fd, 8, _COUNTER) if hasattr(os, "pread") else b""
    return int.from_bytes(data.ljust(8, b"\0"), "little")


if sys.platform == "win32":
    import msvcrt

    def _join(fd: int) -> None:
        del fd

    def _try_lock(fd: int, offset: int) -> bool:
        os.lseek(fd, offset, os.SEEK_SET)
        try:
            msvcrt.locking(fd, msvcrt.LK_NBLCK, 1)
        except OSError:
            return False
        return True

    def _others_present(fd: int) -> bool:
        del fd
        return True

else:
    import fcntl

    def _join(fd: int) -> None:
        fcntl.lockf(fd, fcntl.LOCK_SH, 1, _PRESENT)  # waits at most for a look of another process
        fcntl.lockf(fd, fcntl.LOCK_EX, 1, _JOINING)
        try:
            count = _read_counter(fd)
            os.pwrite(fd, ((count + 1) % 2**63).to_bytes(8, "little"), _COUNTER)
        finally:
            fcntl.lockf(fd, fcntl.LOCK_UN, 1, _JOINING)

    def _try_lock(fd: int, offset: int) -> bool:
        try:
            fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB, 1, offset)
        except OSError as error:
            if _refused(error):
                return False
            raise
        return True

    def _others_present(fd: int) -> bool:
        if not _try_lock(fd, _PRESENT):  # another process holds a shared lock on byte 1
            return True
        fcntl.lockf(fd, fcntl.LOCK_SH, 1, _PRESENT)  # back to shared (a downgrade: never waits)
        return False
