"""The typed LLM-call record: lossless in each layout for the fields it carries; one call, one reading."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import pytest
from agl.types.semconv import (
    GenAIAttributes,
    InstrumentedLLMAttributes,
    LLMCall,
    LLMCallAttributes,
    LLMCallFormat,
    LLMChoice,
    LLMUsage,
    parse_json_text,
)
from hypothesis import given, settings
from hypothesis import strategies as st

PROXY, GEN_AI = LLMCallFormat.PROXY, LLMCallFormat.GEN_AI

text = st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=12)
word = st.text(alphabet="abcdefghij_", min_size=1, max_size=8)
some_text = text.filter(bool)
floats = st.floats(allow_nan=False, allow_infinity=False)
ids = st.lists(st.integers(min_value=0, max_value=2**31), max_size=6)
json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | floats | text,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(text, inner, max_size=3),
    max_leaves=8,
)
json_objects = st.dictionaries(text, json_values, max_size=4)
scalar_params = st.dictionaries(
    word.filter(lambda k: k not in ("model", "stream", "functions")),
    st.booleans() | st.integers() | floats | text | st.lists(some_text, min_size=1, max_size=3),
    max_size=4,
)


def optional(strategy: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    return st.none() | strategy


# -- calls each layout carries completely -----------------------------------------------------------


@st.composite
def tool_calls(draw: st.DrawFn) -> list[dict[str, Any]]:
    return [
        {
            "id": draw(optional(word)),
            "type": "function",
            "function": {"name": draw(optional(word)), "arguments": draw(text)},
        }
        for _ in range(draw(st.integers(1, 2)))
    ]


@st.composite
def genai_messages(draw: st.DrawFn, *, answer: bool = False) -> dict[str, Any]:
    message: dict[str, Any] = {
        "role": draw(st.sampled_from(["assistant"] if answer else ["user", "system", "tool"]))
    }
    if draw(st.booleans()):
        message["content"] = draw(text)
    if not answer:
        for key in ("name", "tool_call_id"):
            if draw(st.booleans()):
                message[key] = draw(word)
    if draw(st.booleans()):
        message["tool_calls"] = draw(tool_calls())
    return message


@st.composite
def genai_tools(draw: st.DrawFn) -> dict[str, Any]:
    function: dict[str, Any] = {"name": draw(word)}
    if draw(st.booleans()):
        function["description"] = draw(some_text)
    if draw(st.booleans()):
        function["parameters"] = draw(json_objects)
    return {"type": "function", "function": function}


@st.composite
def usages(draw: st.DrawFn, *, total: bool) -> LLMUsage:
    counts = st.integers(min_value=0, max_value=10**6)
    usage = LLMUsage(
        draw(optional(counts)), draw(optional(counts)), draw(optional(counts)) if total else None
    )
    return usage if usage != LLMUsage() else LLMUsage(input_tokens=1)


@st.composite
def genai_choices(draw: st.DrawFn) -> list[LLMChoice]:
    indices = sorted(draw(st.sets(st.integers(0, 5), max_size=3)))
    choices = [
        LLMChoice(
            index=i,
            message=draw(genai_messages(answer=True)),
            finish_reason=draw(optional(word)),
            token_ids=draw(optional(ids)),
        )
        for i in indices
    ]
    if choices and draw(st.booleans()):
        content = [{"token": draw(text), "logprob": draw(floats)} for _ in range(draw(st.integers(1, 3)))]
        choices[0].logprobs_content = content
        choices[0].logprobs = [e["logprob"] for e in content]
    return choices


@st.composite
def genai_calls(draw: st.DrawFn, *, endpoint: str | None = None) -> LLMCall:
    """Calls the ``GEN_AI`` layout carries completely."""
    return LLMCall(
        endpoint=endpoint or draw(st.sampled_from(["chat.completions", "completions"])),
        system=draw(optional(word)),
        model=draw(optional(text)),
        stream=draw(optional(st.booleans())),
        params=draw(scalar_params),
        messages=draw(optional(st.lists(genai_messages(), min_size=1, max_size=3))),
        tools=draw(optional(st.lists(genai_tools(), min_size=1, max_size=2))),
        api_base=draw(optional(some_text)),
        error_type=draw(optional(word)),
        response_id=draw(optional(some_text)),
        response_model=draw(optional(some_text)),
        choices=draw(genai_choices()),
        prompt_token_ids=draw(optional(ids)),
        response_token_ids=draw(optional(ids)),
        usage=draw(optional(usages(total=True))),
    )


@st.composite
def proxy_choices(draw: st.DrawFn) -> list[LLMChoice]:
    count = draw(st.integers(0, 3))
    choices = [
        LLMChoice(
            index=draw(st.integers(0, 5)) if count > 1 else 0,
            message=draw(json_objects),
            finish_reason=draw(optional(word)),
            token_ids=draw(optional(ids)),
            logprobs=draw(optional(st.lists(floats, max_size=4))),
        )
        for _ in range(count)
    ]
    return choices


@st.composite
def proxy_calls(draw: st.DrawFn) -> LLMCall:
    """Calls the ``PROXY`` layout carries completely."""
    choices = draw(proxy_choices())
    return LLMCall(
        endpoint=draw(st.sampled_from(["chat.completions", "completions"])),
        system=draw(optional(some_text)),
        model=draw(optional(text)),
        stream=draw(optional(st.booleans())),
        params=draw(json_objects),
        messages=draw(optional(st.lists(json_values, max_size=3))),
        prompt=draw(optional(json_values.filter(lambda v: v is not None))),
        tools=draw(optional(st.lists(json_values, min_size=1, max_size=2))),
        api_base=draw(optional(some_text)),
        route=draw(optional(text)),
        deployment_model=draw(optional(some_text)),
        http_status=draw(optional(st.integers(100, 599))),
        latency_ms=draw(optional(floats)),
        time_to_first_chunk_ms=draw(optional(floats)),
        client_disconnected=draw(st.booleans()),
        error_type=draw(optional(some_text)),
        error_message=draw(optional(some_text)),
        response_id=draw(optional(some_text)),
        response_model=draw(optional(some_text)),
        choices=choices,
        prompt_token_ids=draw(optional(ids)),
        response_token_ids=choices[0].token_ids if choices else draw(optional(ids)),
        usage=draw(optional(usages(total=False))),
    )


def stored(attributes: dict[str, Any]) -> dict[str, Any]:
    """What a store gives back: the attributes through JSON."""
    return json.loads(json.dumps(attributes))


@settings(max_examples=300, deadline=None)
@given(proxy_calls())
def test_proxy_layout_round_trips(call: LLMCall) -> None:
    attributes = call.to_attributes(PROXY)
    assert LLMCall.from_attributes(attributes) == call
    assert LLMCall.from_attributes(stored(attributes), PROXY, strict=True) == call


@settings(max_examples=300, deadline=None)
@given(genai_calls())
def test_genai_layout_round_trips(call: LLMCall) -> None:
    attributes = call.to_attributes(GEN_AI)
    assert not any(k.startswith("agentlightning.") for k in attributes)
    assert LLMCall.from_attributes(attributes) == call
    assert LLMCall.from_attributes(stored(attributes), GEN_AI, strict=True) == call


def common_fields(call: LLMCall) -> LLMCall:
    """The fields both layouts carry."""
    usage = call.usage and dataclasses.replace(call.usage, total_tokens=None)
    choices = [dataclasses.replace(c, logprobs_content=None) for c in call.choices]
    return dataclasses.replace(call, usage=usage, choices=choices)


@settings(max_examples=200, deadline=None)
@given(genai_calls(endpoint="chat.completions"))
def test_the_same_call_reads_back_the_same_from_either_layout(call: LLMCall) -> None:
    # Where the layouts' reach differs: a lone choice is choice 0 and its token ids are the call's.
    call.usage = call.usage and dataclasses.replace(call.usage, total_tokens=None)
    if call.usage == LLMUsage():
        call.usage = None
    if len(call.choices) == 1:
        call.choices[0].index = 0
    if call.choices:
        call.response_token_ids = call.choices[0].token_ids
    from_proxy = LLMCall.from_attributes(stored(call.to_attributes(PROXY)))
    from_genai = LLMCall.from_attributes(stored(call.to_attributes(GEN_AI)))
    assert common_fields(from_proxy) == common_fields(from_genai) == common_fields(call)


def test_request_and_response_attributes_split_the_layout() -> None:
    call = LLMCall(
        model="m", messages=[{"role": "user", "content": "hi"}], response_id="r", choices=[LLMChoice()]
    )
    for layout in LLMCallFormat:
        request, response = call.request_attributes(layout), call.response_attributes(layout)
        assert not set(request) & set(response)
        assert {**request, **response} == call.to_attributes(layout)
    assert call.request_attributes(GEN_AI)[GenAIAttributes.REQUEST_MODEL.value] == "m"
    assert GenAIAttributes.RESPONSE_ID.value not in call.request_attributes(GEN_AI)


def test_the_layout_is_detected_from_the_attributes() -> None:
    assert LLMCall.detect_format({LLMCallAttributes.ENDPOINT.value: "completions"}) is PROXY
    assert LLMCall.detect_format({"gen_ai.prompt.0.role": "user"}) is GEN_AI
    assert LLMCall.detect_format({}) is GEN_AI


# -- malformed payloads ----------------------------------------------------------------------------

DEEP = "[" * 100_000 + "]" * 100_000


@pytest.mark.parametrize(
    ("key", "value", "complaint"),
    [
        (LLMCallAttributes.REQUEST_MESSAGES.value, '{"role": "user"}', "list"),
        (LLMCallAttributes.REQUEST_MESSAGES.value, "[not json", "not valid JSON"),
        (LLMCallAttributes.REQUEST_MESSAGES.value, DEEP, "nested too deeply"),
        (LLMCallAttributes.RESPONSE_MESSAGES.value, DEEP, "nested too deeply"),
        (LLMCallAttributes.REQUEST_PARAMS.value, "[1]", "object"),
        (LLMCallAttributes.PROMPT_TOKEN_IDS.value, ["a"], "integers"),
        (LLMCallAttributes.HTTP_STATUS.value, "200", "integer"),
        (GenAIAttributes.REQUEST_MODEL.value, 3, "string"),
    ],
)
def test_a_malformed_proxy_payload_is_named_when_strict_and_skipped_otherwise(
    key: str, value: Any, complaint: str, caplog: pytest.LogCaptureFixture
) -> None:
    attributes = {LLMCallAttributes.ENDPOINT.value: "chat.completions", key: value, "gen_ai.response.id": "r"}
    with pytest.raises(ValueError, match=complaint) as raised:
        LLMCall.from_attributes(attributes, strict=True)
    assert key in str(raised.value)
    call = LLMCall.from_attributes(attributes)
    assert call.response_id == "r"
    assert key in caplog.text


def test_deeply_nested_json_in_a_genai_span_is_skipped() -> None:
    call = LLMCall.from_attributes(
        {
            "gen_ai.completion.0.role": "assistant",
            InstrumentedLLMAttributes.LOGPROBS_CONTENT.value: DEEP,
            InstrumentedLLMAttributes.PROMPT_TOKEN_IDS.value: DEEP,
            "gen_ai.request.functions.0.parameters": DEEP,
        }
    )
    assert call.logprobs is None and call.prompt_token_ids is None
    assert call.tools == [{"type": "function", "function": {"parameters": DEEP}}]


def test_parse_json_text_leaves_undecodable_text_alone() -> None:
    assert parse_json_text('{"a": [1]}') == {"a": [1]}
    assert parse_json_text("[not json") == "[not json"
    assert parse_json_text(DEEP) == DEEP
    too_deep = "[" * 129 + "]" * 129
    assert parse_json_text(too_deep) == too_deep
    assert parse_json_text("[" * 128 + "]" * 128) != "[" * 128 + "]" * 128
    assert parse_json_text(5) == 5
