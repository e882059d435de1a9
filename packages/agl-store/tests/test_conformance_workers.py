"""Contract: workers, their heartbeats and the status the store derives from their attempts (every backend)."""

from __future__ import annotations

from agl.store import LightningStore
from agl.testing.clock import ManualClock
from agl.testing.spans import claim, span_for
from agl.types import RolloutConfig, Worker


async def worker(store: LightningStore, worker_id: str) -> Worker:
    found = await store.get_worker_by_id(worker_id)
    assert found is not None
    return found


async def test_update_worker_is_a_heartbeat_only(store: LightningStore, clock: ManualClock) -> None:
    assert await store.get_worker_by_id("w") is None
    created = await store.update_worker("w", heartbeat_stats={"gpu": 0.5})
    assert created.worker_id == "w"
    assert created.status == "unknown"
    assert created.heartbeat_stats == {"gpu": 0.5}
    assert created.last_heartbeat_time == clock.now
    clock.advance(3)
    beat = await store.update_worker("w")
    assert beat.heartbeat_stats == {"gpu": 0.5}  # kept when not given
    assert beat.last_heartbeat_time == clock.now
    replaced = await store.update_worker("w", heartbeat_stats={"gpu": 0.9})
    assert replaced.heartbeat_stats == {"gpu": 0.9}
    assert await worker(store, "w") == replaced


async def test_worker_follows_its_attempts(store: LightningStore, clock: ManualClock) -> None:
    await store.update_worker("w", heartbeat_stats={"n": 1})
    heartbeat_time = clock.now
    clock.advance(1)
    rollout = await claim(store, worker_id="w")
    busy = await worker(store, "w")
    assert busy.status == "busy"
    assert busy.current_rollout_id == rollout.rollout_id
    assert busy.current_attempt_id == rollout.attempt.attempt_id
    assert busy.last_dequeue_time == clock.now
    assert busy.last_busy_time == clock.now
    clock.advance(1)
    await store.update_attempt(rollout.rollout_id, "latest", status="succeeded")
    idle = await worker(store, "w")
    assert idle.status == "idle"
    assert idle.current_rollout_id is None and idle.current_attempt_id is None
    assert idle.last_idle_time == clock.now
    # the status machine never touches heartbeat fields
    assert idle.heartbeat_stats == {"n": 1}
    assert idle.last_heartbeat_time == heartbeat_time


async def test_failed_attempt_makes_worker_idle(store: LightningStore) -> None:
    rollout = await claim(store, worker_id="w")
    await store.update_attempt(rollout.rollout_id, "latest", status="failed")
    assert (await worker(store, "w")).status == "idle"


async def test_empty_dequeue_marks_worker_idle(store: LightningStore, clock: ManualClock) -> None:
    assert await store.dequeue_rollout(worker_id="w") is None
    idle = await worker(store, "w")
    assert idle.status == "idle"
    assert idle.last_idle_time == clock.now and idle.last_dequeue_time == clock.now
    clock.advance(2)
    assert await store.dequeue_many_rollouts(limit=3, worker_id="w") == []
    again = await worker(store, "w")
    assert again.last_dequeue_time == clock.now
    assert again.last_idle_time == idle.last_idle_time  # already idle: only the dequeue time moves


async def test_timed_out_or_unresponsive_attempt_makes_worker_unknown(
    store: LightningStore, clock: ManualClock
) -> None:
    timed = await claim(store, config=RolloutConfig(timeout_seconds=5), worker_id="w-timeout")
    silent = await claim(store, config=RolloutConfig(unresponsive_seconds=5), worker_id="w-silent")
    clock.advance(6)
    workers = {w.worker_id: w for w in await store.query_workers()}
    assert workers["w-timeout"].status == "unknown"
    assert workers["w-silent"].status == "unknown"
    assert workers["w-timeout"].current_rollout_id is None
    assert workers["w-silent"].last_idle_time == clock.now
    # a recovering attempt makes its worker busy again
    await span_for(store, silent)
    recovered = await worker(store, "w-silent")
    assert recovered.status == "busy"
    assert recovered.current_attempt_id == silent.attempt.attempt_id
    assert timed.rollout_id != silent.rollout_id


async def test_dequeue_many_binds_the_worker_to_the_last_claim(store: LightningStore) -> None:
    for i in range(3):
        await store.enqueue_rollout(i)
    claimed = await store.dequeue_many_rollouts(limit=3, worker_id="w")
    assert all(r.attempt.worker_id == "w" for r in claimed)
    busy = await worker(store, "w")
    assert busy.status == "busy"
    assert busy.current_attempt_id == claimed[-1].attempt.attempt_id


async def test_start_rollout_and_start_attempt_make_worker_busy(store: LightningStore) -> None:
    started = await store.start_rollout("x", worker_id="w-1")
    assert (await worker(store, "w-1")).current_rollout_id == started.rollout_id
    retried = await store.start_attempt(started.rollout_id, worker_id="w-2")
    w2 = await worker(store, "w-2")
    assert w2.status == "busy" and w2.current_attempt_id == retried.attempt.attempt_id


async def test_reassigning_an_attempt_syncs_the_new_worker(store: LightningStore) -> None:
    rollout = await claim(store)
    await store.update_attempt(rollout.rollout_id, "latest", worker_id="w-new")
    assigned = await worker(store, "w-new")
    assert assigned.status == "busy"
    assert assigned.current_attempt_id == rollout.attempt.attempt_id
    await store.update_attempt(rollout.rollout_id, "latest", status="succeeded")
    assert (await worker(store, "w-new")).status == "idle"


async def test_query_workers(store: LightningStore) -> None:
    await claim(store, worker_id="runner-1")
    await store.dequeue_rollout(worker_id="runner-2")
    await store.update_worker("other-3")
    statuses = {w.worker_id: w.status for w in await store.query_workers()}
    assert statuses == {"runner-1": "busy", "runner-2": "idle", "other-3": "unknown"}
    assert [w.worker_id for w in await store.query_workers(status_in=["busy", "idle"])] == [
        "runner-1",
        "runner-2",
    ]
    assert [w.worker_id for w in await store.query_workers(worker_id_contains="runner")] == [
        "runner-1",
        "runner-2",
    ]
    either = await store.query_workers(status_in=["unknown"], worker_id_contains="-1", filter_logic="or")
    assert [w.worker_id for w in either] == ["runner-1", "other-3"]
    both = await store.query_workers(status_in=["unknown"], worker_id_contains="-1")
    assert both.total == 0
    page = await store.query_workers(sort_by="worker_id", sort_order="desc", limit=1, offset=1)
    assert [w.worker_id for w in page] == ["runner-1"] and page.total == 3
