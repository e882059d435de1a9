"""One process at a time runs the SQL store's watchdog: the one holding a lock that dies with it (SQLite: an
OS file lock next to the database; PostgreSQL: a session advisory lock). Issue 27, defect 4: with a lease
row, a killed leader left the watchdog blind until its lease expired (10 s and more)."""

from __future__ import annotations

import asyncio
import os
import signal
import time
from pathlib import Path

import pytest
from agl.store import SqlLightningStore
from agl.testing.clock import ManualClock
from agl.testing.store.sql import SQL_BACKENDS, fresh_database
from agl.testing.store.sql_process import StoreProcess
from agl.types import RolloutConfig


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
    with (
        fresh_database(backend, tmp_path) as (url, kwargs),
        StoreProcess(url, {**kwargs, "scan_debounce_seconds": 0}) as child,
    ):
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
    with (
        fresh_database(backend, tmp_path) as (url, kwargs),
        StoreProcess(url, {**kwargs, "scan_debounce_seconds": 0}) as child,
    ):
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
