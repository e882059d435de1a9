"""The marks LocalGRPO writes on rollouts (dropped as stale, no training data, superseded by a resume) add to
their metadata and keep what was there: the asynchronous loop's drop once replaced it."""

from __future__ import annotations

import random
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from agl.algorithms.adapter.diagnosis import NO_TRAINING_DATA, NoDataReason, mark_no_data
from agl.algorithms.local.async_loop import AsyncTraining, _Group
from agl.algorithms.local.checkpoint import SUPERSEDED, supersede_later_steps, write_pending
from agl.algorithms.local.staleness import GroupState
from agl.store import InMemoryLightningStore
from agl.types import EnqueueRolloutRequest

ORIGIN = {"origin": {"dataset": "calc", "row": 7}}


def _learner(version: int) -> Any:
    """The part of the Learner protocol that dropping a group reads: its config, the served weights' version."""
    config = SimpleNamespace(max_staleness=1, prompts_per_step=1, n=2)
    return SimpleNamespace(config=config, server=SimpleNamespace(version=version))


async def _enqueued(store: InMemoryLightningStore, count: int) -> list[str]:
    requests = [EnqueueRolloutRequest(input=i, metadata=dict(ORIGIN)) for i in range(count)]
    return [r.rollout_id for r in await store.enqueue_many_rollouts(requests)]


async def test_a_group_dropped_as_stale_keeps_its_rollouts_metadata() -> None:
    store = InMemoryLightningStore()
    ids = await _enqueued(store, 2)
    loop = AsyncTraining(_learner(3), store, None, None, [], random.Random(0))  # pyright: ignore[reportArgumentType]
    loop.groups[0] = _Group(version=0, rollout_ids=ids)
    loop.owner.update(dict.fromkeys(ids, 0))
    await loop._drop((GroupState(group_id=0, size=2),))
    for rid in ids:
        rollout = await store.get_rollout_by_id(rid)
        assert rollout is not None and rollout.metadata == {**ORIGIN, "dropped_as_stale_at": 3}
    assert not loop.groups and not loop.owner


async def test_no_data_and_resume_marks_keep_the_metadata_written_since_the_rollout_was_read(
    tmp_path: Path,
) -> None:
    store = InMemoryLightningStore()
    ids = await _enqueued(store, 2)
    read_before = await store.get_rollout_by_id(ids[0])
    assert read_before is not None
    await store.update_rollout(ids[0], metadata={**ORIGIN, "later": True})
    await mark_no_data(store, read_before, NoDataReason.BYPASSED_PROXY)
    first = await store.get_rollout_by_id(ids[0])
    assert first is not None and first.metadata is not None
    assert first.metadata["later"] is True and first.metadata["origin"] == ORIGIN["origin"]
    assert first.metadata[NO_TRAINING_DATA]["reason"] == NoDataReason.BYPASSED_PROXY.value
    write_pending(tmp_path, 5, ids[1:])
    assert await supersede_later_steps(store, tmp_path, 4) == 1
    second = await store.get_rollout_by_id(ids[1])
    assert second is not None and second.status == "cancelled"
    assert second.metadata == {**ORIGIN, SUPERSEDED: {"resumed_after_step": 3}}
