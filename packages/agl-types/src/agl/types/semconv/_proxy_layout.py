"""The ``PROXY`` attribute layout of an LLM call: the agl LLM proxy's ``agentlightning.llm.*`` attributes (JSON
payloads in OpenAI's wire format, token id lists) plus the GenAI scalars."""

from __future__ import annotations

from typing import Any, TypeVar

from ..narrow import as_dict, as_int_list, as_list, as_mapping
from ._attribute_reader import AttributeReader, dumps, floats, is_number, str_or_none
from ._fields import Field, read_fields, write_fields
from ._llm_record import CHAT, COMPLETIONS, LLMCallFields, LLMChoice, LLMUsage
from ._names import GenAIAttributes as G
from ._names import LLMCallAttributes as L

__all__ = ["proxy_request", "proxy_response", "read_proxy"]

CallT = TypeVar("CallT", bound=LLMCallFields)

# Request parameters the proxy also writes as GenAI scalars (both max-token names go to the one attribute).
_PROXY_PARAM_ATTRS = {
    "temperature": G.REQUEST_TEMPERATURE,
    "top_p": G.REQUEST_TOP_P,
    "max_tokens": G.REQUEST_MAX_TOKENS,
    "max_completion_tokens": G.REQUEST_MAX_TOKENS,
    "seed": G.REQUEST_SEED,
    "frequency_penalty": G.REQUEST_FREQUENCY_PENALTY,
    "presence_penalty": G.REQUEST_PRESENCE_PENALTY,
    "n": G.REQUEST_CHOICE_COUNT,
}

_REQUEST_FIELDS = (
    Field("stream", L.STREAM.value, AttributeReader.flag),
    Field("route", L.ROUTE.value, AttributeReader.text),
    Field("system", G.SYSTEM.value, AttributeReader.text, skip_empty=True),
    Field("model", G.REQUEST_MODEL.value, AttributeReader.text),
)
_PAYLOAD_FIELDS = (
    Field(
        "messages",
        L.REQUEST_MESSAGES.value,
        lambda r, key: r.json_list(key, "a JSON list of messages"),
        encode=dumps,
    ),
    Field("prompt", L.REQUEST_PROMPT.value, AttributeReader.json, encode=dumps),
    Field(
        "tools",
        L.REQUEST_TOOLS.value,
        lambda r, key: r.json_list(key, "a JSON list of tools"),
        skip_empty=True,
        encode=dumps,
    ),
    Field(
        "params",
        L.REQUEST_PARAMS.value,
        lambda r, key: r.json(key, dict, "a JSON object") or {},
        skip_empty=True,
        encode=dumps,
    ),
    Field("deployment_model", L.DEPLOYMENT_MODEL.value, AttributeReader.text, skip_empty=True),
    Field("api_base", L.DEPLOYMENT_API_BASE.value, AttributeReader.text, skip_empty=True),
)
_RESPONSE_FIELDS = (
    Field("http_status", L.HTTP_STATUS.value, AttributeReader.integer),
    Field("latency_ms", L.LATENCY_MS.value, AttributeReader.number),
    Field("time_to_first_chunk_ms", L.TIME_TO_FIRST_CHUNK_MS.value, AttributeReader.number),
    Field(
        "client_disconnected",
        L.CLIENT_DISCONNECTED.value,
        lambda r, key: bool(r.flag(key)),
        skip_empty=True,
    ),
    Field("error_type", G.ERROR_TYPE.value, AttributeReader.text, skip_empty=True),
    Field("error_message", L.ERROR_MESSAGE.value, AttributeReader.text, skip_empty=True),
    Field("response_id", G.RESPONSE_ID.value, AttributeReader.text, skip_empty=True),
    Field("response_model", G.RESPONSE_MODEL.value, AttributeReader.text, skip_empty=True),
    Field("system_fingerprint", L.RESPONSE_SYSTEM_FINGERPRINT.value, AttributeReader.text, skip_empty=True),
    Field("prompt_token_ids", L.PROMPT_TOKEN_IDS.value, AttributeReader.ints),
    Field("response_token_ids", L.RESPONSE_TOKEN_IDS.value, AttributeReader.ints),
)
_USAGE_FIELDS = (
    Field("input_tokens", G.USAGE_INPUT_TOKENS.value, AttributeReader.integer),
    Field("output_tokens", G.USAGE_OUTPUT_TOKENS.value, AttributeReader.integer),
)


def proxy_request(call: LLMCallFields) -> dict[str, Any]:
    """The attributes of ``call`` known when the request is sent."""
    attrs: dict[str, Any] = {
        G.OPERATION_NAME.value: call.operation_name,
        L.ENDPOINT.value: call.endpoint,
    }
    write_fields(call, _REQUEST_FIELDS, attrs)
    for key, name in _PROXY_PARAM_ATTRS.items():
        value = call.params.get(key)
        if is_number(value):
            attrs[name.value] = value
    stop = call.params.get("stop")
    if isinstance(stop, str):
        attrs[G.REQUEST_STOP_SEQUENCES.value] = [stop]
    elif isinstance(stop, list):
        stops = as_list(stop) or []
        if all(isinstance(s, str) for s in stops):
            attrs[G.REQUEST_STOP_SEQUENCES.value] = stop
    write_fields(call, _PAYLOAD_FIELDS, attrs)
    return attrs


def proxy_response(call: LLMCallFields) -> dict[str, Any]:
    """The attributes of ``call`` known once it ended: the response, its outcome and its timing."""
    attrs: dict[str, Any] = {}
    write_fields(call, _RESPONSE_FIELDS, attrs)
    if call.finish_reasons:
        attrs[G.RESPONSE_FINISH_REASONS.value] = call.finish_reasons
    if call.choices:
        first = call.choices[0]
        if first.logprobs is not None:
            attrs[L.RESPONSE_LOGPROBS.value] = first.logprobs
        attrs[L.RESPONSE_MESSAGES.value] = dumps([c.message for c in call.choices])
        if len(call.choices) > 1:
            attrs[L.RESPONSE_CHOICES.value] = dumps(
                [
                    {
                        "index": c.index,
                        "finish_reason": c.finish_reason,
                        "token_ids": c.token_ids,
                        "logprobs": c.logprobs,
                    }
                    for c in call.choices
                ]
            )
    if call.usage is not None:
        write_fields(call.usage, _USAGE_FIELDS, attrs)
    return attrs


def read_proxy(r: AttributeReader, record: type[CallT]) -> CallT:
    """The call recorded in the ``PROXY`` layout, as a ``record`` (:class:`~agl.types.semconv.LLMCall`)."""
    endpoint = r.text(L.ENDPOINT.value)
    if endpoint is None:
        endpoint = COMPLETIONS if r.attributes.get(G.OPERATION_NAME.value) == "text_completion" else CHAT
    call = record(
        endpoint=endpoint,
        **read_fields(r, (*_REQUEST_FIELDS, *_PAYLOAD_FIELDS, *_RESPONSE_FIELDS)),
    )
    messages = r.json_list(L.RESPONSE_MESSAGES.value, "a JSON list of messages") or []
    details = r.json_list(L.RESPONSE_CHOICES.value, "a JSON list of choices")
    if details:
        for i, item in enumerate(details):
            detail = as_mapping(item)
            if detail is None:
                r.problem(L.RESPONSE_CHOICES.value, f"item {i} must be an object")
                continue
            index = detail.get("index")
            message = as_dict(messages[i]) if i < len(messages) else None
            call.choices.append(
                LLMChoice(
                    index=index if isinstance(index, int) else i,
                    message=message if message is not None else {},
                    finish_reason=str_or_none(detail.get("finish_reason")),
                    token_ids=as_int_list(detail.get("token_ids")),
                    logprobs=floats(detail.get("logprobs")),
                )
            )
    else:
        finish = r.items(G.RESPONSE_FINISH_REASONS.value, "a list of strings")
        for i, item in enumerate(messages):
            message = as_dict(item)
            if message is None:
                r.problem(L.RESPONSE_MESSAGES.value, f"item {i} must be a message object")
            call.choices.append(
                LLMChoice(
                    index=i,
                    message=message if message is not None else {},
                    finish_reason=str_or_none(finish[i]) if i < len(finish) else None,
                )
            )
        if call.choices:
            call.choices[0].token_ids = call.response_token_ids
            call.choices[0].logprobs = floats(
                r.get(L.RESPONSE_LOGPROBS.value, (list, tuple), "a list of numbers")
            )
    usage = LLMUsage(**read_fields(r, _USAGE_FIELDS))
    if usage.input_tokens is not None or usage.output_tokens is not None:
        call.usage = usage
    return call
