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
it is dropped and logged, the others are written, and :meth:`SpanRecorder.write` returns why, for the proxy
to fail that call rather than answer as if it were recorded. A span is cut to fit in one store request
first (``_bound``), so its size alone never makes the store refuse it.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING

from agl.store.group_writer import GroupWriter, Outcome

from ._bound import DEFAULT_MAX_SPAN_BYTES

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
    written together by one drain task as soon as it is done (:class:`agl.store.group_writer.GroupWriter`).
    """

    def __init__(
        self,
        store: LightningStore,
        *,
        max_batch: int = 512,
        max_retries: int = 5,
        max_span_bytes: int = DEFAULT_MAX_SPAN_BYTES,
    ) -> None:
        self.store = store
        self.max_span_bytes = max_span_bytes
        self._max_retries = max_retries
        self._writer: GroupWriter[Span] = GroupWriter(
            self._store_spans, max_group=max_batch, on_failed=self._dropped
        )
        self._unbuilt = 0

    @property
    def spans_written(self) -> int:
        """Spans stored so far."""
        return self._writer.written

    @property
    def spans_dropped(self) -> int:
        """Spans given up: not buildable, refused by the store, or still failing after the retries."""
        return self._unbuilt + self._writer.failed

    def _span_of(self, call: CallRecord) -> Span | Exception:
        try:
            return call.to_span(0, self.max_span_bytes)
        except Exception as exc:
            self._unbuilt += 1
            logger.exception("could not build the span of a call to rollout %s", call.rollout_id)
            return exc

    async def write(self, call: CallRecord) -> Outcome:
        """Store ``call``'s span; returns ``None`` once stored, or the error it was given up for (the store
        refused it: a ``ValueError``; or it could not be built or written). Never raises but CancelledError."""
        span = self._span_of(call)
        if isinstance(span, Exception):
            return span
        return await self._writer.write(span)

    def submit(self, call: CallRecord) -> None:
        """Queue ``call``'s span and return at once (for calls nobody waits for: failed or cut off)."""
        span = self._span_of(call)
        if not isinstance(span, Exception):
            self._writer.submit(span)

    async def flush(self) -> None:
        """Wait until every queued span has been written (or dropped)."""
        await self._writer.flush()

    def _dropped(self, span: Span, error: BaseException) -> None:
        if isinstance(error, ValueError):  # NotFoundError, InvalidRequestError...: refused alone
            logger.error(
                "the store refused the span of a call to rollout %s attempt %s: %s",
                span.rollout_id,
                span.attempt_id,
                error,
            )

    async def _store_spans(self, spans: list[Span]) -> None:
        """One group's store call, retried on transient errors; a refusal (ValueError) is raised at once
        for the writer to split the group."""
        delay = 0.05
        for attempt in range(self._max_retries + 1):
            try:
                await self.store.add_spans_in_order(spans)
                return
            except ValueError:
                raise
            except Exception as exc:
                if attempt == self._max_retries:
                    logger.error(
                        "dropping %d LLM-call spans after %d tries: %s", len(spans), attempt + 1, exc
                    )
                    raise
                logger.warning(
                    "writing %d LLM-call spans failed (%s); retrying in %.2fs", len(spans), exc, delay
                )
                await asyncio.sleep(delay)
                delay = min(delay * 2, 2.0)
