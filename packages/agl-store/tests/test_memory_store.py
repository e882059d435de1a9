"""What is particular to ``InMemoryLightningStore`` (the contract itself is in test_conformance_*.py)."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable

import pytest
from agl.store import InMemoryLightningStore
from agl.testing.clock import ManualClock
from agl.testing.spans import claim, make_span
from agl.types import AttemptedRollout, EnqueueRolloutRequest, InvalidRequestError, RolloutConfig


async def test_capabilities() -> None:
    caps = InMemoryLightningStore().capabilities
    assert caps == {"thread_safe": True, "async_safe": True, "zero_copy": False, "otlp_traces": False}


async def test_watchdog_is_debounced_by_the_injected_clock(clock: ManualClock) -> None:
    store = InMemoryLightningStore(clock=clock, scan_debounce_seconds=10)
    rollout = await claim(store, config=RolloutConfig(timeout_seconds=5))  # scans happen here, at t=0
    clock.advance(6)  # timed out, but the last scan was 6 s ago: no scan yet
    attempt = await store.get_latest_attempt(rollout.rollout_id)
    assert attempt is not None and attempt.status == "preparing"
    clock.advance(4)  # 10 s since the last scan
    attempt = await store.get_latest_attempt(rollout.rollout_id)
    assert attempt is not None and attempt.status == "timeout"


async def test_span_writes_do_not_scan(clock: ManualClock) -> None:
    store = InMemoryLightningStore(clock=clock, scan_debounce_seconds=0)
    rollout = await claim(store, config=RolloutConfig(timeout_seconds=5))
    clock.advance(6)
    await store.add_span(make_span(rollout.rollout_id, rollout.attempt.attempt_id, 1))
    await store.get_next_span_sequence_id(rollout.rollout_id, rollout.attempt.attempt_id)
    await store.update_worker("w")
    await store.get_latest_resources()
    assert store._rollouts[rollout.rollout_id].attempts[-1].status == "running"  # untouched so far
    latest = await store.get_latest_attempt(rollout.rollout_id)
    assert latest is not None and latest.status == "timeout"


async def test_add_span_returns_the_given_object() -> None:
    store = InMemoryLightningStore()
    rollout = await claim(store)
    span = make_span(rollout.rollout_id, rollout.attempt.attempt_id, 1)
    assert await store.add_span(span) is span
    batch = [make_span(rollout.rollout_id, rollout.attempt.attempt_id, i) for i in (2, 3)]
    stored = await store.add_many_spans(batch)
    assert all(a is b for a, b in zip(stored, batch, strict=True))


async def test_spans_that_are_not_json_are_rejected_with_a_clear_error() -> None:
    store = InMemoryLightningStore()
    rollout = await claim(store)
    span = make_span(rollout.rollout_id, rollout.attempt.attempt_id, 1, attributes={"blob": object()})
    with pytest.raises(InvalidRequestError, match="not JSON-serialisable"):
        await store.add_span(span)
    assert (await store.query_spans(rollout.rollout_id)).total == 0


async def test_results_are_copies_callers_cannot_corrupt_the_store() -> None:
    store = InMemoryLightningStore()
    rollout = await store.enqueue_rollout("x", metadata={"k": 1}, config=RolloutConfig(max_attempts=2))
    assert rollout.metadata is not None
    rollout.metadata["k"] = 2
    rollout.config.max_attempts = 5
    rollout.status = "succeeded"
    claimed = await store.dequeue_rollout()
    assert claimed is not None
    claimed.attempt.status = "failed"
    fetched = await store.get_rollout_by_id(rollout.rollout_id)
    assert fetched is not None
    assert fetched.metadata == {"k": 1} and fetched.config.max_attempts == 2 and fetched.status == "preparing"
    assert isinstance(fetched, AttemptedRollout) and fetched.attempt.status == "preparing"


async def test_a_dequeue_waiting_in_one_loop_is_woken_by_another_thread() -> None:
    store = InMemoryLightningStore()

    def enqueue_from_a_thread() -> None:
        time.sleep(0.05)
        asyncio.run(store.enqueue_rollout("from another thread"))

    thread = threading.Thread(target=enqueue_from_a_thread)
    thread.start()
    # The memory store never polls: back before the hour-long timeout means the other thread woke it.
    got = await asyncio.wait_for(store.dequeue_rollout(timeout=3600), 60)
    thread.join()
    assert got is not None and got.input == "from another thread"


async def test_close_releases_waiting_calls() -> None:
    store = InMemoryLightningStore()
    rollout = await claim(store)
    waiting = asyncio.ensure_future(store.wait_for_rollouts(rollout_ids=[rollout.rollout_id], timeout=None))
    dequeuing = asyncio.ensure_future(store.dequeue_rollout(timeout=None))  # pyright: ignore[reportArgumentType]
    await asyncio.sleep(0.05)
    await store.close()
    assert await asyncio.wait_for(waiting, 5) == []
    assert await asyncio.wait_for(dequeuing, 5) is None


async def test_store_usable_from_a_fresh_event_loop_in_another_thread() -> None:
    store = InMemoryLightningStore()
    rollout = await store.enqueue_rollout("x")
    result: list[object] = []
    thread = threading.Thread(target=lambda: result.append(asyncio.run(store.dequeue_rollout(timeout=1))))
    thread.start()
    thread.join(10)
    assert len(result) == 1 and getattr(result[0], "rollout_id", None) == rollout.rollout_id


async def _query_cost(total: int) -> float:
    """CPU seconds per status- and id-filtered query matching one rollout among ``total``."""
    store = InMemoryLightningStore()
    await store.enqueue_many_rollouts([EnqueueRolloutRequest(input=i) for i in range(total)])
    finished = await claim(store)
    await store.update_attempt(finished.rollout_id, "latest", status="succeeded")
    t0 = time.process_time()
    for _ in range(300):
        assert (await store.query_rollouts(status_in=["succeeded"])).total == 1
        assert (await store.query_rollouts(rollout_id_in=[finished.rollout_id])).total == 1
    return (time.process_time() - t0) / 600


async def test_filtered_queries_cost_does_not_grow_with_the_store() -> None:
    small, large = await _query_cost(100), await _query_cost(10_000)
    # a scan would make the large store ~100x slower; the indexes keep it flat
    assert large < small * 5, f"{small * 1e6:.0f} us at 100 rollouts, {large * 1e6:.0f} us at 10,000"


async def test_cancelled_waits_leave_nothing_behind() -> None:
    store = InMemoryLightningStore()
    waits = [asyncio.ensure_future(store.dequeue_rollout(timeout=30)) for _ in range(20)]
    await asyncio.sleep(0.05)
    for w in waits:
        w.cancel()
    await asyncio.gather(*waits, return_exceptions=True)
    assert not store._queue_changed._waiters


async def test_a_wait_for_several_rollouts_wakes_only_when_the_one_it_waits_on_finishes() -> None:
    """A wait cannot return before all its rollouts finish: it waits on the last one still pending, the
    others finishing first do not wake it (each would cost a cross-thread wake-up), and it returns once all
    have finished, in whatever order."""
    store = InMemoryLightningStore()
    first, second, third = [await claim(store) for _ in range(3)]
    ids = [r.rollout_id for r in (first, second, third)]
    waiting = asyncio.ensure_future(store.wait_for_rollouts(rollout_ids=ids, timeout=None))
    await _until(lambda: list(store._rollout_finished._by_key) == [third.rollout_id])
    for r in (first, second):
        await store.update_attempt(r.rollout_id, r.attempt.attempt_id, status="succeeded")
    assert list(store._rollout_finished._by_key) == [third.rollout_id]  # not woken
    await store.update_attempt(third.rollout_id, third.attempt.attempt_id, status="failed")
    finished = await asyncio.wait_for(waiting, 5)
    assert sorted(r.rollout_id for r in finished) == sorted(ids)
    assert len(store._rollout_finished) == 0

    # out of order: the last one finishes first, then the wait moves on to the next one still pending
    rollouts = [await claim(store) for _ in range(3)]
    ids = [r.rollout_id for r in rollouts]
    waiting = asyncio.ensure_future(store.wait_for_rollouts(rollout_ids=ids, timeout=None))
    await _until(lambda: list(store._rollout_finished._by_key) == [ids[2]])
    for r in (rollouts[2], rollouts[0]):
        await store.update_attempt(r.rollout_id, r.attempt.attempt_id, status="succeeded")
    await _until(lambda: list(store._rollout_finished._by_key) == [ids[1]])
    assert not waiting.done()
    await store.update_attempt(ids[1], rollouts[1].attempt.attempt_id, status="succeeded")
    assert sorted(r.rollout_id for r in await asyncio.wait_for(waiting, 5)) == sorted(ids)


async def test_timed_out_and_cancelled_waits_for_rollouts_leave_nothing_behind() -> None:
    store = InMemoryLightningStore()
    rollout = await claim(store)
    assert await store.wait_for_rollouts(rollout_ids=[rollout.rollout_id], timeout=0.01) == []
    waits = [
        asyncio.ensure_future(store.wait_for_rollouts(rollout_ids=[rollout.rollout_id], timeout=30))
        for _ in range(5)
    ]
    await _until(lambda: len(store._rollout_finished) == 1)
    for w in waits:
        w.cancel()
    await asyncio.gather(*waits, return_exceptions=True)
    assert len(store._rollout_finished) == 0


async def _until(condition: Callable[[], bool], timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "condition not reached"
        await asyncio.sleep(0.001)
