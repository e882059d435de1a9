"""SQL store: several processes and threads dequeuing from one database never claim the same rollout."""

from __future__ import annotations

import asyncio
import multiprocessing
import threading
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from agl.store import SqlLightningStore
from agl.testing.store.sql import SQL_BACKENDS, fresh_database
from agl.testing.store.sql_workers import drain_in_threads, drain_process
from agl.types import EnqueueRolloutRequest

ROLLOUTS = 300


async def _enqueue(url: str, engine_kwargs: dict, count: int) -> list[str]:
    store = SqlLightningStore(url, **engine_kwargs)
    try:
        requests = [EnqueueRolloutRequest(input={"i": i}) for i in range(count)]
        return [r.rollout_id for r in await store.enqueue_many_rollouts(requests)]
    finally:
        await store.close()


@pytest.mark.parametrize("backend", SQL_BACKENDS)
def test_threads_of_one_store_never_share_a_rollout(backend: str, tmp_path: Path) -> None:
    with fresh_database(backend, tmp_path) as (url, kwargs):
        ids = asyncio.run(_enqueue(url, kwargs, ROLLOUTS))
        claimed = drain_in_threads(url, kwargs, threads=4, name="solo")
    assert sorted(claimed) == sorted(ids), "every rollout claimed exactly once"


@pytest.mark.parametrize("backend", SQL_BACKENDS)
def test_two_processes_with_threads_never_share_a_rollout(backend: str, tmp_path: Path) -> None:
    with fresh_database(backend, tmp_path) as (url, kwargs):
        ids = asyncio.run(_enqueue(url, kwargs, ROLLOUTS))
        ctx = multiprocessing.get_context("spawn")
        queue, ready = ctx.Queue(), ctx.Barrier(3, timeout=120)
        procs = [
            ctx.Process(target=drain_process, args=(url, kwargs, 3, f"p{i}", queue, ready)) for i in range(2)
        ]
        for proc in procs:
            proc.start()
        # this process joins in too, with threads of its own; all start once every store is open
        mine = drain_in_threads(url, kwargs, threads=2, name="parent", ready=ready)
        theirs = [queue.get(timeout=120) for _ in procs]
        for proc in procs:
            proc.join(timeout=60)
            assert proc.exitcode == 0
    counts = Counter(mine + [rid for claimed in theirs for rid in claimed])
    assert [rid for rid, n in counts.items() if n > 1] == [], "a rollout was claimed twice"
    assert sorted(counts) == sorted(ids), "every rollout claimed"
    busy = sum(1 for claimed in [mine, *theirs] if claimed)
    assert busy >= 2, "several processes claimed rollouts: they really ran concurrently"


@pytest.mark.parametrize("backend", SQL_BACKENDS)
def test_waiting_dequeue_wakes_for_another_thread_and_another_store(
    backend: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """In-process writes wake a waiting dequeue (notified), those of another store of the process too."""
    import agl.store.sql._waiting as sql_waiting

    with fresh_database(backend, tmp_path) as (url, kwargs):
        with monkeypatch.context() as patched:  # polling an hour apart: only a notification wakes the waiter
            patched.setattr(sql_waiting, "_FIRST_POLL_INTERVAL", 3600.0)
            patched.setattr(sql_waiting, "_MAX_POLL_INTERVAL", 3600.0)
            asyncio.run(_wait_for_a_late_rollout(url, kwargs, same_store=True))
        asyncio.run(_wait_for_a_late_rollout(url, kwargs, same_store=False))


async def _wait_for_a_late_rollout(url: str, kwargs: dict, *, same_store: bool) -> None:
    waiter_store = SqlLightningStore(url, **kwargs)
    # another store stands for another process: no shared signal, only the poll finds its writes
    writer = waiter_store if same_store else SqlLightningStore(url, **kwargs)
    try:
        await waiter_store.get_latest_resources()  # connected, schema ready

        def enqueue_later() -> None:
            async def main() -> None:
                await asyncio.sleep(0.2)
                await writer.enqueue_rollout("late")
                await writer.release_loop_resources()  # this thread's loop closes next

            asyncio.run(main())

        thread = threading.Thread(target=enqueue_later)
        thread.start()
        # back well before the hour-long timeout: woken by the write (notified, or found by the poll)
        got = await asyncio.wait_for(waiter_store.dequeue_rollout(worker_id="w", timeout=3600), 60)
        thread.join()
        assert got is not None and got.input == "late"
    finally:
        await waiter_store.close()
        if writer is not waiter_store:
            await writer.close()


@pytest.mark.parametrize("backend", SQL_BACKENDS)
def test_waiting_for_rollouts_this_process_finishes_does_not_read_each_one_back(
    backend: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The calc app waits for 128 rollouts its runners finish one by one: the store learns which finished
    from its own writes, instead of reading the unfinished ones back after every finish. A finish by
    another store object on the same database (another process) is still found, by polling."""
    from agl.store.sql import _reads

    reads = Counter[str]()
    for name in ("finished_rollouts", "finished_rollout_ids"):  # reading them whole, or their ids
        read = getattr(_reads, name, None)
        if read is not None:
            monkeypatch.setattr(_reads, name, _counted(read, reads))

    async def main(url: str, kwargs: dict) -> None:
        store = SqlLightningStore(url, **kwargs)
        other = SqlLightningStore(url, **kwargs)
        try:
            ids = [
                r.rollout_id
                for r in await store.enqueue_many_rollouts(
                    [EnqueueRolloutRequest(input={"i": i}) for i in range(41)]
                )
            ]
            claimed = [await store.dequeue_rollout(worker_id="w") for _ in ids]
            waiting = asyncio.ensure_future(store.wait_for_rollouts(rollout_ids=ids, timeout=60))
            for rollout in claimed[:40]:
                assert rollout is not None
                await asyncio.sleep(0)  # the waiter runs between finishes, as it does between a runner's
                await store.update_attempt(rollout.rollout_id, rollout.attempt.attempt_id, status="succeeded")
            last = claimed[40]
            assert last is not None
            await other.update_attempt(last.rollout_id, last.attempt.attempt_id, status="failed")
            done = await waiting
            assert sorted(r.rollout_id for r in done) == sorted(ids)
            assert reads.total() < 20, reads  # was one read per finish (41+)
        finally:
            await other.close()
            await store.close()

    with fresh_database(backend, tmp_path) as (url, kwargs):
        asyncio.run(main(url, kwargs))


def _counted(read: Any, reads: Counter[str]) -> Any:
    def counted(*args: Any) -> Any:
        reads[read.__name__] += 1
        return read(*args)

    return counted
