"""The event loop agl's servers and runner processes run on: uvloop where it is installed (less CPU per
request than asyncio's own), else asyncio's."""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any, TypeVar

__all__ = ["new_event_loop", "run_fast"]

T = TypeVar("T")


def new_event_loop() -> asyncio.AbstractEventLoop:
    """A new uvloop loop, or asyncio's where uvloop is not installed."""
    try:
        import uvloop
    except ImportError:
        return asyncio.new_event_loop()
    return uvloop.new_event_loop()


def run_fast(main: Coroutine[Any, Any, T]) -> T:
    """``asyncio.run(main)`` on uvloop where it is installed."""
    try:
        import uvloop
    except ImportError:
        return asyncio.run(main)
    return uvloop.run(main)
