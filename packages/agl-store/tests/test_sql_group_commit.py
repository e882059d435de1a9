"""SQL store write path: concurrent writers committed in groups, each acknowledged only once committed (that
group-committed writes survive kill -9: test_sql_durability.py); a failing write fails alone; the SQLite WAL
stays bounded under a steady stream of commits."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Coroutine
from pathlib import Path
from typing import Any, cast

import pytest
from agl.store import SqlLightningStore
from agl.store.sql import _db
from agl.testing.spans import make_span
from agl.testing.store.sql import SQL_BACKENDS, fresh_database
from agl.types import NotFoundError, RolloutConfig


@contextlib.asynccontextmanager
async def _one_running_attempt(url: str, **kwargs: Any) -> AsyncIterator[tuple[SqlLightningStore, str, str]]:
    """A store at ``url`` with one rollout enqueued and claimed: the store (closed after), the rollout and the
    attempt ids."""
    store = SqlLightningStore(url, **kwargs)
    try:
        await store.enqueue_rollout({"q": 1})
        claimed = await store.dequeue_rollout(worker_id="w")
        assert claimed is not None
        yield store, claimed.rollout_id, claimed.attempt.attempt_id
    finally:
        await store.close()


def test_concurrent_writes_are_committed_together(tmp_path: Path) -> None:
    async def main() -> None:
        async with _one_running_attempt(f"sqlite:///{tmp_path / 'g.db'}") as (store, rid, aid):
            before = store._db.commits
            spans = [make_span(rid, aid, i) for i in range(1, 65)]
            stored = await asyncio.gather(*(store.add_span(span) for span in spans))
            assert all(s is not None for s in stored)
            assert store._db.commits - before < len(spans)  # grouped: fewer commits than writes
            assert store._db.batched_writes > 0
            found = await store.query_spans(rid)
            assert sorted(s.sequence_id for s in found.items) == list(range(1, 65))
            latest = await store.get_latest_attempt(rid)
            assert latest is not None and latest.status == "running"

    asyncio.run(main())


@pytest.mark.parametrize("loop_kind", ["asyncio", "uvloop"])
def test_concurrent_writes_on_any_loop_are_committed_together(tmp_path: Path, loop_kind: str) -> None:
    """Whether to group is read from public state only, the same on asyncio's loop and on uvloop (the store
    server's): concurrent writers are grouped, and a lone task's writes one after another still run at once,
    one commit each."""

    async def main() -> None:
        async with _one_running_attempt(f"sqlite:///{tmp_path / 'u.db'}") as (store, rid, aid):
            before = store._db.commits
            for i in range(1, 6):  # one task, one write after another: not held back
                await store.add_span(make_span(rid, aid, i))
            assert store._db.commits - before == 5 and store._db.batched_writes == 0

            async def writer(first: int) -> None:
                for i in range(first, first + 8):
                    await asyncio.sleep(0)  # as a server's requests do between calls (the network)
                    await store.add_span(make_span(rid, aid, i))

            before = store._db.commits
            await asyncio.gather(*(writer(100 + 10 * w) for w in range(16)))
            assert store._db.commits - before < 16 * 8 / 2, store._db.commits - before
            found = await store.query_spans(rid)
            assert len(found.items) == 5 + 16 * 8

    if loop_kind == "uvloop":
        pytest.importorskip("uvloop").run(main())
    else:
        asyncio.run(main())


def test_writes_that_find_the_write_lock_held_by_another_thread_wait_for_it_on_the_loop(
    tmp_path: Path,
) -> None:
    """Another of the process's threads holds the write lock for a moment (a checkpoint catching up, a write
    from another loop): the loop's writes wait for it and then commit as one group. They used to go to the
    pool, whose write then held the lock while the loop's next writes came, sending those there too."""

    async def main() -> None:
        async with _one_running_attempt(f"sqlite:///{tmp_path / 'h.db'}") as (store, rid, aid):
            lock = store._db._write_lock
            pooled, commits = store._db.pooled, store._db.commits

            async def while_held(*writes: Any) -> list[Any]:
                lock.acquire()  # as another thread would; not reentrant, so the loop's writes find it held
                try:
                    tasks = [asyncio.ensure_future(w) for w in writes]
                    for _ in range(100):  # a few loop turns: every write has tried and is waiting
                        await asyncio.sleep(0)
                    assert store._db.pooled == pooled, "writes went to the thread pool"
                    assert not any(t.done() for t in tasks)
                finally:
                    lock.release()
                return await asyncio.gather(*tasks)

            [lone] = await while_held(store.add_span(make_span(rid, aid, 1)))  # a lone write waits too
            assert lone.sequence_id == 1
            stored = await while_held(*(store.add_span(make_span(rid, aid, i)) for i in range(2, 34)))
            assert sorted(s.sequence_id for s in stored) == list(range(2, 34))
            assert store._db.pooled == pooled
            assert store._db.commits - commits == 2

    asyncio.run(main())


@pytest.mark.parametrize("backend", SQL_BACKENDS)
def test_a_failing_write_among_concurrent_ones_fails_alone(backend: str, tmp_path: Path) -> None:
    async def main(url: str, kwargs: dict) -> None:
        async with _one_running_attempt(url, **kwargs) as (store, rid, aid):
            calls: list[Coroutine[Any, Any, object]] = [
                store.add_span(make_span(rid, aid, i)) for i in range(1, 11)
            ]
            calls.insert(3, store.add_span(make_span("ro-missing", aid, 99)))
            calls.insert(7, store.update_attempt(rid, "at-missing", status="failed"))
            results = await asyncio.gather(*calls, return_exceptions=True)
            errors = [r for r in results if isinstance(r, BaseException)]
            assert len(errors) == 2 and all(isinstance(e, NotFoundError) for e in errors), results
            found = await store.query_spans(rid)
            assert sorted(s.sequence_id for s in found.items) == list(range(1, 11))
            latest = await store.get_latest_attempt(rid)
            assert latest is not None and latest.status == "running"

    with fresh_database(backend, tmp_path) as (url, kwargs):
        asyncio.run(main(url, kwargs))


def test_wal_stays_bounded_under_steady_writes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Checkpoints running beside a steady stream of commits never finish copying the WAL, so SQLite never
    starts it over; the store finishes them under its write lock once the WAL is long."""
    monkeypatch.setattr(_db, "_CHECKPOINT_EVERY", 16)
    monkeypatch.setattr(_db, "_WAL_CATCH_UP_FRAMES", 256)
    path = tmp_path / "wal.db"

    async def main() -> None:
        store = SqlLightningStore(f"sqlite:///{path}")
        try:
            await store.enqueue_rollout({"q": 1})
            claimed = await store.dequeue_rollout(worker_id="w")
            assert claimed is not None
            for i in range(1, 1501):  # one commit each, ~6 pages: ~40 MB of WAL if it never restarts
                await store.add_span(make_span(claimed.rollout_id, claimed.attempt.attempt_id, i))
            wal = path.with_name(path.name + "-wal").stat().st_size
            assert wal < 16 * 2**20, f"the WAL grew to {wal / 2**20:.1f} MiB"
        finally:
            await store.close()

    asyncio.run(main())


def test_write_statements_search_indexes(tmp_path: Path) -> None:
    """No statement of the write path scans a whole table (its cost would grow with the store): after a
    lifecycle that runs each of them, SQLite's plan for every compiled statement searches an index."""
    import sqlite3

    from agl.store.sql import _steps

    path = tmp_path / "plans.db"

    async def main() -> None:
        store = SqlLightningStore(f"sqlite:///{path}", scan_debounce_seconds=0)
        try:
            for i in range(3):
                await store.enqueue_rollout({"i": i}, config=cast("RolloutConfig", {"timeout_seconds": 100}))
            claimed = await store.dequeue_rollout(worker_id="w")
            assert claimed is not None
            rid, aid = claimed.rollout_id, claimed.attempt.attempt_id
            await store.add_span(make_span(rid, aid, 1))
            await store.add_spans_in_order([make_span(rid, aid, 0)])
            await store.update_attempt(rid, aid, status="succeeded")
            await store.update_rollout(rid, status="queuing")
            await store.start_rollout({"b": 1}, worker_id="w2")
            await store.dequeue_many_rollouts(limit=5, worker_id="w")
            assert await store.dequeue_rollout(worker_id="w") is None
            await store.wait_for_rollouts(rollout_ids=[rid], timeout=0.01)
        finally:
            await store.close()

    asyncio.run(main())
    conn = sqlite3.connect(path)
    try:
        scans = []
        for plan in list(_steps._SQLITE_PLANS.values()):
            if not plan.sql.lstrip().upper().startswith(("SELECT", "UPDATE", "INSERT")):
                continue
            steps = conn.execute("EXPLAIN QUERY PLAN " + plan.sql, [None] * len(plan.names)).fetchall()
            scans += [
                (step[3], plan.sql)
                for step in steps
                if step[3].startswith("SCAN agl_") and "INDEX" not in step[3]
            ]
        assert not scans, scans
    finally:
        conn.close()
