"""AutoGen (``autogen-agentchat`` AssistantAgent + ``autogen-ext`` OpenAI client) through the LLM proxy."""

from __future__ import annotations

from typing import Any

import pytest
from agl.runner import rollout
from agl.testing.e2e.proxy_harness import run_agent
from agl.types import LLM

from tests.test_frameworks_openai import check_calculator_run


async def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


@rollout
async def autogen_agent(task: dict[str, Any], llm: LLM) -> float:
    from autogen_agentchat.agents import AssistantAgent
    from autogen_agentchat.messages import BaseTextChatMessage
    from autogen_ext.models.openai import OpenAIChatCompletionClient

    client = OpenAIChatCompletionClient(
        model=llm.model,
        base_url=llm.endpoint,
        api_key="unused",
        max_retries=0,
        model_info={
            "vision": False,
            "function_calling": True,
            "json_output": False,
            "family": "unknown",
            "structured_output": False,
        },
    )
    agent = AssistantAgent(
        "calculator",
        model_client=client,
        tools=[add],
        reflect_on_tool_use=True,
        model_client_stream=task["stream"],
    )
    try:
        result = await agent.run(task=f"Please add {task['a']} and {task['b']}.")
    finally:
        await client.close()
    last = result.messages[-1]
    final = last.content if isinstance(last, BaseTextChatMessage) else None
    return 1.0 if final == f"The sum is {task['a'] + task['b']}" else 0.0


@pytest.mark.timeout(180)
@pytest.mark.parametrize("stream", [False, True], ids=["plain", "stream"])
def test_autogen_through_the_proxy_yields_triplets(stream: bool) -> None:
    tasks = [{"a": 3, "b": 4, "stream": stream}, {"a": 20, "b": 22, "stream": stream}]
    check_calculator_run(run_agent(autogen_agent, tasks), tasks)
