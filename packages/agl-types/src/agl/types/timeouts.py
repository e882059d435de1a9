"""``wait_within``: ``asyncio.wait_for`` that never swallows a cancellation of its caller.

Before Python 3.12, ``asyncio.wait_for`` returns the awaited result when its caller is cancelled just as that
result arrives (python/cpython#86296): a loop that is stopped by cancelling its task then runs on, and whoever
awaits the task waits forever. :func:`wait_within` gives the same deadline on every supported version and lets
the cancellation through.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import TypeVar

__all__ = ["wait_within"]

T = TypeVar("T")


async def wait_within(awaitable: Awaitable[T], seconds: float | None) -> T:
    """Await ``awaitable`` for at most ``seconds`` (``None``: no limit); on expiry it is cancelled and
    :class:`asyncio.TimeoutError` raised. A cancellation of the caller cancels it too and always propagates."""
    task = asyncio.ensure_future(awaitable)
    try:
        await asyncio.wait({task}, timeout=seconds)
    except asyncio.CancelledError:
        task.cancel()
        raise
    if not task.done():
        task.cancel()
        await asyncio.wait({task})  # let it finish cancelling (a cancellation of ours still propagates)
        raise asyncio.TimeoutError
    return task.result()
