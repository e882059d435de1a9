"""The idempotency replay cache: the first answer to each ``Idempotency-Key``, bounded by entries, bytes and age.

:class:`ReplayCache` is the small interface the HTTP layer needs, so a cache shared through a database (one
that several server workers, or a restarted server, see) can take the place of :class:`MemoryReplayCache`:

* ``claim(key)`` returns the answer recorded under ``key``; or, when there is none, makes the caller the
  key's holder and returns ``None`` (while another request holds the key, it waits for that one to end).
* ``release(key, answer)`` ends the hold: ``answer`` is remembered for replays, or with ``None`` (a server
  fault, a cut-off answer) the key is forgotten so that a retry runs for real.

Only finished answers count towards the bounds and only they are evicted; a request still running holds
its key outside them, so an unfinished request can never stop eviction.
"""

from __future__ import annotations

import asyncio
import time
from collections import OrderedDict
from collections.abc import Hashable
from dataclasses import dataclass, field
from typing import Generic, Protocol, TypeVar

__all__ = ["KeyHolds", "MemoryReplayCache", "RecordedAnswer", "ReplayCache"]

K = TypeVar("K", bound=Hashable)


@dataclass(frozen=True, slots=True)
class RecordedAnswer:
    """A complete HTTP answer as sent: status, header pairs and the whole body."""

    status: int
    headers: list[tuple[bytes, bytes]]
    body: bytes
    size: int = field(init=False, compare=False)

    def __post_init__(self) -> None:
        size = len(self.body) + sum(len(k) + len(v) for k, v in self.headers)
        object.__setattr__(self, "size", size)


class ReplayCache(Protocol):
    """Where the first answer to each idempotency key is kept (see the module docstring)."""

    async def claim(self, key: bytes) -> RecordedAnswer | None: ...

    async def release(self, key: bytes, answer: RecordedAnswer | None) -> None: ...


class KeyHolds(Generic[K]):
    """Keys held by requests still running in this process; whoever wants a held key waits for its end."""

    __slots__ = ("_held",)

    def __init__(self) -> None:
        self._held: dict[K, asyncio.Event | None] = {}  # the event is made once someone waits

    def __len__(self) -> int:
        return len(self._held)

    def try_hold(self, key: K) -> bool:
        """Hold ``key`` if nobody does; whether the caller holds it now."""
        if key in self._held:
            return False
        self._held[key] = None
        return True

    async def wait(self, key: K) -> None:
        """Wait until the current holder of ``key`` (if any) ends its hold."""
        if key not in self._held:
            return
        event = self._held[key]
        if event is None:
            event = self._held[key] = asyncio.Event()
        await event.wait()

    async def hold(self, key: K) -> None:
        """Hold ``key``, first waiting for whoever holds it."""
        while not self.try_hold(key):
            await self.wait(key)

    def end(self, key: K) -> None:
        """End the hold of ``key``, waking whoever waits for it."""
        event = self._held.pop(key, None)
        if event is not None:
            event.set()


class MemoryReplayCache:
    """In-process :class:`ReplayCache`: finished answers oldest first, evicted past any bound.

    Args:
        max_entries: Most finished answers kept.
        max_bytes: Most bytes of finished answers kept (an answer larger than this is not kept at all).
        ttl_seconds: Longest an answer is kept after it was recorded.
    """

    def __init__(
        self, max_entries: int = 20_000, max_bytes: int = 64 * 1024 * 1024, ttl_seconds: float = 600.0
    ) -> None:
        if max_entries < 0 or max_bytes < 0 or ttl_seconds < 0:
            raise ValueError("max_entries, max_bytes and ttl_seconds must be >= 0")
        self.max_entries = max_entries
        self.max_bytes = max_bytes
        self.ttl_seconds = ttl_seconds
        self._done: OrderedDict[bytes, tuple[float, RecordedAnswer]] = OrderedDict()
        self._running: KeyHolds[bytes] = KeyHolds()
        self._bytes = 0

    @property
    def bytes(self) -> int:
        """Bytes of the finished answers kept now (never above ``max_bytes``)."""
        return self._bytes

    def __len__(self) -> int:
        return len(self._done)

    @property
    def running(self) -> int:
        """Keys held by requests still running."""
        return len(self._running)

    async def claim(self, key: bytes) -> RecordedAnswer | None:
        while True:
            found = self._done.get(key)
            if found is not None:
                if time.monotonic() - found[0] <= self.ttl_seconds:
                    return found[1]
                self._drop(key)
            if self._running.try_hold(key):
                return None
            # held by a request still running: then look again (answered, or forgotten and maybe held anew)
            await self._running.wait(key)

    async def release(self, key: bytes, answer: RecordedAnswer | None) -> None:
        if answer is not None and answer.size <= self.max_bytes and self.max_entries > 0:
            self._drop(key)
            self._done[key] = (time.monotonic(), answer)
            self._bytes += answer.size
        self._evict()
        self._running.end(key)

    def _drop(self, key: bytes) -> None:
        found = self._done.pop(key, None)
        if found is not None:
            self._bytes -= found[1].size

    def _evict(self) -> None:
        done = self._done
        while done and (len(done) > self.max_entries or self._bytes > self.max_bytes):
            _, (_, answer) = done.popitem(last=False)
            self._bytes -= answer.size
        oldest = time.monotonic() - self.ttl_seconds
        while done:
            key, (recorded, answer) = next(iter(done.items()))
            if recorded >= oldest:
                break
            del done[key]
            self._bytes -= answer.size
