"""The OpenAI Agents SDK (``openai-agents``: Agent + function tool) through the LLM proxy."""

from __future__ import annotations

import os
from typing import Any

import pytest
from agl.runner import rollout
from agl.testing.e2e.proxy_harness import run_agent
from agl.types import LLM

from tests.test_frameworks_openai import check_calculator_run

os.environ.setdefault("OPENAI_AGENTS_DISABLE_TRACING", "1")  # its tracing would export to api.openai.com


@rollout
async def agents_sdk_agent(task: dict[str, Any], llm: LLM) -> float:
    from agents import Agent, OpenAIChatCompletionsModel, Runner, function_tool, set_tracing_disabled
    from openai import AsyncOpenAI

    set_tracing_disabled(True)

    @function_tool
    def add(a: int, b: int) -> int:
        """Add two integers."""
        return a + b

    client = AsyncOpenAI(base_url=llm.endpoint, api_key="unused", max_retries=0)
    model = OpenAIChatCompletionsModel(model=llm.model, openai_client=client)
    agent = Agent(name="calculator", instructions="Use the add tool.", tools=[add], model=model)
    question = f"Please add {task['a']} and {task['b']}."
    try:
        if task["stream"]:
            result: Any = Runner.run_streamed(agent, question)
            async for _ in result.stream_events():
                pass
        else:
            result = await Runner.run(agent, question)
    finally:
        await client.close()
    return 1.0 if result.final_output == f"The sum is {task['a'] + task['b']}" else 0.0


@pytest.mark.timeout(180)
@pytest.mark.parametrize("stream", [False, True], ids=["plain", "stream"])
def test_openai_agents_sdk_through_the_proxy_yields_triplets(stream: bool) -> None:
    tasks = [{"a": 8, "b": 13, "stream": stream}, {"a": 0, "b": 6, "stream": stream}]
    check_calculator_run(run_agent(agents_sdk_agent, tasks), tasks)
