"""``SqlLightningStore``: the durable LightningStore on SQLite (a file) or PostgreSQL, one implementation.

See :mod:`agl.store.sql._db` for transactions and durability, :mod:`._writes` and :mod:`._reads` for the
operations. Waiting (``wait_for_rollouts``, ``dequeue_*`` with a timeout) is woken at once by writes of
this process and polls the database (backing off to 100 ms) for writes of other processes.

The watchdog (timeouts, unresponsive attempts) runs in one process at a time among all that share the
database (the workers of ``agl store --workers N``, runners with their own store): the one holding the
``watchdog`` lease (:mod:`._lease`); another takes over when the holder closes its store or stops renewing.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import threading
import time
from collections.abc import Awaitable, Callable, Sequence
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
from .._notify import Notifier, Waiter
from .._watchdog import ScanDebouncer
from ..base import FinishedAttempt, LightningStore, LightningStoreCapabilities, LightningStoreStatistics
from . import _lease, _reads, _spans, _writes
from ._db import Database
from ._steps import Ctx, Effects

__all__ = ["SqlLightningStore"]

T = TypeVar("T")

logger = logging.getLogger("agl.store.sql")

_WATCHDOG_LEASE = "watchdog"
_MIN_LEASE_SECONDS = 10.0

_MAX_POLL_INTERVAL = 0.1
_FIRST_POLL_INTERVAL = 0.005


class _Signal:
    """Wakes waiters of any thread's loop when this process changes something they wait for."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._notifier = Notifier()

    def register(self) -> Waiter:
        with self._lock:
            return self._notifier.register()

    def unregister(self, waiter: Waiter) -> None:
        with self._lock:
            self._notifier.unregister(waiter)

    def notify(self) -> None:
        with self._lock:
            self._notifier.notify_all()


async def _poll(
    check: Callable[[bool], Awaitable[T]], done: Callable[[T], bool], signal: _Signal, timeout: float | None
) -> T:
    """``check(woken)`` until ``done`` or the deadline; woken early by ``signal`` (``woken``: this process
    changed something), polling other processes' writes (``woken`` false: first call, or a poll interval
    passed without news)."""
    deadline = None if timeout is None else time.monotonic() + max(timeout, 0.0)
    interval = _FIRST_POLL_INTERVAL
    woken = False
    while True:
        waiter = signal.register()
        try:
            result = await check(woken)
            if done(result):
                return result
            remaining = None if deadline is None else deadline - time.monotonic()
            if remaining is not None and remaining <= 0:
                return result
            wait = interval if remaining is None else min(interval, remaining)
            woken = await waiter.wait(wait)
            if not woken:
                interval = min(interval * 2, _MAX_POLL_INTERVAL)
        finally:
            signal.unregister(waiter)


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
        watchdog_lease_seconds: How long this process keeps the watchdog to itself among the processes
            sharing the database without renewing it (default: 3 debounce periods, at least 10 s): how
            long scans may pause when the process doing them dies.
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
        watchdog_lease_seconds: float | None = None,
        **engine_kwargs: Any,
    ) -> None:
        self._db = Database(url, engine_kwargs)
        self._ctx = Ctx(clock=clock, dialect=self._db.dialect)
        self._clock = clock
        self._debouncer = ScanDebouncer(clock, scan_debounce_seconds)
        if watchdog_lease_seconds is None:
            watchdog_lease_seconds = max(3 * scan_debounce_seconds, _MIN_LEASE_SECONDS)
        self._lease = _lease.Lease(_WATCHDOG_LEASE, watchdog_lease_seconds)
        self._lease_holder = _lease.process_holder()
        self._lease_held = False
        self._started = time.monotonic()
        self._queued = _Signal()
        self._finished = _Signal()
        self._finish_listeners: list[Callable[[set[str]], None]] = []
        """Told the rollouts each committed write of this process finished (``wait_for_rollouts``)."""

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
        if self._lease_held:  # let another process take the watchdog over at once
            self._lease_held = False
            self._lease.forget()
            with contextlib.suppress(Exception):  # (a database gone meanwhile: the lease expires)
                await asyncio.wait_for(
                    self._db.write(_lease.give_up, _WATCHDOG_LEASE, self._lease_holder), timeout=5
                )
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
            result = await self._db.write(fn, self._ctx, effects, *args)
            committed = True
            return result
        finally:
            if effects.queued:
                self._queued.notify()
            if effects.finished:
                if committed:
                    for tell in list(self._finish_listeners):
                        tell(effects.finished)
                self._finished.notify()

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
        """Whether this process runs the watchdog now (it holds, or has just taken, the lease)."""
        now = self._clock()
        fresh = self._lease.fresh(now)
        if fresh is not None:
            return fresh
        held = await self._db.write(_lease.take, _WATCHDOG_LEASE, self._lease_holder, now, self._lease.ttl)
        self._lease.record(now, held)
        if held != self._lease_held:
            self._lease_held = held
            if held:
                logger.info("watchdog: %s now runs the watchdog of this store", self._lease_holder)
            else:
                logger.info("watchdog: another process took the watchdog over from %s", self._lease_holder)
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
        first_try = True

        async def claim(_woken: bool) -> list[AttemptedRollout]:
            nonlocal first_try
            mark_idle, first_try = first_try, False  # an empty dequeue marks the worker idle once per call
            if not mark_idle:
                await self._watchdog()  # a long wait must still notice timeouts (nothing else may call)
            # Polling an empty queue: a read, and (first try) the idle mark. On PostgreSQL the first try
            # skips the read: a round trip more whenever there is work.
            probe = not mark_idle or self._db.dialect == "sqlite"
            if probe and not await self._read(_writes.has_queue_entries):
                if mark_idle and worker_id:
                    await self._write(_writes.mark_idle, worker_id)
                return []
            return await self._write(_writes.dequeue, limit, worker_id, mark_idle)

        if timeout <= 0:
            return await claim(False)
        return await _poll(claim, bool, self._queued, timeout)

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

    async def _finish_attempt(
        self,
        rollout_id: str,
        attempt_id: str,
        spans: list[Span],
        changes: AttemptUpdate,
        claim_next_for: str | None,
    ) -> FinishedAttempt:
        await self._watchdog()
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

        async def progress(woken: bool) -> int:
            """How many have finished: this process's own writes say which; the others' are read (only
            those not seen finished yet) when no news came for a poll interval. (Reading them back at
            every finish cost the calc app a tenth of its steps.)"""
            await self._watchdog()
            while told:
                finished.update(told.popleft())
            if not woken:
                waiting = [rid for rid in wanted if rid not in finished]
                if waiting:
                    finished.update(await self._read(_reads.finished_rollout_ids, waiting))
            return len(finished)

        self._finish_listeners.append(tell)
        try:
            await _poll(progress, lambda count: count >= known, self._finished, timeout)
        finally:
            self._finish_listeners.remove(tell)
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
    attempt = _writes.update_attempt(conn, ctx, eff, rollout_id, attempt_id, changes)
    return [numbered[i] for i in stored], attempt
