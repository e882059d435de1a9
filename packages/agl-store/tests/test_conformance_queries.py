"""Contract: rollout and attempt queries, filters, sorting and pagination (every backend)."""

from __future__ import annotations

from collections.abc import Iterable

import pytest
from agl.store import LightningStore
from agl.testing.clock import ManualClock
from agl.testing.spans import claim
from agl.types import AttemptedRollout, InvalidRequestError, Rollout


async def make_population(store: LightningStore, clock: ManualClock) -> dict[str, str]:
    """Five rollouts in distinct states, created one second apart; returns name -> rollout id."""
    ids: dict[str, str] = {}
    for name in ("queued", "preparing", "succeeded", "failed", "cancelled"):
        clock.advance(1)
        ids[name] = (await store.enqueue_rollout(name)).rollout_id
    for name in ("preparing", "succeeded", "failed", "cancelled"):
        await store.update_rollout(ids[name], status="cancelled")  # take them out of the queue...
        await store.start_attempt(ids[name])  # ...and give each an attempt
    clock.advance(1)
    await store.update_attempt(ids["succeeded"], "latest", status="succeeded")
    clock.advance(1)
    await store.update_attempt(ids["failed"], "latest", status="failed")
    clock.advance(1)
    await store.update_rollout(ids["cancelled"], status="cancelled")
    return ids


async def ids_of(result: Iterable[Rollout]) -> list[str]:
    return [r.rollout_id for r in result]


async def test_query_rollouts_default_is_creation_order_with_latest_attempts(
    store: LightningStore, clock: ManualClock
) -> None:
    ids = await make_population(store, clock)
    result = await store.query_rollouts()
    assert result.total == 5
    assert await ids_of(result) == list(ids.values())
    by_id = {r.rollout_id: r for r in result}
    assert type(by_id[ids["queued"]]) is Rollout
    succeeded = by_id[ids["succeeded"]]
    assert isinstance(succeeded, AttemptedRollout)
    assert succeeded.attempt.status == "succeeded"
    assert {r.rollout_id: r.status for r in result} == {
        ids["queued"]: "queuing",
        ids["preparing"]: "preparing",
        ids["succeeded"]: "succeeded",
        ids["failed"]: "failed",
        ids["cancelled"]: "cancelled",
    }


async def test_query_rollouts_filters(store: LightningStore, clock: ManualClock) -> None:
    ids = await make_population(store, clock)
    finished = await store.query_rollouts(status_in=["succeeded", "failed", "cancelled"])
    assert await ids_of(finished) == [ids["succeeded"], ids["failed"], ids["cancelled"]]
    picked = await store.query_rollouts(rollout_id_in=[ids["failed"], ids["queued"], "ro-missing"])
    assert await ids_of(picked) == [ids["queued"], ids["failed"]]  # creation order, unknown ids omitted
    assert await ids_of(await store.query_rollouts(rollout_id_contains=ids["failed"][3:9])) == [ids["failed"]]
    both = await store.query_rollouts(
        status_in=["succeeded"], rollout_id_in=[ids["failed"], ids["succeeded"]]
    )
    assert await ids_of(both) == [ids["succeeded"]]
    either = await store.query_rollouts(
        status_in=["succeeded"], rollout_id_in=[ids["failed"]], filter_logic="or"
    )
    assert await ids_of(either) == [ids["succeeded"], ids["failed"]]
    either_contains = await store.query_rollouts(
        status_in=["queuing"], rollout_id_contains=ids["cancelled"], filter_logic="or"
    )
    assert await ids_of(either_contains) == [ids["queued"], ids["cancelled"]]
    assert (await store.query_rollouts(filter_logic="or")).total == 5  # Decision (6)
    assert (await store.query_rollouts(rollout_id_contains="RO-")).total == 0  # case-sensitive


async def test_query_rollouts_by_mode(store: LightningStore) -> None:
    train = await store.enqueue_rollout(input=1, mode="train")
    val = await store.enqueue_rollout(input=2, mode="val")
    await store.enqueue_rollout(input=3)  # no mode: never matches a mode filter
    assert await ids_of(await store.query_rollouts(mode_in=["val"])) == [val.rollout_id]
    assert await ids_of(await store.query_rollouts(mode_in=["train", "val"])) == [
        train.rollout_id,
        val.rollout_id,
    ]
    assert (await store.query_rollouts(mode_in=[])).total == 0
    with pytest.raises(InvalidRequestError, match="mode_in"):
        await store.query_rollouts(mode_in=["bogus"])  # pyright: ignore[reportArgumentType]


async def test_query_rollouts_sort_and_paginate(store: LightningStore, clock: ManualClock) -> None:
    ids = await make_population(store, clock)
    newest_first = await store.query_rollouts(sort_by="start_time", sort_order="desc")
    assert await ids_of(newest_first) == list(ids.values())[::-1]
    # Decision (6): None sorts last ascending, first descending
    by_end = await store.query_rollouts(sort_by="end_time")
    assert set((await ids_of(by_end))[-2:]) == {ids["queued"], ids["preparing"]}
    by_end_desc = await store.query_rollouts(sort_by="end_time", sort_order="desc")
    assert set((await ids_of(by_end_desc))[:2]) == {ids["queued"], ids["preparing"]}
    assert (await ids_of(by_end))[:3] == [ids["succeeded"], ids["failed"], ids["cancelled"]]
    page = await store.query_rollouts(sort_by="start_time", limit=2, offset=1)
    assert await ids_of(page) == [ids["preparing"], ids["succeeded"]]
    assert (page.total, page.limit, page.offset) == (5, 2, 1)
    counted = await store.query_rollouts(status_in=["cancelled", "failed"], limit=0)
    assert counted.items == [] and counted.total == 2
    assert (await store.query_rollouts(offset=99)).items == []


@pytest.mark.parametrize(
    "kwargs",
    [
        {"sort_by": "not_a_field"},
        {"sort_order": "sideways"},
        {"limit": -5},
        {"offset": -1},
        {"filter_logic": "xor"},
    ],
)
async def test_query_rollouts_rejects_bad_parameters(
    store: LightningStore, kwargs: dict[str, object]
) -> None:
    with pytest.raises(InvalidRequestError):
        await store.query_rollouts(**kwargs)  # pyright: ignore[reportArgumentType]


async def test_query_attempts(store: LightningStore) -> None:
    assert (await store.query_attempts("ro-missing")).total == 0  # Decision (3)
    assert await store.get_latest_attempt("ro-missing") is None
    rollout = await claim(store)
    for _ in range(3):
        await store.start_attempt(rollout.rollout_id)
    attempts = await store.query_attempts(rollout.rollout_id)
    assert [a.sequence_id for a in attempts] == [1, 2, 3, 4]
    desc = await store.query_attempts(rollout.rollout_id, sort_order="desc", limit=2)
    assert [a.sequence_id for a in desc] == [4, 3] and desc.total == 4
    page = await store.query_attempts(rollout.rollout_id, offset=3)
    assert [a.sequence_id for a in page] == [4]
    latest = await store.get_latest_attempt(rollout.rollout_id)
    assert latest is not None and latest.sequence_id == 4
    with pytest.raises(InvalidRequestError):
        await store.query_attempts(rollout.rollout_id, sort_by="bogus")


async def test_statistics_count_everything(store: LightningStore) -> None:
    rollout = await claim(store, worker_id="w")
    await store.start_attempt(rollout.rollout_id)
    await store.enqueue_rollout("other")
    await store.add_resources({})
    stats = await store.statistics()
    assert "total_rollouts" in stats and "total_attempts" in stats and "total_spans" in stats
    assert "total_resources" in stats and "total_workers" in stats and "uptime" in stats
    assert stats["total_rollouts"] == 2
    assert stats["total_attempts"] == 2
    assert stats["total_spans"] == 0
    assert stats["total_resources"] == 1
    assert stats["total_workers"] == 1
    assert stats["uptime"] >= 0
