"""Contract: rollouts, the queue, start_attempt, update_rollout and wait_for_rollouts (every backend)."""

from __future__ import annotations

import asyncio
import time

import pytest
from agl.store import LightningStore, annotate_rollout
from agl.testing.clock import ManualClock
from agl.testing.spans import claim
from agl.types import (
    LLM,
    AttemptedRollout,
    EnqueueRolloutRequest,
    InvalidRequestError,
    NotFoundError,
    Rollout,
    RolloutConfig,
)


async def test_enqueue_creates_a_queuing_rollout(store: LightningStore, clock: ManualClock) -> None:
    rollout = await store.enqueue_rollout({"q": "1+1"}, mode="train", metadata={"tag": "x"})
    assert rollout.rollout_id.startswith("ro-")
    assert rollout.status == "queuing"
    assert rollout.input == {"q": "1+1"}
    assert rollout.mode == "train"
    assert rollout.start_time == clock.now
    assert rollout.end_time is None
    assert rollout.resources_id is None
    assert rollout.config == RolloutConfig()
    assert rollout.metadata == {"tag": "x"}
    assert not isinstance(rollout, AttemptedRollout)
    fetched = await store.get_rollout_by_id(rollout.rollout_id)
    assert fetched == rollout
    assert (await store.query_attempts(rollout.rollout_id)).total == 0


async def test_enqueue_defaults_metadata_to_empty_dict(store: LightningStore) -> None:
    rollout = await store.enqueue_rollout("x")
    assert rollout.metadata == {}


async def test_enqueue_copies_config_and_metadata(store: LightningStore) -> None:
    config = RolloutConfig(max_attempts=2, retry_condition=["failed"])
    metadata = {"a": 1}
    rollout = await store.enqueue_rollout("x", config=config, metadata=metadata)
    config.retry_condition.append("timeout")
    metadata["b"] = 2
    fetched = await store.get_rollout_by_id(rollout.rollout_id)
    assert fetched is not None
    assert fetched.config.retry_condition == ["failed"]
    assert fetched.metadata == {"a": 1}


async def test_resources_id_defaults_to_latest_and_unknown_ids_are_kept_verbatim(
    store: LightningStore,
) -> None:
    assert (await store.enqueue_rollout("x")).resources_id is None
    first = await store.add_resources({"llm": LLM(endpoint="http://127.0.0.1:1/v1", model="m")})
    assert (await store.enqueue_rollout("x")).resources_id == first.resources_id
    second = await store.add_resources({"llm": LLM(endpoint="http://127.0.0.1:2/v1", model="m")})
    assert (await store.start_rollout("x")).resources_id == second.resources_id
    # Decision (1): an explicit id is not validated.
    assert (await store.enqueue_rollout("x", resources_id="override")).resources_id == "override"


async def test_invalid_mode_is_rejected(store: LightningStore) -> None:
    with pytest.raises(InvalidRequestError, match="mode"):
        await store.enqueue_rollout("x", mode="training")  # pyright: ignore[reportArgumentType]


async def test_start_rollout_creates_first_attempt_and_skips_the_queue(
    store: LightningStore, clock: ManualClock
) -> None:
    started = await store.start_rollout("x", mode="val", worker_id="w-1")
    assert isinstance(started, AttemptedRollout)
    assert started.status == "preparing"
    assert started.attempt.sequence_id == 1
    assert started.attempt.status == "preparing"
    assert started.attempt.worker_id == "w-1"
    assert started.attempt.start_time == clock.now
    assert started.attempt.attempt_id.startswith("at-")
    assert await store.dequeue_rollout() is None


async def test_dequeue_claims_fifo_and_creates_an_attempt(store: LightningStore, clock: ManualClock) -> None:
    ids = [(await store.enqueue_rollout(i)).rollout_id for i in range(3)]
    clock.advance(5)
    got = await store.dequeue_rollout(worker_id="w")
    assert got is not None
    assert isinstance(got, AttemptedRollout)
    assert got.rollout_id == ids[0]
    assert got.status == "preparing"
    assert got.attempt.sequence_id == 1
    assert got.attempt.status == "preparing"
    assert got.attempt.worker_id == "w"
    assert got.attempt.start_time == clock.now
    rest = [r.rollout_id for r in await store.dequeue_many_rollouts(limit=10)]
    assert rest == ids[1:]
    assert await store.dequeue_rollout() is None


async def test_enqueue_many_keeps_order(store: LightningStore) -> None:
    requests = [
        EnqueueRolloutRequest(
            input=i, mode="test", metadata={"i": i}, config=RolloutConfig(max_attempts=i + 1)
        )
        for i in range(5)
    ]
    rollouts = await store.enqueue_many_rollouts(requests)
    assert [r.input for r in rollouts] == list(range(5))
    assert all(r.status == "queuing" and r.mode == "test" for r in rollouts)
    assert [r.config.max_attempts for r in rollouts] == [1, 2, 3, 4, 5]
    claimed = await store.dequeue_many_rollouts(limit=3)
    assert [r.rollout_id for r in claimed] == [r.rollout_id for r in rollouts[:3]]
    assert await store.enqueue_many_rollouts([]) == []


async def test_dequeue_many_limits(store: LightningStore) -> None:
    for i in range(3):
        await store.enqueue_rollout(i)
    assert await store.dequeue_many_rollouts(limit=0) == []
    assert len(await store.dequeue_many_rollouts(limit=2)) == 2
    assert len(await store.dequeue_many_rollouts(limit=2)) == 1
    assert await store.dequeue_many_rollouts(limit=2) == []


async def test_dequeue_skips_rollouts_that_left_the_queued_state(store: LightningStore) -> None:
    a = await store.enqueue_rollout("a")
    b = await store.enqueue_rollout("b")
    await store.update_rollout(a.rollout_id, status="cancelled")
    got = await store.dequeue_rollout()
    assert got is not None and got.rollout_id == b.rollout_id
    assert await store.dequeue_rollout() is None
    cancelled = await store.get_rollout_by_id(a.rollout_id)
    assert cancelled is not None and cancelled.status == "cancelled"


async def test_dequeue_with_timeout_returns_none_when_nothing_arrives(store: LightningStore) -> None:
    started = time.monotonic()
    assert await store.dequeue_rollout(timeout=0.2) is None
    elapsed = time.monotonic() - started
    assert 0.15 <= elapsed < 3.0


NOTIFIED_WITHIN = 20.0
"""How long a woken waiter may take to return: far more than a wake-up needs, and less than any poll that
could find the change unnotified (``only_notifications`` slows the SQL stores' poll to an hour; the HTTP
client's long polls last 25 s), so a waiter back by then was notified."""


@pytest.fixture
def only_notifications(monkeypatch: pytest.MonkeyPatch) -> None:
    """Slow the SQL stores' poll for other processes' writes to once an hour: only a notification wakes."""
    import agl.store.sql._waiting as sql_waiting

    monkeypatch.setattr(sql_waiting, "_FIRST_POLL_INTERVAL", 3600.0)
    monkeypatch.setattr(sql_waiting, "_MAX_POLL_INTERVAL", 3600.0)


async def test_dequeue_with_timeout_wakes_up_when_work_arrives(
    store: LightningStore, only_notifications: None
) -> None:
    waiting = asyncio.ensure_future(store.dequeue_rollout(worker_id="w", timeout=3600))
    await asyncio.sleep(0.05)  # let the dequeue start waiting (a delay, not a wait for a result)
    assert not waiting.done()
    rollout_id = (await store.enqueue_rollout("late")).rollout_id
    got = await asyncio.wait_for(waiting, NOTIFIED_WITHIN)
    assert got is not None and got.rollout_id == rollout_id


async def test_start_attempt_is_a_manual_retry_from_any_state(store: LightningStore) -> None:
    with pytest.raises(NotFoundError, match="not found"):
        await store.start_attempt("ro-missing")
    rollout = await claim(store)
    await store.update_attempt(rollout.rollout_id, "latest", status="succeeded")
    # Decision (9): allowed from a finished rollout, regardless of max_attempts (1 here).
    retried = await store.start_attempt(rollout.rollout_id, worker_id="w-2")
    assert retried.status == "preparing"
    assert retried.end_time is None
    assert retried.attempt.sequence_id == 2
    assert retried.attempt.worker_id == "w-2"
    third = await store.start_attempt(rollout.rollout_id)
    assert third.attempt.sequence_id == 3
    assert [a.sequence_id for a in await store.query_attempts(rollout.rollout_id)] == [1, 2, 3]


async def test_start_attempt_leaves_a_stale_queue_entry_that_is_skipped(store: LightningStore) -> None:
    queued = await store.enqueue_rollout("x")
    await store.start_attempt(queued.rollout_id)
    assert await store.dequeue_rollout() is None
    assert (await store.query_attempts(queued.rollout_id)).total == 1


async def test_update_rollout_writes_only_given_fields(store: LightningStore) -> None:
    rollout = await store.enqueue_rollout({"a": 1}, mode="train", resources_id="rs-1", metadata={"m": 1})
    updated = await store.update_rollout(rollout.rollout_id, metadata={"m": 2})
    assert updated.metadata == {"m": 2}
    assert updated.input == {"a": 1} and updated.mode == "train" and updated.resources_id == "rs-1"
    assert updated.status == "queuing"
    updated = await store.update_rollout(rollout.rollout_id, mode=None, resources_id=None, metadata=None)
    assert updated.mode is None and updated.resources_id is None and updated.metadata is None
    updated = await store.update_rollout(
        rollout.rollout_id, input=[1, 2], config=RolloutConfig(timeout_seconds=3.0, max_attempts=2)
    )
    assert updated.input == [1, 2]
    assert updated.config == RolloutConfig(timeout_seconds=3.0, max_attempts=2)
    assert await store.get_rollout_by_id(rollout.rollout_id) == updated


async def test_update_rollout_errors(store: LightningStore) -> None:
    with pytest.raises(NotFoundError, match="Rollout ro-missing not found"):
        await store.update_rollout("ro-missing", status="cancelled")
    rollout = await store.enqueue_rollout("x")
    with pytest.raises(InvalidRequestError, match="status"):
        await store.update_rollout(rollout.rollout_id, status="done")  # pyright: ignore[reportArgumentType]
    with pytest.raises(InvalidRequestError, match="mode"):
        await store.update_rollout(rollout.rollout_id, mode="prod")  # pyright: ignore[reportArgumentType]


async def test_update_rollout_to_finished_stamps_end_time(store: LightningStore, clock: ManualClock) -> None:
    rollout = await claim(store)
    clock.advance(7)
    updated = await store.update_rollout(rollout.rollout_id, status="cancelled")
    assert updated.status == "cancelled"
    assert updated.end_time == clock.now
    # attempts are not touched by update_rollout
    attempt = await store.get_latest_attempt(rollout.rollout_id)
    assert attempt is not None and attempt.status == "preparing"


async def test_update_rollout_to_a_queued_status_requeues_exactly_once(
    store: LightningStore, clock: ManualClock
) -> None:
    rollout = await claim(store)
    await store.update_rollout(rollout.rollout_id, status="failed")
    clock.advance(1)
    requeued = await store.update_rollout(rollout.rollout_id, status="requeuing")
    assert requeued.end_time is None  # back to life: no end time
    await store.update_rollout(rollout.rollout_id, status="requeuing")
    await store.update_rollout(rollout.rollout_id, status="queuing")
    again = await store.dequeue_rollout()
    assert again is not None and again.rollout_id == rollout.rollout_id
    assert again.attempt.sequence_id == 2
    assert await store.dequeue_rollout() is None


async def test_get_rollout_attaches_latest_attempt(store: LightningStore) -> None:
    assert await store.get_rollout_by_id("ro-missing") is None
    rollout = await claim(store)
    second = await store.start_attempt(rollout.rollout_id)
    fetched = await store.get_rollout_by_id(rollout.rollout_id)
    assert isinstance(fetched, AttemptedRollout)
    assert fetched.attempt == second.attempt


async def test_wait_for_rollouts_returns_only_finished_ones(store: LightningStore) -> None:
    done = await claim(store)
    await store.update_attempt(done.rollout_id, "latest", status="succeeded")
    pending = await store.enqueue_rollout("pending")
    result = await store.wait_for_rollouts(
        rollout_ids=[done.rollout_id, pending.rollout_id, "ro-missing"], timeout=0
    )
    assert [r.rollout_id for r in result] == [done.rollout_id]
    assert isinstance(result[0], Rollout) and result[0].status == "succeeded"
    # waiting never changes state
    still = await store.get_rollout_by_id(pending.rollout_id)
    assert still is not None and still.status == "queuing"


async def test_wait_for_rollouts_carries_the_latest_attempt(store: LightningStore) -> None:
    # A trainer reads the attempt of each finished rollout: the wait answers it, no second read needed.
    first = await claim(store)
    await store.update_attempt(first.rollout_id, "latest", status="failed")
    retried = await store.start_attempt(first.rollout_id)
    await store.update_attempt(first.rollout_id, retried.attempt.attempt_id, status="succeeded")
    other = await claim(store)
    await store.update_attempt(other.rollout_id, "latest", status="succeeded")
    never_ran = await store.enqueue_rollout("cancelled before it ran")
    await store.update_rollout(never_ran.rollout_id, status="cancelled")
    ids = [other.rollout_id, first.rollout_id, never_ran.rollout_id]
    result = await store.wait_for_rollouts(rollout_ids=ids, timeout=0)
    assert [r.rollout_id for r in result] == ids
    assert isinstance(result[0], AttemptedRollout) and isinstance(result[1], AttemptedRollout)
    assert result[1].attempt.attempt_id == retried.attempt.attempt_id
    assert result[1].attempt.status == "succeeded"
    assert result[1].attempt == await store.get_latest_attempt(first.rollout_id)
    assert result[0].attempt.status == "succeeded"
    assert not isinstance(result[2], AttemptedRollout)  # finished without an attempt: a plain rollout
    assert result == [await store.get_rollout_by_id(i) for i in ids]


async def test_wait_for_rollouts_times_out_and_ignores_unknown_ids(store: LightningStore) -> None:
    started = time.monotonic()
    assert await store.wait_for_rollouts(rollout_ids=["ro-missing"], timeout=30) == []
    assert time.monotonic() - started < 10.0  # nothing known to wait for: far less than the timeout
    pending = await store.enqueue_rollout("x")
    started = time.monotonic()
    assert await store.wait_for_rollouts(rollout_ids=[pending.rollout_id], timeout=0.2) == []
    assert 0.15 <= time.monotonic() - started < 3.0


async def test_wait_for_rollouts_wakes_up_when_one_finishes(
    store: LightningStore, only_notifications: None
) -> None:
    rollout = await claim(store)
    waiting = asyncio.ensure_future(store.wait_for_rollouts(rollout_ids=[rollout.rollout_id], timeout=3600))
    await asyncio.sleep(0.05)  # let the wait start (a delay, not a wait for a result)
    assert not waiting.done()
    await store.update_attempt(rollout.rollout_id, "latest", status="failed")
    result = await asyncio.wait_for(waiting, NOTIFIED_WITHIN)
    assert [r.status for r in result] == ["failed"]


async def test_the_references_spellings_of_query_and_batch_enqueue_arguments(store: LightningStore) -> None:
    """``enqueue_many_rollouts(rollouts=...)`` and the deprecated ``query_rollouts(status=, rollout_ids=)``."""
    first, second = await store.enqueue_many_rollouts(
        rollouts=[EnqueueRolloutRequest(input=1), EnqueueRolloutRequest(input=2)]
    )
    await store.update_rollout(second.rollout_id, status="cancelled")
    with pytest.warns(DeprecationWarning, match="status_in= and rollout_id_in="):
        cancelled = await store.query_rollouts(status=["cancelled"])
    assert [r.rollout_id for r in cancelled] == [second.rollout_id]
    with pytest.warns(DeprecationWarning):
        named = await store.query_rollouts(
            rollout_ids=[first.rollout_id, second.rollout_id], status_in=["queuing"]
        )
    assert [r.rollout_id for r in named] == [first.rollout_id]
    with pytest.warns(DeprecationWarning):  # the new spelling wins over the old
        assert (await store.query_rollouts(status=["cancelled"], status_in=["queuing"])).total == 1


async def test_annotate_rollout_adds_notes_and_keeps_the_rest_of_the_metadata(store: LightningStore) -> None:
    queued = await store.enqueue_rollout("x", metadata={"origin": "calc", "note": "old"})
    noted = await annotate_rollout(store, queued.rollout_id, {"note": "new", "extra": [1, 2]})
    assert noted.metadata == {"origin": "calc", "note": "new", "extra": [1, 2]}
    ended = await annotate_rollout(store, queued.rollout_id, {"why": "test"}, status="cancelled")
    assert ended.status == "cancelled" and ended.end_time is not None
    fetched = await store.get_rollout_by_id(queued.rollout_id)
    assert fetched is not None and fetched.metadata == {
        "origin": "calc",
        "note": "new",
        "extra": [1, 2],
        "why": "test",
    }
    with pytest.raises(NotFoundError, match="ro-missing"):
        await annotate_rollout(store, "ro-missing", {"a": 1})
