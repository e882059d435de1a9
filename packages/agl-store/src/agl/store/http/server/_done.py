"""What the store server's ``start()``/``stop()``/``run_forever()`` return, so that both the plain calls and the
reference's coroutine spellings work: ``server.start()``, ``await server.start()``, ``asyncio.run(server.run_forever())``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine, Generator
from typing import Any

__all__ = ["COMPLETED", "ServerCall", "loop_running_here"]


class ServerCall(Coroutine[Any, None, None]):
    """A coroutine object (``await``, ``asyncio.run()`` and ``asyncio.create_task()`` take it) for a server call:
    finished when the call returned (the call did the work; awaiting returns ``None`` at once), or the work still
    to do (``inner``).

    Finished, it is no native coroutine: left unawaited (the plain spelling) it warns of nothing; an unawaited
    ``inner`` warns as any coroutine never awaited does."""

    __slots__ = ("_inner",)

    def __init__(self, inner: Coroutine[Any, None, None] | None = None) -> None:
        self._inner = inner

    def send(self, value: None, /) -> Any:
        if self._inner is None:
            raise StopIteration
        return self._inner.send(value)

    def throw(self, typ: Any, val: Any = None, tb: Any = None, /) -> Any:
        if self._inner is not None:
            return self._inner.throw(typ, val, tb)
        raise typ if val is None else val

    def close(self) -> None:
        if self._inner is not None:
            self._inner.close()

    def __await__(self) -> Generator[Any, None, None]:
        if self._inner is not None:
            return self._inner.__await__()
        return _nothing()

    def __repr__(self) -> str:
        return "<ServerCall: done>" if self._inner is None else f"<ServerCall: {self._inner!r}>"


def _nothing() -> Generator[Any, None, None]:
    return
    yield  # a generator that yields nothing: the await completes at once


COMPLETED = ServerCall()
"""The finished call (stateless: shared)."""


def loop_running_here() -> bool:
    """Whether the calling thread is running an event loop (a plain blocking call would stall or refuse)."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True
