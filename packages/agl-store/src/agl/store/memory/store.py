"""``InMemoryLightningStore``: the fastest store, for one process (any number of threads and event loops).

Every method runs its synchronous critical section under one ``threading.Lock`` and never awaits while
holding it, so each call is atomic to concurrent coroutines and threads alike. Waits
(``wait_for_rollouts``, ``dequeue_*`` with a timeout) sleep on notifications that are delivered to the
waiting coroutine's own event loop, whatever thread made the change.

Data is indexed by what is queried: rollouts by id and by status, attempts and spans per rollout. Stored
rollouts, attempts, resources and workers are copied on the way out. Spans are kept as flat tuples with
their content as JSON (see ``_spans``), which keeps the garbage collector's work independent of how many
spans the store holds. Every status decision comes from ``_rules``, shared with the SQL store.
"""

from __future__ import annotations

import collections
import functools
import time
from collections.abc import Callable, Sequence
from operator import attrgetter
from typing import Any, cast

from agl.types import (
    FINISHED_STATUSES,
    UNSET,
    Attempt,
    AttemptedRollout,
    AttemptUpdate,
    EnqueueRolloutRequest,
    InvalidRequestError,
    NamedResources,
    NotFoundError,
    PaginatedResult,
    ResourcesUpdate,
    Rollout,
    RolloutUpdate,
    Span,
    Unset,
    Worker,
    new_resources_id,
)
from agl.types.query import AttemptQuery, ResourcesQuery, RolloutQuery, SpanQuery, WorkerQuery

from .._checks import spans_of
from .._notify import Waiter
from .._results import AttemptFinish, FinishedAttempt
from .._rules import outcome_changes, sort_field
from ..base import LightningStore, LightningStoreCapabilities, LightningStoreStatistics
from ._cap import SPAN_BYTES, rollout_size
from ._core import MemoryCore, by_creation
from ._query import filter_where, page_of, paginate, select_by_key, sort_rows, without
from ._records import (
    RolloutRecord,
    copy_attempt,
    copy_attempted,
    copy_rollout,
    resources_update,
    write_fields,
)
from ._spans import ATTEMPT_ID, StoredSpan, encode_span, query_stored_spans

__all__ = ["InMemoryLightningStore"]

_WAIT_SLICE_SECONDS = 1.0
"""Long waits wake at least this often to let the watchdog run (nothing else may be calling the store)."""


class InMemoryLightningStore(MemoryCore, LightningStore):
    """A :class:`LightningStore` that keeps everything in this process's memory.

    Args:
        clock: Source of "now" (seconds since the epoch) for every timestamp and for the watchdog;
            tests inject a manual clock to exercise timeouts without sleeping.
        scan_debounce_seconds: The watchdog scans running rollouts for timed-out and unresponsive
            attempts at most once per this many seconds of ``clock`` (0: on every watched call).
        max_rollouts: Keep at most this many rollouts (``None``: no limit).
        max_bytes: Keep at most about this many bytes of rollouts, attempts and spans, as estimated from
            their JSON size plus a measured fixed cost each (``None``: no limit; see the README).

    With a cap, a write that would exceed it first evicts finished rollouts (succeeded, failed, cancelled),
    oldest first, with their attempts and spans; when evicting every finished rollout would not make room,
    the write is refused with :class:`~agl.store.errors.StoreFullError` (HTTP 507) and nothing changes.
    Queued and running rollouts are never evicted.
    """

    # __init__ (the arguments above, and the reference's: see _reference.py) is MemoryCore's.

    serialises_spans = True

    # -- housekeeping ---------------------------------------------------------------------------

    @property
    def capabilities(self) -> LightningStoreCapabilities:
        return LightningStoreCapabilities(
            thread_safe=True, async_safe=True, zero_copy=False, otlp_traces=False
        )

    async def statistics(self) -> LightningStoreStatistics:
        with self._lock:
            return LightningStoreStatistics(
                name=type(self).__name__,
                total_rollouts=len(self._rollouts),
                total_attempts=self._total_attempts,
                total_spans=self._total_spans,
                total_resources=len(self._resources),
                total_workers=len(self._workers),
                uptime=time.monotonic() - self._started,
            )

    async def close(self) -> None:
        """Wake every waiting call (they return what they have) and refuse to wait from now on."""
        with self._lock:
            self._closed = True
            self._queue_changed.notify_all()
            self._rollout_finished.notify_all()

    # -- rollouts and the queue -----------------------------------------------------------------

    async def _start_rollout(self, request: EnqueueRolloutRequest, worker_id: str | None) -> AttemptedRollout:
        with self._lock:
            now = self._clock()
            self._watch(now)
            if self._cap.max_rollouts is not None or self._cap.max_bytes is not None:
                self._make_room(1, rollout_size(request) if self._cap.max_bytes is not None else 0)
            record = self._new_rollout(request, "preparing", now, self._latest_resources_id)
            attempt = self._new_attempt(record, worker_id, now)
            if worker_id:
                self._sync_worker(attempt, now)
            return copy_attempted(record)

    async def _enqueue_rollouts(self, requests: list[EnqueueRolloutRequest]) -> list[Rollout]:
        with self._lock:
            now = self._clock()
            self._watch(now)
            latest = self._latest_resources_id
            if self._cap.max_rollouts is not None or self._cap.max_bytes is not None:
                size = sum(map(rollout_size, requests)) if self._cap.max_bytes is not None else 0
                self._make_room(len(requests), size)
            records = [self._new_rollout(r, "queuing", now, latest) for r in requests]
            return [copy_rollout(record) for record in records]

    async def _dequeue_rollouts(
        self, limit: int, worker_id: str | None, timeout: float | None
    ) -> list[AttemptedRollout]:
        deadline = None if timeout is None else time.monotonic() + timeout
        first = True
        while True:
            with self._lock:
                now = self._clock()
                self._watch(now)
                # an empty dequeue marks the worker idle once, not on every wake-up of a long wait
                claimed = self._claim(limit, worker_id, now, mark_idle=first)
                first = False
                remaining = None if deadline is None else deadline - time.monotonic()
                if claimed or self._closed or (remaining is not None and remaining <= 0):
                    return claimed
                waiter = self._queue_changed.register()
            await self._wait(waiter, functools.partial(self._queue_changed.unregister, waiter), remaining)

    async def _wait(self, waiter: Waiter, take_back: Callable[[], None], remaining: float | None) -> None:
        """Wait for ``waiter`` (a slice of the time ``remaining`` at most); ``take_back()`` (under the lock)
        takes its ticket back if it was not woken (timed out, or cancelled: a client went away)."""
        timeout = _WAIT_SLICE_SECONDS if remaining is None else min(remaining, _WAIT_SLICE_SECONDS)
        woken = False
        try:
            woken = await waiter.wait(timeout)
        finally:
            if not woken:
                with self._lock:
                    take_back()

    async def start_attempt(self, rollout_id: str, worker_id: str | None = None) -> AttemptedRollout:
        with self._lock:
            now = self._clock()
            self._watch(now)
            record = self._record(rollout_id)
            attempt = self._new_attempt(record, worker_id, now)
            if worker_id:
                self._sync_worker(attempt, now)
            return copy_attempted(record)

    async def _query_rollouts(self, query: RolloutQuery) -> PaginatedResult[Rollout | AttemptedRollout]:
        where, limit, offset, sort_by = query.where(), query.limit, query.offset, sort_field(query)
        with self._lock:
            now = self._clock()
            self._watch(now)
            matched = self._select_rollouts(where)
            total = len(matched)
            descending = query.sort_order == "desc"
            if sort_by is None:
                picked = by_creation(matched, descending, None if limit < 0 else offset + limit)
            else:  # creation order first, so that ties keep it
                ordered = by_creation(matched, False, None)
                picked = [
                    self._rollouts[r.rollout_id]
                    for r in sort_rows([r.rollout for r in ordered], sort_by, query.sort_order)
                ]
            picked = picked[offset:] if limit < 0 else picked[offset : offset + limit]
            items = [copy_rollout(r) for r in picked]
        return page_of(items, limit, offset, total)

    async def get_rollout_by_id(self, rollout_id: str) -> Rollout | AttemptedRollout | None:
        with self._lock:
            self._watch(self._clock())
            record = self._rollouts.get(rollout_id)
            return None if record is None else copy_rollout(record)

    async def _query_attempts(self, query: AttemptQuery) -> PaginatedResult[Attempt]:
        where = without(query.where(), "rollout_id")
        with self._lock:
            self._watch(self._clock())
            record = self._rollouts.get(query.rollout_id)
            rows = [] if record is None else filter_where(record.attempts, where, attrgetter)
            page = paginate(sort_rows(rows, sort_field(query), query.sort_order), query.limit, query.offset)
            page.items = [copy_attempt(a) for a in page.items]
            return page

    async def get_latest_attempt(self, rollout_id: str) -> Attempt | None:
        with self._lock:
            self._watch(self._clock())
            record = self._rollouts.get(rollout_id)
            if record is None or not record.attempts:
                return None
            return copy_attempt(record.attempts[-1])

    async def _update_rollout(self, rollout_id: str, changes: RolloutUpdate) -> Rollout:
        with self._lock:
            now = self._clock()
            self._watch(now)
            record = self._record(rollout_id)
            write_fields(record.rollout, changes)
            if "status" in changes:
                self._set_rollout_status(record, changes["status"], now)
            return copy_rollout(record)

    async def _update_attempt(self, rollout_id: str, attempt_id: str, changes: AttemptUpdate) -> Attempt:
        return self._write_attempt(rollout_id, attempt_id, changes)

    async def _finish_attempt(self, finish: AttemptFinish) -> FinishedAttempt:
        stored = await self.add_spans_in_order(finish.spans) if finish.spans else []
        attempt = self._write_attempt(finish.rollout_id, finish.attempt_id, finish.changes, outcome=True)
        return FinishedAttempt(stored, attempt, await self._claim_next(finish.claim_next_for))

    def _write_attempt(
        self, rollout_id: str, attempt_id: str, changes: AttemptUpdate, *, outcome: bool = False
    ) -> Attempt:
        """Write an attempt's fields under the lock; ``outcome``: a runner's final report, to which
        :func:`~agl.store._rules.outcome_changes` applies."""
        with self._lock:
            now = self._clock()
            self._watch(now)
            record = self._record(rollout_id)
            if not record.attempts:
                raise NotFoundError(f"No attempts found for rollout {rollout_id}")
            attempt = record.attempts[-1] if attempt_id == "latest" else record.find_attempt(attempt_id)
            if attempt is None:
                raise NotFoundError(f"Attempt {attempt_id} not found for rollout {rollout_id}")
            if outcome:
                is_latest = attempt is record.attempts[-1]
                changes = outcome_changes(
                    changes, attempt.metadata, is_latest=is_latest, rollout_status=record.rollout.status
                )
            write_fields(attempt, changes)
            if "status" in changes:
                self._set_attempt_status(record, attempt, changes["status"], now)
            elif changes.get("worker_id"):
                self._sync_worker(attempt, now)
            return copy_attempt(attempt)

    async def wait_for_rollouts(
        self, *, rollout_ids: Sequence[str], timeout: float | None = None
    ) -> list[Rollout | AttemptedRollout]:
        wanted = list(dict.fromkeys(rollout_ids))
        deadline = None if timeout is None else time.monotonic() + timeout
        # Known and not yet seen finished. Waiting needs one unfinished rollout, not all of them: each wake-up
        # drops the finished ones from both ends only, so a long wait costs O(rollouts), not O(rollouts²).
        # Nothing can be returned before every one has finished, so a wait wakes only when the last pending
        # one does: queues are served in order, so that is the one likely to finish last (one wake-up for
        # a whole batch, where waking on every finish cost a cross-thread wake-up per rollout).
        pending: collections.deque[RolloutRecord] | None = None
        while True:
            with self._lock:
                self._watch(self._clock())
                if pending is None:
                    pending = collections.deque(self._rollouts[i] for i in wanted if i in self._rollouts)
                while pending and pending[0].rollout.status in FINISHED_STATUSES:
                    pending.popleft()
                while pending and pending[-1].rollout.status in FINISHED_STATUSES:
                    pending.pop()
                remaining = None if deadline is None else deadline - time.monotonic()
                if not pending or self._closed or (remaining is not None and remaining <= 0):
                    finished = (self._rollouts.get(i) for i in wanted)
                    return [
                        copy_rollout(r)
                        for r in finished
                        if r is not None and r.rollout.status in FINISHED_STATUSES
                    ]
                last = pending[-1].rollout.rollout_id
                waiter = self._rollout_finished.register(last)
            await self._wait(
                waiter, functools.partial(self._rollout_finished.unregister, last, waiter), remaining
            )

    # -- resources ------------------------------------------------------------------------------

    async def add_resources(self, resources: NamedResources) -> ResourcesUpdate:
        with self._lock:
            now = self._clock()
            resources_id = new_resources_id()
            while resources_id in self._resources:
                resources_id = new_resources_id()
            update = resources_update(resources_id, resources, now, now, 1)
            self._resources[resources_id] = update
            self._latest_resources_id = resources_id
            return update.model_copy()

    async def update_resources(self, resources_id: str, resources: NamedResources) -> ResourcesUpdate:
        with self._lock:
            now = self._clock()
            self._watch(now)
            old = self._resources.get(resources_id)
            if old is None:
                update = resources_update(resources_id, resources, now, now, 1)
            else:
                update = resources_update(resources_id, resources, old.create_time, now, old.version + 1)
            self._resources[resources_id] = update
            self._latest_resources_id = resources_id
            return update.model_copy()

    async def get_resources_by_id(self, resources_id: str) -> ResourcesUpdate | None:
        with self._lock:
            update = self._resources.get(resources_id)
            return None if update is None else update.model_copy()

    async def get_latest_resources(self) -> ResourcesUpdate | None:
        with self._lock:
            if self._latest_resources_id is None:
                return None
            return self._resources[self._latest_resources_id].model_copy()

    async def _query_resources(self, query: ResourcesQuery) -> PaginatedResult[ResourcesUpdate]:
        with self._lock:
            rows = select_by_key(self._resources, "resources_id", query.where(), attrgetter)
            page = paginate(sort_rows(rows, sort_field(query), query.sort_order), query.limit, query.offset)
            page.items = [r.model_copy() for r in page.items]
            return page

    # -- spans ----------------------------------------------------------------------------------

    async def add_span(self, span: Span) -> Span | None:
        stored = await self.add_many_spans([span])
        return stored[0] if stored else None

    async def add_many_spans(self, spans: Sequence[Span]) -> list[Span]:
        spans = spans_of(spans)
        encoded = [encode_span(s) for s in spans]  # outside the lock: the expensive part
        with self._lock:
            now = self._clock()
            targets: dict[tuple[str, str], tuple[RolloutRecord, Attempt]] = {}
            for span in spans:  # validate everything before storing anything
                key = (span.rollout_id, span.attempt_id)
                if key not in targets:
                    record = self._record(span.rollout_id)
                    attempt = record.find_attempt(span.attempt_id)
                    if attempt is None:
                        raise NotFoundError(
                            f"Attempt {span.attempt_id} not found for rollout {span.rollout_id}"
                        )
                    targets[key] = (record, attempt)
            capped = self._cap.max_bytes is not None
            if capped:
                self._make_room(0, sum(SPAN_BYTES + len(row[7]) for row in encoded), (k[0] for k in targets))
            stored: list[Span] = []
            stored_rows: list[StoredSpan] = []
            touched: dict[tuple[str, str], None] = {}
            counters = self._span_counters
            for span, row in zip(spans, encoded, strict=True):
                record, _ = targets[(span.rollout_id, span.attempt_id)]
                if counters.get(span.rollout_id, 0) < span.sequence_id:
                    counters[span.rollout_id] = span.sequence_id
                span_key = (span.attempt_id, span.span_id)
                if span_key in record.span_keys:
                    continue  # duplicate: skipped, not an error
                record.span_keys.add(span_key)
                record.spans.append(row)
                if capped:
                    record.size += SPAN_BYTES + len(row[7])
                    self._bytes += SPAN_BYTES + len(row[7])
                stored.append(span)
                stored_rows.append(row)
                touched[(span.rollout_id, span.attempt_id)] = None
            self._total_spans += len(stored)
            if stored:
                # What was just written is what a trainer reads next: keep it decoded (the store's own copy).
                self._span_cache.put(stored_rows, [s.model_copy() for s in stored])
            for key in touched:
                record, attempt = targets[key]
                self._heartbeat(record, attempt, now)
            return stored

    async def get_next_span_sequence_id(self, rollout_id: str, attempt_id: str) -> int:
        with self._lock:
            value = self._span_counters.get(rollout_id, 0) + 1
            self._span_counters[rollout_id] = value
            return value

    async def get_many_span_sequence_ids(self, rollout_attempt_ids: Sequence[tuple[str, str]]) -> list[int]:
        with self._lock:
            counters = self._span_counters
            values: list[int] = []
            for rollout_id, _ in rollout_attempt_ids:
                value = counters.get(rollout_id, 0) + 1
                counters[rollout_id] = value
                values.append(value)
            return values

    async def _query_spans(self, query: SpanQuery) -> PaginatedResult[Span]:
        where = without(query.where(), "rollout_id")
        attempt_id = query.attempt_id
        ids = query.rollout_ids
        if len(ids) > 1:
            ids = sorted(ids)  # spans of several rollouts: ties in rollout id order (as the SQL store)
        rows: list[StoredSpan] = []
        with self._lock:
            self._watch(self._clock())
            for rollout_id in ids:
                record = self._rollouts.get(rollout_id)
                if record is None:
                    continue
                wanted = attempt_id
                if wanted == "latest":
                    if not record.attempts:
                        continue
                    wanted = record.attempts[-1].attempt_id
                if wanted is None:
                    rows.extend(record.spans)
                else:
                    rows.extend(s for s in record.spans if s[ATTEMPT_ID] == wanted)
        return query_stored_spans(
            rows, where, sort_field(query), query.sort_order, query.limit, query.offset, self._span_cache
        )

    # -- workers --------------------------------------------------------------------------------

    async def _query_workers(self, query: WorkerQuery) -> PaginatedResult[Worker]:
        with self._lock:
            self._watch(self._clock())
            rows = select_by_key(self._workers, "worker_id", query.where(), attrgetter)
        page = paginate(sort_rows(rows, sort_field(query), query.sort_order), query.limit, query.offset)
        page.items = [w.model_copy() for w in page.items]
        return page

    async def get_worker_by_id(self, worker_id: str) -> Worker | None:
        with self._lock:
            worker = self._workers.get(worker_id)
            return None if worker is None else worker.model_copy()

    async def update_worker(self, worker_id: str, heartbeat_stats: dict[str, Any] | Unset = UNSET) -> Worker:
        if not worker_id:  # (its type was checked by the wrapper of every backend's update_worker)
            raise InvalidRequestError(f"worker_id must be a non-empty string, got {worker_id!r}")
        with self._lock:
            now = self._clock()
            worker = self._workers.get(worker_id) or Worker(worker_id=worker_id)
            update: dict[str, Any] = {"last_heartbeat_time": now}
            if heartbeat_stats is not UNSET:
                stats = cast(
                    "dict[str, Any] | None", heartbeat_stats
                )  # (None, accepted at run time, clears them)
                update["heartbeat_stats"] = None if stats is None else dict(stats)
            worker = worker.model_copy(update=update)
            self._workers[worker_id] = worker
            return worker.model_copy()
