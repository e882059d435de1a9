"""One event loop per runner: spans drain on the runner's own loop unless the agent may block it."""

from __future__ import annotations

import threading
from typing import Any

import pytest
from agl.runner import LitAgentRunner, rollout
from agl.store import InMemoryLightningStore
from agl.tracer import OtelTracer, emit_reward
from agl.types import LLM, NamedResources

_RESOURCES: NamedResources = {"llm": LLM(endpoint="http://127.0.0.1:9/v1", model="m")}


def _export_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "agl-span-export"]


@rollout
async def _async_agent(task: Any, llm: LLM) -> None:
    emit_reward(1.0)


@rollout
def _sync_agent(task: Any, llm: LLM) -> None:
    emit_reward(1.0)


@pytest.mark.parametrize(
    ("agent", "in_thread", "export_thread"),
    [(_async_agent, True, False), (_sync_agent, True, False), (_sync_agent, False, True)],
)
async def test_spans_drain_on_the_runners_loop_unless_the_agent_blocks_it(
    agent: Any, in_thread: bool, export_thread: bool
) -> None:
    assert not _export_threads()
    store = InMemoryLightningStore()
    runner = LitAgentRunner(OtelTracer(), heartbeat_interval=0, sync_agent_in_thread=in_thread)
    with runner.run_context(agent=agent, store=store):
        await store.add_resources(_RESOURCES)
        done = await runner.step(1)
        assert done.status == "succeeded"
        spans = list(await store.query_spans(done.rollout_id))
        assert [s.name for s in spans] == ["agentlightning.annotation"]
        assert bool(_export_threads()) is export_thread
    assert not _export_threads()
