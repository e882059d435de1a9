"""TraceToMessages: spans → OpenAI chat records with tools."""

from __future__ import annotations

import json
from typing import Any

import pytest
from agl.algorithms import TraceToMessages
from agl.algorithms.adapter import group_genai_dict
from agl.types import Span
from agl.types.semconv import AGL_LLM_CALL, LLMCallAttributes

L = LLMCallAttributes

TOOL = {
    "type": "function",
    "function": {"name": "add", "description": "add", "parameters": {"type": "object", "properties": {}}},
}


def make(
    attributes: dict[str, Any],
    *,
    name: str = "openai.chat.completion",
    span_id: str = "s1",
    parent: str | None = None,
    start: float = 1.0,
) -> Span:
    return Span.from_attributes(
        attributes=attributes,
        rollout_id="ro",
        attempt_id="at",
        sequence_id=1,
        name=name,
        span_id=span_id,
        parent_id=parent,
        start_time=start,
        end_time=start + 1,
    )


def test_group_genai_dict_regroups_numbered_entries() -> None:
    attrs = {
        "gen_ai.prompt.1.role": "user",
        "gen_ai.prompt.0.role": "system",
        "gen_ai.prompt.10.role": "assistant",
        "gen_ai.prompt.0.content": "sys",
        "other": 1,
    }
    assert group_genai_dict(attrs, "gen_ai.prompt") == [
        {"role": "system", "content": "sys"},
        {"role": "user"},
        {"role": "assistant"},
    ]
    assert group_genai_dict(attrs, "gen_ai.nothing") is None


def test_proxy_spans_become_records_with_tools() -> None:
    answer = {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "add", "arguments": '{"a": 1}'}}
        ],
    }
    span = make(
        {
            L.REQUEST_MESSAGES.value: json.dumps(
                [{"role": "system", "content": "s"}, {"role": "user", "content": "u"}]
            ),
            L.REQUEST_TOOLS.value: json.dumps([TOOL]),
            L.RESPONSE_MESSAGES.value: json.dumps([answer]),
        },
        name=AGL_LLM_CALL,
    )
    [record] = TraceToMessages().adapt([span])
    assert record["messages"] == [
        {"role": "system", "content": "s"},
        {"role": "user", "content": "u"},
        {"role": "assistant", "content": None, "tool_calls": answer["tool_calls"]},
    ]
    assert record["tools"] == [TOOL]


def test_genai_spans_with_tool_call_history_and_functions() -> None:
    attrs = {
        "gen_ai.prompt.0.role": "user",
        "gen_ai.prompt.0.content": "what is 1+2",
        "gen_ai.prompt.1.role": "assistant",
        "gen_ai.prompt.1.tool_calls.0.id": "c0",
        "gen_ai.prompt.1.tool_calls.0.name": "add",
        "gen_ai.prompt.1.tool_calls.0.arguments": '{"a": 1, "b": 2}',
        "gen_ai.prompt.2.role": "tool",
        "gen_ai.prompt.2.content": "3",
        "gen_ai.prompt.2.tool_call_id": "c0",
        "gen_ai.completion.0.role": "assistant",
        "gen_ai.completion.0.content": "3",
        "gen_ai.request.functions.0.name": "add",
        "gen_ai.request.functions.0.parameters": '{"type": "object"}',
    }
    [record] = TraceToMessages().adapt([make(attrs)])
    assert record["messages"] == [
        {"role": "user", "content": "what is 1+2"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": "c0", "type": "function", "function": {"name": "add", "arguments": '{"a": 1, "b": 2}'}}
            ],
        },
        {"role": "tool", "content": "3", "tool_call_id": "c0"},
        {"role": "assistant", "content": "3"},
    ]
    assert record["tools"] == [
        {"type": "function", "function": {"name": "add", "parameters": {"type": "object"}}}
    ]


def test_tool_child_spans_become_the_answers_tool_calls_in_order() -> None:
    parent = make(
        {
            "gen_ai.prompt.0.role": "user",
            "gen_ai.prompt.0.content": "go",
            "gen_ai.completion.0.role": "assistant",
        }
    )
    tools = [
        make(
            {"tool.name": "second", "tool.parameters": "{}", "tool.call.id": "t2"},
            name="tool",
            span_id="k2",
            parent="s1",
            start=3,
        ),
        make(
            {"tool.name": "first", "tool.parameters": '{"x": 1}', "tool.call.id": "t1"},
            name="tool",
            span_id="k1",
            parent="s1",
            start=2,
        ),
    ]
    records = TraceToMessages().adapt([parent, *tools])
    assert len(records) == 1
    calls = records[0]["messages"][-1]["tool_calls"]
    assert [(c["id"], c["function"]["name"]) for c in calls] == [("t1", "first"), ("t2", "second")]


def test_malformed_payloads_raise_clear_errors() -> None:
    with pytest.raises(ValueError, match="role"):
        TraceToMessages().adapt([make({"gen_ai.prompt.0.content": "no role"})])
    with pytest.raises(ValueError, match="list"):
        TraceToMessages().adapt(
            [make({L.REQUEST_MESSAGES.value: json.dumps({"role": "user"})}, name=AGL_LLM_CALL)]
        )
    assert TraceToMessages().adapt([make({"unrelated": 1})]) == []


def test_json_looking_string_content_stays_a_string() -> None:
    """A tool result or answer that is JSON text is still text: OpenAI content is a string or a list of parts,
    never an object (issue 28). Both span layouts keep it as the model saw it."""
    rooms = json.dumps({"rooms": [{"id": "A1", "capacity": 4}]})
    genai = make(
        {
            "gen_ai.prompt.0.role": "user",
            "gen_ai.prompt.0.content": "[1, 2]",
            "gen_ai.prompt.1.role": "tool",
            "gen_ai.prompt.1.content": rooms,
            "gen_ai.prompt.1.tool_call_id": "c0",
            "gen_ai.completion.0.role": "assistant",
            "gen_ai.completion.0.content": '{"room": "A1"}',
        }
    )
    proxy = make(
        {
            L.REQUEST_MESSAGES.value: json.dumps(
                [
                    {"role": "user", "content": "[1, 2]"},
                    {"role": "tool", "content": rooms, "tool_call_id": "c0"},
                ]
            ),
            L.RESPONSE_MESSAGES.value: json.dumps([{"role": "assistant", "content": '{"room": "A1"}'}]),
        },
        name=AGL_LLM_CALL,
        span_id="s2",
    )
    for record in TraceToMessages().adapt([genai, proxy]):
        assert [m["content"] for m in record["messages"]] == ["[1, 2]", rooms, '{"room": "A1"}']


def test_content_parts_recorded_as_json_text_come_back_as_parts() -> None:
    parts = [{"type": "text", "text": "describe"}, {"type": "image_url", "image_url": {"url": "data:x"}}]
    span = make(
        {
            "gen_ai.prompt.0.role": "user",
            "gen_ai.prompt.0.content": json.dumps(parts),
            "gen_ai.completion.0.role": "assistant",
            "gen_ai.completion.0.content": "a cat",
        }
    )
    [record] = TraceToMessages().adapt([span])
    assert record["messages"][0]["content"] == parts
