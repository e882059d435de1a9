"""Run a coroutine at once, in the caller, and hand it to a task only if it has to wait.

Most requests to the in-memory store never wait: running their coroutine directly saves creating and
scheduling a task for each. Python 3.12's eager tasks do this; this module does it on 3.11 too.
"""

from __future__ import annotations

import asyncio
import sys
import types
from collections.abc import Coroutine, Generator
from typing import Any, TypeVar, cast

__all__ = ["eager_safe", "run_eagerly", "start"]

T = TypeVar("T")


def eager_safe(store: object) -> bool:
    """Whether the first step of a call to ``store`` may run outside a task (Python < 3.12).

    Code that binds itself to the current task before its first wait (``asyncio.timeout``, a database
    driver's connect; on Python 3.12 ``asyncio.wait_for`` too) needs a task: only the in-memory store is
    known to have none on 3.11. On 3.12 and later, :func:`start` uses eager tasks, which have one."""
    if sys.version_info >= (3, 12):
        return True
    from ...memory import InMemoryLightningStore

    return type(store).__module__.startswith("agl.store.memory") and isinstance(store, InMemoryLightningStore)


def start(
    coro: Coroutine[Any, Any, T], loop: asyncio.AbstractEventLoop, eager: bool
) -> tuple[bool, Any, asyncio.Task[T] | None]:
    """Start ``coro``: ``(True, result, None)`` when it finished without waiting, else ``(False, None, task)``.

    With ``eager`` (see :func:`eager_safe`) its first step runs now, in the caller (Python 3.12: in an eager
    task); otherwise it is a task that starts on the loop's next turn."""
    if sys.version_info >= (3, 12):
        task = cast(Any, asyncio.Task)(coro, loop=loop, eager_start=eager)
        if task.done():
            return True, task.result(), None
        return False, None, task
    if eager:
        return run_eagerly(coro, loop)
    return False, None, loop.create_task(coro)


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
