"""Wake coroutines waiting in any thread's event loop when the store changes.

A waiter registers *while the caller holds the store's lock* (right after seeing that there is nothing
to return yet), and writers call :meth:`Notifier.notify_all` under the same lock after a change, so no
wake-up is lost. Waking goes through ``loop.call_soon_threadsafe``, so it works across threads and loops.
"""

from __future__ import annotations

import asyncio
import contextlib

from agl.types.timeouts import wait_within

__all__ = ["KeyedNotifier", "Notifier", "Waiter"]


class Waiter:
    """One coroutine's ticket: :meth:`wait` returns when notified or after ``timeout`` seconds."""

    __slots__ = ("_future", "_loop")

    def __init__(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._future: asyncio.Future[None] = self._loop.create_future()

    def wake(self) -> None:
        with contextlib.suppress(RuntimeError):  # the waiter's loop is closed: nobody is listening
            self._loop.call_soon_threadsafe(self._set)

    def _set(self) -> None:
        if not self._future.done():
            self._future.set_result(None)

    async def wait(self, timeout: float | None) -> bool:
        """True if woken, False on timeout."""
        try:
            await wait_within(self._future, timeout)
        except asyncio.TimeoutError:
            return False
        return True


class Notifier:
    """A set of waiters woken together. Not locked itself: callers hold the store's lock."""

    __slots__ = ("_waiters",)

    def __init__(self) -> None:
        self._waiters: set[Waiter] = set()

    def register(self) -> Waiter:
        waiter = Waiter()
        self._waiters.add(waiter)
        return waiter

    def unregister(self, waiter: Waiter) -> None:
        self._waiters.discard(waiter)

    def __bool__(self) -> bool:
        return bool(self._waiters)

    def notify_all(self) -> None:
        if not self._waiters:
            return
        waiters, self._waiters = self._waiters, set()
        for waiter in waiters:
            waiter.wake()


class KeyedNotifier:
    """Waiters by key (e.g. the rollout each waits to finish), woken by key or all together. Not locked
    itself: callers hold the store's lock."""

    __slots__ = ("_by_key",)

    def __init__(self) -> None:
        self._by_key: dict[str, Notifier] = {}

    def __len__(self) -> int:
        """Keys with a waiter."""
        return len(self._by_key)

    def register(self, key: str) -> Waiter:
        notifier = self._by_key.get(key)
        if notifier is None:
            notifier = self._by_key[key] = Notifier()
        return notifier.register()

    def unregister(self, key: str, waiter: Waiter) -> None:
        notifier = self._by_key.get(key)
        if notifier is not None:
            notifier.unregister(waiter)
            if not notifier:
                del self._by_key[key]

    def notify(self, key: str) -> None:
        notifier = self._by_key.pop(key, None)
        if notifier is not None:
            notifier.notify_all()

    def notify_all(self) -> None:
        notifiers, self._by_key = self._by_key, {}
        for notifier in notifiers.values():
            notifier.notify_all()
