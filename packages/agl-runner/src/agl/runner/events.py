"""``ExecutionEvent``: the cooperative stop signal shared by an algorithm and its runners.

Its own module so that runners, strategies and the trainer can all name it without importing each other.
"""

from __future__ import annotations

from typing import Protocol

__all__ = ["ExecutionEvent"]


class ExecutionEvent(Protocol):
    """The cooperative stop signal shared by an algorithm and its runners (threading or multiprocessing)."""

    def set(self) -> None:
        """Ask everyone to stop."""
        ...

    def is_set(self) -> bool:
        """Whether a stop was asked for."""
        ...
