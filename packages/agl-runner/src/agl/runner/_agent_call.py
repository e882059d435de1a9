"""Running a sync agent in a thread that the runner can walk away from.

A thread cannot be killed. When the store ends an attempt whose sync agent is still running, the runner
stops waiting for it at once (its slot takes the next rollout) and asks the thread to stop by raising
:class:`AgentCancelled` inside it. CPython delivers that exception at the thread's next Python bytecode:
an agent looping in Python stops promptly; one blocked in a C call (``time.sleep``, a socket read, a
lock) keeps its thread until the call returns, then stops. The thread is a daemon, so it never holds the
process open.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import ctypes
import logging
import threading
from collections.abc import Callable
from typing import Any, TypeVar

from .errors import AgentCancelled, AttemptEnded

__all__ = ["AgentCancelled", "AttemptEnded", "run_sync_agent"]

logger = logging.getLogger(__name__)

R = TypeVar("R")


def _raise_in_thread(thread: threading.Thread) -> bool:
    """Ask ``thread`` to raise :class:`AgentCancelled` at its next bytecode; ``False`` if it was gone."""
    ident = thread.ident
    if ident is None or not thread.is_alive():
        return False
    set_async_exc = ctypes.pythonapi.PyThreadState_SetAsyncExc
    hit = set_async_exc(ctypes.c_ulong(ident), ctypes.py_object(AgentCancelled))
    if hit > 1:  # cannot happen for a valid ident; undo as the C API asks
        set_async_exc(ctypes.c_ulong(ident), None)
        return False
    return hit == 1


async def run_sync_agent(func: Callable[..., R], *args: Any) -> R:
    """``func(*args)`` in a new daemon thread (with the caller's context variables, e.g. the tracing context).

    Cancelling the awaiting task returns at once and asks the thread to stop (see the module docstring).
    """
    loop = asyncio.get_running_loop()
    future: asyncio.Future[R] = loop.create_future()
    context = contextvars.copy_context()

    def deliver(error: BaseException | None, value: Any) -> None:
        if future.done():
            return
        if error is None:
            future.set_result(value)
        else:
            future.set_exception(error)

    def target() -> None:
        try:
            try:
                value = context.run(func, *args)
            except BaseException as exc:
                with contextlib.suppress(RuntimeError):  # the loop is gone
                    loop.call_soon_threadsafe(deliver, exc, None)
                return
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(deliver, None, value)
        except AgentCancelled:  # arrived after the agent had returned: nothing left to stop
            pass

    thread = threading.Thread(
        target=target, name=f"agl-agent-{getattr(func, '__name__', 'call')}", daemon=True
    )
    thread.start()
    try:
        return await future
    except asyncio.CancelledError:
        if _raise_in_thread(thread):
            logger.warning(
                "abandoned the sync agent's thread %s; it stops at its next Python instruction "
                "(a call blocked in C keeps it until that call returns)",
                thread.name,
            )
        raise
