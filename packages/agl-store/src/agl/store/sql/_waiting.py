"""Long polls of the SQL store (``wait_for_rollouts``, ``dequeue_*`` with a timeout): woken by notification.

A waiting call sleeps until a write that may satisfy it wakes it: a write of this process (any store of it on
the same database, any thread), or one of another process, announced by :mod:`._coordination` (PostgreSQL
``LISTEN``/``NOTIFY``; SQLite: a watch on the file, kept only while other processes use it). Idle, it wakes
once per ``tick`` (half the watchdog's debounce period, a second at least) to let the watchdog run, which
nothing else may be calling, without reading anything else. Only while news of other processes cannot come
(PostgreSQL's listening connection is down) does it poll the database, backing off to a second.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Awaitable, Callable
from typing import Literal, TypeVar

from .._notify import Notifier, Waiter

__all__ = ["Inbox", "Signal", "Wake", "poll"]

T = TypeVar("T")

Wake = Literal["first", "news", "reread", "tick"]
"""Why a waiting call checks again: ``first`` try; ``news`` from this process's writes (its listeners were
told what finished); ``reread`` (something may have changed that only the database knows: read it);
``tick`` (nothing changed that a waiter would be told of: only the watchdog is due)."""

_MAX_POLL_INTERVAL = 1.0
_FIRST_POLL_INTERVAL = 0.005


class Signal:
    """Wakes waiters of any thread's loop when something they wait for may have changed.

    :attr:`rereads` counts the wake-ups that came without saying what changed (other processes' writes):
    a waiter that sees it move reads the database again.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._notifier = Notifier()
        self.rereads = 0

    def register(self) -> Waiter:
        with self._lock:
            return self._notifier.register()

    def unregister(self, waiter: Waiter) -> None:
        with self._lock:
            self._notifier.unregister(waiter)

    def notify(self, reread: bool = False) -> None:
        with self._lock:
            if reread:
                self.rereads += 1
            self._notifier.notify_all()


FinishListener = Callable[[set[str]], None]


class Inbox:
    """One store's waiters: those of the queue, those of finished rollouts, and listeners told which
    rollouts each committed write finished (``wait_for_rollouts``)."""

    def __init__(self) -> None:
        self.queued = Signal()
        self.finished = Signal()
        self.finish_listeners: list[FinishListener] = []

    def local(self, queued: bool, finished: set[str], committed: bool) -> None:
        """A write of this process: what it changed (told to listeners only once committed)."""
        if queued:
            self.queued.notify()
        if finished:
            if committed:
                for tell in list(self.finish_listeners):
                    tell(finished)
            self.finished.notify()

    def remote(self, queued: bool, finished: set[str] | None) -> None:
        """A committed write of another process: ``finished`` ``None`` when it did not say which."""
        if queued:
            self.queued.notify(reread=True)
        if finished is None:
            self.finished.notify(reread=True)
        elif finished:
            self.local(False, finished, committed=True)

    def reread(self) -> None:
        """Anything may have changed: every waiter reads the database again."""
        self.queued.notify(reread=True)
        self.finished.notify(reread=True)


async def poll(
    check: Callable[[Wake], Awaitable[T]],
    done: Callable[[T], bool],
    signal: Signal,
    timeout: float | None,
    *,
    covered: Callable[[], bool],
    tick: float,
) -> T:
    """``check(wake)`` until ``done`` or the deadline; woken by ``signal``. ``covered()``: whether every write
    that may satisfy the waiter wakes it (else poll the database, backing off to a second); ``tick``: seconds
    between checks when nothing happens (``wake`` ``tick``)."""
    deadline = None if timeout is None else time.monotonic() + max(timeout, 0.0)
    interval = _FIRST_POLL_INTERVAL
    wake: Wake = "first"
    seen = signal.rereads
    while True:
        waiter = signal.register()
        try:
            if signal.rereads != seen:  # read after registering: a later one wakes this waiter
                seen = signal.rereads
                wake = "reread" if wake != "first" else wake  # (a first try reads anyway)
            watched = covered()
            result = await check(wake)
            if done(result):
                return result
            remaining = None if deadline is None else deadline - time.monotonic()
            if remaining is not None and remaining <= 0:
                return result
            wait = tick if watched else interval
            if await waiter.wait(wait if remaining is None else min(wait, remaining)):
                wake = "news"
            elif watched:
                wake = "tick"
            else:
                wake, interval = "reread", min(interval * 2, _MAX_POLL_INTERVAL)
        finally:
            signal.unregister(waiter)
