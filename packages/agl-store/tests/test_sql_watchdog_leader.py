"""One process at a time runs the SQL store's watchdog: the one holding a lock that dies with it (SQLite: an
OS file lock next to the database; PostgreSQL: a session advisory lock). Issue 27, defect 4: with a lease
row, a killed leader left the watchdog blind until its lease expired (10 s and more)."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from types import TracebackType
from typing import Any

import pytest
from agl.store import SqlLightningStore
from agl.testing.clock import ManualClock
from agl.testing.store.sql import SQL_BACKENDS, fresh_database
from agl.types import RolloutConfig

_CHILD = textwrap.dedent(
    """
    import asyncio, sys
    from agl.store import SqlLightningStore

    async def main():
        store = SqlLightningStore(sys.argv[1], scan_debounce_seconds=0, **eval(sys.argv[2]))
        loop = asyncio.get_running_loop()
        print("ready", flush=True)
        while True:
            command = (await loop.run_in_executor(None, sys.stdin.readline)).strip()
            if command == "scan":  # a watched call: scans if this process may; says whether it leads
                await store.query_rollouts()
                print(getattr(store, "_leading", getattr(store, "_lease_held", None)), flush=True)
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


class Child:
    """Another process with its own store on the database, told what to do line by line."""

    def __init__(self, url: str, kwargs: dict[str, Any]) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-c", _CHILD, url, repr(kwargs)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert self.read() == "ready"

    def read(self) -> str:
        assert self.process.stdout is not None
        return self.process.stdout.readline().strip()

    def ask(self, command: str) -> str:
        assert self.process.stdin is not None
        self.process.stdin.write(command + "\n")
        self.process.stdin.flush()
        return self.read()

    def __enter__(self) -> Child:
        return self

    def __exit__(self, *_: type[BaseException] | BaseException | TracebackType | None) -> None:
        if self.process.poll() is None:
            os.kill(self.process.pid, signal.SIGCONT)
            self.process.kill()
        self.process.wait(timeout=30)
        assert self.process.stdin is not None and self.process.stdout is not None
        self.process.stdin.close()
        self.process.stdout.close()


async def _status(store: SqlLightningStore, rollout_id: str) -> str:
    await store.get_rollout_by_id(rollout_id)  # a watched call: scans if this store may
    attempt = await store.get_latest_attempt(rollout_id)
    assert attempt is not None
    return attempt.status


async def _timed_out_within(store: SqlLightningStore, rollout_id: str, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while await _status(store, rollout_id) != "timeout":
        if time.monotonic() > deadline:
            return False
        await asyncio.sleep(0.05)
    return True


_QUICK = RolloutConfig(timeout_seconds=0.3)


@pytest.mark.parametrize("backend", SQL_BACKENDS)
def test_a_killed_leader_is_replaced_at_once(backend: str, tmp_path: Path) -> None:
    """kill -9 of the process running the watchdog: the next scan of another process runs it (the lease row
    kept it blind until the lease expired, 10 s at least)."""
    with fresh_database(backend, tmp_path) as (url, kwargs), Child(url, kwargs) as child:
        assert child.ask("scan") == "True", "the other process runs the watchdog"

        async def main() -> None:
            store = SqlLightningStore(url, scan_debounce_seconds=0, **kwargs)
            try:
                rollout = await store.start_rollout("x", config=_QUICK)
                await asyncio.sleep(0.6)
                assert await _status(store, rollout.rollout_id) == "preparing", "scanned beside the leader"
                child.process.kill()
                child.process.wait(timeout=30)
                assert await _timed_out_within(store, rollout.rollout_id, 5), "the watchdog stayed blind"
            finally:
                await store.close()

        asyncio.run(main())


@pytest.mark.parametrize("backend", SQL_BACKENDS)
def test_a_closing_leader_hands_over_and_a_paused_one_keeps_the_watchdog(
    backend: str, tmp_path: Path
) -> None:
    """While the leader lives, even paused (SIGSTOP), no other process scans; it closes its store: the next
    scan of another process runs the watchdog."""
    with fresh_database(backend, tmp_path) as (url, kwargs), Child(url, kwargs) as child:
        assert child.ask("scan") == "True"

        async def main() -> None:
            store = SqlLightningStore(url, scan_debounce_seconds=0, **kwargs)
            try:
                rollout = await store.start_rollout("x", config=_QUICK)
                os.kill(child.process.pid, signal.SIGSTOP)
                try:
                    assert not await _timed_out_within(store, rollout.rollout_id, 1.5), "two leaders at once"
                finally:
                    os.kill(child.process.pid, signal.SIGCONT)
                assert child.ask("close") == "closed"
                assert await _timed_out_within(store, rollout.rollout_id, 5), "nobody took the watchdog over"
            finally:
                await store.close()

        asyncio.run(main())


@pytest.mark.parametrize("backend", SQL_BACKENDS)
def test_the_stores_of_one_process_share_its_leadership(backend: str, tmp_path: Path) -> None:
    """Two stores of one process on one database: both scan (the lock is the process's)."""
    with fresh_database(backend, tmp_path) as (url, kwargs):

        async def main() -> None:
            clock = ManualClock()
            a = SqlLightningStore(url, clock=clock, scan_debounce_seconds=0, **kwargs)
            b = SqlLightningStore(url, clock=clock, scan_debounce_seconds=0, **kwargs)
            try:
                first = await a.start_rollout("x", config=RolloutConfig(timeout_seconds=2))
                second = await b.start_rollout("y", config=RolloutConfig(timeout_seconds=2))
                clock.advance(3)
                assert await _status(b, first.rollout_id) == "timeout"
                clock.advance(3)
                await a.close()  # b goes on leading: the process still has a store open
                assert await _status(b, second.rollout_id) == "timeout"
            finally:
                await a.close()
                await b.close()

        asyncio.run(main())


def test_the_sqlite_lock_lies_next_to_the_database(tmp_path: Path) -> None:
    database = tmp_path / "runs" / "store.db"

    async def main() -> None:
        store = SqlLightningStore(f"sqlite:///{database}", scan_debounce_seconds=0)
        try:
            await store.query_rollouts()
            assert (tmp_path / "runs" / "store.db.watchdog.lock").exists()
        finally:
            await store.close()

    asyncio.run(main())
