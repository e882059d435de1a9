"""The default tracer's LangChain handler (the reference's default tracer has one): chains and tools become
spans of the rollout, and the LLM calls a chain makes are its children (issue 28)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import openai
import pytest
from agl.testing.openai_standin import serve_standin
from agl.testing.tracer import new_store
from agl.tracer import OtelTracer
from agl.types import Span

pytest.importorskip("langchain_core")

from langchain_core.runnables import RunnableLambda
from langchain_core.tools import tool


@pytest.fixture(scope="module")
def base_url() -> Iterator[str]:
    with serve_standin() as server:
        yield server.base_url


@tool
def lookup(city: str) -> str:
    """The weather of a city."""
    return f"sunny in {city}"


def test_chains_tools_and_their_llm_calls_are_recorded(base_url: str) -> None:
    tracer = OtelTracer()
    tracer.init_worker(0, new_store())
    client = openai.OpenAI(base_url=base_url, api_key="k", max_retries=0)

    def ask(question: str) -> str:
        answer = client.chat.completions.create(
            model="tiny", messages=[{"role": "user", "content": question}]
        )
        return str(answer.choices[0].message.content)

    def weather(text: str) -> str:
        return str(lookup.invoke({"city": text}))

    chain = RunnableLambda(ask, name="planner") | RunnableLambda(weather, name="executor")

    async def go() -> Any:
        async with tracer.trace_context():
            handler = tracer.get_langchain_handler()
            return chain.invoke("paris", {"callbacks": [handler]})

    try:
        assert asyncio.run(go()) == "sunny in echo: paris"
        spans = tracer.get_last_trace()
    finally:
        tracer.teardown_worker(0)
        client.close()
    by_id: dict[str, Span] = {s.span_id: s for s in spans}
    chains = {s.attributes["langchain.chain.type"]: s for s in spans if s.name == "chain.chain"}
    assert {"planner", "executor"} <= set(chains)
    assert all(s.attributes["agentops.span.kind"] == "chain" for s in chains.values())
    [llm] = [s for s in spans if s.name == "openai.chat.completion"]
    assert llm.parent_id == chains["planner"].span_id
    [tool_span] = [s for s in spans if s.name == "tool.tool"]
    assert tool_span.attributes["langchain.tool.name"] == "lookup"
    assert tool_span.attributes["langchain.tool.output"] == "sunny in echo: paris"
    assert tool_span.parent_id is not None and tool_span.parent_id in by_id
    assert chains["planner"].parent_id == chains["executor"].parent_id  # both steps of one sequence
    assert by_id[chains["planner"].parent_id or ""].name == "chain.chain"


def test_get_langchain_callback_handler_is_an_alias() -> None:
    assert OtelTracer.get_langchain_callback_handler is OtelTracer.get_langchain_handler
