"""A clock that moves only when told to: stores take it as ``clock=`` so timeouts are tested without sleeping."""

from __future__ import annotations

import time

__all__ = ["ManualClock"]


class ManualClock:
    """A clock that moves only when told to (``clock()`` reads it, ``clock.advance(s)`` moves it)."""

    def __init__(self, start: float | None = None) -> None:
        self.now = time.time() if start is None else start

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds
