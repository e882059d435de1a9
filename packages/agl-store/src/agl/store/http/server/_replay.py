"""The idempotency replay cache: the first answer to each ``Idempotency-Key``, bounded by entries, bytes and age.

:class:`ReplayCache` is the small interface the HTTP layer needs, so a cache shared through a database (one
that several server workers, or a restarted server, see) can take the place of :class:`MemoryReplayCache`:

* ``claim(key, fingerprint)`` returns the answer recorded under ``key``; or, when there is none, makes the
  caller the key's holder and returns ``None`` or a :class:`WriteLog` (while another request holds the
  key, it waits for that one to end). ``fingerprint`` names the request's body: a key that comes back
  with another body is not a retry but a client's mistake, and the claim raises :class:`KeyReused`
  (answered 422) instead of replaying another request's answer.
* ``release(key, answer)`` ends the hold: ``answer`` is remembered for replays, or with ``None`` (a server
  fault, a cut-off answer) the key is forgotten so that a retry runs for real.

A cache whose answers outlive the server process (kept in a SQL store's database) hands out a
:class:`WriteLog`: while the request runs it is :data:`current_writes`, and the store records the result
of each of the request's writes in the write's own transaction. A server killed after a write committed
but before its answer was recorded thus leaves the write's result under the key, and the retry replays
it (:mod:`agl.store.sql._writelog`) instead of writing again.

Only finished answers count towards the bounds and only they are evicted; a request still running holds
its key outside them, so an unfinished request can never stop eviction.
"""

from __future__ import annotations

import asyncio
import time
from collections import OrderedDict
from collections.abc import Hashable
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any, Generic, Protocol, TypeVar

from agl.types import AglError

__all__ = [
    "KeyHolds",
    "KeyReused",
    "MemoryReplayCache",
    "RecordedAnswer",
    "ReplayCache",
    "WriteLog",
    "body_differs",
    "current_writes",
]

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


class KeyReused(AglError):
    """An idempotency key came back with another request body than the one it was first used with."""


def body_differs(first: str | None, fingerprint: str) -> bool:
    """Whether a request whose body hashes to ``fingerprint`` is not the one a key was first used with
    (``first``); an unknown hash on either side (an older store's row, a request without a body) never is."""
    return bool(fingerprint and first and first != fingerprint)


@dataclass(eq=False, slots=True)
class WriteLog:
    """The results of the writes of one request answered under an idempotency key, kept with the key.

    ``entries`` are ``(write, result as JSON)`` in the order the writes committed: those an earlier try of
    the request committed (found by the claim: its answer was lost) and this try's own. ``used`` marks,
    per entry, whether this try has had it: an earlier try's result is handed to the same write once."""

    key: str
    """The key as the cache keeps it (the ``key`` of its row)."""
    fingerprint: str
    run_id: str
    claimed: float
    entries: list[tuple[str, Any]] = field(default_factory=list[tuple[str, Any]])
    used: list[bool] = field(default_factory=list[bool])

    def take(self, write: str) -> tuple[bool, Any]:
        """``(True, result)`` of the first entry of ``write`` this try has not had yet, else ``(False, None)``."""
        for index, (name, result) in enumerate(self.entries):
            if name == write and not self.used[index]:
                self.used[index] = True
                return True, result
        return False, None

    def pending(self, write: str) -> bool:
        """Whether an earlier try's result of ``write`` waits for this try."""
        return any(
            name == write and not used for (name, _), used in zip(self.entries, self.used, strict=True)
        )

    def add(self, write: str, result: Any) -> None:
        """This try's ``write`` committed with ``result`` (recorded in its transaction)."""
        self.entries.append((write, result))
        self.used.append(True)


current_writes: ContextVar[WriteLog | None] = ContextVar("agl_store_current_writes", default=None)
"""The :class:`WriteLog` of the request being answered (set by the server around the store call)."""


class ReplayCache(Protocol):
    """Where the first answer to each idempotency key is kept (see the module docstring)."""

    async def claim(self, key: bytes, fingerprint: str = "") -> RecordedAnswer | WriteLog | None: ...

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
        self._done: OrderedDict[bytes, tuple[float, RecordedAnswer, str]] = OrderedDict()
        self._running: KeyHolds[bytes] = KeyHolds()
        self._fingerprints: dict[bytes, str] = {}  # of the requests holding their keys
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

    async def claim(self, key: bytes, fingerprint: str = "") -> RecordedAnswer | None:
        while True:
            found = self._done.get(key)
            if found is not None:
                recorded, answer, first = found
                if time.monotonic() - recorded <= self.ttl_seconds:
                    if body_differs(first, fingerprint):
                        raise KeyReused
                    return answer
                self._drop(key)
            if self._running.try_hold(key):
                self._fingerprints[key] = fingerprint
                return None
            # held by a request still running: then look again (answered, or forgotten and maybe held anew)
            await self._running.wait(key)

    async def release(self, key: bytes, answer: RecordedAnswer | None) -> None:
        fingerprint = self._fingerprints.pop(key, "")
        if answer is not None and answer.size <= self.max_bytes and self.max_entries > 0:
            self._drop(key)
            self._done[key] = (time.monotonic(), answer, fingerprint)
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
            _, (_, answer, _) = done.popitem(last=False)
            self._bytes -= answer.size
        oldest = time.monotonic() - self.ttl_seconds
        while done:
            key, (recorded, answer, _) = next(iter(done.items()))
            if recorded >= oldest:
                break
            del done[key]
            self._bytes -= answer.size
