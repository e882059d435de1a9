"""Contract: attempts, the status machine, retries and the watchdog (every backend, injected clock)."""

from __future__ import annotations

import pytest
from agl.store import LightningStore
from agl.testing.clock import ManualClock
from agl.testing.spans import claim, make_span, span_for
from agl.types import (
    Attempt,
    AttemptedRollout,
    AttemptStatus,
    InvalidRequestError,
    NotFoundError,
    RolloutConfig,
    RolloutStatus,
)


async def rollout_status(store: LightningStore, rollout_id: str) -> str:
    rollout = await store.get_rollout_by_id(rollout_id)
    assert rollout is not None
    return rollout.status


async def attempt_status(store: LightningStore, rollout_id: str) -> str:
    """The status of the rollout's latest attempt (which must exist)."""
    attempt = await store.get_latest_attempt(rollout_id)
    assert attempt is not None
    return attempt.status


async def test_update_attempt_errors(store: LightningStore) -> None:
    with pytest.raises(NotFoundError, match="Rollout ro-missing not found"):
        await store.update_attempt("ro-missing", "latest", status="failed")
    queued = await store.enqueue_rollout("x")
    with pytest.raises(NotFoundError, match=f"No attempts found for rollout {queued.rollout_id}"):
        await store.update_attempt(queued.rollout_id, "latest", status="failed")
    rollout = await claim(store)
    with pytest.raises(NotFoundError, match=f"Attempt at-missing not found for rollout {rollout.rollout_id}"):
        await store.update_attempt(rollout.rollout_id, "at-missing", status="failed")
    with pytest.raises(InvalidRequestError, match="status"):
        await store.update_attempt(rollout.rollout_id, "latest", status="exploded")  # pyright: ignore[reportArgumentType]


async def test_update_attempt_writes_fields(store: LightningStore, clock: ManualClock) -> None:
    rollout = await claim(store)
    attempt_id = rollout.attempt.attempt_id
    updated = await store.update_attempt(
        rollout.rollout_id,
        attempt_id,
        worker_id="w-9",
        last_heartbeat_time=clock.now + 1,
        metadata={"k": "v"},
    )
    assert updated.attempt_id == attempt_id
    assert updated.worker_id == "w-9"
    assert updated.last_heartbeat_time == clock.now + 1
    assert updated.metadata == {"k": "v"}
    assert updated.status == "preparing"
    assert await store.get_latest_attempt(rollout.rollout_id) == updated


async def test_success_sets_end_times_and_finishes_the_rollout(
    store: LightningStore, clock: ManualClock
) -> None:
    rollout = await claim(store)
    await span_for(store, rollout)
    assert await rollout_status(store, rollout.rollout_id) == "running"
    clock.advance(3)
    attempt = await store.update_attempt(rollout.rollout_id, "latest", status="succeeded")
    assert attempt.status == "succeeded"
    assert attempt.end_time == clock.now
    finished = await store.get_rollout_by_id(rollout.rollout_id)
    assert finished is not None
    assert finished.status == "succeeded"
    assert finished.end_time == clock.now


async def test_failure_without_retry_fails_the_rollout(store: LightningStore) -> None:
    rollout = await claim(store)
    attempt = await store.update_attempt(rollout.rollout_id, "latest", status="failed")
    assert attempt.end_time is not None
    assert await rollout_status(store, rollout.rollout_id) == "failed"
    assert await store.dequeue_rollout() is None


async def test_failed_attempt_is_retried_and_succeeds_on_attempt_two(store: LightningStore) -> None:
    """Acceptance: a rollout whose attempt fails with retry allowed is requeued and succeeds on attempt 2."""
    config = RolloutConfig(max_attempts=2, retry_condition=["failed"])
    first = await claim(store, config=config, worker_id="w-1")
    await span_for(store, first)
    await store.update_attempt(first.rollout_id, first.attempt.attempt_id, status="failed")
    requeued = await store.get_rollout_by_id(first.rollout_id)
    assert requeued is not None
    assert requeued.status == "requeuing"
    assert requeued.end_time is None

    second = await store.dequeue_rollout(worker_id="w-2")
    assert second is not None
    assert second.rollout_id == first.rollout_id
    assert second.attempt.sequence_id == 2
    assert second.attempt.attempt_id != first.attempt.attempt_id
    assert second.status == "preparing"
    await span_for(store, second)
    assert await rollout_status(store, first.rollout_id) == "running"
    await store.update_attempt(second.rollout_id, "latest", status="succeeded")

    done = await store.wait_for_rollouts(rollout_ids=[first.rollout_id], timeout=0)
    assert [r.status for r in done] == ["succeeded"]
    attempts = await store.query_attempts(first.rollout_id)
    assert [(a.sequence_id, a.status, a.worker_id) for a in attempts] == [
        (1, "failed", "w-1"),
        (2, "succeeded", "w-2"),
    ]
    assert await store.dequeue_rollout() is None  # requeued exactly once


async def test_retries_stop_at_max_attempts(store: LightningStore) -> None:
    config = RolloutConfig(max_attempts=2, retry_condition=["failed"])
    rollout = await claim(store, config=config)
    await store.update_attempt(rollout.rollout_id, "latest", status="failed")
    second = await store.dequeue_rollout()
    assert second is not None and second.attempt.sequence_id == 2
    await store.update_attempt(rollout.rollout_id, "latest", status="failed")
    assert await rollout_status(store, rollout.rollout_id) == "failed"
    assert await store.dequeue_rollout() is None


async def test_status_outside_retry_condition_fails(store: LightningStore) -> None:
    config = RolloutConfig(max_attempts=3, retry_condition=["timeout"])
    rollout = await claim(store, config=config)
    await store.update_attempt(rollout.rollout_id, "latest", status="failed")
    assert await rollout_status(store, rollout.rollout_id) == "failed"


async def test_only_the_latest_attempt_propagates(store: LightningStore) -> None:
    rollout = await claim(store)
    second = await store.start_attempt(rollout.rollout_id)
    await store.update_attempt(rollout.rollout_id, rollout.attempt.attempt_id, status="succeeded")
    assert await rollout_status(store, rollout.rollout_id) == "preparing"
    await store.update_attempt(rollout.rollout_id, second.attempt.attempt_id, status="running")
    assert await rollout_status(store, rollout.rollout_id) == "running"
    first = (await store.query_attempts(rollout.rollout_id))[0]
    assert first.status == "succeeded"


async def test_attempt_status_propagation_table(store: LightningStore) -> None:
    table: list[tuple[AttemptStatus, str]] = [
        ("preparing", "preparing"),
        ("running", "running"),
        ("succeeded", "succeeded"),
        ("failed", "failed"),
        ("timeout", "failed"),
        ("unresponsive", "failed"),
    ]
    for status, expected in table:
        rollout = await claim(store)
        await store.update_attempt(rollout.rollout_id, "latest", status=status)
        assert await rollout_status(store, rollout.rollout_id) == expected, status


async def test_heartbeat_stops_attempt_becomes_unresponsive(
    store: LightningStore, clock: ManualClock
) -> None:
    """Acceptance: an attempt whose heartbeat stops is marked unresponsive; the rollout fails or is requeued."""
    no_retry = await claim(store, config=RolloutConfig(unresponsive_seconds=30))
    with_retry = await claim(
        store, config=RolloutConfig(unresponsive_seconds=30, max_attempts=2, retry_condition=["unresponsive"])
    )
    await span_for(store, no_retry)
    await span_for(store, with_retry)
    clock.advance(20)
    await span_for(store, with_retry)  # still alive
    clock.advance(20)  # no_retry silent for 40 s, with_retry for 20 s
    assert await rollout_status(store, no_retry.rollout_id) == "failed"
    attempt = await store.get_latest_attempt(no_retry.rollout_id)
    assert attempt is not None
    assert attempt.status == "unresponsive"
    assert attempt.end_time is None  # Decision (8): unresponsive may recover, so no end time
    assert await rollout_status(store, with_retry.rollout_id) == "running"

    clock.advance(15)  # with_retry now silent for 35 s
    assert await rollout_status(store, with_retry.rollout_id) == "requeuing"
    retried = await store.dequeue_rollout()
    assert retried is not None and retried.rollout_id == with_retry.rollout_id
    assert retried.attempt.sequence_id == 2


async def test_attempt_without_any_heartbeat_becomes_unresponsive(
    store: LightningStore, clock: ManualClock
) -> None:
    rollout = await claim(store, config=RolloutConfig(unresponsive_seconds=10))
    clock.advance(9)
    assert await attempt_status(store, rollout.rollout_id) == "preparing"
    clock.advance(2)
    assert await attempt_status(store, rollout.rollout_id) == "unresponsive"


async def test_attempt_past_timeout_seconds_times_out(store: LightningStore, clock: ManualClock) -> None:
    """Acceptance: an attempt past timeout_seconds is marked timeout; the rollout fails or is requeued."""
    no_retry = await claim(store, config=RolloutConfig(timeout_seconds=60))
    with_retry = await claim(
        store, config=RolloutConfig(timeout_seconds=60, max_attempts=3, retry_condition=["timeout"])
    )
    for _ in range(5):  # busy the whole time: heartbeats do not prevent a timeout
        clock.advance(12.5)
        await span_for(store, no_retry)
        await span_for(store, with_retry)
    attempts = await store.query_attempts(no_retry.rollout_id)
    assert attempts[0].status == "timeout"
    assert attempts[0].end_time == clock.now  # Decision (8): a timed-out attempt has ended
    assert await rollout_status(store, no_retry.rollout_id) == "failed"
    rollout = await store.get_rollout_by_id(no_retry.rollout_id)
    assert rollout is not None and rollout.end_time == clock.now
    assert await rollout_status(store, with_retry.rollout_id) == "requeuing"
    retried = await store.dequeue_rollout()
    assert retried is not None and retried.rollout_id == with_retry.rollout_id


async def test_rollouts_timed_out_by_one_scan_are_requeued_in_creation_order(
    store: LightningStore, clock: ManualClock
) -> None:
    """Rollout ids are random: a scan that requeued by id (SQL before the fix) made the queue order random."""
    config = RolloutConfig(timeout_seconds=60, max_attempts=2, retry_condition=["timeout"])
    created = [(await claim(store, config=config)).rollout_id for _ in range(8)]
    clock.advance(61)
    retried = await store.dequeue_many_rollouts(limit=8)
    assert [r.rollout_id for r in retried] == created


async def test_timeout_wins_over_unresponsive(store: LightningStore, clock: ManualClock) -> None:
    rollout = await claim(store, config=RolloutConfig(timeout_seconds=10, unresponsive_seconds=5))
    clock.advance(11)
    assert await attempt_status(store, rollout.rollout_id) == "timeout"


async def test_watchdog_leaves_finished_attempts_alone(store: LightningStore, clock: ManualClock) -> None:
    rollout = await claim(store, config=RolloutConfig(timeout_seconds=5, unresponsive_seconds=5))
    await store.update_attempt(rollout.rollout_id, "latest", status="succeeded")
    clock.advance(100)
    assert await attempt_status(store, rollout.rollout_id) == "succeeded"
    assert await rollout_status(store, rollout.rollout_id) == "succeeded"


async def _span_past_the_limit(
    store: LightningStore, clock: ManualClock, config: RolloutConfig
) -> tuple[AttemptedRollout, Attempt]:
    """A claimed rollout whose attempt broke its 5 s limit (a retry is pending) then sent a span; the rollout and
    its latest attempt, whose heartbeat the span refreshed."""
    rollout = await claim(store, config=config)
    clock.advance(6)
    assert await rollout_status(store, rollout.rollout_id) == "requeuing"
    await span_for(store, rollout)
    attempt = await store.get_latest_attempt(rollout.rollout_id)
    assert attempt is not None and attempt.last_heartbeat_time == clock.now
    return rollout, attempt


async def test_unresponsive_attempt_recovers_with_a_span(store: LightningStore, clock: ManualClock) -> None:
    config = RolloutConfig(unresponsive_seconds=5, max_attempts=2, retry_condition=["unresponsive"])
    rollout, attempt = await _span_past_the_limit(store, clock, config)
    assert attempt.status == "running"
    assert await rollout_status(store, rollout.rollout_id) == "running"
    assert await store.dequeue_rollout() is None  # the pending retry entry is stale now


async def test_late_span_of_a_timed_out_attempt_keeps_the_retry(
    store: LightningStore, clock: ManualClock
) -> None:
    """Decision (18): a late span of an ended attempt refreshes its heartbeat only."""
    config = RolloutConfig(timeout_seconds=5, max_attempts=2, retry_condition=["timeout"])
    rollout, attempt = await _span_past_the_limit(store, clock, config)
    assert attempt.status == "timeout"
    assert await rollout_status(store, rollout.rollout_id) == "requeuing"
    retried = await store.dequeue_rollout()
    assert retried is not None and retried.attempt.sequence_id == 2


async def test_late_span_of_a_failed_attempt_changes_nothing(store: LightningStore) -> None:
    rollout = await claim(store, config=RolloutConfig(max_attempts=2, retry_condition=["failed"]))
    await store.update_attempt(rollout.rollout_id, "latest", status="failed")
    await span_for(store, rollout)
    assert await attempt_status(store, rollout.rollout_id) == "failed"
    assert await rollout_status(store, rollout.rollout_id) == "requeuing"


async def test_span_of_an_older_attempt_does_not_move_the_rollout(store: LightningStore) -> None:
    rollout = await claim(store)
    await store.start_attempt(rollout.rollout_id)
    await span_for(store, rollout)  # attempt 1
    attempts = await store.query_attempts(rollout.rollout_id)
    assert [a.status for a in attempts] == ["running", "preparing"]
    assert await rollout_status(store, rollout.rollout_id) == "preparing"


@pytest.mark.parametrize("queued_status", ["queuing", "requeuing"])
async def test_span_promotes_a_queued_rollout_with_a_live_attempt(
    store: LightningStore, queued_status: RolloutStatus
) -> None:
    """Decision (5): the misspelt ``queueing`` of the reference is fixed; both queued statuses are promoted."""
    rollout = await claim(store)
    await store.update_rollout(rollout.rollout_id, status=queued_status)
    await span_for(store, rollout)
    assert await rollout_status(store, rollout.rollout_id) == "running"
    assert await store.dequeue_rollout() is None


async def test_span_writes_are_not_watched(store: LightningStore, clock: ManualClock) -> None:
    """The watchdog runs before reads and updates, not before span writes: a span refreshes the heartbeat."""
    rollout = await claim(store, config=RolloutConfig(unresponsive_seconds=10))
    await span_for(store, rollout)
    clock.advance(11)
    await store.add_span(make_span(rollout.rollout_id, rollout.attempt.attempt_id, 99))
    assert await attempt_status(store, rollout.rollout_id) == "running"


async def test_watchdog_applies_limits_changed_by_update_rollout(
    store: LightningStore, clock: ManualClock
) -> None:
    rollout = await claim(store)
    clock.advance(100)
    assert await rollout_status(store, rollout.rollout_id) == "preparing"  # no limits: never times out
    await store.update_rollout(rollout.rollout_id, config=RolloutConfig(timeout_seconds=50))
    assert await rollout_status(store, rollout.rollout_id) == "failed"


async def test_a_cancelled_rollout_stays_cancelled_when_its_attempt_ends(store: LightningStore) -> None:
    rollout = await claim(store)
    await store.update_rollout(rollout.rollout_id, status="cancelled")
    attempt = await store.update_attempt(rollout.rollout_id, "latest", status="succeeded")
    assert attempt.status == "succeeded"
    after = await store.get_rollout_by_id(rollout.rollout_id)
    assert after is not None and after.status == "cancelled"


async def test_finish_attempt_drops_the_success_of_an_attempt_a_later_one_took_over(
    store: LightningStore,
) -> None:
    """The store gave up on an attempt and retried the rollout; the first runner reports success late. Decided
    in the write itself (a runner asking first races the watchdog), the late success is dropped: a rollout
    never has two attempts that succeeded (the multi-host test saw two)."""
    rollout = await claim(store, worker_id="w-old")
    rid, old = rollout.rollout_id, rollout.attempt.attempt_id
    await store.update_attempt(rid, old, metadata={"note": "kept"})
    retry = await store.start_attempt(rid, worker_id="w-new")
    late = await store.finish_attempt(rid, old, [make_span(rid, old, 0)], status="succeeded")
    assert late.attempt.status == "failed" and late.attempt.end_time is not None
    assert late.attempt.metadata is not None and late.attempt.metadata["note"] == "kept"
    error = late.attempt.metadata["error"]
    assert error["type"] == "ResultDropped" and "a later attempt took over its rollout" in error["message"]
    assert [s.sequence_id for s in late.spans] == [1]  # its spans are kept
    current = await store.get_rollout_by_id(rid)
    assert isinstance(current, AttemptedRollout) and current.attempt.attempt_id == retry.attempt.attempt_id
    assert current.status == "preparing"  # the retry is untouched
    # metadata brought with the outcome is kept too; a failure is written as reported
    again = await store.finish_attempt(rid, old, status="succeeded", metadata={"final_reward": 1.0})
    assert again.attempt.metadata is not None and again.attempt.metadata["final_reward"] == 1.0
    assert again.attempt.metadata["error"]["type"] == "ResultDropped"
    assert (await store.finish_attempt(rid, old, status="failed", metadata={})).attempt.metadata == {}
    won = await store.finish_attempt(rid, retry.attempt.attempt_id, status="succeeded")
    assert won.attempt.status == "succeeded"
    assert [a.status for a in await store.query_attempts(rid)] == ["failed", "succeeded"]
    assert await rollout_status(store, rid) == "succeeded"


async def test_finish_attempt_drops_a_success_reported_after_the_rollout_was_cancelled(
    store: LightningStore,
) -> None:
    rollout = await claim(store)
    rid, aid = rollout.rollout_id, rollout.attempt.attempt_id
    await store.update_rollout(rid, status="cancelled")
    late = await store.finish_attempt(rid, aid, status="succeeded")
    assert late.attempt.status == "failed"
    assert (
        late.attempt.metadata is not None
        and "its rollout was cancelled" in late.attempt.metadata["error"]["message"]
    )
    assert await rollout_status(store, rid) == "cancelled"
    # update_attempt stays the reference's plain write
    assert (await store.update_attempt(rid, aid, status="succeeded")).status == "succeeded"
