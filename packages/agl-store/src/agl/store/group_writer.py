"""One primitive for writing items in groups ("group commit"), shared by every batched writer of agl.

Like OpenTelemetry's shared batch processor, :class:`GroupWriter` holds the mechanism once; its users give
it a *sink* (an async function that writes a list of items) and keep only their own needs around it.

- A write arriving while nothing is being written runs at once, in the caller's coroutine: a lone writer
  pays one sink call and no task hop. A writer that expects company (``write(item, gather=True)``) queues
  its item instead: the drain starts at the loop's next turn, and the writes of this turn join its group
  (for a sink that writes without suspending, as SQLite's does, nothing else would ever queue behind it).
- Items arriving while a write is in flight queue up; one drain task writes them, in groups of at most
  ``max_group``, until the queue is empty.
- A group the sink refuses (it raises an error ``refused`` accepts, by default a :class:`ValueError`) is
  split in halves until the bad item stands alone: only that item fails, the others are written. A sink
  that isolates bad items itself (say, with savepoints in one transaction) returns one outcome per item
  instead (``None`` for written, the exception for failed) and is never bisected.
- Any other error fails the whole group (the sink retries first if it wants to).
- :meth:`GroupWriter.flush` waits until every queued item is written or has failed.
- A waiter that is cancelled never loses its write: a queued item stays queued, and an item whose own
  inline write was interrupted is queued again for the drain.

Not thread-safe: a writer lives on one event loop (callers on other threads hand items over to it).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from typing import Generic, TypeVar

__all__ = ["GroupWriter", "Outcome", "Sink"]

T = TypeVar("T")

Outcome = BaseException | None
"""What became of an item: ``None`` when written, else the error it failed with."""

Sink = Callable[[list[T]], Awaitable[Sequence[Outcome] | None]]
"""Writes a group; returns ``None`` (all written) or one :data:`Outcome` per item, or raises."""


def _is_value_error(error: BaseException) -> bool:
    return isinstance(error, ValueError)


class GroupWriter(Generic[T]):
    """Writes items through ``sink`` at once when idle and in groups when busy (see the module docs).

    ``on_failed(item, error)`` is called for every item that fails (refused, or its group failed); the
    counters ``written``, ``failed``, ``groups`` and ``grouped`` (items written in groups of two or more)
    are kept for statistics.
    """

    def __init__(
        self,
        sink: Sink[T],
        *,
        max_group: int = 512,
        refused: Callable[[BaseException], bool] = _is_value_error,
        on_failed: Callable[[T, BaseException], None] | None = None,
    ) -> None:
        if max_group < 1:
            raise ValueError("max_group must be at least 1")
        self._sink = sink
        self._max_group = max_group
        self._refused = refused
        self._on_failed = on_failed
        self._queue: list[tuple[T, asyncio.Future[Outcome] | None]] = []
        self._busy = False  # a write (inline or the drain task) is in flight
        self._task: asyncio.Task[None] | None = None
        self._idle = asyncio.Event()
        self._idle.set()
        self.written = 0
        self.failed = 0
        self.groups = 0
        self.grouped = 0

    @property
    def busy(self) -> bool:
        """Whether a write is in flight or items are queued."""
        return self._busy

    @property
    def queued(self) -> int:
        """Items waiting for the drain."""
        return len(self._queue)

    async def write(self, item: T, *, gather: bool = False) -> Outcome:
        """Write ``item``; return ``None`` once written, or the error it failed with. Never raises but
        :class:`asyncio.CancelledError`, and the write goes on when the caller is cancelled. ``gather``:
        queue it for the drain even when idle, so that the writes of this loop turn share its group."""
        loop = asyncio.get_running_loop()
        if self._busy or gather:
            done: asyncio.Future[Outcome] = loop.create_future()
            self._enqueue(item, done, loop)
            return await done  # cancelled or not, the drain writes it (and skips answering a cancelled one)
        return (await self.write_all([item]))[0]

    async def write_all(self, items: Sequence[T]) -> list[Outcome]:
        """Write ``items`` (in groups of at most ``max_group``), as :meth:`write` writes one; one outcome
        per item, in order."""
        loop = asyncio.get_running_loop()
        if self._busy:
            futures: list[asyncio.Future[Outcome]] = [loop.create_future() for _ in items]
            self._queue.extend(zip(items, futures, strict=True))
            return list(
                await asyncio.shield(asyncio.gather(*futures))
            )  # cancelled or not, the drain writes them
        self._start()
        outcomes: list[Outcome] = []
        try:
            for start in range(0, len(items), self._max_group):
                await self._write(list(items[start : start + self._max_group]), outcomes)
        except asyncio.CancelledError:  # interrupted mid-write: the drain finishes what is not settled
            self._queue.extend((item, None) for item in items[len(outcomes) :])
            raise
        finally:
            self._after_write(loop)
        return outcomes

    def submit(self, item: T) -> None:
        """Queue ``item`` and return at once (nobody waits for it; see ``on_failed``). Needs a running loop."""
        self._enqueue(item, None, asyncio.get_running_loop())

    async def flush(self) -> None:
        """Wait until every item queued so far (and any queued meanwhile) is written or has failed."""
        while not self._idle.is_set():
            await self._idle.wait()

    def _enqueue(
        self, item: T, done: asyncio.Future[Outcome] | None, loop: asyncio.AbstractEventLoop
    ) -> None:
        """Queue ``item`` for the drain, starting it (at the loop's next turn) when nothing is in flight."""
        self._queue.append((item, done))
        if not self._busy:
            self._start()
            self._after_write(loop)

    def _start(self) -> None:
        self._busy = True
        self._idle.clear()

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
                group = self._queue[: self._max_group]
                del self._queue[: self._max_group]
                outcomes: list[Outcome] = []
                try:
                    await self._write([item for item, _ in group], outcomes)
                finally:
                    for i, (_, done) in enumerate(group):
                        if done is not None and not done.done():
                            # past the settled ones: the drain itself was cancelled (its loop is closing)
                            done.set_result(outcomes[i] if i < len(outcomes) else asyncio.CancelledError())
        finally:
            self._task = None
            self._busy = False
            self._idle.set()
            if self._queue:  # only when the drain itself was cancelled: hand the rest on
                self._start()
                self._after_write(asyncio.get_running_loop())

    async def _write(self, items: list[T], settled: list[Outcome]) -> None:
        """Write ``items`` through the sink, bisecting a refused group; appends one outcome per item to
        ``settled`` as each part is done (so a cancelled write knows which items are settled)."""
        try:
            result = await self._sink(items)
        except asyncio.CancelledError:
            raise
        except Exception as error:
            if len(items) > 1 and self._refused(error):
                middle = len(items) // 2
                await self._write(items[:middle], settled)
                await self._write(items[middle:], settled)
                return
            outcomes: list[Outcome] = [error] * len(items)
        else:
            if result is None:  # the common case, kept cheap: all written
                self.groups += 1
                self.written += len(items)
                if len(items) > 1:
                    self.grouped += len(items)
                settled.extend([None] * len(items))
                return
            outcomes = list(result)
            if len(outcomes) != len(items):
                raise RuntimeError(f"the sink returned {len(outcomes)} outcomes for {len(items)} items")
        self._count(items, outcomes)
        settled.extend(outcomes)

    def _count(self, items: list[T], outcomes: list[Outcome]) -> None:
        self.groups += 1
        written = sum(outcome is None for outcome in outcomes)
        self.written += written
        if len(items) > 1:
            self.grouped += written
        for item, outcome in zip(items, outcomes, strict=True):
            if outcome is not None:
                self.failed += 1
                if self._on_failed is not None:
                    self._on_failed(item, outcome)
