"""The span pipeline: finished spans of a trace session are batched to the store in the background.

Per trace session (one ``trace_context``): spans are queued as they end (cheap, never blocking, never raising),
and one drain task per session ships whatever has accumulated in one ``add_spans_in_order`` call (the store
numbers the spans and writes them: one round trip). While a batch is in flight the next one accumulates, so
batches grow with the load. A batch waits ``linger_seconds`` (5 ms) for the spans that end right after its
first, unless the context closes meanwhile; a lone span still goes out within that (spans are also the
heartbeat of the attempt). A closing context can hand its unsent spans to the caller instead of writing
them (``close_session(hand_over=True)``): the runner stores them with the attempt's outcome, in one call.
Closing a session waits, up to a bound, until everything queued is written.

The drain runs on the pipeline's own export thread (so spans flow even while a synchronous agent blocks the
runner's loop), except for a store that is not thread-safe: that one is only used from the loop that opened
the session. With ``drain_on_caller_loop`` (a runner sets it when its agent never blocks its loop), an async
trace context on an async-safe store drains on the loop that opened it: one event loop per runner process
(measured: the second loop only added CPU, thread wake-ups and a second set of connections).
Memory is bounded: at most ``max_pending_spans`` spans wait across all sessions; more are dropped and
counted, with a warning. Store errors are retried a few times (``ValueError``s such as an unknown rollout
are not: they will not get better) and then logged; the spans stay available through ``get_last_trace``.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import functools
import logging
import os
import threading
import time
from collections import deque
from typing import TYPE_CHECKING, Any, Union

from agl.store.group_writer import GroupWriter
from agl.types import Span, SpanCoreFields
from agl.types.timeouts import wait_within
from opentelemetry import context as otel_context

from . import _context

# The key OpenTelemetry instrumentations check before recording (``opentelemetry.context``'s own constant).
_SUPPRESS_INSTRUMENTATION_KEY = getattr(
    otel_context, "_SUPPRESS_INSTRUMENTATION_KEY", "suppress_instrumentation"
)

if TYPE_CHECKING:
    from agl.store import LightningStore
    from opentelemetry.sdk.trace import ReadableSpan

__all__ = ["PipelineStats", "SpanPipeline", "TraceSession"]

logger = logging.getLogger(__name__)

DUMMY_ROLLOUT_ID = "rollout-dummy"
DUMMY_ATTEMPT_ID = "attempt-dummy"

SpanItem = Union["ReadableSpan", SpanCoreFields, Span]
DrainFuture = Union["concurrent.futures.Future[None]", "asyncio.Future[None]"]
"""A session's drain: a task when it runs on the loop (and thread) that opened the session."""


class TraceSession:
    """One ``trace_context``: where its spans go and what it recorded."""

    def __init__(
        self,
        tracer: Any,
        name: str | None,
        store: LightningStore | None,
        rollout_id: str | None,
        attempt_id: str | None,
        max_recorded_spans: int,
    ) -> None:
        self.tracer = tracer
        self.name = name
        self.store = store if rollout_id is not None else None
        self.rollout_id = rollout_id or DUMMY_ROLLOUT_ID
        self.attempt_id = attempt_id or DUMMY_ATTEMPT_ID
        self.max_recorded_spans = max_recorded_spans
        self.lock = threading.Lock()
        self.pending: deque[SpanItem] = deque()
        self.inflight: list[SpanItem] = []
        self.recorded: list[Span] = []
        self.local_items: list[tuple[SpanItem, int]] = []
        self.handed_over: list[
            Span
        ] = []  # queued at close and given to the caller to store (see close_session)
        self.truncated = False
        self.local_sequence = 0
        self.dropped = 0
        self.failed = 0
        self.written = 0
        self.closing = False
        self.drained = False
        self.signaled = False
        self.loop: asyncio.AbstractEventLoop | None = None
        self.loop_thread: int | None = None  # ident of the thread running ``loop``
        self.event: asyncio.Event | None = None
        self.drain_future: DrainFuture | None = None
        self.backend_state: Any = None  # what a tracer backend keeps per context (e.g. an AgentOps trace)

    @property
    def ships_to_store(self) -> bool:
        return self.store is not None

    def next_local_sequence(self) -> int:
        with self.lock:
            self.local_sequence += 1
            return self.local_sequence

    def _room(self, wanted: int) -> int:
        room = max(0, self.max_recorded_spans - len(self.recorded) - len(self.local_items))
        if room < wanted and not self.truncated:
            self.truncated = True
            logger.warning(
                "trace %s keeps at most %d spans for get_last_trace(); later ones are not kept there%s",
                self.rollout_id,
                self.max_recorded_spans,
                " (they still go to the store)" if self.store is not None else "",
            )
        return min(room, wanted)

    def record(self, spans: list[Span]) -> None:
        """Keep spans for ``get_last_trace`` (they are the in-flight batch, if any: it is done now)."""
        with self.lock:
            self.inflight = []
            self.recorded.extend(spans[: self._room(len(spans))])

    def record_local(self, item: SpanItem) -> None:
        """Keep a span of a context without a store; it is converted only when the context closes."""
        with self.lock:
            self.local_sequence += 1
            if self._room(1):
                self.local_items.append((item, self.local_sequence))

    def final_spans(self) -> list[Span]:
        """Recorded spans plus, converted locally, any still waiting (a flush that timed out)."""
        with self.lock:
            inflight, pending = list(self.inflight), list(self.pending)
            spans = list(self.recorded)
            local = list(self.local_items)
        rid, aid = self.rollout_id, self.attempt_id
        spans.extend(Span.from_item(i, rollout_id=rid, attempt_id=aid, sequence_id=seq) for i, seq in local)
        spans.extend(Span.from_item(i, rollout_id=rid, attempt_id=aid) for i in inflight)
        spans.extend(self.handed_over)
        spans.extend(Span.from_item(i, rollout_id=rid, attempt_id=aid) for i in pending)
        return spans

    def hand_over_pending(self) -> int:
        """Take the spans still queued (not yet sent) out of the pipeline into :attr:`handed_over`; returns
        how many. Spans that end later are shipped as usual."""
        with self.lock:
            taken = list(self.pending)
            self.pending.clear()
        rid, aid = self.rollout_id, self.attempt_id
        self.handed_over.extend(Span.from_item(i, rollout_id=rid, attempt_id=aid) for i in taken)
        return len(taken)


class PipelineStats:
    """Counters of a pipeline since it was created (read them; do not write)."""

    def __init__(self) -> None:
        self.submitted = 0
        self.written = 0
        self.dropped = 0
        self.failed = 0
        self.batches = 0


class _LoopThread:
    """An event loop running forever in a daemon thread."""

    def __init__(self, name: str) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self._run, name=name, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.run_forever()
        self.loop.close()

    def stop(self, timeout: float) -> None:
        if self.loop.is_closed():
            return
        self.loop.call_soon_threadsafe(self.loop.stop)
        if threading.current_thread() is not self.thread:
            self.thread.join(timeout)


class SpanPipeline:
    """Ships the spans of trace sessions to their store in batches. Thread-safe; never raises into callers."""

    def __init__(
        self,
        *,
        max_pending_spans: int = 20_000,
        max_batch_size: int = 1_000,
        max_recorded_spans: int = 100_000,
        store_timeout: float = 10.0,
        max_retries: int = 3,
        retry_backoff: float = 0.2,
        drain_on_caller_loop: bool = False,
        linger_seconds: float = 0.005,
    ) -> None:
        if max_pending_spans < 1 or max_batch_size < 1 or max_recorded_spans < 0:
            raise ValueError("max_pending_spans and max_batch_size must be >= 1, max_recorded_spans >= 0")
        if not 0 <= linger_seconds <= 1:
            raise ValueError(f"linger_seconds must be between 0 and 1, not {linger_seconds}")
        self.linger_seconds = linger_seconds
        self.max_pending_spans = max_pending_spans
        self.max_batch_size = max_batch_size
        self.max_recorded_spans = max_recorded_spans
        self.store_timeout = store_timeout
        self.max_retries = max_retries
        self.retry_backoff = retry_backoff
        self.drain_on_caller_loop = drain_on_caller_loop
        self.stats = PipelineStats()
        self._lock = threading.Lock()
        self._pending_total = 0
        self._loop_thread: _LoopThread | None = None
        self._pid = os.getpid()
        self._sessions: set[TraceSession] = set()
        self._export_stores: dict[int, LightningStore] = {}  # stores the export thread has used

    # -- sessions ------------------------------------------------------------------------------

    def open_session(
        self, session: TraceSession, *, caller_loop: asyncio.AbstractEventLoop | None
    ) -> TraceSession:
        """Start a new session (made with this pipeline's ``max_recorded_spans``); with a store, its drain task
        starts at once."""
        if session.store is not None:
            thread_safe = bool(session.store.capabilities.get("thread_safe"))
            caps = session.store.capabilities
            on_caller = not thread_safe or (self.drain_on_caller_loop and bool(caps.get("async_safe")))
            if caller_loop is not None and on_caller:
                loop, session.loop_thread = caller_loop, threading.get_ident()
            else:
                loop = self._export_loop()
                session.loop_thread = self._loop_thread.thread.ident if self._loop_thread else None
                with self._lock:
                    self._export_stores[id(session.store)] = session.store
            session.loop = loop
            if loop is caller_loop:  # this thread runs it: a plain task, no cross-thread hand-off
                session.drain_future = loop.create_task(self._drain(session))
            else:
                session.drain_future = asyncio.run_coroutine_threadsafe(self._drain(session), loop)
            with self._lock:
                self._sessions.add(session)
        return session

    def _export_loop(self) -> asyncio.AbstractEventLoop:
        with self._lock:
            if self._pid != os.getpid():  # forked: the parent's thread does not exist here
                self._loop_thread = None
                self._sessions = set()
                self._pid = os.getpid()
            if self._loop_thread is None or not self._loop_thread.thread.is_alive():
                self._loop_thread = _LoopThread("agl-span-export")
            return self._loop_thread.loop

    def submit(self, session: TraceSession, item: SpanItem) -> None:
        """Queue a finished span (any thread). Never blocks on I/O and never raises."""
        try:
            if not session.ships_to_store:
                session.record_local(item)
                return
            dropped = 0
            with self._lock:
                if self._pending_total >= self.max_pending_spans:
                    self.stats.dropped += 1
                    session.dropped += 1
                    dropped = self.stats.dropped
                    full = True
                else:
                    self._pending_total += 1
                    self.stats.submitted += 1
                    full = False
            if full:
                if dropped == 1 or dropped % 1000 == 0:
                    logger.warning(
                        "span pipeline full (%d spans waiting for the store): %d spans dropped so far",
                        self.max_pending_spans,
                        dropped,
                    )
                return
            with session.lock:
                session.pending.append(item)
                wake = not session.signaled
                session.signaled = True
                restart = session.drained
                session.drained = False
            if restart:  # a late span, after the context closed: drain it once more
                self._restart_drain(session)
            elif wake and session.loop is not None:
                if session.loop_thread == threading.get_ident():
                    session.loop.call_soon(_wake, session)  # no self-pipe write from the loop's own thread
                else:
                    session.loop.call_soon_threadsafe(_wake, session)
        except Exception:  # a span must never break the agent
            logger.exception("could not queue a span for %s/%s", session.rollout_id, session.attempt_id)

    def _restart_drain(self, session: TraceSession) -> None:
        loop = session.loop
        if loop is None or loop.is_closed() or not loop.is_running():
            with session.lock:
                lost = len(session.pending)
                session.pending.clear()
                session.drained = True
            with self._lock:
                self._pending_total -= lost
                self.stats.dropped += lost
            logger.warning(
                "%d spans of %s/%s ended after their trace context closed and its loop stopped; dropped",
                lost,
                session.rollout_id,
                session.attempt_id,
            )
            return
        session.drain_future = asyncio.run_coroutine_threadsafe(self._drain(session), loop)

    def _take(self, session: TraceSession) -> list[SpanItem]:
        with session.lock:
            n = min(len(session.pending), self.max_batch_size)
            batch = [session.pending.popleft() for _ in range(n)]
            if not batch:
                session.signaled = False
                if session.closing:
                    session.drained = True
        if batch:
            with self._lock:
                self._pending_total -= len(batch)
        return batch

    async def _drain(self, session: TraceSession) -> None:
        # The store's own calls (an HTTP client, say) must not be traced back into the pipeline.
        _context.set_suppressed(True)
        otel_context.attach(otel_context.set_value(_SUPPRESS_INSTRUMENTATION_KEY, True))
        if session.event is None:
            session.event = asyncio.Event()
        event = session.event
        # One writer per session: the drain is its only caller, so each batch is written at once, whole
        # (never bisected: a refusal concerns the session's rollout, shared by every span of it).
        writer: GroupWriter[Span] = GroupWriter(
            functools.partial(self._store_spans, session), max_group=self.max_batch_size, refused=_never
        )
        while True:
            if self.linger_seconds and session.pending and not session.closing:
                await _linger(event, self.linger_seconds)
            batch = self._take(session)
            if batch:
                with session.lock:
                    session.inflight = batch
                try:
                    await self._ship(session, batch, writer)
                finally:
                    with session.lock:
                        session.inflight = []
                continue
            if session.drained:
                return
            await event.wait()
            event.clear()

    async def _ship(self, session: TraceSession, batch: list[SpanItem], writer: GroupWriter[Span]) -> None:
        rid, aid = session.rollout_id, session.attempt_id
        spans = [Span.from_item(item, rollout_id=rid, attempt_id=aid) for item in batch]
        outcomes = await writer.write_all(spans)
        failed = [span for span, outcome in zip(spans, outcomes, strict=True) if outcome is not None]
        if failed:  # kept for get_last_trace, numbered locally
            for span in failed:
                span.sequence_id = session.next_local_sequence()
            session.record(failed)
            session.failed += len(failed)
            self.stats.failed += len(failed)

    async def _store_spans(self, session: TraceSession, spans: list[Span]) -> None:
        """One batch's store call, retried a few times; raises once given up (the writer fails the batch)."""
        store = session.store
        assert store is not None
        rid, aid = session.rollout_id, session.attempt_id
        for attempt in range(self.max_retries + 1):
            try:
                # A retry after a lost answer cannot store a span twice: duplicates (same span id) are skipped,
                # and the trace keeps them as they are (they were stored by the try whose answer was lost).
                stored = await wait_within(store.add_spans_in_order(spans), self.store_timeout)
                numbered = {span.span_id: span for span in stored}
                session.record([numbered.get(span.span_id, span) for span in spans])
                session.written += len(spans)
                self.stats.written += len(spans)
                self.stats.batches += 1
                return
            except asyncio.CancelledError:
                raise
            except ValueError as exc:  # NotFoundError, InvalidRequestError...: retrying will not help
                logger.error("store rejected %d spans of %s/%s: %s", len(spans), rid, aid, exc)
                raise
            except Exception as exc:
                if attempt < self.max_retries:
                    logger.warning(
                        "writing %d spans of %s/%s failed (%s: %s); retrying",
                        len(spans),
                        rid,
                        aid,
                        type(exc).__name__,
                        exc,
                    )
                    await asyncio.sleep(self.retry_backoff * (2**attempt))
                else:
                    logger.error(
                        "giving up writing %d spans of %s/%s after %d tries: %s: %s",
                        len(spans),
                        rid,
                        aid,
                        attempt + 1,
                        type(exc).__name__,
                        exc,
                    )
                    raise

    def _begin_close(self, session: TraceSession, hand_over: bool = False) -> DrainFuture | None:
        session.closing = True
        if hand_over and session.ships_to_store:
            taken = session.hand_over_pending()
            if taken:
                with self._lock:
                    self._pending_total -= taken
        if session.loop is not None and not session.loop.is_closed():
            if session.loop_thread == threading.get_ident():
                _wake(session)
            else:
                session.loop.call_soon_threadsafe(_wake, session)
        return session.drain_future

    def _end_close(self, session: TraceSession, done: bool, timeout: float) -> None:
        with self._lock:
            self._sessions.discard(session)
        if not done:
            with session.lock:
                waiting = len(session.pending) + len(session.inflight)
            logger.warning(
                "%d spans of %s/%s were not written within %.1fs; they are still being sent in the background",
                waiting,
                session.rollout_id,
                session.attempt_id,
                timeout,
            )
        if session.dropped:
            logger.warning(
                "%d spans of %s/%s were dropped because the span pipeline was full",
                session.dropped,
                session.rollout_id,
                session.attempt_id,
            )

    async def close_session(self, session: TraceSession, timeout: float, *, hand_over: bool = False) -> bool:
        """Wait (up to ``timeout`` seconds) until every queued span of the session is written or given up.

        ``hand_over``: spans still queued (not yet sent) are not written but moved to ``session.handed_over``
        for the caller to store with the attempt's outcome (``LightningStore.finish_attempt``, one round trip
        instead of two); a batch already on its way is still waited for, so sequence ids keep span order.
        """
        future = self._begin_close(session, hand_over)
        done = True
        if future is not None:
            try:
                await wait_within(asyncio.shield(asyncio.wrap_future(future)), timeout)
            except asyncio.TimeoutError:
                done = False
            except asyncio.CancelledError:
                raise
            except Exception:
                logger.exception("span drain of %s/%s failed", session.rollout_id, session.attempt_id)
        self._end_close(session, done, timeout)
        return done

    def close_session_sync(self, session: TraceSession, timeout: float) -> bool:
        """Blocking variant of :meth:`close_session` (must not run on the session's own loop)."""
        future = self._begin_close(session)
        done = True
        if future is not None:
            try:
                _wait_blocking(session, future, timeout)
            except concurrent.futures.TimeoutError:
                done = False
            except Exception:
                logger.exception("span drain of %s/%s failed", session.rollout_id, session.attempt_id)
        self._end_close(session, done, timeout)
        return done

    def shutdown(self, timeout: float = 10.0) -> None:
        """Flush what is queued (up to ``timeout`` seconds), then stop the export thread."""
        deadline = time.monotonic() + timeout
        with self._lock:
            sessions = list(self._sessions)
        for session in sessions:
            future = self._begin_close(session)
            if future is None:
                continue
            try:
                _wait_blocking(session, future, max(0.0, deadline - time.monotonic()))
            except Exception:
                logger.warning(
                    "span pipeline shut down with spans of %s/%s unwritten",
                    session.rollout_id,
                    session.attempt_id,
                )
        with self._lock:
            loop_thread, self._loop_thread = self._loop_thread, None
            self._sessions = set()
            stores, self._export_stores = list(self._export_stores.values()), {}
        if loop_thread is not None and self._pid == os.getpid():
            if stores and not loop_thread.loop.is_closed():
                closing = asyncio.run_coroutine_threadsafe(_release_loop_resources(stores), loop_thread.loop)
                try:
                    closing.result(max(0.1, deadline - time.monotonic()))
                except Exception:
                    logger.debug("could not release store connections of the export loop", exc_info=True)
            loop_thread.stop(max(0.1, deadline - time.monotonic()))

    @property
    def pending_spans(self) -> int:
        with self._lock:
            return self._pending_total


async def _release_loop_resources(stores: list[LightningStore]) -> None:
    """Release what the stores hold for the export loop (HTTP sessions, say); the stores stay usable."""
    for store in stores:
        await store.release_loop_resources()


def _wait_blocking(session: TraceSession, future: DrainFuture, timeout: float) -> None:
    """Block until a session's drain is done (``TimeoutError`` after ``timeout`` seconds)."""
    if isinstance(future, concurrent.futures.Future):
        future.result(timeout)
        return
    if future.done():
        if not future.cancelled():
            future.result()  # (raises what the drain raised)
        return
    loop = session.loop
    if loop is None or loop.is_closed() or session.loop_thread == threading.get_ident():
        return  # the loop's own thread cannot block on it: the context's own close waits for it instead
    asyncio.run_coroutine_threadsafe(asyncio.wait([future]), loop).result(timeout)


def _never(_error: BaseException) -> bool:
    return False


async def _linger(event: asyncio.Event, seconds: float) -> None:
    """Wait ``seconds`` for the spans that end soon after the first, unless ``event`` (the context closing)
    comes first: the last spans of an attempt then go with its outcome instead of in a request of their own."""
    handle = asyncio.get_running_loop().call_later(seconds, event.set)
    try:
        await event.wait()
    finally:
        handle.cancel()
    event.clear()


def _wake(session: TraceSession) -> None:
    if session.event is not None:
        session.event.set()
