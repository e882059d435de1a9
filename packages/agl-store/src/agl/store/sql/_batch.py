"""Group commit's pieces (SQLite, see :mod:`._db`; the grouping itself is :class:`agl.store.GroupWriter`):
the write a writer hands over, and whether a write should wait for others in this turn of its loop."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from typing import Any

__all__ = ["STICKY_BATCHING", "Write", "never", "worth_batching"]


class Write:
    """One store write waiting in a group: ``fn(conn, *args)``, and its ``result`` once run."""

    __slots__ = ("args", "fn", "result")

    def __init__(self, fn: Callable[..., Any], args: tuple[Any, ...]) -> None:
        self.fn = fn
        self.args = args
        self.result: Any = None


def never(_error: BaseException) -> bool:
    """A SQL group is never bisected: its savepoints isolate a failing write, and any other error (BEGIN or
    COMMIT failed) fails the whole group."""
    return False


class _Turn:
    """The task that last wrote right away in this turn of a loop (see :func:`worth_batching`)."""

    __slots__ = ("loop", "task")

    def __init__(self, loop: asyncio.AbstractEventLoop, task: asyncio.Task[Any] | None) -> None:
        self.loop = loop
        self.task = task


STICKY_BATCHING = 16
"""Groups of one write after which a loop goes back to writing at once."""


def worth_batching(local: threading.local, loop: asyncio.AbstractEventLoop) -> bool:
    """Whether other writers may come in this turn of the loop, so that a write should join a batch.

    Read from public state only, the same on every loop (asyncio's, uvloop): writes start batching when a
    second task writes in the same turn, and keep batching until :data:`STICKY_BATCHING` groups in a row
    held one write each (a lone task's writes one after another run right away)."""
    if getattr(local, "batching", 0) > 0:
        return True
    task = asyncio.current_task(loop)
    turn: _Turn | None = getattr(local, "turn", None)
    if turn is not None and turn.loop is loop:
        if turn.task is task:
            return False
        local.batching = STICKY_BATCHING
        return True
    turn = local.turn = _Turn(loop, task)

    def end_of_turn() -> None:
        if getattr(local, "turn", None) is turn:
            local.turn = None

    loop.call_soon(end_of_turn)
    return False
