"""The optional cap of the in-memory store: finished rollouts are evicted oldest first with their spans;
when nothing can be evicted the write is refused (StoreFullError, HTTP 507) and nothing changes."""

from __future__ import annotations

import asyncio

import pytest
from agl.store import InMemoryLightningStore, StoreFullError
from agl.store.memory._cap import ROLLOUT_BYTES, SPAN_BYTES
from agl.testing.spans import make_span
from agl.testing.store.http import call, http_session, running_server
from agl.types import InvalidRequestError


async def _finish(store: InMemoryLightningStore, spans: int = 0) -> str:
    rollout = await store.enqueue_rollout("x")
    claimed = await store.dequeue_rollout()
    assert claimed is not None and claimed.rollout_id == rollout.rollout_id
    if spans:
        await store.add_many_spans(
            [make_span(claimed.rollout_id, claimed.attempt.attempt_id, i + 1) for i in range(spans)]
        )
    await store.update_attempt(claimed.rollout_id, "latest", status="succeeded")
    return rollout.rollout_id


async def test_finished_rollouts_are_evicted_oldest_first_with_their_spans() -> None:
    store = InMemoryLightningStore(max_rollouts=40)
    first = [await _finish(store, spans=2) for _ in range(40)]
    newest = await _finish(store, spans=2)
    stats = await store.statistics()
    assert "total_rollouts" in stats and "total_spans" in stats
    assert stats["total_rollouts"] <= 40
    assert await store.get_rollout_by_id(first[0]) is None
    assert (await store.query_spans(first[0])).total == 0
    assert await store.get_rollout_by_id(newest) is not None
    kept = {r.rollout_id for r in (await store.query_rollouts()).items}
    evicted = [i for i in first if i not in kept]
    assert evicted == first[: len(evicted)]  # a prefix: oldest first
    assert stats["total_spans"] == 2 * stats["total_rollouts"]


async def test_a_full_store_of_unfinished_rollouts_refuses_and_changes_nothing() -> None:
    store = InMemoryLightningStore(max_rollouts=3)
    for _ in range(3):
        await store.enqueue_rollout("x")
    with pytest.raises(StoreFullError, match="max_rollouts=3"):
        await store.enqueue_rollout("y")
    with pytest.raises(StoreFullError):
        await store.start_rollout("y")
    assert (await store.query_rollouts()).total == 3
    claimed = await store.dequeue_rollout()
    assert claimed is not None
    await store.update_attempt(claimed.rollout_id, "latest", status="failed")
    await store.enqueue_rollout("z")  # the failed one made room
    assert await store.get_rollout_by_id(claimed.rollout_id) is None


async def test_the_byte_cap_counts_spans_and_never_evicts_the_rollout_written_to() -> None:
    store = InMemoryLightningStore(max_bytes=ROLLOUT_BYTES * 3 + SPAN_BYTES * 20)
    done = await _finish(store, spans=5)
    rollout = await store.enqueue_rollout("x")
    claimed = await store.dequeue_rollout()
    assert claimed is not None and claimed.rollout_id == rollout.rollout_id
    attempt_id = claimed.attempt.attempt_id
    await store.add_many_spans([make_span(rollout.rollout_id, attempt_id, i + 1) for i in range(3)])
    assert await store.get_rollout_by_id(done) is not None
    # far more than evicting every finished rollout would free: refused as a whole, nothing evicted
    many = [make_span(rollout.rollout_id, attempt_id, i + 10) for i in range(200)]
    with pytest.raises(StoreFullError, match="max_bytes"):
        await store.add_many_spans(many)
    assert (await store.query_spans(rollout.rollout_id)).total == 3
    await store.add_many_spans(many[:10])  # room once the finished rollout is evicted
    assert await store.get_rollout_by_id(done) is None
    assert (await store.query_spans(rollout.rollout_id)).total == 13


def test_cap_arguments_are_checked() -> None:
    for bad in (0, -1, "10", 1.5, True):
        with pytest.raises(InvalidRequestError):
            InMemoryLightningStore(max_rollouts=bad)  # pyright: ignore[reportArgumentType]
        with pytest.raises(InvalidRequestError):
            InMemoryLightningStore(max_bytes=bad)  # pyright: ignore[reportArgumentType]


async def test_a_full_store_answers_507_over_http() -> None:
    store = InMemoryLightningStore(max_rollouts=1)
    await store.enqueue_rollout("x")
    with running_server(store) as server:
        async with http_session() as session:
            status, body, _ = await call(
                session,
                server,
                "POST",
                "/v1/agl/queues/rollouts/enqueue",
                json_body={"rollouts": [{"input": 1}]},
            )
    assert status == 507, body
    assert body["error_type"] == "StoreFullError" and "max_rollouts=1" in body["detail"]


async def test_the_client_raises_store_full_at_once_instead_of_retrying() -> None:
    from agl.store import LightningStoreClient
    from agl.store.errors import StoreFullClientError, StoreFullError

    store = InMemoryLightningStore(max_rollouts=1)
    await store.enqueue_rollout("x")
    with running_server(store) as server:
        client = LightningStoreClient(server.endpoint, retry_delays=(30.0,))  # a retry would outlast the test
        try:
            with pytest.raises(StoreFullClientError, match="max_rollouts=1") as caught:
                await asyncio.wait_for(client.enqueue_rollout(1), timeout=10)
        finally:
            await client.close()
    assert isinstance(caught.value, StoreFullError) and caught.value.status == 507


def test_the_references_memory_arguments_are_accepted() -> None:
    """``InMemoryLightningStore(thread_safe=True, eviction_memory_threshold=..., tracker=...)``, as the
    reference's programs write it: the threshold becomes the bound, the rest warn at the caller's line."""
    with pytest.warns(DeprecationWarning, match="bounds the store at 123456 bytes") as caught:
        store = InMemoryLightningStore(thread_safe=True, eviction_memory_threshold=123456)
    assert caught[0].filename == __file__
    assert store.capabilities.get("thread_safe")
    with pytest.warns(DeprecationWarning, match="max_bytes= instead"):
        halved = InMemoryLightningStore(eviction_memory_threshold=0.5)
    assert halved is not None
    with pytest.warns(UserWarning, match=r"tracker=\.\.\.\) has no effect"):
        InMemoryLightningStore(tracker=object())
    with pytest.raises(ValueError, match="eviction_memory_threshold"):
        InMemoryLightningStore(eviction_memory_threshold=-1)
