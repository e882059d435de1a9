"""Run async work in several threads at once, each with its own event loop (concurrency tests)."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:
    from agl.store import LightningStore

__all__ = ["run_in_threads"]

T = TypeVar("T")


def run_in_threads(
    count: int, work: Callable[[int], Awaitable[T]], store: LightningStore | None = None
) -> list[T]:
    """Run ``work(i)`` in ``count`` threads, each in its own new event loop; re-raise the first error.

    ``store``: the store the work uses; what it opened on a thread's loop (PostgreSQL connections) is released
    before that loop closes, as a program using a store from several loops must do.
    """

    async def run(i: int) -> T:
        try:
            return await work(i)
        finally:
            if store is not None:
                await store.release_loop_resources()

    results: list[Any] = [None] * count
    errors: list[BaseException] = []
    barrier = threading.Barrier(count)

    def target(i: int) -> None:
        try:
            barrier.wait(timeout=30)
            results[i] = asyncio.run(run(i))
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=target, args=(i,)) for i in range(count)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not any(t.is_alive() for t in threads), "a thread did not finish in time"
    if errors:
        raise errors[0]
    return results
