"""Contract: concurrent coroutines and threads (each with its own event loop) never see or cause a torn state.

Thread tests run only for stores that declare ``thread_safe`` (a documented capability, not a backend
exception).
"""

from __future__ import annotations

import asyncio
from collections import Counter

import pytest
from agl.store import LightningStore
from agl.testing.spans import claim, make_span
from agl.testing.threads import run_in_threads
from agl.types import AttemptedRollout, EnqueueRolloutRequest


def require_threads(store: LightningStore) -> None:
    if not store.capabilities.get("thread_safe"):
        pytest.skip(f"{type(store).__name__} does not declare thread_safe")


async def test_concurrent_dequeues_never_share_a_rollout(store: LightningStore) -> None:
    """Acceptance: many coroutines dequeuing at once; each rollout is handed out exactly once."""
    rollouts = await store.enqueue_many_rollouts([EnqueueRolloutRequest(input=i) for i in range(60)])

    async def worker(i: int) -> list[str]:
        got: list[str] = []
        while True:
            claimed = await store.dequeue_rollout(worker_id=f"w-{i}")
            if claimed is None:
                return got
            got.append(claimed.rollout_id)

    per_worker = await asyncio.gather(*(worker(i) for i in range(25)))
    claimed = [rid for ids in per_worker for rid in ids]
    assert sorted(claimed) == sorted(r.rollout_id for r in rollouts)
    assert max(Counter(claimed).values()) == 1


async def test_concurrent_dequeues_from_threads_never_share_a_rollout(store: LightningStore) -> None:
    """Acceptance: several threads, each with its own event loop, dequeuing from one store."""
    require_threads(store)
    rollouts = await store.enqueue_many_rollouts([EnqueueRolloutRequest(input=i) for i in range(80)])

    async def worker(i: int) -> list[str]:
        got: list[str] = []
        while True:
            batch = await store.dequeue_many_rollouts(limit=1 + i % 3, worker_id=f"t-{i}")
            if not batch:
                return got
            got.extend(r.rollout_id for r in batch)

    per_thread = await asyncio.to_thread(run_in_threads, 4, worker, store)
    claimed = [rid for ids in per_thread for rid in ids]
    assert sorted(claimed) == sorted(r.rollout_id for r in rollouts)
    assert max(Counter(claimed).values()) == 1
    attempts = await store.query_rollouts(status_in=["preparing"])
    assert attempts.total == 80
    assert all(isinstance(r, AttemptedRollout) and r.attempt.sequence_id == 1 for r in attempts)


async def test_waiting_dequeues_share_work_fairly_and_exactly_once(store: LightningStore) -> None:
    async def waiter(i: int) -> AttemptedRollout | None:
        return await store.dequeue_rollout(worker_id=f"w-{i}", timeout=10)

    waiting = [asyncio.ensure_future(waiter(i)) for i in range(5)]
    await asyncio.sleep(0.05)
    rollouts = [await store.enqueue_rollout(i) for i in range(5)]
    got = await asyncio.wait_for(asyncio.gather(*waiting), 20)
    assert sorted(r.rollout_id for r in got if r is not None) == sorted(r.rollout_id for r in rollouts)


async def test_spans_written_and_read_concurrently(store: LightningStore) -> None:
    rollout = await claim(store)
    rid, aid = rollout.rollout_id, rollout.attempt.attempt_id

    async def writer(i: int) -> None:
        for j in range(10):
            ids = await store.get_many_span_sequence_ids([(rid, aid)] * 3)
            await store.add_many_spans([make_span(rid, aid, s, name=f"w{i}-{j}") for s in ids])

    async def reader() -> int:
        seen = 0
        for _ in range(20):
            seen = max(seen, (await store.query_spans(rid, name_contains="w")).total)
            await asyncio.sleep(0)
        return seen

    await asyncio.gather(*(writer(i) for i in range(5)), reader(), reader())
    spans = await store.query_spans(rid)
    assert spans.total == 150
    assert sorted(s.sequence_id for s in spans) == list(range(1, 151))


async def test_spans_and_sequence_ids_from_threads(store: LightningStore) -> None:
    require_threads(store)
    rollout = await claim(store)
    rid, aid = rollout.rollout_id, rollout.attempt.attempt_id

    async def writer(i: int) -> list[int]:
        allocated: list[int] = []
        for _ in range(15):
            seq = await store.get_next_span_sequence_id(rid, aid)
            allocated.append(seq)
            await store.add_span(make_span(rid, aid, seq, name=f"t{i}"))
            await store.query_spans(rid, "latest", name=f"t{i}")
        return allocated

    allocated = await asyncio.to_thread(run_in_threads, 4, writer, store)
    flat = sorted(s for seqs in allocated for s in seqs)
    assert flat == list(range(1, 61))  # no sequence id handed out twice
    assert (await store.query_spans(rid)).total == 60


async def test_wait_for_rollouts_is_woken_from_another_thread(store: LightningStore) -> None:
    require_threads(store)
    rollouts = [await claim(store) for _ in range(3)]

    async def finish(_: int) -> None:
        await asyncio.sleep(0.05)
        for r in rollouts:
            await store.update_attempt(r.rollout_id, "latest", status="succeeded")

    finisher = asyncio.ensure_future(asyncio.to_thread(run_in_threads, 1, finish, store))
    done = await store.wait_for_rollouts(rollout_ids=[r.rollout_id for r in rollouts], timeout=20)
    await finisher
    assert sorted(r.rollout_id for r in done) == sorted(r.rollout_id for r in rollouts)


async def test_concurrent_updates_of_one_rollout_keep_it_consistent(store: LightningStore) -> None:
    rollout = await claim(store)

    async def bump(i: int) -> None:
        await store.update_attempt(rollout.rollout_id, "latest", metadata={"i": i})
        await store.update_rollout(rollout.rollout_id, metadata={"i": i})

    await asyncio.gather(*(bump(i) for i in range(20)))
    final = await store.get_rollout_by_id(rollout.rollout_id)
    assert final is not None and isinstance(final.metadata, dict) and final.metadata["i"] in range(20)
    assert (await store.query_attempts(rollout.rollout_id)).total == 1
