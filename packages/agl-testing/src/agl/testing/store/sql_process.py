"""Another process with its own SQL store on a test's database, told what to do one line at a time.

For tests of what crosses processes on one database: notifications that wake another process's waiters, the
watchdog's leadership. The child answers each command with one line:

- ``scan``: a watched call (the watchdog scans if this process may); answers whether this store leads.
- ``enqueue``: enqueues a rollout; answers its id.
- ``finish <rollout_id>``: claims that rollout and ends its attempt as succeeded; answers ``finished``.
- ``close``: closes the store; answers ``closed``.

Anything else, or the end of its input, ends the child.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import sys
import textwrap
from types import TracebackType
from typing import Any

__all__ = ["StoreProcess"]

_CHILD = textwrap.dedent(
    """
    import asyncio, sys
    from agl.store import SqlLightningStore

    async def main():
        store = SqlLightningStore(sys.argv[1], **eval(sys.argv[2]))
        if sys.argv[3] == "watched":
            await store.query_rollouts()  # known from the start to use the database
        loop = asyncio.get_running_loop()
        print("ready", flush=True)
        while True:
            command = (await loop.run_in_executor(None, sys.stdin.readline)).strip()
            if command == "scan":
                await store.query_rollouts()
                print(getattr(store, "_leading", None), flush=True)
            elif command == "enqueue":
                print((await store.enqueue_rollout("from another process")).rollout_id, flush=True)
            elif command.startswith("finish "):
                claimed = await store.start_attempt(command.split()[1])
                await store.update_attempt(claimed.rollout_id, claimed.attempt.attempt_id, status="succeeded")
                print("finished", flush=True)
            elif command == "close":
                await store.close()
                print("closed", flush=True)
            else:
                break

    asyncio.run(main())
    """
)


class StoreProcess:
    """A child process with ``SqlLightningStore(url, **kwargs)``; ``watched``: it makes a watched call before
    it says it is ready (so that the database knows it from the start)."""

    def __init__(self, url: str, kwargs: dict[str, Any], *, watched: bool = False) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-c", _CHILD, url, repr(kwargs), "watched" if watched else "quiet"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        if self.read() != "ready":
            self.close()
            raise RuntimeError("the store process did not start (see its stderr above)")

    def read(self) -> str:
        """The child's next line."""
        assert self.process.stdout is not None
        return self.process.stdout.readline().strip()

    def ask(self, command: str) -> str:
        """Send ``command``; its answer."""
        assert self.process.stdin is not None
        self.process.stdin.write(command + "\n")
        self.process.stdin.flush()
        return self.read()

    async def ask_async(self, command: str) -> str:
        """:meth:`ask` without blocking the event loop."""
        return await asyncio.get_running_loop().run_in_executor(None, self.ask, command)

    def close(self) -> None:
        """End the child (resumed first, should a test have stopped it), killed if it does not end."""
        if self.process.poll() is None:
            os.kill(self.process.pid, signal.SIGCONT)
        assert self.process.stdin is not None and self.process.stdout is not None
        with contextlib.suppress(BrokenPipeError):
            self.process.stdin.close()
        try:
            self.process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(timeout=30)
        self.process.stdout.close()

    def __enter__(self) -> StoreProcess:
        return self

    def __exit__(self, *_: type[BaseException] | BaseException | TracebackType | None) -> None:
        self.close()
