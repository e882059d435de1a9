"""``Hook.on_trace_end`` sees the rollout's own trace through ``tracer.get_last_trace()`` (issue 28, 4).

The reference's debugging recipe prints ``tracer.get_last_trace()`` in ``on_trace_end``; here the hook ran
inside the trace context, before the trace was finished: it saw ``[]`` on the first rollout and the previous
rollout's spans on every later one."""

from __future__ import annotations

from typing import Any

import pytest
from agl.runner import Hook, LitAgentRunner, rollout
from agl.store import InMemoryLightningStore
from agl.tracer import OtelTracer, emit_reward, get_reward_value
from agl.types import LLM, NamedResources, Rollout

LLM_RESOURCES: NamedResources = {"llm": LLM(endpoint="http://127.0.0.1:9/v1", model="m")}


class LastTrace(Hook):
    """Keeps the rewards of the trace that ``on_trace_end`` sees, per rollout."""

    def __init__(self) -> None:
        self.seen: dict[str, list[float | None]] = {}

    async def on_trace_end(self, *, agent: Any, runner: Any, tracer: Any, rollout: Rollout) -> None:
        self.seen[rollout.rollout_id] = [get_reward_value(span) for span in tracer.get_last_trace()]


@rollout
async def rewarding(task: float, llm: LLM) -> None:
    emit_reward(task)


@rollout
async def failing(task: float, llm: LLM) -> None:
    emit_reward(task)
    raise RuntimeError("the agent fails after its reward")


async def test_on_trace_end_sees_this_rollouts_spans_on_every_rollout() -> None:
    hook = LastTrace()
    runner = LitAgentRunner[Any](OtelTracer(), heartbeat_interval=0)
    with runner.run_context(agent=rewarding, store=InMemoryLightningStore(), hooks=[hook]):
        first = await runner.step(0.25, resources=LLM_RESOURCES)
        second = await runner.step(0.75, resources=LLM_RESOURCES)
    assert hook.seen == {first.rollout_id: [0.25], second.rollout_id: [0.75]}


async def test_on_trace_end_runs_and_sees_the_trace_when_the_agent_fails() -> None:
    hook = LastTrace()
    runner = LitAgentRunner[Any](OtelTracer(), heartbeat_interval=0)
    with (
        runner.run_context(agent=failing, store=InMemoryLightningStore(), hooks=[hook]),
        pytest.raises(RuntimeError, match="fails after its reward"),
    ):
        await runner.step(0.5, resources=LLM_RESOURCES)
    assert list(hook.seen.values()) == [[0.5]]
