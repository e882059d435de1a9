"""``SqlReplayCache``: idempotent replays kept in the SQL store's database (table ``agl_replays``).

The :class:`~agl.store.http.server._replay.ReplayCache` of a server over a :class:`SqlLightningStore`: every
worker of ``agl store --workers N`` sees the same keys, and so does the server after a restart, so a
retried write is applied once whichever worker it reaches and whenever it comes (within ``ttl_seconds``).

A key is *held* from the claim until its answer is recorded (``done``) or forgotten (a server fault, so
that a retry runs for real). A retry that finds the key held waits for the holder to finish. Holds count
only within one run of the server (a restarted server takes over the holds of the killed one), so where
that run is one process (``shared_holds=False``: a server without workers) they are kept in its memory,
together with the keys that have an answer (read once, at the first claim, then kept up to date by this
process): a new key is claimed without touching the database, and only a real retry reads its answer.
Among the workers of ``agl store --workers N`` a hold is a row (``state = running``), deleted if the request
is forgotten, polled by a retry that waits; it is stale, and taken over by the next claim, when it belongs
to an earlier run or is older than ``hold_seconds`` (its worker died). Either way the newest
``max_entries`` answers, none older than ``ttl_seconds``, are replayed.

Each write the request makes logs its result under the key in its own transaction (:mod:`._writelog`):
the claim of a retry whose answer a crash lost (the row is ``running`` from a dead run, or ``applied``:
released after a fault) finds those results and hands them to the retry (a :class:`WriteLog` with
entries), whose writes return them instead of writing again.

The body's fingerprint is kept with the key: a claim with another body raises :class:`KeyReused`.
"""

from __future__ import annotations

import asyncio
import hashlib
import time
from collections import OrderedDict
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar, cast

import sqlalchemy as sa

from ..http.server._replay import KeyHolds, KeyReused, RecordedAnswer, WriteLog, body_differs
from ._steps import execute, prepared
from ._writelog import ROW as _ROW
from ._writelog import Entries
from ._writelog import log_entries as _log_entries
from .schema import replays as T

if TYPE_CHECKING:
    from .store import SqlLightningStore

__all__ = ["SqlReplayCache"]

T_ = TypeVar("T_")
_HELD = "held"
_REUSED = "reused"
_PRUNE_EVERY = 60.0


def _insert(dialect: str) -> Any:
    if dialect == "postgresql":
        from sqlalchemy.dialects.postgresql import insert
    else:
        from sqlalchemy.dialects.sqlite import insert
    return insert


_ASYNC_COMMIT = sa.text("SET LOCAL synchronous_commit TO OFF")


def _no_flush_wait(conn: sa.Connection) -> None:
    """PostgreSQL: commit without waiting for the WAL flush. Nothing is lost by it: a claim records no
    result (the writes that follow it record theirs, in their own, synchronous, commits; which flush the
    WAL up to them, the claim included)."""
    if conn.dialect.name == "postgresql":
        conn.execute(_ASYNC_COMMIT)


# -- claims and answers ----------------------------------------------------------------------------


def _answer(row: dict[str, Any]) -> RecordedAnswer:
    stored: list[tuple[str, str]] = row["headers"] or []  # a JSON column: [[name, value], ...]
    headers = [(k.encode("latin-1"), v.encode("latin-1")) for k, v in stored]
    return RecordedAnswer(int(row["status"]), headers, bytes(row["body"] or b""))


def _try_claim(conn: sa.Connection, key: str, run_id: str, fingerprint: str, now: float) -> bool:
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
                    request_hash=sa.bindparam("b_hash"),
                )
                .on_conflict_do_nothing()
                .returning(T.c.seq)
            ),
        ),
        {"b_key": key, "b_run_id": run_id, "b_now": now, "b_hash": fingerprint},
    )
    return bool(inserted)


def _claim(
    conn: sa.Connection, key: str, run_id: str, fingerprint: str, now: float, hold: float, ttl: float
) -> Any:
    """The entries of an earlier try's log (a list: the caller holds ``key`` now), the recorded answer,
    ``_HELD`` (another request has it) or ``_REUSED`` (another body's key)."""
    dialect = conn.dialect.name
    _no_flush_wait(conn)
    if _try_claim(conn, key, run_id, fingerprint, now):
        return []
    select = prepared(
        ("replay_find", dialect),
        lambda: sa.select(*(T.c[c] for c in _ROW)).where(T.c.key == sa.bindparam("b_key")).with_for_update(),
    )
    rows = execute(conn, select, {"b_key": key})
    if not rows:
        return _HELD  # deleted meanwhile (a fault): claim again
    row = rows[0]
    fresh = now - row["claimed"] <= ttl
    if fresh and body_differs(row["request_hash"], fingerprint):
        return _REUSED
    if row["state"] == "done" and fresh:
        return _answer(row)
    if row["state"] == "running" and row["run_id"] == run_id and now - row["claimed"] <= hold:
        return _HELD
    # an expired answer, a stale hold or a released log: take the key over, with the log if still fresh
    kept = row["writes"] if fresh and row["state"] != "done" else None
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
            "request_hash": sa.bindparam("b_hash"),
            "writes": sa.bindparam("b_writes"),
        },
        {"b_key": key, "b_run_id": run_id, "b_now": now, "b_hash": fingerprint, "b_writes": kept},
    )
    return _log_entries(kept)


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


def _record(
    conn: sa.Connection, key: str, run_id: str, now: float, answer: RecordedAnswer, fingerprint: str
) -> None:
    """Keep ``answer`` under ``key``: the claim's row becomes ``done`` (its log is no longer needed), or
    (holds in memory, no write logged) a new row."""
    dialect = conn.dialect.name

    def build() -> Any:
        insert = _insert(dialect)(T).values(
            key=sa.bindparam("b_key"),
            state="done",
            run_id=sa.bindparam("b_run_id"),
            claimed=sa.bindparam("b_now"),
            status=sa.bindparam("b_status"),
            headers=sa.bindparam("b_headers", type_=T.c.headers.type),
            body=sa.bindparam("b_body", type_=sa.LargeBinary()),
            request_hash=sa.bindparam("b_hash"),
        )
        done = insert.excluded
        return insert.on_conflict_do_update(index_elements=[T.c.key], set_={c: done[c] for c in _ROW})

    headers = [[k.decode("latin-1"), v.decode("latin-1")] for k, v in answer.headers]
    params = {
        "b_key": key,
        "b_run_id": run_id,
        "b_now": now,
        "b_status": answer.status,
        "b_hash": fingerprint,
    }
    execute(
        conn,
        prepared(("replay_record", dialect), build),
        {**params, "b_headers": headers, "b_body": answer.body},
    )


def _find_row(conn: sa.Connection, key: str, newer_than: float) -> dict[str, Any] | None:
    """The row of ``key`` if it was claimed after ``newer_than`` (one read)."""
    select = prepared(
        ("replay_row", conn.dialect.name),
        lambda: sa.select(*(T.c[c] for c in _ROW)).where(
            T.c.key == sa.bindparam("b_key"), T.c.claimed >= sa.bindparam("b_since")
        ),
    )
    rows = execute(conn, select, {"b_key": key, "b_since": newer_than})
    return rows[0] if rows else None


def _found(row: dict[str, Any] | None, fingerprint: str) -> RecordedAnswer | Entries | None:
    """What a claim (holds in memory) finds in the key's row: its answer, an earlier try's log, or nothing."""
    if row is None:
        return None
    if body_differs(row["request_hash"], fingerprint):
        raise KeyReused
    if row["state"] == "done":
        return _answer(row)
    return _log_entries(row["writes"]) or None


def _answered_keys(conn: sa.Connection, newer_than: float, limit: int) -> list[tuple[str, float]]:
    """The newest ``limit`` keys with an answer or a write log recorded after ``newer_than``, oldest first."""
    select = (
        sa.select(T.c.key, T.c.claimed)
        .where(sa.or_(T.c.state == "done", T.c.writes.is_not(None)), T.c.claimed >= newer_than)
        .order_by(T.c.seq.desc())
        .limit(limit)
    )
    return [(row.key, float(row.claimed)) for row in reversed(conn.execute(select).all())]


def _forget(conn: sa.Connection, key: str) -> None:
    execute(
        conn,
        prepared(
            ("replay_forget", conn.dialect.name),
            lambda: sa.delete(T).where(T.c.key == sa.bindparam("b_key"), T.c.state == "running"),
        ),
        {"b_key": key},
    )


def _keep_log(conn: sa.Connection, key: str) -> None:
    """A request that logged writes ended without an answer (a fault): its log stays for the retry."""
    execute(
        conn,
        prepared(
            ("replay_keep", conn.dialect.name),
            lambda: (
                sa.update(T)
                .where(T.c.key == sa.bindparam("b_key"), T.c.state == "running")
                .values(state="applied")
            ),
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
        shared_holds: Whether other processes serve this run (workers): holds are then rows, else kept here.
    """

    def __init__(
        self,
        store: SqlLightningStore,
        run_id: str,
        *,
        shared_holds: bool = True,
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
        self.shared_holds = shared_holds
        self._holds: KeyHolds[str] = KeyHolds()
        self._answered: OrderedDict[str, float] | None = None  # key -> recorded at, oldest first
        self._answered_loaded: asyncio.Lock | None = None
        self._logs: dict[str, WriteLog] = {}  # of the keys claimed here, until released

    @staticmethod
    def _key(key: bytes) -> str:
        return hashlib.sha256(key).hexdigest()

    async def claim(self, key: bytes, fingerprint: str = "") -> RecordedAnswer | WriteLog:
        digest = self._key(key)
        if not self.shared_holds:
            return await self._claim_here(digest, fingerprint)
        delay = 0.002
        while True:
            now = self._clock()
            if await self._single(_try_claim, digest, self.run_id, fingerprint, now):
                found: Any = []  # the common case: a new key, one statement
            else:
                found = await self._db.write(
                    _claim, digest, self.run_id, fingerprint, now, self.hold_seconds, self.ttl_seconds
                )
            if isinstance(found, list):
                await self._prune_if_due(now)
                return self._open(digest, fingerprint, now, cast("Entries", found))
            if isinstance(found, RecordedAnswer):
                return found
            if found == _REUSED:
                raise KeyReused
            await asyncio.sleep(delay)  # held by a request still running (on any worker)
            delay = min(delay * 2, 0.05)

    async def _claim_here(self, digest: str, fingerprint: str) -> RecordedAnswer | WriteLog:
        """:meth:`claim` with the holds in this process: wait while the key is held, hold it, then (only if
        the key has an answer or a write log, recorded by this run or an earlier one) read that."""
        await self._holds.hold(digest)
        try:
            now = self._clock()
            answered = await self._answered_keys()
            recorded = answered.get(digest)
            found = None
            if recorded is not None and now - recorded <= self.ttl_seconds:
                found = _found(await self._db.read(_find_row, digest, now - self.ttl_seconds), fingerprint)
            if not isinstance(found, RecordedAnswer):
                if found is None:
                    await self._prune_if_due(now)
                return self._open(digest, fingerprint, now, found or [])
        except BaseException:
            self._holds.end(digest)
            raise
        self._holds.end(digest)
        return found

    def _open(self, digest: str, fingerprint: str, now: float, entries: Entries) -> WriteLog:
        """The write log of a claimed key (with ``entries``, an earlier try's), until :meth:`release`."""
        log = WriteLog(digest, fingerprint, self.run_id, now, entries, [False] * len(entries))
        self._logs[digest] = log
        return log

    async def _answered_keys(self) -> OrderedDict[str, float]:
        """The keys with an answer or a write log, read from the database at the first claim of this run."""
        if self._answered is not None:
            return self._answered
        if self._answered_loaded is None:
            self._answered_loaded = asyncio.Lock()
        async with self._answered_loaded:
            if self._answered is None:
                rows = await self._db.read(_answered_keys, self._clock() - self.ttl_seconds, self.max_entries)
                self._answered = OrderedDict(rows)
        return self._answered

    def _remember_answered(self, digest: str, now: float) -> None:
        answered = self._answered
        if answered is None:  # (no claim read them yet: the first one will find this key in the database)
            return
        answered[digest] = now
        answered.move_to_end(digest)
        while len(answered) > self.max_entries:
            answered.popitem(last=False)
        oldest = now - self.ttl_seconds
        while answered and next(iter(answered.values())) < oldest:
            answered.popitem(last=False)

    async def _prune_if_due(self, now: float) -> None:
        if now >= self._next_prune:
            self._next_prune = now + _PRUNE_EVERY
            await self._db.write(_prune, now - max(self.ttl_seconds, self.hold_seconds), self.max_entries)

    async def release(self, key: bytes, answer: RecordedAnswer | None) -> None:
        digest = self._key(key)
        log = self._logs.pop(digest, None)
        try:
            if answer is not None:
                now = self._clock()
                fingerprint = log.fingerprint if log is not None else ""
                await self._single(_record, digest, self.run_id, now, answer, fingerprint)
                if not self.shared_holds:
                    self._remember_answered(digest, now)
            elif log is not None and log.entries:  # a fault after writes: the retry replays them
                await self._single(_keep_log, digest)
                if not self.shared_holds:
                    self._remember_answered(digest, log.claimed)
            elif self.shared_holds:
                await self._single(_forget, digest)
        finally:
            if not self.shared_holds:
                self._holds.end(digest)

    async def _single(self, fn: Callable[..., T_], *args: Any) -> T_:
        """Run a one-statement write: on PostgreSQL outside a transaction (one round trip instead of
        three); on SQLite as any write (behind the store's write lock)."""
        if self._db.dialect == "postgresql":
            return await self._db.read(fn, *args)
        return await self._db.write(fn, *args)
