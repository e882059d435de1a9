"""A user's own tracer, written to the reference's ``Tracer`` interface: its ``trace_context`` takes no
``hand_over_to`` and makes no tracer active, and it writes its spans itself. The runner works with it, and a
reward the agent returns is stored after the trace (issue 28)."""

from __future__ import annotations

import time
from collections.abc import AsyncGenerator
from contextlib import asynccontextmanager
from typing import Any

from agl.runner import LitAgentRunner, rollout
from agl.store import InMemoryLightningStore, LightningStore
from agl.tracer import Tracer, find_final_reward
from agl.types import PromptTemplate, Span


class OneSpanTracer(Tracer):
    """Records one span per rollout, named after it, and stores it when the rollout ends."""

    def __init__(self) -> None:
        super().__init__()
        self.last: list[Span] = []

    @asynccontextmanager
    async def trace_context(  # pyright: ignore[reportIncompatibleMethodOverride]  # the reference's signature, on purpose
        self,
        name: str | None = None,
        *,
        store: LightningStore | None = None,
        rollout_id: str | None = None,
        attempt_id: str | None = None,
    ) -> AsyncGenerator[Any, None]:
        store = store or self._store
        assert store is not None and rollout_id is not None and attempt_id is not None
        started = time.time()
        yield self
        sequence_id = await store.get_next_span_sequence_id(rollout_id, attempt_id)
        span = Span.from_attributes(
            rollout_id=rollout_id,
            attempt_id=attempt_id,
            sequence_id=sequence_id,
            name=f"custom:{name}",
            attributes={"x": 1},
            start_time=started,
            end_time=time.time(),
        )
        await store.add_span(span)
        self.last = [span]

    def get_last_trace(self) -> list[Span]:
        return list(self.last)


@rollout
def scores(task: str, prompt_template: PromptTemplate) -> float:
    return 0.25


async def test_a_tracer_with_the_references_trace_context_runs_and_keeps_the_returned_reward() -> None:
    store = InMemoryLightningStore()
    runner = LitAgentRunner[Any](OneSpanTracer(), heartbeat_launch_mode="asyncio")
    with runner.run_context(agent=scores, store=store):
        done = await runner.step("task", resources={"p": PromptTemplate(template="x", engine="f-string")})
    assert done.status == "succeeded"
    spans = list(await store.query_spans(done.rollout_id))
    assert [s.name for s in spans] == [f"custom:{done.rollout_id}", "agentlightning.annotation"]
    assert find_final_reward(spans) == 0.25
    finished = await store.get_rollout_by_id(done.rollout_id)
    assert finished is not None and finished.status == "succeeded"
