"""Property: ``dequeue_many_rollouts_with_resources``, the one claim every other claim method is a form of.

For any queue (rollouts naming a known snapshot, an unknown one, or none) and any ``limit``, a claim takes
the oldest ``limit`` rollouts, each started for the worker and paired with the snapshot it names, else the
latest; ``dequeue_rollout_with_resources`` is the same claim of one. Over HTTP a claim of one is the
server's claim route and of more the dequeue route plus snapshot reads: both are checked.
"""

from __future__ import annotations

import asyncio
import contextlib
from pathlib import Path

import pytest
from agl.store import LightningStore
from agl.testing.clock import ManualClock
from agl.testing.store.backends import open_store
from agl.types import LLM
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

_NAMES = st.sampled_from([None, "rs-a", "rs-b", "rs-missing"])


async def _expected_resources(store: LightningStore, resources_id: str | None) -> object:
    if resources_id:
        return await store.get_resources_by_id(resources_id)
    return await store.get_latest_resources()


async def _check(store: LightningStore, plan: list[str | None], limit: int, updates: list[str]) -> None:
    for n, name in enumerate(updates):
        await store.update_resources(name, {"llm": LLM(endpoint=f"http://127.0.0.1:{n + 1}/v1", model="m")})
    queued = [await store.enqueue_rollout(input=i, resources_id=rid) for i, rid in enumerate(plan)]
    if limit == 1 and queued:
        one = await store.dequeue_rollout_with_resources(worker_id="w")
        claimed = [] if one is None else [one]
    else:
        claimed = await store.dequeue_many_rollouts_with_resources(limit=limit, worker_id="w")
    assert [r.rollout_id for r, _ in claimed] == [r.rollout_id for r in queued[: max(limit, 0)]]
    for rollout, resources in claimed:
        assert rollout.status == "preparing" and rollout.attempt.worker_id == "w"
        assert resources == await _expected_resources(store, rollout.resources_id)
    await store.dequeue_many_rollouts(limit=len(plan) + 1)  # leave the queue empty for the next example


@pytest.mark.parametrize("backend", ["memory", "sqlite", "http-memory"])
def test_a_claim_pairs_the_oldest_rollouts_with_their_snapshots(backend: str, tmp_path: Path) -> None:
    loop = asyncio.new_event_loop()
    stack = contextlib.AsyncExitStack()
    store = loop.run_until_complete(stack.enter_async_context(open_store(backend, ManualClock(), tmp_path)))

    @settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
    @given(
        plan=st.lists(_NAMES, max_size=8),
        limit=st.integers(min_value=-1, max_value=10),
        updates=st.lists(st.sampled_from(["rs-a", "rs-b"]), max_size=3),
    )
    def check(plan: list[str | None], limit: int, updates: list[str]) -> None:
        loop.run_until_complete(_check(store, plan, limit, updates))

    try:
        check()
    finally:
        loop.run_until_complete(stack.aclose())
        loop.close()
