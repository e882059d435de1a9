"""Call spans written to the store in batches ("group commit"), before the client sees the answer.

The proxy hands each finished call to :meth:`SpanRecorder.write` and releases the last bytes of its answer
only once the call's span is stored. So when an agent has its answer, its span is in the store: a runner that
marks the attempt finished after the agent returned cannot get ahead of the proxy, and an algorithm never
reads a finished rollout without its last LLM call, wherever the proxy, the runners and the store run.

Sequence ids are given by the store as it writes (``add_spans_in_order``), so a call sorts after everything
the agent recorded before sending it and before whatever it does after reading the answer.

Concurrent calls share store round trips: while one write is in flight, new calls queue up and go out together
in the next one. Under light load every call is written at once; under heavy load batches grow by themselves.
A batch the store refuses (say, one call names an unknown rollout) is split until the bad call stands alone:
it is dropped and logged, the others are written.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from agl.store import LightningStore
    from agl.types import Span

    from ._call_record import CallRecord

__all__ = ["SpanRecorder"]

logger = logging.getLogger(__name__)


class SpanRecorder:
    """Writes call spans to the store in batches. Lives on the proxy's loop; the store must be usable from it
    (wrap it with ``agl.store.as_thread_safe`` when it is not thread-safe).

    A call arriving while nothing is being written writes at once, in its own coroutine (no task hop: a lone
    call pays one store call and nothing else); calls arriving while a write is in flight queue up and are
    written together by one drain task as soon as it is done.
    """

    def __init__(self, store: LightningStore, *, max_batch: int = 512, max_retries: int = 5) -> None:
        self.store = store
        self._max_batch = max_batch
        self._max_retries = max_retries
        self._queue: list[tuple[Span, asyncio.Future[None] | None]] = []
        self._busy = False  # a write (inline or the drain task) is in flight
        self._task: asyncio.Task[None] | None = None
        self._idle = asyncio.Event()
        self._idle.set()
        self.spans_written = 0
        self.spans_dropped = 0

    def _span_of(self, call: CallRecord) -> Span | None:
        try:
            return call.to_span(0)
        except Exception:
            self.spans_dropped += 1
            logger.exception("could not build the span of a call to rollout %s", call.rollout_id)
            return None

    async def write(self, call: CallRecord) -> None:
        """Store ``call``'s span; returns once it is stored or given up (never raises but CancelledError)."""
        span = self._span_of(call)
        if span is None:
            return
        loop = asyncio.get_running_loop()
        if self._busy:
            done = loop.create_future()
            self._queue.append((span, done))
            await asyncio.shield(done)  # cancelled or not, the drain writes it
            return
        self._busy = True
        self._idle.clear()
        try:
            await self._write([span])
        except asyncio.CancelledError:
            self._queue.append((span, None))  # the client went away mid-write: the drain finishes it
            raise
        finally:
            self._after_write(loop)

    def submit(self, call: CallRecord) -> None:
        """Queue ``call``'s span and return at once (for calls nobody waits for: failed or cut off)."""
        span = self._span_of(call)
        if span is None:
            return
        self._queue.append((span, None))
        if not self._busy:
            self._busy = True
            self._idle.clear()
            self._after_write(asyncio.get_running_loop())

    def _after_write(self, loop: asyncio.AbstractEventLoop) -> None:
        if self._queue:
            if self._task is None:
                self._task = loop.create_task(self._drain())
        elif self._task is None:
            self._busy = False
            self._idle.set()

    async def _drain(self) -> None:
        try:
            while self._queue:
                batch = self._queue[: self._max_batch]
                del self._queue[: self._max_batch]
                try:
                    await self._write([span for span, _ in batch])
                finally:
                    for _, done in batch:
                        if done is not None and not done.done():
                            done.set_result(None)
        finally:
            self._task = None
            self._busy = False
            self._idle.set()
            if self._queue:  # only when the drain itself was cancelled: hand the rest on
                self._busy = True
                self._idle.clear()
                self._after_write(asyncio.get_running_loop())

    async def _write(self, spans: list[Span]) -> None:
        delay = 0.05
        for attempt in range(self._max_retries + 1):
            try:
                await self.store.add_spans_in_order(spans)
                self.spans_written += len(spans)
                return
            except ValueError as exc:  # NotFoundError, InvalidRequestError...: one of them is bad
                if len(spans) > 1:
                    middle = len(spans) // 2
                    await self._write(spans[:middle])
                    await self._write(spans[middle:])
                    return
                self.spans_dropped += 1
                logger.error(
                    "the store refused the span of a call to rollout %s attempt %s: %s",
                    spans[0].rollout_id,
                    spans[0].attempt_id,
                    exc,
                )
                return
            except Exception as exc:
                if attempt == self._max_retries:
                    self.spans_dropped += len(spans)
                    logger.error(
                        "dropping %d LLM-call spans after %d tries: %s", len(spans), attempt + 1, exc
                    )
                    return
                logger.warning(
                    "writing %d LLM-call spans failed (%s); retrying in %.2fs", len(spans), exc, delay
                )
                await asyncio.sleep(delay)
                delay = min(delay * 2, 2.0)

    async def flush(self) -> None:
        """Wait until every queued span has been written (or dropped)."""
        while not self._idle.is_set():
            await self._idle.wait()
