"""Adapters survive malformed span payloads, JSON text nested too deeply to decode included (issue 12 #11)."""

from __future__ import annotations

import logging
from typing import Any

import pytest
from agl.algorithms import LlmProxyTraceToTriplet, TracerTraceToTriplet, TraceToMessages
from agl.algorithms.adapter import extract_llm_call
from agl.types import Span
from agl.types.semconv import AGL_LLM_CALL, LLMCallAttributes

L = LLMCallAttributes
DEEP = "[" * 100_000 + "]" * 100_000
DECODABLE_BUT_DEEP = "[" * 300 + "]" * 300  # json decodes it; pydantic cannot serialise a triplet holding it


def span(attributes: dict[str, Any], name: str, span_id: str = "s1", seq: int = 1) -> Span:
    return Span.from_attributes(
        attributes=attributes,
        rollout_id="ro",
        attempt_id="at",
        sequence_id=seq,
        name=name,
        span_id=span_id,
        start_time=float(seq),
        end_time=seq + 0.5,
    )


def proxy_call(**payload: Any) -> Span:
    attributes = {
        L.ENDPOINT.value: "chat.completions",
        L.REQUEST_MESSAGES.value: '[{"role": "user", "content": "hi"}]',
        L.RESPONSE_MESSAGES.value: '[{"role": "assistant", "content": "yo"}]',
        L.PROMPT_TOKEN_IDS.value: [1, 2],
        L.RESPONSE_TOKEN_IDS.value: [3],
        "gen_ai.response.id": "r1",
    }
    attributes.update({getattr(L, k).value: v for k, v in payload.items()})
    return span(attributes, AGL_LLM_CALL)


def genai_call(**attributes: Any) -> Span:
    base = {
        "gen_ai.prompt.0.role": "user",
        "gen_ai.prompt.0.content": "hi",
        "gen_ai.completion.0.role": "assistant",
        "gen_ai.completion.0.content": "yo",
        "prompt_token_ids": [1, 2],
        "response_token_ids": [3],
    }
    return span({**base, **attributes}, "openai.chat.completion")


@pytest.mark.parametrize(
    "field", ["REQUEST_MESSAGES", "RESPONSE_MESSAGES", "REQUEST_TOOLS", "REQUEST_PARAMS"]
)
def test_deeply_nested_json_in_a_proxy_span_is_skipped_with_a_warning(
    field: str, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING):
        [triplet] = LlmProxyTraceToTriplet().adapt([proxy_call(**{field: DEEP})])
    assert (triplet.prompt["token_ids"], triplet.response["token_ids"]) == ([1, 2], [3])
    assert getattr(L, field).value in caplog.text and "nested too deeply" in caplog.text
    assert len(TracerTraceToTriplet().adapt([proxy_call(**{field: DEEP})])) == 1


def test_deeply_nested_json_in_a_genai_span_is_text() -> None:
    spans = [genai_call(**{"gen_ai.prompt.0.content": DEEP, "logprobs.content": DEEP})]
    [triplet] = TracerTraceToTriplet().adapt(spans)
    assert triplet.prompt["image_urls"] == [] and "logprobs" not in triplet.response
    [record] = TraceToMessages().adapt(spans)
    assert record["messages"][0]["content"] == DEEP


def test_messages_say_which_attribute_is_too_deep() -> None:
    with pytest.raises(ValueError, match="nested too deeply") as raised:
        TraceToMessages().adapt([proxy_call(REQUEST_MESSAGES=DEEP)])
    assert "span s1" in str(raised.value) and L.REQUEST_MESSAGES.value in str(raised.value)


def test_reference_payloads_nested_too_deeply_are_ignored() -> None:
    call = extract_llm_call({"llm.hosted_vllm.prompt_token_ids": DEEP, "llm.hosted_vllm.choices": DEEP})
    assert (call.prompt_token_ids, call.response_token_ids) == ([], [])


def test_decodable_json_deeper_than_the_limit_is_skipped_too(caplog: pytest.LogCaptureFixture) -> None:
    [triplet] = LlmProxyTraceToTriplet().adapt([proxy_call(REQUEST_MESSAGES=DECODABLE_BUT_DEEP)])
    assert triplet.prompt["raw_content"] is None
    triplet.model_dump_json()
    assert "more than 128 levels" in caplog.text
    [triplet] = TracerTraceToTriplet().adapt([genai_call(**{"gen_ai.prompt.0.content": DECODABLE_BUT_DEEP})])
    triplet.model_dump_json()
