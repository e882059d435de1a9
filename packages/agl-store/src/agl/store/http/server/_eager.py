"""Run a coroutine at once, in the caller, and hand it to a task only if it has to wait.

Most requests to the in-memory store never wait: running their coroutine directly saves creating and
scheduling a task for each. Python 3.12's eager tasks do this; this module does it on 3.11 too.
"""

from __future__ import annotations

import asyncio
import types
from collections.abc import Coroutine, Generator
from typing import Any, TypeVar

__all__ = ["run_eagerly"]

T = TypeVar("T")


def run_eagerly(
    coro: Coroutine[Any, Any, T], loop: asyncio.AbstractEventLoop
) -> tuple[bool, Any, asyncio.Task[T] | None]:
    """Run ``coro`` up to its first wait: ``(True, result, None)`` when it finished without one, else
    ``(False, None, task)`` with a task that runs the rest of it. An exception it raises before waiting
    propagates."""
    try:
        yielded = coro.send(None)
    except StopIteration as stop:
        return True, stop.value, None
    return False, None, loop.create_task(_rest(coro, yielded))


async def _rest(coro: Coroutine[Any, Any, T], yielded: Any) -> T:
    return await _resume(coro, yielded)


@types.coroutine
def _resume(coro: Coroutine[Any, Any, T], yielded: Any) -> Generator[Any, Any, T]:
    """Go on with ``coro`` (suspended on ``yielded``) in the task that awaits this: each future it waits on
    is handed to the task as is, and what the task sends or throws back goes on to ``coro``."""
    while True:
        try:
            sent = yield yielded
        except BaseException as exc:  # cancellation (or anything thrown into the task)
            try:
                yielded = coro.throw(exc)
            except StopIteration as stop:
                return stop.value
        else:
            try:
                yielded = coro.send(sent)
            except StopIteration as stop:
                return stop.value
