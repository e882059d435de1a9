"""``SqlReplayCache``: idempotent replays kept in the SQL store's database (table ``agl_replays``).

The :class:`~agl.store.http.server._replay.ReplayCache` of a server over a :class:`SqlLightningStore`: every
worker of ``agl store --workers N`` sees the same keys, and so does the server after a restart, so a
retried write is applied once whichever worker it reaches and whenever it comes (within ``ttl_seconds``).

A key is *held* (``state = running``) from the claim until its answer is recorded (``done``) or forgotten
(a server fault: the row is deleted, so a retry runs for real). A retry that finds the key held waits,
polling the row, for the holder to finish. A hold is stale, and taken over by the next claim, when it
belongs to an earlier run of the server (the holder was killed with its request) or is older than
``hold_seconds`` (its worker died).

One gap remains: a write and the recording of its answer are two transactions; a server killed between
them has applied the write but recorded nothing, and the retry applies it again.
"""

from __future__ import annotations

import asyncio
import hashlib
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

import sqlalchemy as sa

from ..http.server._replay import RecordedAnswer
from . import schema
from ._steps import execute, prepared

if TYPE_CHECKING:
    from .store import SqlLightningStore

__all__ = ["SqlReplayCache"]

T = schema.replays
T_ = TypeVar("T_")
_HELD = "held"
_CLAIMED = "claimed"
_PRUNE_EVERY = 60.0


def _insert(dialect: str) -> Any:
    if dialect == "postgresql":
        from sqlalchemy.dialects.postgresql import insert
    else:
        from sqlalchemy.dialects.sqlite import insert
    return insert


_ASYNC_COMMIT = sa.text("SET LOCAL synchronous_commit TO OFF")


def _no_flush_wait(conn: sa.Connection) -> None:
    """PostgreSQL: commit without waiting for the WAL flush. Nothing is lost by it: the write that follows
    a claim commits synchronously, which flushes the WAL up to it, the claim included; and an answer lost
    in a PostgreSQL crash is the gap the module docstring describes anyway."""
    if conn.dialect.name == "postgresql":
        conn.execute(_ASYNC_COMMIT)


def _answer(row: dict[str, Any]) -> RecordedAnswer:
    stored: list[tuple[str, str]] = row["headers"] or []  # a JSON column: [[name, value], ...]
    headers = [(k.encode("latin-1"), v.encode("latin-1")) for k, v in stored]
    return RecordedAnswer(int(row["status"]), headers, bytes(row["body"] or b""))


def _try_claim(conn: sa.Connection, key: str, run_id: str, now: float) -> bool:
    """Hold ``key`` if nobody has it yet (one statement: on PostgreSQL it runs without a transaction)."""
    dialect = conn.dialect.name
    inserted = execute(
        conn,
        prepared(
            ("replay_claim", dialect),
            lambda: (
                _insert(dialect)(T)
                .values(
                    key=sa.bindparam("b_key"),
                    state="running",
                    run_id=sa.bindparam("b_run_id"),
                    claimed=sa.bindparam("b_now"),
                )
                .on_conflict_do_nothing()
                .returning(T.c.seq)
            ),
        ),
        {"b_key": key, "b_run_id": run_id, "b_now": now},
    )
    return bool(inserted)


def _claim(conn: sa.Connection, key: str, run_id: str, now: float, hold: float, ttl: float) -> Any:
    """``_CLAIMED`` (the caller holds ``key`` now), the recorded answer, or ``_HELD`` (another request has it)."""
    dialect = conn.dialect.name
    _no_flush_wait(conn)
    if _try_claim(conn, key, run_id, now):
        return _CLAIMED
    select = prepared(
        ("replay_find", dialect),
        lambda: (
            sa.select(T.c.state, T.c.run_id, T.c.claimed, T.c.status, T.c.headers, T.c.body)
            .where(T.c.key == sa.bindparam("b_key"))
            .with_for_update()
        ),
    )
    rows = execute(conn, select, {"b_key": key})
    if not rows:
        return _HELD  # deleted meanwhile (a fault): claim again
    row = rows[0]
    if row["state"] == "done" and now - row["claimed"] <= ttl:
        return _answer(row)
    if row["state"] == "running" and row["run_id"] == run_id and now - row["claimed"] <= hold:
        return _HELD
    # an expired answer, or a stale hold: take the key over
    _update_row(
        conn,
        "replay_take",
        lambda: {
            "state": "running",
            "run_id": sa.bindparam("b_run_id"),
            "claimed": sa.bindparam("b_now"),
            "status": None,
            "headers": None,
            "body": None,
        },
        {"b_key": key, "b_run_id": run_id, "b_now": now},
    )
    return _CLAIMED


def _update_row(
    conn: sa.Connection, name: str, values: Callable[[], dict[str, Any]], params: dict[str, Any]
) -> None:
    """``UPDATE agl_replays SET values() WHERE key = :b_key``, built once per dialect (as ``name``)."""
    execute(
        conn,
        prepared(
            (name, conn.dialect.name),
            lambda: sa.update(T).where(T.c.key == sa.bindparam("b_key")).values(**values()),
        ),
        params,
    )


def _record(conn: sa.Connection, key: str, now: float, answer: RecordedAnswer) -> None:
    headers = [[k.decode("latin-1"), v.decode("latin-1")] for k, v in answer.headers]
    _update_row(
        conn,
        "replay_record",
        lambda: {
            "state": "done",
            "claimed": sa.bindparam("b_now"),
            "status": sa.bindparam("b_status"),
            "headers": sa.bindparam("b_headers", type_=schema.replays.c.headers.type),
            "body": sa.bindparam("b_body", type_=sa.LargeBinary()),
        },
        {"b_key": key, "b_now": now, "b_status": answer.status, "b_headers": headers, "b_body": answer.body},
    )


def _forget(conn: sa.Connection, key: str) -> None:
    execute(
        conn,
        prepared(
            ("replay_forget", conn.dialect.name),
            lambda: sa.delete(T).where(T.c.key == sa.bindparam("b_key"), T.c.state == "running"),
        ),
        {"b_key": key},
    )


def _prune(conn: sa.Connection, before: float, max_entries: int) -> None:
    conn.execute(sa.delete(T).where(T.c.claimed < before))
    newest = conn.execute(sa.select(sa.func.max(T.c.seq))).scalar()
    if newest is not None and newest > max_entries:
        conn.execute(sa.delete(T).where(T.c.seq <= newest - max_entries, T.c.state == "done"))


class SqlReplayCache:
    """A :class:`~agl.store.http.server._replay.ReplayCache` in the database of ``store``.

    Args:
        store: The SQL store the server serves.
        run_id: Names this run of the server (shared by its workers); holds of other runs are stale.
        ttl_seconds: How long an answer is replayed after it was recorded.
        max_entries: Most answers kept (the oldest go first).
        hold_seconds: After this long a hold is stale even within the same run (its worker died).
        clock: Wall-clock time (shared by processes and restarts).
    """

    def __init__(
        self,
        store: SqlLightningStore,
        run_id: str,
        *,
        ttl_seconds: float = 600.0,
        max_entries: int = 100_000,
        hold_seconds: float = 300.0,
        clock: Callable[[], float] = time.time,
    ) -> None:
        if ttl_seconds <= 0 or max_entries <= 0 or hold_seconds <= 0:
            raise ValueError("ttl_seconds, max_entries and hold_seconds must be positive")
        self._db = store._db  # pyright: ignore[reportPrivateUsage]
        self.run_id = run_id
        self.ttl_seconds = ttl_seconds
        self.max_entries = max_entries
        self.hold_seconds = hold_seconds
        self._clock = clock
        self._next_prune = float("-inf")

    @staticmethod
    def _key(key: bytes) -> str:
        return hashlib.sha256(key).hexdigest()

    async def claim(self, key: bytes) -> RecordedAnswer | None:
        digest = self._key(key)
        delay = 0.002
        while True:
            now = self._clock()
            if await self._single(_try_claim, digest, self.run_id, now):
                found: Any = _CLAIMED  # the common case: a new key, one statement
            else:
                found = await self._db.write(
                    _claim, digest, self.run_id, now, self.hold_seconds, self.ttl_seconds
                )
            if found == _CLAIMED:
                if now >= self._next_prune:
                    self._next_prune = now + _PRUNE_EVERY
                    await self._db.write(
                        _prune, now - max(self.ttl_seconds, self.hold_seconds), self.max_entries
                    )
                return None
            if isinstance(found, RecordedAnswer):
                return found
            await asyncio.sleep(delay)  # held by a request still running (on any worker)
            delay = min(delay * 2, 0.05)

    async def release(self, key: bytes, answer: RecordedAnswer | None) -> None:
        digest = self._key(key)
        if answer is None:
            await self._single(_forget, digest)
        else:
            await self._single(_record, digest, self._clock(), answer)

    async def _single(self, fn: Callable[..., T_], *args: Any) -> T_:
        """Run a one-statement write: on PostgreSQL outside a transaction (one round trip instead of
        three); on SQLite as any write (behind the store's write lock)."""
        if self._db.dialect == "postgresql":
            return await self._db.read(fn, *args)
        return await self._db.write(fn, *args)
