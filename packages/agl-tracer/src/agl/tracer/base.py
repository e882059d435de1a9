"""The ``Tracer`` contract: record the spans of one rollout attempt and deliver them to the store.

A runner calls ``init_worker(worker_id, store)`` once, then, per attempt::

    async with tracer.trace_context(name=rollout_id, rollout_id=rollout_id, attempt_id=attempt_id):
        ...  # run the agent; emitters and instrumented clients record spans
    spans = tracer.get_last_trace()

When the ``async with`` block exits, every span recorded inside it has been written to the store (or the
bounded wait ran out and a warning was logged): the runner can report the attempt's outcome right after.
The active tracer and the rollout/attempt attribution live in ``contextvars``, so several runners in one
process (threads or coroutines) never see each other's spans.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import warnings
from abc import abstractmethod
from collections.abc import AsyncGenerator, Generator, Mapping
from contextvars import Token
from typing import TYPE_CHECKING, Any

from agl.types import ParallelWorkerBase, Span, SpanCoreFields, SpanRecordingContext, StatusCode, TraceStatus

from . import _context
from ._pipeline import SpanPipeline, TraceSession
from .attributes import format_exception_attributes, sanitize_attributes

if TYPE_CHECKING:
    from agl.store import LightningStore

__all__ = ["OpenSpan", "Tracer", "clear_active_tracer", "get_active_tracer", "set_active_tracer"]

logger = logging.getLogger(__name__)


class OpenSpan(SpanRecordingContext):
    """A span that is started and not yet ended; :meth:`end` finishes it (once)."""

    @abstractmethod
    def end(self, end_time: float | None = None) -> SpanCoreFields:
        """End the span (``end_time`` in seconds; now by default) and return what it recorded."""


class Tracer(ParallelWorkerBase):
    """Records spans and ships them to the store of the worker.

    Subclasses implement :meth:`_create_span`, :meth:`start_span` and :meth:`_operation_context`, and may hook
    :meth:`_on_session_start` / :meth:`_on_session_end` and :meth:`_session_handle`.

    Args:
        flush_timeout: seconds ``trace_context`` waits on exit for its spans to reach the store.
        max_pending_spans: spans that may wait for the store across all contexts; more are dropped (counted).
        max_batch_size: most spans written in one ``add_many_spans`` call.
        max_recorded_spans: most spans one context keeps for :meth:`get_last_trace`.
        store_timeout: seconds one store call may take before it is retried.
        linger_seconds: how long a batch waits for the spans that end right after its first (a closing
            context does not wait): the last spans of an attempt then travel with its outcome.
    """

    _transient_attributes: tuple[str, ...] = ("_pipeline", "_store", "_last_trace")

    def __init__(
        self,
        *,
        flush_timeout: float = 10.0,
        max_pending_spans: int = 20_000,
        max_batch_size: int = 1_000,
        max_recorded_spans: int = 100_000,
        store_timeout: float = 10.0,
        linger_seconds: float = 0.005,
    ) -> None:
        if flush_timeout < 0:
            raise ValueError("flush_timeout must be >= 0")
        self.flush_timeout = flush_timeout
        self._pipeline_options: dict[str, Any] = {
            "max_pending_spans": max_pending_spans,
            "max_batch_size": max_batch_size,
            "max_recorded_spans": max_recorded_spans,
            "store_timeout": store_timeout,
            "linger_seconds": linger_seconds,
        }
        self._pipeline: SpanPipeline | None = None
        self._store: LightningStore | None = None
        self._last_trace: list[Span] = []

    # -- pickling: tracers travel to runner processes without their threads ----------------------

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        for name in self._transient_attributes:
            state.pop(name, None)
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._pipeline = None
        self._store = None
        self._last_trace = []
        self._restore_transient()

    def _restore_transient(self) -> None:
        """Reset subclass runtime state after unpickling."""

    # -- lifecycle -------------------------------------------------------------------------------

    def init_worker(
        self, worker_id: int | str, store: LightningStore | None = None, *args: Any, **kwargs: Any
    ) -> None:
        """Remember the store that spans of this worker are written to."""
        super().init_worker(worker_id, *args, **kwargs)
        self._store = store

    def teardown_worker(self, worker_id: int | str, *args: Any, **kwargs: Any) -> None:
        """Flush what is still queued (bounded) and stop the export thread.

        When other workers (threads sharing this tracer) still have open trace contexts, nothing is stopped.
        """
        if _context.live_session_count(self) > 0:
            return
        pipeline, self._pipeline = self._pipeline, None
        if pipeline is not None:
            pipeline.shutdown(self.flush_timeout)

    @property
    def store(self) -> LightningStore | None:
        """The store given to :meth:`init_worker`."""
        return self._store

    def set_drain_on_caller_loop(self, enabled: bool) -> None:
        """Drain async trace contexts on the loop that opened them (for an async-safe store) instead of the
        export thread. For callers whose loop is never blocked by the traced code, e.g. a runner whose agent
        is async or runs in a worker thread: one event loop per process."""
        self._pipeline_options["drain_on_caller_loop"] = enabled
        if self._pipeline is not None:
            self._pipeline.drain_on_caller_loop = enabled

    @property
    def pipeline(self) -> SpanPipeline:
        """The span pipeline of this tracer (created on first use)."""
        if self._pipeline is None:
            self._pipeline = SpanPipeline(**self._pipeline_options)
        return self._pipeline

    @contextlib.contextmanager
    def lifespan(self, store: LightningStore | None = None) -> Generator[Tracer, None, None]:
        """``init``, ``init_worker(0, store)``, then the matching teardowns: handy in scripts and tests."""
        self.init()
        self.init_worker(0, store)
        try:
            yield self
        finally:
            try:
                self.teardown_worker(0)
            finally:
                self.teardown()

    # -- trace contexts --------------------------------------------------------------------------

    def _open(
        self,
        name: str | None,
        store: LightningStore | None,
        rollout_id: str | None,
        attempt_id: str | None,
        caller_loop: asyncio.AbstractEventLoop | None,
    ) -> tuple[TraceSession, Token[Any], Token[Any]]:
        if store is not None:
            warnings.warn(
                "passing store= to trace_context is deprecated; give the store to init_worker(worker_id, store)",
                DeprecationWarning,
                stacklevel=4,
            )
        else:
            store = self._store
        if (rollout_id is None) != (attempt_id is None):
            raise ValueError("rollout_id and attempt_id must be given together (or neither)")
        if rollout_id is not None and store is None:
            raise ValueError(
                f"trace_context for rollout {rollout_id!r} needs a store: call init_worker(worker_id, store) first"
            )
        open_session = _context.current_session()
        if open_session is not None:
            raise ValueError(
                f"a trace context of {type(open_session.tracer).__name__} is already open in this context; "
                "trace contexts do not nest"
            )
        active = _context.current_tracer()
        if active is not None and active is not self:
            raise ValueError(f"another tracer ({type(active).__name__}) is active in this context")
        self._check_ready()
        session = TraceSession(self, name, store, rollout_id, attempt_id, self.pipeline.max_recorded_spans)
        self.pipeline.open_session(session, caller_loop=caller_loop)
        tracer_token, session_token = _context.enter_session(self, session)
        return session, tracer_token, session_token

    def _close_vars(self, session: TraceSession, tracer_token: Token[Any], session_token: Token[Any]) -> None:
        _context.exit_session(session, tracer_token, session_token)

    def _finish(self, session: TraceSession) -> None:
        spans = session.final_spans()
        self._last_trace = spans
        _context.set_last_trace(self, spans)

    def _check_ready(self) -> None:
        """Raise ``RuntimeError`` when the tracer cannot record yet (e.g. ``init_worker`` not called)."""

    @contextlib.asynccontextmanager
    async def trace_context(
        self,
        name: str | None = None,
        *,
        store: LightningStore | None = None,
        rollout_id: str | None = None,
        attempt_id: str | None = None,
        hand_over_to: list[Span] | None = None,
    ) -> AsyncGenerator[Any, None]:
        """Record the spans of one rollout attempt (or, without ids, just record them locally).

        ``rollout_id`` and ``attempt_id`` go together and need a store (from :meth:`init_worker`). On exit,
        every span recorded inside has been written to the store, waiting at most ``flush_timeout`` seconds;
        store failures are logged, never raised. Exceptions of the body propagate unchanged.
        Yields what the backend offers (an OpenTelemetry tracer for :class:`OtelTracer`).

        ``hand_over_to``: the spans not yet sent when the context closes are appended to this list instead
        of being written (unnumbered, ``sequence_id`` 0); the caller stores them, typically with the
        attempt's outcome in one ``LightningStore.finish_attempt`` call, as the runner does.
        """
        session, tracer_token, session_token = self._open(
            name, store, rollout_id, attempt_id, asyncio.get_running_loop()
        )
        try:
            with self._session_body(session) as handle:
                yield handle
        finally:
            try:
                hand_over = hand_over_to is not None
                await self.pipeline.close_session(session, self.flush_timeout, hand_over=hand_over)
                if hand_over_to is not None:
                    hand_over_to.extend(session.handed_over)
            finally:
                self._close(session, tracer_token, session_token)

    @contextlib.contextmanager
    def trace_context_sync(
        self,
        name: str | None = None,
        *,
        rollout_id: str | None = None,
        attempt_id: str | None = None,
    ) -> Generator[Any, None, None]:
        """Blocking twin of :meth:`trace_context` for code without an event loop."""
        session, tracer_token, session_token = self._open(name, None, rollout_id, attempt_id, None)
        try:
            with self._session_body(session) as handle:
                yield handle
        finally:
            try:
                self.pipeline.close_session_sync(session, self.flush_timeout)
            finally:
                self._close(session, tracer_token, session_token)

    @contextlib.contextmanager
    def _session_body(self, session: TraceSession) -> Generator[Any, None, None]:
        """What both trace contexts do around their body: the backend's start, and its end told of the
        body's exception (if any), before the spans are flushed."""
        handle = self._on_session_start(session)
        try:
            yield handle
        except BaseException as exc:
            self._safe_session_end(session, exc)
            raise
        else:
            self._safe_session_end(session, None)

    def _close(self, session: TraceSession, tracer_token: Any, session_token: Any) -> None:
        self._finish(session)
        self._close_vars(session, tracer_token, session_token)

    def _safe_session_end(self, session: TraceSession, exc: BaseException | None) -> None:
        try:
            self._on_session_end(session, exc)
        except Exception:
            logger.exception("tracer %s failed to end trace %s", type(self).__name__, session.name)

    def _on_session_start(self, session: TraceSession) -> Any:
        """Backend work when a context opens; the return value is what ``trace_context`` yields."""
        return None

    def _on_session_end(self, session: TraceSession, exc: BaseException | None) -> None:
        """Backend work when a context closes (before its spans are flushed)."""

    def _submit(self, item: Any) -> None:
        """Hand a finished span to the session it belongs to (if any)."""
        session = _context.session_for(self)
        if session is not None:
            self.pipeline.submit(session, item)

    def get_last_trace(self) -> list[Span]:
        """Spans of the most recently finished ``trace_context`` (of this thread or task, if it had one)."""
        last = _context.last_trace(self)
        return last if last is not None else list(self._last_trace)

    # -- recording -------------------------------------------------------------------------------

    def create_span(
        self,
        name: str,
        attributes: Mapping[str, Any] | None = None,
        timestamp: float | None = None,
        status: TraceStatus | None = None,
    ) -> SpanCoreFields:
        """Record an already finished span (``timestamp`` in seconds is both start and end; now by default)."""
        when = timestamp if timestamp is not None else time.time()
        return self._create_span(name, attributes or {}, when, status)

    @abstractmethod
    def _create_span(
        self, name: str, attributes: Mapping[str, Any], when: float, status: TraceStatus | None
    ) -> SpanCoreFields:
        """Backend of :meth:`create_span`: a span started and ended at ``when``."""

    @abstractmethod
    def start_span(self, name: str, attributes: Mapping[str, Any] | None = None) -> OpenSpan:
        """Start a span, child of the current operation, that the caller ends with ``OpenSpan.end()``.

        It does not become the current span (so it may end in another task or thread).
        """

    def operation_context(
        self,
        name: str,
        attributes: Mapping[str, Any] | None = None,
        start_time: float | None = None,
        end_time: float | None = None,
    ) -> contextlib.AbstractContextManager[SpanRecordingContext]:
        """A span covering a block, current inside it; an exception marks it ERROR and propagates."""
        return self._operation_context(name, attributes or {}, start_time, end_time)

    @abstractmethod
    def _operation_context(
        self, name: str, attributes: Mapping[str, Any], start_time: float | None, end_time: float | None
    ) -> contextlib.AbstractContextManager[SpanRecordingContext]:
        """Backend of :meth:`operation_context`."""

    def get_langchain_handler(self) -> Any:
        """A LangChain callback handler that records into this tracer; ``None`` when the tracer has none."""
        warnings.warn(f"{type(self).__name__} has no LangChain handler", stacklevel=2)
        return None


def get_active_tracer() -> Tracer | None:
    """The tracer active in this context (thread or task), or ``None``.

    Outside any context that set one (e.g. in a thread the agent started itself), the tracer of the only live
    trace session of the process is returned when there is exactly one; otherwise ``None``.
    """
    return _context.active_tracer()


def set_active_tracer(tracer: Tracer) -> None:
    """Make ``tracer`` the active tracer of this context.

    Raises ``ValueError`` when another tracer is already active here (tracing contexts do not nest).
    Other threads and tasks are not affected.
    """
    _context.activate(tracer)


def clear_active_tracer() -> None:
    """No tracer is active in this context any more."""
    _context.deactivate()


class RecordedSpan(OpenSpan):
    """A span recorded in plain Python: the building block of tracers without an OpenTelemetry backend."""

    def __init__(
        self,
        name: str,
        attributes: Mapping[str, Any] | None = None,
        start_time: float | None = None,
        on_end: Any = None,
    ) -> None:
        self._name = name
        self._attributes: dict[str, Any] = sanitize_attributes(dict(attributes or {}))
        self._status = TraceStatus(status_code="UNSET")
        self._start = start_time if start_time is not None else time.time()
        self._end: float | None = None
        self._on_end = on_end

    def record_exception(self, exception: BaseException) -> None:
        self._attributes.update(format_exception_attributes(exception))

    def record_attributes(self, attributes: Mapping[str, Any]) -> None:
        self._attributes.update(sanitize_attributes(dict(attributes)))

    def record_status(self, status_code: StatusCode, description: str | None = None) -> None:
        self._status = TraceStatus(status_code=status_code, description=description)

    def get_recorded_span(self) -> SpanCoreFields:
        return SpanCoreFields(
            name=self._name,
            status=self._status,
            attributes=dict(self._attributes),
            start_time=self._start,
            end_time=self._end,
        )

    def end(self, end_time: float | None = None) -> SpanCoreFields:
        if self._end is None:
            self._end = end_time if end_time is not None else time.time()
            core = self.get_recorded_span()
            if self._on_end is not None:
                self._on_end(core)
            return core
        return self.get_recorded_span()
