"""Every adapter reads spans whose attributes hold JSON text nested arbitrarily deep, in every attribute the
adapters decode, without a RecursionError (issue 12, defect 11)."""

from __future__ import annotations

from typing import Any

import pytest
from agl.algorithms.adapter import LlmProxyTraceToTriplet, TracerTraceToTriplet, TraceToMessages
from agl.types import Span


def _span(attributes: dict[str, Any], name: str = "openai.chat.completion") -> Span:
    return Span(
        rollout_id="ro",
        attempt_id="at",
        sequence_id=1,
        trace_id="t" * 32,
        span_id="s" * 16,
        name=name,
        attributes=attributes,
        start_time=1.0,
        end_time=2.0,
    )


def _layouts(text: str) -> list[dict[str, Any]]:
    return [
        {
            "gen_ai.prompt.0.role": "user",
            "gen_ai.prompt.0.content": text,
            "gen_ai.completion.0.role": "assistant",
            "gen_ai.completion.0.content": text,
            "gen_ai.request.functions.0.name": "f",
            "gen_ai.request.functions.0.parameters": text,
        },
        {
            "gen_ai.prompt.0.role": "user",
            "gen_ai.prompt.0.content": "x",
            "gen_ai.completion.0.role": "assistant",
            "gen_ai.completion.0.tool_calls.0.function.name": "f",
            "gen_ai.completion.0.tool_calls.0.function.arguments": text,
            "prompt_token_ids": text,
            "response_token_ids": text,
        },
        {"agentops.op.output.choices": text, "agentops.op.output.prompt_token_ids": text},
        {"agentops.op.input.messages": text},
        {"llm.hosted_vllm.prompt_token_ids": text, "llm.hosted_vllm.choices": text},
    ]


@pytest.mark.parametrize("depth", [150, 990, 100_000])
@pytest.mark.parametrize("shape", ["lists", "dicts"])
def test_deep_json_text_never_raises_recursion_error(depth: int, shape: str) -> None:
    text = "[" * depth + "]" * depth if shape == "lists" else '{"a":' * depth + "1" + "}" * depth
    reward = _span({"agentlightning.reward.0.value": 1.0}, "agentlightning.annotation")
    for attributes in _layouts(text):
        for adapter in (TraceToMessages(), TracerTraceToTriplet(), LlmProxyTraceToTriplet()):
            adapter.adapt([_span(attributes), reward])  # may skip the call; must not raise
