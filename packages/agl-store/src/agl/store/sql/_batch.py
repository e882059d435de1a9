"""Group commit's bookkeeping (SQLite, see :mod:`._db`): the writes of one loop waiting to be committed
together, whether a write should wait for others in this turn of its loop, and answering the writers."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from typing import Any

__all__ = ["STICKY_BATCHING", "Batch", "Op", "settle", "worth_batching"]

Op = tuple[Callable[..., Any], tuple[Any, ...], "asyncio.Future[Any]"]


class Batch:
    """Writes of one event loop waiting to be committed together."""

    __slots__ = ("loop", "ops")

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.ops: list[Op] = []


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


def settle(ops: list[Op], outcomes: list[tuple[bool, Any]] | None, error: BaseException | None) -> None:
    for i, (_, _, future) in enumerate(ops):
        if future.done():  # its caller was cancelled; the write stands
            continue
        if outcomes is None:
            future.set_exception(error if error is not None else RuntimeError("write not run"))
            continue
        ok, value = outcomes[i]
        if ok:
            future.set_result(value)
        else:
            future.set_exception(value)
