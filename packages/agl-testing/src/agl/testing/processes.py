"""Processes as tests see them on Linux: alive or not (a zombie is not), their children, and a condition
polled with a deadline (never a fixed sleep)."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from pathlib import Path

__all__ = ["alive", "children", "wait_until"]


def _stat_fields(pid: int) -> list[str]:
    """``/proc/<pid>/stat`` after the command name (which may hold spaces): state, ppid, ..."""
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()


def alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie, exited but not yet reaped, does not)."""
    try:
        return _stat_fields(pid)[0] != "Z"
    except (OSError, IndexError):
        return False


def children(pid: int) -> set[int]:
    """The processes whose parent is ``pid``."""
    found: set[int] = set()
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError, IndexError, ValueError):
            if int(_stat_fields(int(stat.parent.name))[1]) == pid:
                found.add(int(stat.parent.name))
    return found


def wait_until(condition: Callable[[], bool], seconds: float, interval: float = 0.05) -> bool:
    """Poll ``condition`` until it holds or ``seconds`` pass; whether it held."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(interval)
    return condition()
