"""SQL store: what was acknowledged is still there after closing, reopening, or killing the process."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from agl.store import SqlLightningStore
from agl.testing.spans import make_span
from agl.testing.store.sql import SQL_BACKENDS, fresh_database
from agl.testing.store.sql_workers import kill_writer_after, stored_rollouts
from agl.types import LLM, PromptTemplate, RolloutConfig


async def _write_everything(store: SqlLightningStore) -> dict[str, object]:
    resources = await store.add_resources({"llm": LLM(endpoint="http://127.0.0.1:1/v1", model="m")})
    await store.update_resources("prompt", {"p": PromptTemplate(template="Hi {name}")})
    config = RolloutConfig(max_attempts=2, retry_condition=["failed"], timeout_seconds=60)
    done = await store.enqueue_rollout({"q": "done"}, mode="train", config=config, metadata={"k": [1, 2]})
    queued = await store.enqueue_rollout({"q": "queued"}, resources_id="override")
    claimed = await store.dequeue_rollout(worker_id="w1")
    assert claimed is not None and claimed.rollout_id == done.rollout_id
    aid = claimed.attempt.attempt_id
    spans = [make_span(done.rollout_id, aid, i, attributes={"i": i, "text": "é" * 10}) for i in (1, 2, 3)]
    await store.add_many_spans(spans)
    await store.update_attempt(done.rollout_id, aid, status="succeeded", metadata={"score": 1.5})
    await store.update_worker("w1", heartbeat_stats={"gpu": 0.5})
    assert await store.get_next_span_sequence_id(done.rollout_id, aid) == 4
    return {
        "rollouts": (await store.query_rollouts()).items,
        "attempts": (await store.query_attempts(done.rollout_id)).items,
        "spans": (await store.query_spans(done.rollout_id)).items,
        "resources": (await store.query_resources()).items,
        "latest": await store.get_latest_resources(),
        "workers": (await store.query_workers()).items,
        "first_resources": resources,
        "queued": queued.rollout_id,
    }


async def _read_everything(store: SqlLightningStore, done_id: str) -> dict[str, object]:
    return {
        "rollouts": (await store.query_rollouts()).items,
        "attempts": (await store.query_attempts(done_id)).items,
        "spans": (await store.query_spans(done_id)).items,
        "resources": (await store.query_resources()).items,
        "latest": await store.get_latest_resources(),
        "workers": (await store.query_workers()).items,
    }


@pytest.mark.parametrize("backend", SQL_BACKENDS)
def test_close_and_reopen_keeps_everything(backend: str, tmp_path: Path) -> None:
    async def main(url: str, kwargs: dict) -> None:
        store = SqlLightningStore(url, **kwargs)
        before = await _write_everything(store)
        await store.close()
        with pytest.raises(RuntimeError, match="closed"):
            await store.get_latest_resources()

        reopened = SqlLightningStore(url, **kwargs)
        try:
            done_id = before["rollouts"][0].rollout_id  # type: ignore[index]
            after = await _read_everything(reopened, done_id)
            for key, value in after.items():
                assert value == before[key], key
            # the queue and the counters survived too
            assert await reopened.get_next_span_sequence_id(done_id, "any") == 5
            again = await reopened.dequeue_rollout()
            assert again is not None and again.rollout_id == before["queued"]
        finally:
            await reopened.close()

    with fresh_database(backend, tmp_path) as (url, kwargs):
        asyncio.run(main(url, kwargs))


def test_acknowledged_writes_survive_sigkill(tmp_path: Path) -> None:
    """WAL + synchronous=NORMAL: a commit is in the operating system's hands before it is acknowledged."""
    url = f"sqlite:///{tmp_path / 'killed.db'}"
    acknowledged = kill_writer_after(url, 100000, tasks=None, acknowledged=200)
    found, everything = stored_rollouts(url, acknowledged)
    assert found == len(acknowledged)
    assert everything >= len(acknowledged)  # maybe a few more: committed, not yet printed
