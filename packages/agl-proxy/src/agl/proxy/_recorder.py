"""Sequence ids and span writes, batched off the request path ("group commit").

Concurrent requests share store calls: while one ``get_many_span_sequence_ids`` or
``add_many_spans`` call is in flight, new work queues up and goes out together in the next one.
Under light load every call is written at once; under heavy load batches grow by themselves.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:
    from agl.store import LightningStore

    from ._record import CallRecord

__all__ = ["SpanRecorder", "StoreBridge"]

logger = logging.getLogger(__name__)
T = TypeVar("T")


class StoreBridge:
    """Calls the store from the proxy's event loop.

    A store that is not thread-safe is called on its home loop (the loop that started the proxy).
    """

    def __init__(self, store: LightningStore, home_loop: asyncio.AbstractEventLoop | None) -> None:
        self.store = store
        direct = bool(store.capabilities.get("thread_safe")) or home_loop is None
        self._home_loop = None if direct else home_loop

    async def call(self, fn: Callable[..., Awaitable[T]], *args: Any) -> T:
        if self._home_loop is None or self._home_loop is asyncio.get_running_loop():
            return await fn(*args)
        future = asyncio.run_coroutine_threadsafe(_as_coroutine(fn, *args), self._home_loop)
        return await asyncio.wrap_future(future)


async def _as_coroutine(fn: Callable[..., Awaitable[T]], *args: Any) -> T:
    return await fn(*args)


class SpanRecorder:
    """Allocates sequence ids and writes call spans to the store in batches. Lives on the proxy's loop."""

    def __init__(self, bridge: StoreBridge, *, max_batch: int = 512, max_retries: int = 5) -> None:
        self._bridge = bridge
        self._max_batch = max_batch
        self._max_retries = max_retries
        self._alloc_queue: list[tuple[str, str, asyncio.Future[int]]] = []
        self._alloc_task: asyncio.Task[None] | None = None
        self._write_queue: list[tuple[CallRecord, asyncio.Future[int]]] = []
        self._write_task: asyncio.Task[None] | None = None
        self._idle = asyncio.Event()
        self._idle.set()
        self.spans_written = 0
        self.spans_dropped = 0

    # -- sequence ids ---------------------------------------------------------------------------

    def allocate(self, rollout_id: str, attempt_id: str) -> asyncio.Future[int]:
        """A future of the next sequence id of ``rollout_id``; ids come in call order."""
        future: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        self._alloc_queue.append((rollout_id, attempt_id, future))
        if self._alloc_task is None:
            self._alloc_task = asyncio.get_running_loop().create_task(self._drain_allocations())
        return future

    async def _drain_allocations(self) -> None:
        try:
            while self._alloc_queue:
                batch, self._alloc_queue = self._alloc_queue, []
                try:
                    if len(batch) == 1:
                        rid, aid, _ = batch[0]
                        ids = [
                            await self._bridge.call(self._bridge.store.get_next_span_sequence_id, rid, aid)
                        ]
                    else:
                        pairs = [(rid, aid) for rid, aid, _ in batch]
                        ids = await self._bridge.call(self._bridge.store.get_many_span_sequence_ids, pairs)
                except Exception as exc:
                    logger.warning("could not allocate span sequence ids: %s", exc)
                    for _, _, future in batch:
                        if not future.done():
                            future.set_exception(exc)
                    continue
                for (_, _, future), seq in zip(batch, ids, strict=False):
                    if not future.done():
                        future.set_result(int(seq))
        finally:
            self._alloc_task = None

    # -- span writes ----------------------------------------------------------------------------

    def record(self, call: CallRecord, sequence: asyncio.Future[int]) -> None:
        """Queue ``call`` to be written once its sequence id is known. Never blocks."""
        self._write_queue.append((call, sequence))
        self._idle.clear()
        if self._write_task is None:
            self._write_task = asyncio.get_running_loop().create_task(self._drain_writes())

    async def _drain_writes(self) -> None:
        try:
            while self._write_queue:
                batch = self._write_queue[: self._max_batch]
                del self._write_queue[: self._max_batch]
                spans = []
                for call, sequence in batch:
                    try:
                        seq = await sequence
                    except Exception as exc:
                        self.spans_dropped += 1
                        logger.error(
                            "dropping the span of a call to rollout %s attempt %s: no sequence id (%s)",
                            call.rollout_id,
                            call.attempt_id,
                            exc,
                        )
                        continue
                    try:
                        spans.append(call.to_span(seq))
                    except Exception:
                        self.spans_dropped += 1
                        logger.exception("could not build the span of a call to rollout %s", call.rollout_id)
                if spans:
                    await self._write(spans)
        finally:
            self._write_task = None
            if not self._write_queue:
                self._idle.set()

    async def _write(self, spans: list[Any]) -> None:
        delay = 0.05
        for attempt in range(self._max_retries + 1):
            try:
                await self._bridge.call(self._bridge.store.add_many_spans, spans)
                self.spans_written += len(spans)
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
        while not self._idle.is_set() or self._write_task is not None:
            await self._idle.wait()
            if self._write_task is not None:
                await asyncio.shield(self._write_task)
