"""``SqlLightningStore``: the durable LightningStore on SQLite (a file) or PostgreSQL, one implementation.

See :mod:`agl.store.sql._db` for transactions and durability, :mod:`._writes` and :mod:`._reads` for the
operations. Waiting (``wait_for_rollouts``, ``dequeue_*`` with a timeout) is woken by notification, of
this process's writes and of other processes' (:mod:`._waiting`, :mod:`._coordination`).

The watchdog (timeouts, unresponsive attempts) runs in one process at a time among all that share the
database (the workers of ``agl store --workers N``, runners with their own store): the one holding a lock
that dies with its holder (SQLite: an OS file lock next to the database; PostgreSQL: a session advisory
lock); another takes over at its next scan once the holder has closed its store or died.
"""

from __future__ import annotations

import collections
import logging
import os
import socket
import time
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from agl.types import (
    UNSET,
    Attempt,
    AttemptedRollout,
    AttemptUpdate,
    EnqueueRolloutRequest,
    NamedResources,
    PaginatedResult,
    ResourcesUpdate,
    Rollout,
    RolloutUpdate,
    Span,
    Unset,
    Worker,
)
from agl.types.errors import validated
from agl.types.query import AttemptQuery, ResourcesQuery, RolloutQuery, SpanQuery, WorkerQuery
from pydantic import TypeAdapter

from .._checks import spans_of
from .._results import AttemptFinish
from .._watchdog import ScanDebouncer
from ..base import FinishedAttempt, LightningStore, LightningStoreCapabilities, LightningStoreStatistics
from . import _coordination, _reads, _spans, _writelog, _writes
from ._db import Database
from ._steps import Ctx, Effects
from ._waiting import Inbox, Wake, poll

__all__ = ["SqlLightningStore"]

T = TypeVar("T")

logger = logging.getLogger("agl.store.sql")

_MIN_TICK_SECONDS = 1.0
"""Idle waiting calls wake every half debounce period, a second at least, to let the watchdog scan (nothing
else may be calling the store): a scan comes at most 1.5 debounce periods after the last one."""


_NAMED_RESOURCES: TypeAdapter[NamedResources] = TypeAdapter(NamedResources)


def _resources(resources: Any) -> NamedResources:
    return validated(_NAMED_RESOURCES.validate_python, resources, "resources")


class SqlLightningStore(LightningStore):
    """A durable LightningStore on SQLite or PostgreSQL, shared by threads and processes.

    Args:
        url: ``sqlite:///path/to/store.db`` (a file, created with its directory if missing; add
            ``?synchronous=FULL`` to survive power loss as well as process crashes) or
            ``postgresql://user:password@host:port/database`` (needs the ``postgres`` extra).
        clock: Source of timestamps and of the watchdog's notion of now (tests pass a manual clock).
        scan_debounce_seconds: At most one watchdog scan for timed-out or unresponsive attempts per
            this many seconds of ``clock``; 0 scans on every watched call.
        **engine_kwargs: Passed to SQLAlchemy's ``create_engine`` / ``create_async_engine``
            (e.g. ``pool_size``, ``connect_args``).

    The schema is created on first use. The store may be used from several threads, each with its own
    event loop, and by several processes on the same file or database at once.
    """

    serialises_spans = True

    def __init__(
        self,
        url: str,
        *,
        clock: Callable[[], float] = time.time,
        scan_debounce_seconds: float = 10.0,
        **engine_kwargs: Any,
    ) -> None:
        self._db = Database(url, engine_kwargs)
        self._ctx = Ctx(clock=clock, dialect=self._db.dialect)
        self._clock = clock
        self._debouncer = ScanDebouncer(clock, scan_debounce_seconds)
        self._tick = max(_MIN_TICK_SECONDS, scan_debounce_seconds / 2)
        self._started = time.monotonic()
        self._inbox = Inbox()
        """This store's waiters, and the listeners told which rollouts each committed write finished."""
        self._coord = _coordination.attach(url, engine_kwargs, self._inbox)
        self._leading = False
        self._detached = False

    @property
    def dialect(self) -> str:
        """``"sqlite"`` or ``"postgresql"``."""
        return self._db.dialect

    @property
    def capabilities(self) -> LightningStoreCapabilities:
        return LightningStoreCapabilities(
            thread_safe=True, async_safe=True, zero_copy=True, otlp_traces=False
        )

    async def statistics(self) -> LightningStoreStatistics:
        counts = await self._query(_reads.counts)
        return LightningStoreStatistics(
            name=type(self).__name__, uptime=time.monotonic() - self._started, **counts
        )

    async def ensure_schema(self) -> None:
        """Create or migrate the database's schema now instead of on first use (a server does it before
        serving). Cheap and lock-free when the schema is current; concurrent calls share one check."""
        await self._db.ensure_schema()

    async def close(self) -> None:
        if not self._detached:  # the last store of this process lets the watchdog's lock go
            self._detached = True
            await _coordination.detach(self._coord, self._inbox)
        await self._db.close()

    async def release_loop_resources(self) -> None:
        """Close this event loop's database connections before the loop closes (PostgreSQL); the store stays
        usable from other loops, and from this one, which would open new connections."""
        await self._db.release_loop()

    # -- plumbing -----------------------------------------------------------------------------

    async def _write(self, fn: Callable[..., T], *args: Any) -> T:
        effects = Effects()
        committed = False
        try:
            result = await self._db.write(self._coord.wrap(fn), self._ctx, effects, *args, write_of=fn)
            committed = True
            return result
        finally:
            self._coord.publish(effects.queued, effects.finished, committed)

    async def _read(self, fn: Callable[..., T], *args: Any) -> T:
        return await self._db.read(fn, self._ctx, *args)

    async def _query(self, fn: Callable[..., T], *args: Any) -> T:
        """A read of several statements (a page and its total): one snapshot."""
        return await self._db.read(fn, self._ctx, *args, snapshot=True)

    async def _watchdog(self) -> None:
        """Mark timed-out and unresponsive attempts (debounced); each verdict is re-checked under a lock."""
        if not self._debouncer.should_scan() or not await self._hold_watchdog():
            return
        for rollout_id in await self._read(_writes.find_unhealthy):
            await self._write(_writes.apply_watchdog, rollout_id)

    async def _hold_watchdog(self) -> bool:
        """Whether this process runs the watchdog now: it holds the watchdog's lock, or has just taken it
        (a lock that dies with its holder; see :mod:`._coordination`)."""
        held = await self._coord.lead()
        if held != self._leading:
            self._leading = held
            process = f"{socket.gethostname()}:{os.getpid()}"
            if held:
                logger.info("watchdog: %s now runs the watchdog of this store", process)
            else:
                logger.info("watchdog: %s no longer runs the watchdog of this store", process)
        return held

    # -- rollouts and the queue ---------------------------------------------------------------

    async def _start_rollout(self, request: EnqueueRolloutRequest, worker_id: str | None) -> AttemptedRollout:
        await self._watchdog()
        return await self._write(_writes.start_rollout, request, worker_id)

    async def _enqueue_rollouts(self, requests: list[EnqueueRolloutRequest]) -> list[Rollout]:
        await self._watchdog()
        return await self._write(_writes.enqueue, requests)

    async def _dequeue_rollouts(
        self, limit: int, worker_id: str | None, timeout: float
    ) -> list[AttemptedRollout]:
        await self._watchdog()

        async def claim(wake: Wake) -> list[AttemptedRollout]:
            mark_idle = wake == "first"  # an empty dequeue marks the worker idle once per call
            if not mark_idle:
                await self._watchdog()  # a long wait must still notice timeouts (nothing else may call)
                if wake == "tick":  # nothing was queued meanwhile (the watchdog's requeues wake us)
                    return []
            # Polling an empty queue: a read, and (first try) the idle mark. On PostgreSQL the first try
            # skips the read: a round trip more whenever there is work.
            probe = not mark_idle or self._db.dialect == "sqlite"
            probe = probe and not _writelog.replaying(_writes.dequeue)  # (a retry gets its first try's claim)
            if probe and not await self._read(_writes.has_queue_entries):
                if mark_idle and worker_id:
                    await self._write(_writes.mark_idle, worker_id)
                return []
            return await self._write(_writes.dequeue, limit, worker_id, mark_idle)

        if timeout <= 0:
            return await claim("first")
        self._coord.join()
        return await poll(
            claim, bool, self._inbox.queued, timeout, covered=self._coord.covered, tick=self._tick
        )

    async def start_attempt(self, rollout_id: str, worker_id: str | None = None) -> AttemptedRollout:
        await self._watchdog()
        return await self._write(_writes.start_attempt, rollout_id, worker_id)

    async def _query_rollouts(self, query: RolloutQuery) -> PaginatedResult[Rollout | AttemptedRollout]:
        await self._watchdog()
        return await self._query(_reads.query_rollouts, query)

    async def get_rollout_by_id(self, rollout_id: str) -> Rollout | AttemptedRollout | None:
        await self._watchdog()
        return await self._read(_reads.get_rollout, rollout_id)

    async def _query_attempts(self, query: AttemptQuery) -> PaginatedResult[Attempt]:
        await self._watchdog()
        return await self._query(_reads.query_attempts, query)

    async def get_latest_attempt(self, rollout_id: str) -> Attempt | None:
        await self._watchdog()
        return await self._read(_reads.latest_attempt, rollout_id)

    async def _update_rollout(self, rollout_id: str, changes: RolloutUpdate) -> Rollout:
        await self._watchdog()
        return await self._write(_writes.update_rollout, rollout_id, changes)

    async def _update_attempt(self, rollout_id: str, attempt_id: str, changes: AttemptUpdate) -> Attempt:
        await self._watchdog()
        return await self._write(_writes.update_attempt, rollout_id, attempt_id, changes)

    async def _finish_attempt(self, finish: AttemptFinish) -> FinishedAttempt:
        await self._watchdog()
        rollout_id, attempt_id, spans, changes, claim_next_for = finish
        stored, attempt = await self._write(_finish_attempt, rollout_id, attempt_id, spans, changes)
        return FinishedAttempt(stored, attempt, await self._claim_next(claim_next_for))

    async def wait_for_rollouts(
        self, *, rollout_ids: Sequence[str], timeout: float | None = None
    ) -> list[Rollout | AttemptedRollout]:
        ids = list(rollout_ids)
        if not ids:
            return []

        async def check() -> list[Rollout | AttemptedRollout]:
            await self._watchdog()
            return await self._read(_reads.finished_rollouts, ids)

        if timeout is not None and timeout <= 0:
            return await check()
        known = await self._known_rollout_count(ids)
        wanted = set(ids)
        finished: set[str] = set()
        told: collections.deque[set[str]] = collections.deque()  # appended by any thread's writes

        def tell(rollout_ids: set[str]) -> None:
            told.append(rollout_ids & wanted)

        async def progress(wake: Wake) -> int:
            """How many have finished: the writes of this process, and those of others that said which,
            tell; the rest are read (only those not seen finished yet) when news came without saying
            which. (Reading them back at every finish cost the calc app a tenth of its steps.)"""
            await self._watchdog()
            while told:
                finished.update(told.popleft())
            if wake in ("first", "reread"):
                waiting = [rid for rid in wanted if rid not in finished]
                if waiting:
                    finished.update(await self._read(_reads.finished_rollout_ids, waiting))
            return len(finished)

        self._coord.join()
        self._inbox.finish_listeners.append(tell)
        try:
            await poll(
                progress,
                lambda count: count >= known,
                self._inbox.finished,
                timeout,
                covered=self._coord.covered,
                tick=self._tick,
            )
        finally:
            self._inbox.finish_listeners.remove(tell)
        return await self._read(_reads.finished_rollouts, ids)  # as they are now, in request order

    async def _known_rollout_count(self, ids: list[str]) -> int:
        query = RolloutQuery.model_construct(rollout_id_in=list(dict.fromkeys(ids)), limit=0)
        return (await self._read(_reads.query_rollouts, query)).total

    # -- resources ----------------------------------------------------------------------------

    async def add_resources(self, resources: NamedResources) -> ResourcesUpdate:
        return await self._db.write(_writes.add_resources, self._ctx, _resources(resources))

    async def update_resources(self, resources_id: str, resources: NamedResources) -> ResourcesUpdate:
        checked = _resources(resources)
        await self._watchdog()
        return await self._db.write(_writes.update_resources, self._ctx, resources_id, checked)

    async def get_resources_by_id(self, resources_id: str) -> ResourcesUpdate | None:
        return await self._read(_reads.get_resources, resources_id)

    async def get_latest_resources(self) -> ResourcesUpdate | None:
        return await self._read(_reads.get_resources, None)

    async def _query_resources(self, query: ResourcesQuery) -> PaginatedResult[ResourcesUpdate]:
        return await self._query(_reads.query_resources, query)

    # -- spans --------------------------------------------------------------------------------

    async def add_span(self, span: Span) -> Span | None:
        (span,) = spans_of([span])
        stored = await self._write(_spans.add_spans, [span])
        return span if stored else None

    async def add_many_spans(self, spans: Sequence[Span]) -> list[Span]:
        batch = spans_of(spans)
        if not batch:
            return []
        stored = await self._write(_spans.add_spans, batch)
        return [batch[i] for i in stored]

    async def add_spans_in_order(self, spans: Sequence[Span]) -> list[Span]:
        if not spans:
            return []
        numbered, stored = await self._write(_spans.add_spans_in_order, spans_of(spans))
        return [numbered[i] for i in stored]

    async def get_next_span_sequence_id(self, rollout_id: str, attempt_id: str) -> int:
        (value,) = await self._db.write(_spans.allocate_sequence_ids, self._ctx, [(rollout_id, attempt_id)])
        return value

    async def get_many_span_sequence_ids(self, rollout_attempt_ids: Sequence[tuple[str, str]]) -> list[int]:
        pairs = [(rid, aid) for rid, aid in rollout_attempt_ids]
        if not pairs:
            return []
        return await self._db.write(_spans.allocate_sequence_ids, self._ctx, pairs)

    async def _query_spans(self, query: SpanQuery) -> PaginatedResult[Span]:
        await self._watchdog()
        return await self._query(_reads.query_spans, query)

    # -- workers ------------------------------------------------------------------------------

    async def _query_workers(self, query: WorkerQuery) -> PaginatedResult[Worker]:
        await self._watchdog()
        return await self._query(_reads.query_workers, query)

    async def get_worker_by_id(self, worker_id: str) -> Worker | None:
        return await self._read(_reads.get_worker, worker_id)

    async def update_worker(self, worker_id: str, heartbeat_stats: dict[str, Any] | Unset = UNSET) -> Worker:
        stats = _writes.KEEP if heartbeat_stats is UNSET else heartbeat_stats
        return await self._db.write(_writes.update_worker, self._ctx, worker_id, stats)


def _finish_attempt(
    conn: Any, ctx: Ctx, eff: Effects, rollout_id: str, attempt_id: str, spans: list[Span], changes: Any
) -> tuple[list[Span], Attempt]:
    """The spans, then the attempt update, in one transaction: a refused update stores no spans either."""
    numbered, stored = _spans.add_spans_in_order(conn, ctx, eff, spans) if spans else ([], [])
    attempt = _writes.update_attempt(conn, ctx, eff, rollout_id, attempt_id, changes, outcome=True)
    return [numbered[i] for i in stored], attempt
