"""Stop signals and error reports between processes that survive a SIGKILL on either side.

A ``multiprocessing.Event`` guards its flag with a lock shared by every process: a process killed while
holding it would freeze the others. A pipe cannot be left locked: the stop signal is the parent closing
the write end of one pipe whose read ends the runners poll, and the end of file also tells a runner that
its parent died.
"""

from __future__ import annotations

import contextlib
import multiprocessing.connection
import os
import signal
import time
from typing import Any

__all__ = ["ChildStopEvent", "ParentStopEvent", "child_stop_event", "stop_pipe"]


class ParentStopEvent:
    """The algorithm side of the stop signal: :meth:`set` closes the pipe for every runner at once.

    Only in the process that made it: a forked runner holds a copy of this object whose descriptor it has
    closed (and whose number its event loop may have reused), so there :meth:`set` only marks the event.
    """

    def __init__(self, writer: multiprocessing.connection.Connection) -> None:
        self._writer: multiprocessing.connection.Connection | None = writer
        self._owner = os.getpid()
        self._set = False

    def set(self) -> None:
        self._set = True
        if os.getpid() != self._owner:
            return
        writer, self._writer = self._writer, None
        if writer is not None:
            with contextlib.suppress(OSError):
                writer.close()

    def is_set(self) -> bool:
        return self._set


class ChildStopEvent:
    """The runner side: set when the parent closed the pipe (stop requested, or the parent died).

    The pipe is polled at most every ``POLL_SECONDS``: the runner asks before each claim, and a poll is a
    selector and a system call, while a stop may well take that long to be seen.
    """

    POLL_SECONDS = 0.01

    def __init__(self, reader: multiprocessing.connection.Connection) -> None:
        self._reader = reader
        self._set = False
        self._next_poll = 0.0

    def set(self) -> None:
        self._set = True

    def is_set(self) -> bool:
        if not self._set:
            now = time.monotonic()
            if now < self._next_poll:
                return False
            self._next_poll = now + self.POLL_SECONDS
            try:
                self._set = self._reader.poll()
            except (OSError, EOFError, ValueError):
                self._set = True
        return self._set

    def __getstate__(self) -> dict[str, Any]:
        return {"_reader": self._reader, "_set": self._set}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._next_poll = 0.0


def child_stop_event(
    stop_reader: multiprocessing.connection.Connection, inherited_stop_writer: int
) -> ChildStopEvent:
    """What a child process (a runner, the algorithm's) does first: SIGTERM (a group kill, a container
    stop) stops it as Ctrl+C does, not through the handler a forked child inherits from its parent, which is
    about the parent's resources; a forked child's copy of the parent's end of the stop pipe
    (``inherited_stop_writer``, -1 for none) is closed, since only the parent may close the pipe. Returns the
    child's side of the stop signal."""
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    if inherited_stop_writer >= 0:
        with contextlib.suppress(OSError):
            os.close(inherited_stop_writer)
    return ChildStopEvent(stop_reader)


def stop_pipe(
    ctx: Any,
) -> tuple[multiprocessing.connection.Connection, multiprocessing.connection.Connection]:
    """``(reader, writer)`` of a new one-way pipe from ``ctx``."""
    reader, writer = ctx.Pipe(duplex=False)
    return reader, writer
