"""Contract: versioned resources snapshots (every backend)."""

from __future__ import annotations

import pytest
from agl.store import LightningStore
from agl.testing.clock import ManualClock
from agl.types import LLM, InvalidRequestError, PromptTemplate, ProxyLLM


def llm(port: int = 1) -> LLM:
    return LLM(endpoint=f"http://127.0.0.1:{port}/v1", model="m", sampling_parameters={"temperature": 0.5})


async def test_no_resources_yet(store: LightningStore) -> None:
    assert await store.get_latest_resources() is None
    assert await store.get_resources_by_id("rs-missing") is None
    assert (await store.query_resources()).total == 0


async def test_add_resources_creates_version_one_and_becomes_latest(
    store: LightningStore, clock: ManualClock
) -> None:
    first = await store.add_resources({"llm": llm(1)})
    assert first.resources_id.startswith("rs-")
    assert first.version == 1
    assert first.create_time == first.update_time == clock.now
    assert await store.get_latest_resources() == first
    clock.advance(1)
    second = await store.add_resources({"llm": llm(2)})
    assert second.resources_id != first.resources_id
    assert await store.get_latest_resources() == second
    assert await store.get_resources_by_id(first.resources_id) == first


async def test_resource_types_survive(store: LightningStore) -> None:
    resources = {
        "llm": llm(),
        "proxy": ProxyLLM(endpoint="http://127.0.0.1:9/v1", model="p", api_key="k"),
        "prompt": PromptTemplate(template="Hi {name}", engine="f-string"),
    }
    added = await store.add_resources(resources)  # type: ignore[arg-type]
    fetched = await store.get_resources_by_id(added.resources_id)
    assert fetched is not None
    assert fetched.resources == resources
    assert isinstance(fetched.resources["proxy"], ProxyLLM)
    assert isinstance(fetched.resources["prompt"], PromptTemplate)


async def test_update_resources_bumps_version_and_becomes_latest(
    store: LightningStore, clock: ManualClock
) -> None:
    first = await store.add_resources({"llm": llm(1)})
    other = await store.add_resources({"llm": llm(2)})
    clock.advance(5)
    updated = await store.update_resources(first.resources_id, {"llm": llm(3)})
    assert updated.resources_id == first.resources_id
    assert updated.version == 2
    assert updated.create_time == first.create_time
    assert updated.update_time == clock.now
    assert updated.resources == {"llm": llm(3)}
    assert await store.get_latest_resources() == updated
    assert (await store.get_resources_by_id(other.resources_id)) == other  # independent versions


async def test_update_resources_upserts(store: LightningStore, clock: ManualClock) -> None:
    """Decision (2): updating an unknown id creates it with version 1."""
    created = await store.update_resources(
        "v0", {"prompt": PromptTemplate(template="{x}", engine="f-string")}
    )
    assert created.resources_id == "v0"
    assert created.version == 1
    assert created.create_time == created.update_time == clock.now
    assert await store.get_latest_resources() == created
    again = await store.update_resources("v0", {"prompt": PromptTemplate(template="{y}", engine="f-string")})
    assert again.version == 2


async def test_invalid_resources_are_rejected(store: LightningStore) -> None:
    with pytest.raises(InvalidRequestError):
        await store.add_resources({"bad": {"resource_type": "nope"}})  # pyright: ignore[reportArgumentType]


async def test_query_resources(store: LightningStore, clock: ManualClock) -> None:
    ids = []
    for i in range(4):
        clock.advance(1)
        ids.append((await store.update_resources(f"prompt-v{i}", {"llm": llm(i + 1)})).resources_id)
    await store.update_resources("prompt-v0", {"llm": llm(9)})  # now the most recently updated
    all_ = await store.query_resources()
    assert [r.resources_id for r in all_] == ids  # creation order
    assert [r.resources_id for r in await store.query_resources(resources_id="prompt-v2")] == ["prompt-v2"]
    assert (await store.query_resources(resources_id="missing")).total == 0
    assert [r.resources_id for r in await store.query_resources(resources_id_contains="v1")] == ["prompt-v1"]
    both = await store.query_resources(resources_id="prompt-v1", resources_id_contains="v2")
    assert both.total == 0  # exact and substring filters are AND-combined
    by_update = await store.query_resources(sort_by="update_time", sort_order="desc", limit=2)
    assert [r.resources_id for r in by_update] == ["prompt-v0", "prompt-v3"]
    assert by_update.total == 4
    with pytest.raises(InvalidRequestError):
        await store.query_resources(sort_by="nope")


async def test_dequeue_with_resources_brings_the_rollouts_snapshot_or_the_latest(
    store: LightningStore,
) -> None:
    assert await store.dequeue_rollout_with_resources(worker_id="w") is None
    first = await store.add_resources({"llm": llm(1)})
    second = await store.add_resources({"llm": llm(2)})
    await store.enqueue_rollout(input=1, resources_id=first.resources_id)
    await store.enqueue_rollout(input=2)  # runs with the latest
    await store.enqueue_rollout(input=3, resources_id=first.resources_id)
    got = await store.dequeue_rollout_with_resources(worker_id="w")
    assert got is not None and got[0].input == 1 and got[1] == first
    assert got[0].attempt.worker_id == "w" and got[0].status == "preparing"
    got = await store.dequeue_rollout_with_resources(worker_id="w")
    assert got is not None and got[0].input == 2 and got[1] == second
    # A new version of the same snapshot is what the next claim brings (no stale copy).
    updated = await store.update_resources(first.resources_id, {"llm": llm(3)})
    got = await store.dequeue_rollout_with_resources(worker_id="w")
    assert (
        got is not None
        and got[0].input == 3
        and got[1] == updated
        and got[1] is not None
        and got[1].version == 2
    )


async def test_dequeue_with_resources_unknown_snapshot_or_none_at_all_is_none(store: LightningStore) -> None:
    await store.enqueue_rollout(input=1)
    got = await store.dequeue_rollout_with_resources()
    assert got is not None and got[0].input == 1 and got[1] is None
    await store.enqueue_rollout(input=2, resources_id="rs-missing")
    got = await store.dequeue_rollout_with_resources()
    assert got is not None and got[0].input == 2 and got[1] is None
