"""The data and the status transitions of the in-memory store, without locking or waiting.

``InMemoryLightningStore`` calls these methods with its lock held; every decision comes from ``_rules``.
"""

from __future__ import annotations

import heapq
import itertools
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable
from operator import attrgetter
from typing import Any

from agl.types import (
    FINISHED_STATUSES,
    QUEUED_STATUSES,
    ROLLOUT_STATUSES,
    Attempt,
    AttemptedRollout,
    AttemptStatus,
    Condition,
    EnqueueRolloutRequest,
    NotFoundError,
    ResourcesUpdate,
    Rollout,
    RolloutStatus,
    Where,
    Worker,
    new_attempt_id,
    new_rollout_id,
)

from .. import _rules
from .._checks import new_config
from .._notify import KeyedNotifier, Notifier
from .._watchdog import ScanDebouncer
from ..errors import StoreFullError
from ._cap import ATTEMPT_BYTES, MemoryCap, rollout_size
from ._query import filter_where
from ._records import RolloutRecord, copy_attempted, new_metadata
from ._reference import reference_memory_bound
from ._spans import SpanCache

__all__ = ["MemoryCore", "by_creation"]


class MemoryCore:
    """Rollouts indexed by id and status, the queue, attempts, span counters, resources and workers."""

    def __init__(
        self,
        *,
        clock: Callable[[], float] = time.time,
        scan_debounce_seconds: float = 10.0,
        max_rollouts: int | None = None,
        max_bytes: int | None = None,
        thread_safe: bool = True,
        eviction_memory_threshold: float | None = None,
        safe_memory_threshold: float | None = None,
        span_size_estimator: Any = None,
        tracker: Any = None,
    ) -> None:
        # thread_safe and the rest are the reference's InMemoryLightningStore arguments (see _reference.py);
        # this store is always safe to share between threads
        del thread_safe
        max_bytes = reference_memory_bound(
            max_bytes, eviction_memory_threshold, safe_memory_threshold, span_size_estimator, tracker
        )
        self._cap = MemoryCap(max_rollouts, max_bytes)
        self._bytes = 0
        self._evicted = 0
        self._clock = clock
        self._debouncer = ScanDebouncer(clock, scan_debounce_seconds)
        self._lock = threading.Lock()
        self._started = time.monotonic()
        self._closed = False
        self._order = itertools.count()
        self._rollouts: dict[str, RolloutRecord] = {}
        self._by_status: dict[str, set[str]] = {status: set() for status in ROLLOUT_STATUSES}
        self._queue: deque[str] = deque()
        self._in_queue: set[str] = set()
        self._span_counters: dict[str, int] = {}
        self._resources: dict[str, ResourcesUpdate] = {}
        self._latest_resources_id: str | None = None
        self._workers: dict[str, Worker] = {}
        self._total_attempts: int = 0
        self._total_spans: int = 0
        self._span_cache = SpanCache()
        self._queue_changed = Notifier()
        self._rollout_finished = KeyedNotifier()  # by rollout: a waiter wakes when its rollout finishes

    def _watch(self, now: float) -> None:
        """The watchdog: live attempts of running rollouts that broke their limits are timed out or
        marked unresponsive, through the same path as ``update_attempt``."""
        if not self._debouncer.should_scan():
            return
        running = [self._rollouts[i] for i in (*self._by_status["preparing"], *self._by_status["running"])]
        running.sort(key=lambda r: r.order)  # creation order: requeued rollouts queue up deterministically
        for record in running:
            if not record.attempts:
                continue
            attempt = record.attempts[-1]
            verdict = _rules.watchdog_verdict(attempt, record.rollout.config, now)
            if verdict is not None:
                self._set_attempt_status(record, attempt, verdict, now)

    def _make_room(self, rollouts: int, size: int, keep: Iterable[str] = ()) -> None:
        """Evict finished rollouts (oldest first, with their attempts and spans) until ``rollouts`` more
        rollouts and ``size`` more bytes fit under the cap, or raise :class:`StoreFullError` having evicted
        nothing when even evicting every finished rollout would not make enough room."""
        need_rollouts, need_bytes = self._cap.excess(len(self._rollouts) + rollouts, self._bytes + size)
        if need_rollouts <= 0 and need_bytes <= 0:
            return
        protected = set(keep)
        finished = [
            self._rollouts[i]
            for status in FINISHED_STATUSES
            for i in self._by_status[status]
            if i not in protected
        ]
        if len(finished) < need_rollouts or sum(r.size for r in finished) < need_bytes:
            raise StoreFullError(self._cap.full_message(len(self._rollouts), self._bytes, len(finished)))
        finished.sort(key=_creation)
        # Free a little more than needed (a twentieth of the cap), so that a full store sorts only now and then.
        want_rollouts, want_bytes = self._cap.with_slack(need_rollouts, need_bytes)
        freed_bytes = 0
        for freed_rollouts, record in enumerate(finished):
            if freed_rollouts >= want_rollouts and freed_bytes >= want_bytes:
                break
            self._evict(record)
            freed_bytes += record.size

    def _evict(self, record: RolloutRecord) -> None:
        rollout_id = record.rollout.rollout_id
        del self._rollouts[rollout_id]
        self._by_status[record.rollout.status].discard(rollout_id)
        self._in_queue.discard(rollout_id)
        self._span_counters.pop(rollout_id, None)
        self._total_spans -= len(record.spans)
        self._total_attempts -= len(record.attempts)
        self._bytes -= record.size
        self._evicted += 1

    def _record(self, rollout_id: str) -> RolloutRecord:
        record = self._rollouts.get(rollout_id)
        if record is None:
            raise NotFoundError(f"Rollout {rollout_id} not found")
        return record

    def _new_rollout(
        self,
        request: EnqueueRolloutRequest,
        status: RolloutStatus,
        now: float,
        latest_resources_id: str | None,
    ) -> RolloutRecord:
        resources_id = request.resources_id
        rollout_id = new_rollout_id()
        while rollout_id in self._rollouts:
            rollout_id = new_rollout_id()
        rollout = Rollout.model_construct(
            rollout_id=rollout_id,
            input=request.input,
            start_time=now,
            end_time=None,
            mode=request.mode,
            resources_id=resources_id if resources_id is not None else latest_resources_id,
            status=status,
            config=new_config(request.config),
            metadata=new_metadata(request.metadata),
        )
        record = RolloutRecord(rollout, next(self._order))
        if self._cap.max_bytes is not None:
            record.size = rollout_size(request)
            self._bytes += record.size
        self._rollouts[rollout_id] = record
        self._by_status[status].add(rollout_id)
        if status in QUEUED_STATUSES:
            self._push(rollout_id)
        return record

    def _push(self, rollout_id: str) -> None:
        if rollout_id not in self._in_queue:
            self._queue.append(rollout_id)
            self._in_queue.add(rollout_id)
            self._queue_changed.notify_all()

    def _new_attempt(self, record: RolloutRecord, worker_id: str | None, now: float) -> Attempt:
        attempt = Attempt(
            rollout_id=record.rollout.rollout_id,
            attempt_id=new_attempt_id(),
            sequence_id=len(record.attempts) + 1,
            start_time=now,
            status="preparing",
            worker_id=worker_id,
        )
        record.attempts.append(attempt)
        self._total_attempts += 1
        if len(record.attempts) > 1 and self._cap.max_bytes is not None:
            record.size += ATTEMPT_BYTES
            self._bytes += ATTEMPT_BYTES
        self._set_rollout_status(record, "preparing", now)
        return attempt

    def _set_rollout_status(self, record: RolloutRecord, status: RolloutStatus, now: float) -> None:
        rollout = record.rollout
        old = rollout.status
        rollout.end_time = _rules.rollout_end_time(status, old, rollout.end_time, now)
        if status != old:
            self._by_status[old].discard(rollout.rollout_id)
            self._by_status[status].add(rollout.rollout_id)
            rollout.status = status
        if status in QUEUED_STATUSES:
            self._push(rollout.rollout_id)
        elif status in FINISHED_STATUSES:
            self._rollout_finished.notify(rollout.rollout_id)

    def _set_attempt_status(
        self, record: RolloutRecord, attempt: Attempt, status: AttemptStatus, now: float
    ) -> None:
        attempt.status = status
        attempt.end_time = _rules.attempt_end_time(status, attempt.end_time, now)
        if attempt is record.attempts[-1]:
            rollout_status = _rules.rollout_status_after_attempt(
                record.rollout.status, status, attempt.sequence_id, record.rollout.config
            )
            if rollout_status is not None:
                self._set_rollout_status(record, rollout_status, now)
        if attempt.worker_id:
            self._sync_worker(attempt, now)

    def _sync_worker(self, attempt: Attempt, now: float, *, dequeued: bool = False) -> None:
        assert attempt.worker_id is not None
        worker = self._workers.get(attempt.worker_id) or Worker(worker_id=attempt.worker_id)
        self._workers[attempt.worker_id] = _rules.worker_after_attempt(
            worker, attempt, now, dequeued=dequeued
        )

    def _claim(
        self, limit: int, worker_id: str | None, now: float, *, mark_idle: bool = True
    ) -> list[AttemptedRollout]:
        claimed: list[tuple[RolloutRecord, Attempt]] = []
        while len(claimed) < limit and self._queue:
            rollout_id = self._queue.popleft()
            self._in_queue.discard(rollout_id)
            record = self._rollouts.get(rollout_id)
            if record is None or record.rollout.status not in QUEUED_STATUSES:
                continue  # updated while queued (started, cancelled...): a stale entry
            claimed.append((record, self._new_attempt(record, worker_id, now)))
        if worker_id:
            if claimed:
                self._sync_worker(claimed[-1][1], now, dequeued=True)
            elif mark_idle:
                worker = self._workers.get(worker_id) or Worker(worker_id=worker_id)
                self._workers[worker_id] = _rules.worker_after_empty_dequeue(worker, now)
        return [copy_attempted(record) for record, _ in claimed]

    def _heartbeat(self, record: RolloutRecord, attempt: Attempt, now: float) -> None:
        before = attempt.status
        attempt.last_heartbeat_time = now
        after = _rules.attempt_status_after_span(before)
        if after != before:
            attempt.status = after
            if attempt.worker_id:
                self._sync_worker(attempt, now)
        if _rules.rollout_promoted_by_span(record.rollout.status, before, attempt is record.attempts[-1]):
            self._set_rollout_status(record, "running", now)

    def _select_rollouts(self, where: Where) -> list[RolloutRecord]:
        """Matching rollouts in no particular order, read through the id and status indexes where one applies."""
        if where.logic == "and" or len(where.optional) <= 1:
            conditions = [*where.must, *where.optional]
            indexed = [c for c in conditions if c.op != "contains" and c.attribute in _INDEXED_ROLLOUT]
            if not indexed:
                return filter_where(self._rollouts.values(), where, _rollout_reader)
            source = min(indexed, key=lambda c: _INDEXED_ROLLOUT[c.attribute])  # ids before statuses
            rest = [c for c in conditions if c is not source]
            return filter_where(self._lookup(source), Where(rest, [], "and"), _rollout_reader)
        if any(c.op == "contains" or c.attribute not in _INDEXED_ROLLOUT for c in where.optional):
            return filter_where(self._rollouts.values(), where, _rollout_reader)  # a scan
        found: dict[str, RolloutRecord] = {}
        for condition in where.optional:
            found.update((r.rollout.rollout_id, r) for r in self._lookup(condition))
        return filter_where(found.values(), Where(where.must, [], "and"), _rollout_reader)

    def _lookup(self, condition: Condition) -> list[RolloutRecord]:
        """The rollouts passing an exact or within condition on an indexed attribute."""
        values = [condition.value] if condition.op == "exact" else condition.value
        if condition.attribute == "rollout_id":
            return [self._rollouts[i] for i in values if i in self._rollouts]
        return [self._rollouts[i] for i in self._ids_with_status(values)]

    def _ids_with_status(self, statuses: Iterable[str]) -> set[str]:
        ids: set[str] = set()
        for status in statuses:
            ids |= self._by_status.get(status, set())
        return ids


_INDEXED_ROLLOUT = {"rollout_id": 0, "status": 1}
"""Rollout attributes with an index, most selective first."""


def _rollout_reader(attribute: str) -> Callable[[RolloutRecord], Any]:
    return attrgetter("rollout." + attribute)


def by_creation(records: list[RolloutRecord], descending: bool, first: int | None) -> list[RolloutRecord]:
    """Records in creation order; only the ``first`` ones when given (a partial sort for small pages)."""
    if first is not None and first < len(records):
        select = heapq.nlargest if descending else heapq.nsmallest
        return select(first, records, key=_creation)
    return sorted(records, key=_creation, reverse=descending)


def _creation(record: RolloutRecord) -> int:
    return record.order
