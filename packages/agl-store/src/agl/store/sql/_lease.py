"""Named leases in the database: at most one process at a time does a job (the watchdog's scans).

A lease is a row ``(name, holder, expires)``. A process takes it when it is free or expired and renews it
while it keeps doing the job; another process takes over once the holder has let it expire (a crashed or
idle holder) or released it (a closed store). Holders are processes, so every store of one process
counts as the same holder. Times come from the store's clock.
"""

from __future__ import annotations

import os
import socket
import threading
import uuid
from typing import Any

import sqlalchemy as sa

from .schema import leases

__all__ = ["Lease", "process_holder"]

_holder: tuple[int, str] | None = None


def process_holder() -> str:
    """This process's holder name: host, pid and a random part (a new one after a fork)."""
    global _holder
    pid = os.getpid()
    if _holder is None or _holder[0] != pid:
        _holder = (pid, f"{socket.gethostname()}:{pid}:{uuid.uuid4().hex[:8]}")
    return _holder[1]


def _insert(dialect: str) -> Any:  # the dialect's insert, with ON CONFLICT
    if dialect == "postgresql":
        from sqlalchemy.dialects.postgresql import insert
    else:
        from sqlalchemy.dialects.sqlite import insert
    return insert


def take(conn: sa.Connection, name: str, holder: str, now: float, ttl: float) -> bool:
    """Take or renew lease ``name`` for ``holder`` until ``now + ttl``; False if another holds it."""
    renewed = conn.execute(
        sa.update(leases)
        .where(leases.c.name == name, sa.or_(leases.c.holder == holder, leases.c.expires < now))
        .values(holder=holder, expires=now + ttl)
    )
    if renewed.rowcount:
        return True
    insert = _insert(conn.dialect.name)
    created = conn.execute(
        insert(leases).values(name=name, holder=holder, expires=now + ttl).on_conflict_do_nothing()
    )
    return bool(created.rowcount)


def give_up(conn: sa.Connection, name: str, holder: str) -> None:
    """Let lease ``name`` go at once if ``holder`` has it."""
    conn.execute(
        sa.update(leases).where(leases.c.name == name, leases.c.holder == holder).values(expires=0.0)
    )


def holder_of(conn: sa.Connection, name: str, now: float) -> str | None:
    """Who holds lease ``name`` now (``None``: nobody, or it expired)."""
    row = conn.execute(sa.select(leases.c.holder, leases.c.expires).where(leases.c.name == name)).first()
    return None if row is None or row.expires < now else row.holder


class Lease:
    """This process's view of one lease: asks the database only when it must take or renew it.

    Args:
        name: The lease.
        ttl: Seconds a taken lease lasts; the holder renews it once less than half is left.
    """

    def __init__(self, name: str, ttl: float) -> None:
        if ttl <= 0:
            raise ValueError(f"a lease needs a positive ttl, got {ttl}")
        self.name = name
        self.ttl = ttl
        self._lock = threading.Lock()
        self._held_until = float("-inf")
        self._checked_until = float("-inf")

    def fresh(self, now: float) -> bool | None:
        """True: held by this process for at least half its ttl more; False: another process held it
        at the last look, which is recent; None: ask the database (:func:`take`)."""
        with self._lock:
            if now <= self._held_until - self.ttl / 2 and now >= self._held_until - self.ttl:
                return True
            if self._checked_until - self.ttl <= now < self._checked_until:
                return False
            return None

    def record(self, now: float, held: bool) -> None:
        """What :func:`take` answered at ``now``. A refused taker asks again after ``ttl / 2``."""
        with self._lock:
            if held:
                self._held_until, self._checked_until = now + self.ttl, float("-inf")
            else:
                self._held_until, self._checked_until = float("-inf"), now + self.ttl / 2

    def forget(self) -> None:
        with self._lock:
            self._held_until = self._checked_until = float("-inf")
