"""The plain ``openai`` client (sync and async, streamed and not, with tool calls) through the LLM proxy."""

from __future__ import annotations

import json
from typing import Any, cast

import openai
import pytest
from agl.runner import rollout
from agl.testing.e2e.dashboard_run import ADD_TOOL
from agl.testing.e2e.proxy_harness import AgentRun, run_agent, tool_result_message
from agl.testing.openai_standin import Reply, ToolCall, chat_prompt_text, completion_token_ids, token_ids
from agl.types import LLM
from agl.types.semconv import LLMCallAttributes
from openai.types.chat import ChatCompletionMessageParam, ChatCompletionToolUnionParam


def _stream_to_message(chunks: Any) -> dict[str, Any]:
    content, calls = "", {}
    for chunk in chunks:
        if not chunk.choices:
            continue
        delta = chunk.choices[0].delta
        content += delta.content or ""
        for call in delta.tool_calls or []:
            slot = calls.setdefault(call.index, {"id": None, "name": "", "arguments": ""})
            slot["id"] = call.id or slot["id"]
            if call.function and call.function.name:
                slot["name"] = call.function.name
            if call.function and call.function.arguments:
                slot["arguments"] += call.function.arguments
    return _message(content, [calls[i] for i in sorted(calls)])


def _message(content: str | None, calls: list[dict[str, Any]]) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": content or None}
    if calls:
        message["tool_calls"] = [
            {"id": c["id"], "type": "function", "function": {"name": c["name"], "arguments": c["arguments"]}}
            for c in calls
        ]
    return message


def _from_response(resp: Any) -> dict[str, Any]:
    msg = resp.choices[0].message
    calls = [
        {"id": c.id, "name": c.function.name, "arguments": c.function.arguments} for c in msg.tool_calls or []
    ]
    return _message(msg.content, calls)


def _next_messages(messages: list[dict[str, Any]], answer: dict[str, Any]) -> list[dict[str, Any]]:
    messages = [*messages, answer]
    for call in answer.get("tool_calls", []):
        messages.append(
            {
                "role": "tool",
                "tool_call_id": call["id"],
                "content": tool_result_message(call["function"]["arguments"]),
            }
        )
    return messages


def _question(task: dict[str, int]) -> list[dict[str, Any]]:
    return [{"role": "user", "content": f"Please add {task['a']} and {task['b']}."}]


# the agents build their messages as plain dicts, as a user's agent would
_TOOLS = cast("list[ChatCompletionToolUnionParam]", [ADD_TOOL])


def _as_params(messages: list[dict[str, Any]]) -> list[ChatCompletionMessageParam]:
    return cast("list[ChatCompletionMessageParam]", messages)


@rollout
def sync_agent(task: dict[str, Any], llm: LLM) -> float:
    messages = _question(task)
    with openai.OpenAI(base_url=llm.endpoint, api_key="unused", max_retries=0) as client:
        for _ in range(2):
            if task["stream"]:
                answer = _stream_to_message(
                    client.chat.completions.create(
                        model=llm.model, messages=_as_params(messages), tools=_TOOLS, stream=True
                    )
                )
            else:
                answer = _from_response(
                    client.chat.completions.create(
                        model=llm.model, messages=_as_params(messages), tools=_TOOLS
                    )
                )
            messages = _next_messages(messages, answer)
    return 1.0 if messages[-1]["content"] == f"The sum is {task['a'] + task['b']}" else 0.0


@rollout
async def async_agent(task: dict[str, Any], llm: LLM) -> float:
    messages = _question(task)
    async with openai.AsyncOpenAI(base_url=llm.endpoint, api_key="unused", max_retries=0) as client:
        for _ in range(2):
            if task["stream"]:
                stream = await client.chat.completions.create(
                    model=llm.model,
                    messages=_as_params(messages),
                    tools=_TOOLS,
                    stream=True,
                )
                answer = _stream_to_message([c async for c in stream])
            else:
                answer = _from_response(
                    await client.chat.completions.create(
                        model=llm.model, messages=_as_params(messages), tools=_TOOLS
                    )
                )
            messages = _next_messages(messages, answer)
    return 1.0 if messages[-1]["content"] == f"The sum is {task['a'] + task['b']}" else 0.0


def check_calculator_run(run: AgentRun, tasks: list[dict[str, Any]]) -> None:
    """Two calls per rollout (tool call, then answer) → two triplets with the stand-in's exact token ids."""
    assert len(run.results) == len(tasks)
    for task, result in zip(tasks, run.results, strict=True):
        assert result.rollout.status == "succeeded", result.rollout
        triplets = result.proxy_triplets
        assert len(triplets) == 2, [s.name for s in result.spans]
        first, second = triplets
        expected_call = Reply(tool_calls=[ToolCall("add", {"a": task["a"], "b": task["b"]})])
        assert first.response["token_ids"] == completion_token_ids(expected_call)
        assert second.response["token_ids"] == token_ids(f"The sum is {task['a'] + task['b']}")
        for triplet, span in zip(triplets, result.llm_spans, strict=True):
            sent = json.loads(span.attributes[LLMCallAttributes.REQUEST_MESSAGES.value])
            tools_json = span.attributes.get(LLMCallAttributes.REQUEST_TOOLS.value)
            tools = json.loads(tools_json) if tools_json else None
            assert triplet.prompt["token_ids"] == token_ids(chat_prompt_text(sent, tools))
            assert len(triplet.response["logprobs"]) == len(triplet.response["token_ids"])
            assert triplet.metadata["rollout_id"] == result.rollout.rollout_id
        # The agent's returned reward lands on the last call; the tree adapter agrees.
        assert [t.reward for t in triplets] == [None, 1.0]
        assert [t.response["token_ids"] for t in result.tree_triplets] == [
            t.response["token_ids"] for t in triplets
        ]
        assert result.tree_triplets[-1].reward == 1.0


@pytest.mark.timeout(180)
@pytest.mark.parametrize("stream", [False, True], ids=["plain", "stream"])
@pytest.mark.parametrize("agent", [sync_agent, async_agent], ids=["sync", "async"])
def test_openai_client_through_the_proxy_yields_triplets(agent: Any, stream: bool) -> None:
    tasks = [{"a": 2, "b": 3, "stream": stream}, {"a": 10, "b": -4, "stream": stream}]
    run = run_agent(agent, tasks)
    check_calculator_run(run, tasks)
