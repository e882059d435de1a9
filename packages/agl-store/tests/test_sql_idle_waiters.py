"""Idle long polls of the SQL stores cost next to nothing: they are woken by notification, not by polling the
database (issue 27, defect 10: 200 idle waiters each polled every 100 ms). Writes of this process wake them
at once; those of another process through PostgreSQL ``LISTEN``/``NOTIFY``, or on SQLite through a watch of
the file that runs only while another process uses it."""

from __future__ import annotations

import asyncio
import resource
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest
from agl.store import SqlLightningStore
from agl.testing.clock import ManualClock
from agl.testing.store.sql import SQL_BACKENDS, fresh_database
from agl.testing.store.sql_process import StoreProcess
from agl.types import RolloutConfig

_WAITERS = 200
_WINDOW_SECONDS = 3.0


def _cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)  # every thread of this process
    return usage.ru_utime + usage.ru_stime


@pytest.fixture
def only_notifications(monkeypatch: pytest.MonkeyPatch) -> None:
    """No poll of the database in an hour: only a notification wakes a waiter."""
    monkeypatch.setattr("agl.store.sql._waiting._FIRST_POLL_INTERVAL", 3600.0)
    monkeypatch.setattr("agl.store.sql._waiting._MAX_POLL_INTERVAL", 3600.0)


@pytest.mark.parametrize("shared", [False, True], ids=["alone", "shared"])
@pytest.mark.parametrize("backend", SQL_BACKENDS)
def test_idle_waiters_read_nothing_and_cost_little_cpu(backend: str, shared: bool, tmp_path: Path) -> None:
    """200 idle ``dequeue_rollout(timeout=3600)``: no read of the database and under 10 ms of CPU per second
    in 3 s (the 100 ms polls read 2,000 times a second: 36 ms of CPU a second on SQLite, 360 on PostgreSQL,
    on the 2-core development machine). ``shared``: another process uses the database meanwhile."""
    with fresh_database(backend, tmp_path) as (url, kwargs):

        async def main() -> None:
            store = SqlLightningStore(url, **kwargs)  # the default debounce: a scan per 10 s at most
            await store.ensure_schema()
            waiters = [
                asyncio.ensure_future(store.dequeue_rollout(worker_id=f"w{i}", timeout=3600))
                for i in range(_WAITERS)
            ]
            try:
                await asyncio.sleep(1.5)  # all of them waiting
                reads, cpu, began = store._db.reads, _cpu_seconds(), time.monotonic()
                await asyncio.sleep(_WINDOW_SECONDS)
                reads = store._db.reads - reads
                cpu_per_second = (_cpu_seconds() - cpu) / (time.monotonic() - began)
                assert not any(waiter.done() for waiter in waiters)
                assert reads == 0, f"{reads} reads by idle waiters in {_WINDOW_SECONDS} s"
                assert cpu_per_second < 0.010, (
                    f"idle waiters burn {cpu_per_second * 1000:.1f} ms of CPU a second"
                )
            finally:
                for waiter in waiters:
                    waiter.cancel()
                await asyncio.gather(*waiters, return_exceptions=True)
                await store.close()

        if shared:
            with StoreProcess(url, kwargs, watched=True):
                asyncio.run(main())
        else:
            asyncio.run(main())


@pytest.mark.parametrize("backend", SQL_BACKENDS)
def test_a_waiter_is_woken_by_another_process(backend: str, tmp_path: Path, only_notifications: None) -> None:
    """An enqueue of another process wakes a waiting dequeue, a finish a ``wait_for_rollouts``: PostgreSQL
    notifies; SQLite's watch of the file sees the change (polls of the database are an hour apart here)."""
    with fresh_database(backend, tmp_path) as (url, kwargs), StoreProcess(url, kwargs, watched=True) as child:

        async def main() -> None:
            store = SqlLightningStore(url, **kwargs)
            try:
                for _ in range(3):
                    waiting = asyncio.ensure_future(store.dequeue_rollout(worker_id="w", timeout=3600))
                    await asyncio.sleep(0.3)  # waiting (a delay, not a wait for a result)
                    assert not waiting.done()
                    rollout_id = await child.ask_async("enqueue")
                    got = await asyncio.wait_for(waiting, 5)
                    assert got is not None and got.rollout_id == rollout_id

                queued = await store.enqueue_rollout("finished by another process")
                finishing = asyncio.ensure_future(
                    store.wait_for_rollouts(rollout_ids=[queued.rollout_id], timeout=3600)
                )
                await asyncio.sleep(0.3)
                assert not finishing.done()
                assert await child.ask_async(f"finish {queued.rollout_id}") == "finished"
                (done,) = await asyncio.wait_for(finishing, 5)
                assert done.rollout_id == queued.rollout_id and done.status == "succeeded"
            finally:
                await store.close()

        asyncio.run(main())


@pytest.mark.parametrize("backend", SQL_BACKENDS)
def test_a_waiter_is_woken_by_this_process_at_once(
    backend: str, tmp_path: Path, only_notifications: None
) -> None:
    with fresh_database(backend, tmp_path) as (url, kwargs):

        async def main() -> None:
            store = SqlLightningStore(url, **kwargs)
            other = SqlLightningStore(url, **kwargs)  # another store of this process
            try:
                waiting = asyncio.ensure_future(store.dequeue_rollout(worker_id="w", timeout=3600))
                await asyncio.sleep(0.3)
                began = time.monotonic()
                rollout = await other.enqueue_rollout("late")
                got = await asyncio.wait_for(waiting, 5)
                assert got is not None and got.rollout_id == rollout.rollout_id
                assert time.monotonic() - began < 1.0
            finally:
                await other.close()
                await store.close()

        asyncio.run(main())


def test_waiters_poll_while_postgres_listening_is_down_and_hear_again_after(tmp_path: Path) -> None:
    """The listening connections die (terminated by the server): waiters poll until theirs is back, and are
    notified again after."""
    from agl.store.sql._pgnews import APPLICATION_NAME
    from agl.testing.postgres import require_postgres

    with (
        fresh_database("postgres", tmp_path) as (url, kwargs),
        StoreProcess(url, kwargs, watched=True) as child,
    ):

        async def main() -> None:
            store = SqlLightningStore(url, **kwargs)
            try:
                waiting = asyncio.ensure_future(store.dequeue_rollout(worker_id="w", timeout=3600))
                await asyncio.sleep(0.5)
                assert (
                    await _terminate(require_postgres(), APPLICATION_NAME) >= 2
                )  # this process's, the child's
                rollout_id = await child.ask_async("enqueue")  # maybe before anyone listens again
                got = await asyncio.wait_for(waiting, 5)
                assert got is not None and got.rollout_id == rollout_id
                waiting = asyncio.ensure_future(store.dequeue_rollout(worker_id="w", timeout=3600))
                await asyncio.sleep(1.5)  # listening again: no polling
                reads = store._db.reads
                await asyncio.sleep(0.5)
                assert store._db.reads == reads
                rollout_id = await child.ask_async("enqueue")
                got = await asyncio.wait_for(waiting, 5)
                assert got is not None and got.rollout_id == rollout_id
            finally:
                await store.close()

        asyncio.run(main())


async def _terminate(url: str, application_name: str) -> int:
    """Terminate the server's connections named ``application_name``; how many."""
    import asyncpg

    conn: Any = await asyncpg.connect(url.replace("postgresql+asyncpg://", "postgresql://"))
    try:
        query = "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE application_name = $1"
        return int(await conn.fetchval(query, application_name))
    finally:
        await conn.close()


@pytest.mark.parametrize("backend", SQL_BACKENDS)
def test_an_idle_wait_still_lets_the_watchdog_run(
    backend: str, tmp_path: Path, only_notifications: None
) -> None:
    """Nothing but a waiting dequeue calls the store: its idle wake-ups run the watchdog, whose requeue of a
    timed-out attempt wakes it."""
    with fresh_database(backend, tmp_path) as (url, kwargs):

        async def main() -> None:
            clock = ManualClock()
            store = SqlLightningStore(url, clock=clock, scan_debounce_seconds=0, **kwargs)
            try:
                retried = RolloutConfig(timeout_seconds=5, max_attempts=2, retry_condition=["timeout"])
                started = await store.start_rollout("x", config=retried)
                waiting = asyncio.ensure_future(store.dequeue_rollout(worker_id="w", timeout=3600))
                await asyncio.sleep(0.3)
                assert not waiting.done()
                clock.advance(10)
                got = await asyncio.wait_for(waiting, 5)  # a wake-up a second (the debounce is 0)
                assert got is not None and got.rollout_id == started.rollout_id
                assert got.attempt.sequence_id == 2
            finally:
                await store.close()

        asyncio.run(main())


@pytest.mark.parametrize("backend", SQL_BACKENDS)
def test_a_waiter_is_woken_by_a_process_that_came_and_went(
    backend: str, tmp_path: Path, only_notifications: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A process that opens the store, enqueues and exits between two looks of SQLite's watch (2 s apart
    here) is not missed: it counted itself in as it came."""
    monkeypatch.setattr("agl.store.sql._coordination._LOOK_SECONDS", 2.0)
    with fresh_database(backend, tmp_path) as (url, kwargs):

        async def main() -> None:
            store = SqlLightningStore(url, **kwargs)
            try:
                waiting = asyncio.ensure_future(store.dequeue_rollout(worker_id="w", timeout=3600))
                await asyncio.sleep(0.3)
                code = textwrap.dedent(
                    """
                    import asyncio, sys
                    from agl.store import SqlLightningStore

                    async def main():
                        store = SqlLightningStore(sys.argv[1], **eval(sys.argv[2]))
                        print((await store.enqueue_rollout("passing by")).rollout_id)
                        await store.close()

                    asyncio.run(main())
                    """
                )
                child = await asyncio.create_subprocess_exec(
                    sys.executable, "-c", code, url, repr(kwargs), stdout=subprocess.PIPE
                )
                out, _ = await child.communicate()
                assert child.returncode == 0
                got = await asyncio.wait_for(waiting, 10)
                assert got is not None and got.rollout_id == out.decode().strip()
            finally:
                await store.close()

        asyncio.run(main())
