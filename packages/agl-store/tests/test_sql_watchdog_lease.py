"""One process at a time runs the SQL store's watchdog (the ``watchdog`` lease row); the next takes over
when the holder closes its store or its lease expires."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from agl.store import SqlLightningStore
from agl.testing.clock import ManualClock
from agl.testing.store.sql import SQL_BACKENDS, fresh_database
from agl.types import RolloutConfig

_TIMEOUT = RolloutConfig(timeout_seconds=2)


async def _status(store: SqlLightningStore, rollout_id: str) -> str:
    rollout = await store.get_rollout_by_id(rollout_id)  # a watched call: scans if this store may
    assert rollout is not None
    attempt = await store.get_latest_attempt(rollout_id)
    assert attempt is not None
    return attempt.status


@pytest.mark.parametrize("backend", SQL_BACKENDS)
def test_one_process_at_a_time_runs_the_watchdog(backend: str, tmp_path: Path) -> None:
    with fresh_database(backend, tmp_path) as (url, kwargs):

        async def main() -> None:
            clock = ManualClock()
            a = SqlLightningStore(url, clock=clock, scan_debounce_seconds=0, **kwargs)
            b = SqlLightningStore(url, clock=clock, scan_debounce_seconds=0, **kwargs)
            b._lease_holder = "another-host:1:b"  # as if b were another process  # pyright: ignore[reportPrivateUsage]
            try:
                first = await a.start_rollout(
                    "x", config=_TIMEOUT
                )  # a's first watched call: a takes the lease
                clock.advance(3)
                assert await _status(b, first.rollout_id) == "preparing", "b scanned while a holds the lease"
                assert await _status(a, first.rollout_id) == "timeout"

                second = await b.start_rollout("y", config=_TIMEOUT)
                await a.close()  # gives the lease up
                clock.advance(6)  # past b's last look at the lease, before a's lease would have expired
                assert await _status(b, second.rollout_id) == "timeout", "b did not take the watchdog over"
            finally:
                await a.close()
                await b.close()

        asyncio.run(main())


@pytest.mark.parametrize("backend", SQL_BACKENDS)
def test_an_expired_lease_is_taken_over(backend: str, tmp_path: Path) -> None:
    """A holder that died never gives the lease up: another process takes it once it has expired."""
    with fresh_database(backend, tmp_path) as (url, kwargs):

        async def main() -> None:
            clock = ManualClock()
            a = SqlLightningStore(
                url, clock=clock, scan_debounce_seconds=0, watchdog_lease_seconds=30, **kwargs
            )
            b = SqlLightningStore(
                url, clock=clock, scan_debounce_seconds=0, watchdog_lease_seconds=30, **kwargs
            )
            b._lease_holder = "another-host:1:b"  # pyright: ignore[reportPrivateUsage]
            try:
                rollout = await a.start_rollout("x", config=_TIMEOUT)
                a._lease_held = False  # "dies": never renews nor gives up  # pyright: ignore[reportPrivateUsage]
                clock.advance(3)
                assert await _status(b, rollout.rollout_id) == "preparing"
                clock.advance(30)
                assert await _status(b, rollout.rollout_id) == "timeout"
            finally:
                await b.close()
                await a.close()

        asyncio.run(main())
