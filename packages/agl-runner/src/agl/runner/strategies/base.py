"""What an execution strategy is, and the helpers strategies share."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Coroutine
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from agl.types import AglError

from ..events import ExecutionEvent

if TYPE_CHECKING:
    from agl.store import LightningStore

__all__ = ["AlgorithmBundle", "ExecutionStrategy", "RunnerBundle", "StrategyError"]

logger = logging.getLogger(__name__)

R = TypeVar("R")


class AlgorithmBundle(Protocol):
    """Runs the algorithm against ``store`` until it is done (the strategy then stops the runners)."""

    def __call__(self, store: LightningStore, event: ExecutionEvent) -> Coroutine[Any, Any, None]: ...


class RunnerBundle(Protocol):
    """Runs one runner against ``store`` until ``event`` is set."""

    def __call__(
        self, store: LightningStore, worker_id: Any, event: ExecutionEvent
    ) -> Coroutine[Any, Any, None]: ...


class StrategyError(AglError, RuntimeError):
    """A runner or the algorithm failed; the message says which and why."""


class ExecutionStrategy(ABC):
    """Decides where the algorithm and the runners run (threads, processes, machines) and stops them together."""

    n_runners: int = 1
    """How many runners it starts (threads or processes)."""

    @abstractmethod
    def execute(self, algorithm: AlgorithmBundle, runner: RunnerBundle, store: LightningStore) -> None:
        """Run both sides until the algorithm finishes; any failure stops the other side and is raised."""


async def wait_event(event: ExecutionEvent, poll: float = 0.05) -> None:
    """Return once ``event`` is set (threading and multiprocessing events alike)."""
    while not event.is_set():  # noqa: ASYNC110  # threading/multiprocessing events cannot be awaited
        await asyncio.sleep(poll)


async def run_until_stopped(
    make: Callable[[], Coroutine[Any, Any, R]],
    event: ExecutionEvent,
    *,
    grace: float,
) -> R | None:
    """Run ``make()``; if ``event`` is set first, give it ``grace`` seconds to return, then cancel it.

    Returns its result, or ``None`` when it was cancelled. Its exceptions propagate.
    """
    task = asyncio.create_task(make())
    watcher = asyncio.create_task(wait_event(event))
    try:
        await asyncio.wait({task, watcher}, return_when=asyncio.FIRST_COMPLETED)
        if not task.done():
            await asyncio.wait({task}, timeout=grace)
        if not task.done():
            logger.warning("still running %.1fs after the stop request; cancelling it", grace)
            task.cancel()
            await asyncio.wait({task}, timeout=grace)
            if not task.done():
                logger.error("did not finish after cancellation; abandoning it")
                return None
        if task.cancelled():
            return None
        return task.result()
    finally:
        watcher.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await watcher


async def call_sync_in_daemon_thread(func: Callable[..., R], *args: Any, **kwargs: Any) -> R:
    """Run a blocking ``func`` in a daemon thread and await its result (so a stuck call cannot block exit)."""
    loop = asyncio.get_running_loop()
    future: asyncio.Future[R] = loop.create_future()

    def deliver(ok: bool, value: Any) -> None:
        if future.done():
            return
        if ok:
            future.set_result(value)
        else:
            future.set_exception(value)

    def target() -> None:
        try:
            result = func(*args, **kwargs)
        except BaseException as exc:
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(deliver, False, exc)
            return
        with contextlib.suppress(RuntimeError):
            loop.call_soon_threadsafe(deliver, True, result)

    threading.Thread(target=target, name=f"agl-sync-{getattr(func, '__name__', 'call')}", daemon=True).start()
    return await future


def join_threads(threads: list[threading.Thread], timeout: float) -> list[threading.Thread]:
    """Join all threads within ``timeout`` seconds in total; return those still alive."""
    deadline = time.monotonic() + timeout
    for thread in threads:
        thread.join(max(0.0, deadline - time.monotonic()))
    return [t for t in threads if t.is_alive()]
