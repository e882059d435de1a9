"""LangChain (``langchain-openai``'s ChatOpenAI with a bound tool) through the LLM proxy."""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from agl.runner import rollout
from agl.testing.e2e.proxy_harness import run_agent
from agl.types import LLM

from tests.test_frameworks_openai import check_calculator_run


def _add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


def calculator_chat(llm: LLM, task: dict[str, Any], http: httpx.AsyncClient) -> tuple[Any, Any]:
    """The ``add`` tool and a ChatOpenAI bound to it, talking to ``llm`` through ``http``.

    The caller owns ``http`` and closes it: langchain-openai's default client is cached for the whole process,
    its connections left to the garbage collector after the rollout's loop closed."""
    from langchain_core.tools import tool
    from langchain_openai import ChatOpenAI
    from pydantic import SecretStr

    add = tool("add")(_add)
    chat = ChatOpenAI(
        model=llm.model,
        base_url=llm.endpoint,
        api_key=SecretStr("unused"),
        max_retries=0,
        streaming=task["stream"],
        http_async_client=http,
    ).bind_tools([add])
    return add, chat


@rollout
async def langchain_agent(task: dict[str, Any], llm: LLM) -> float:
    from langchain_core.messages import HumanMessage, ToolMessage

    http = httpx.AsyncClient()
    add, chat = calculator_chat(llm, task, http)
    messages: list[Any] = [HumanMessage(content=f"Please add {task['a']} and {task['b']}.")]
    async with http:
        answer = await chat.ainvoke(messages)
        messages.append(answer)
        for call in answer.tool_calls:
            messages.append(ToolMessage(content=str(add.invoke(call["args"])), tool_call_id=call["id"]))
        final = await chat.ainvoke(messages)
    return 1.0 if final.content == f"The sum is {task['a'] + task['b']}" else 0.0


@pytest.mark.timeout(180)
@pytest.mark.parametrize("stream", [False, True], ids=["plain", "stream"])
def test_langchain_through_the_proxy_yields_triplets(stream: bool) -> None:
    tasks = [{"a": 4, "b": 5, "stream": stream}, {"a": 7, "b": 1, "stream": stream}]
    check_calculator_run(run_agent(langchain_agent, tasks), tasks)
