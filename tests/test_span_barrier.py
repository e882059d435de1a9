"""The barrier: an algorithm never sees a finished rollout without every span of it, proxy calls included.

Under the calc app's concurrency (2 runners x 64 rollouts in flight, several LLM turns each, SQL store),
each rollout is checked the moment ``wait_for_rollouts`` reports it finished: every call the model server
answered for it must already be a span in the store. Nobody calls ``LLMProxy.flush()``.
"""

from __future__ import annotations

import asyncio
import threading
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from agl.algorithms import algo
from agl.proxy import LLMProxy
from agl.runner import Trainer
from agl.store import LightningStore, SqlLightningStore
from agl.testing.e2e.agents import BARRIER_TURNS, multi_turn_agent
from agl.testing.openai_standin import StandinBackend, serve_standin
from agl.testing.postgres import (
    create_schema,
    drop_schema,
    require_postgres,
    schema_connect_args,
)
from agl.types import EnqueueRolloutRequest
from agl.types.semconv import AGL_LLM_CALL

ROLLOUTS = 256
RUNNERS, CONCURRENCY = 2, 64


class BatchingModel:
    """Answers in bursts, like a model server decoding a batch (every ``tick`` seconds), and counts the calls
    it answered per rollout (the agent names its rollout in each message)."""

    def __init__(self, tick: float = 0.05) -> None:
        self.tick = tick
        self.answered: Counter[str] = Counter()
        self._lock = threading.Lock()

    async def __call__(self, request: dict[str, Any]) -> str:
        now = asyncio.get_running_loop().time()
        await asyncio.sleep(self.tick - now % self.tick)
        rollout_id = str(request["messages"][-1]["content"]).split(" ", 1)[0]
        with self._lock:
            self.answered[rollout_id] += 1
        return f"{rollout_id}: " + "noted, " * 60


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[SqlLightningStore]:
    """A SQLite file, or a fresh schema of the test PostgreSQL database (slower writes: the race is wider)."""
    if request.param == "sqlite":
        yield SqlLightningStore(f"sqlite:///{tmp_path / 'store.db'}")
        return
    url = require_postgres()
    schema = asyncio.run(create_schema(url))
    try:
        yield SqlLightningStore(url, **schema_connect_args(schema))
    finally:
        asyncio.run(drop_schema(url, schema))


@pytest.mark.slow
@pytest.mark.timeout(300)
@pytest.mark.parametrize("strategy", ["shm", "cs"])
def test_every_answered_call_is_stored_when_the_rollout_is_reported_finished(
    strategy: str, store: SqlLightningStore
) -> None:
    counter = BatchingModel()
    backend = StandinBackend(script=counter, record_requests=False)
    mismatches: list[tuple[str, int, int]] = []
    checked: list[str] = []
    failures: list[str] = []

    with serve_standin(backend) as server:
        proxy = LLMProxy(
            [{"model_name": "m", "litellm_params": {"model": "hosted_vllm/m", "api_base": server.base_url}}],
            store=store,
        )

        @algo
        async def check(store: LightningStore, llm_proxy: LLMProxy, train_dataset: list[Any]) -> None:
            await llm_proxy.start()
            try:
                await store.add_resources({"main_llm": llm_proxy.as_resource()})
                requests = [EnqueueRolloutRequest(input=task) for task in train_dataset]
                queued = await store.enqueue_many_rollouts(requests)
                pending = {r.rollout_id for r in queued}
                deadline = asyncio.get_running_loop().time() + 240
                while pending and asyncio.get_running_loop().time() < deadline:
                    finished = await store.wait_for_rollouts(rollout_ids=sorted(pending), timeout=0.02)
                    for rollout in finished:
                        pending.discard(rollout.rollout_id)
                        if rollout.status != "succeeded":
                            attempt = await store.get_latest_attempt(rollout.rollout_id)
                            error = (attempt.metadata or {}).get("error") if attempt else None
                            failures.append(f"{rollout.rollout_id} {rollout.status}: {error}")
                            continue
                        # Counted by the store (limit=0): the check must be quick to catch a late span.
                        page = await store.query_spans(
                            rollout.rollout_id, "latest", name=AGL_LLM_CALL, limit=0
                        )
                        calls = page.total
                        answered = counter.answered[rollout.rollout_id]
                        checked.append(rollout.rollout_id)
                        # More spans than answers is fine: a call the client retried is recorded as well.
                        if calls < answered:
                            mismatches.append((rollout.rollout_id, answered, calls))
                assert not pending, f"{len(pending)} rollouts did not finish"
            finally:
                await llm_proxy.stop()

        trainer = Trainer(
            algorithm=check,
            n_runners=RUNNERS,
            strategy=strategy,
            store=store,
            llm_proxy=proxy,
            port=0,
            runner={"type": "agl.runner.LitAgentRunner", "concurrency": CONCURRENCY},
            progress=False,
        )
        trainer.fit(multi_turn_agent, [{"i": i} for i in range(ROLLOUTS)])

    assert len(checked) == ROLLOUTS, f"only {len(checked)} of {ROLLOUTS} rollouts succeeded: {failures[:3]}"
    assert all(counter.answered[rid] >= BARRIER_TURNS for rid in checked)
    assert not mismatches, (
        f"{len(mismatches)} of {ROLLOUTS} rollouts were reported finished before all their LLM calls were "
        f"stored (rollout, calls answered, spans stored): {mismatches[:5]}"
    )
