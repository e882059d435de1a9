"""LangGraph (a StateGraph: a model node, a ToolNode, tools_condition between them) through the LLM proxy."""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from agl.runner import rollout
from agl.testing.e2e.proxy_harness import run_agent
from agl.types import LLM

from tests.test_frameworks_langchain import calculator_chat
from tests.test_frameworks_openai import check_calculator_run


@rollout
async def langgraph_agent(task: dict[str, Any], llm: LLM) -> float:
    from langchain_core.messages import HumanMessage
    from langgraph.graph import START, MessagesState, StateGraph
    from langgraph.prebuilt import ToolNode, tools_condition

    http = httpx.AsyncClient()
    add, chat = calculator_chat(llm, task, http)

    async def model(state: MessagesState) -> dict[str, Any]:
        return {"messages": [await chat.ainvoke(state["messages"])]}

    graph = StateGraph(MessagesState)
    graph.add_node("model", model)
    graph.add_node("tools", ToolNode([add]))
    graph.add_edge(START, "model")
    graph.add_conditional_edges("model", tools_condition)
    graph.add_edge("tools", "model")
    async with http:
        result = await graph.compile().ainvoke(
            {"messages": [HumanMessage(content=f"Please add {task['a']} and {task['b']}.")]}
        )
    return 1.0 if result["messages"][-1].content == f"The sum is {task['a'] + task['b']}" else 0.0


@pytest.mark.timeout(180)
@pytest.mark.parametrize("stream", [False, True], ids=["plain", "stream"])
def test_langgraph_through_the_proxy_yields_triplets(stream: bool) -> None:
    tasks = [{"a": 4, "b": 5, "stream": stream}, {"a": 7, "b": 1, "stream": stream}]
    check_calculator_run(run_agent(langgraph_agent, tasks), tasks)
