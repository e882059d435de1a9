"""The ``PROXY`` attribute layout of an LLM call: the agl LLM proxy's ``agentlightning.llm.*`` attributes (JSON
payloads in OpenAI's wire format, token id lists) plus the GenAI scalars."""

from __future__ import annotations

from typing import Any, TypeVar

from .._narrow import as_dict, as_int_list, as_list, as_mapping
from ._attribute_reader import (
    AttributeReader,
    dumps,
    floats,
    is_number,
    str_or_none,
)
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


def proxy_request(call: LLMCallFields) -> dict[str, Any]:
    """The attributes of ``call`` known when the request is sent."""
    attrs: dict[str, Any] = {
        G.OPERATION_NAME.value: call.operation_name,
        L.ENDPOINT.value: call.endpoint,
    }
    if call.stream is not None:
        attrs[L.STREAM.value] = call.stream
    if call.route is not None:
        attrs[L.ROUTE.value] = call.route
    if call.system:
        attrs[G.SYSTEM.value] = call.system
    if call.model is not None:
        attrs[G.REQUEST_MODEL.value] = call.model
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
    if call.messages is not None:
        attrs[L.REQUEST_MESSAGES.value] = dumps(call.messages)
    if call.prompt is not None:
        attrs[L.REQUEST_PROMPT.value] = dumps(call.prompt)
    if call.tools:
        attrs[L.REQUEST_TOOLS.value] = dumps(call.tools)
    if call.params:
        attrs[L.REQUEST_PARAMS.value] = dumps(call.params)
    if call.deployment_model:
        attrs[L.DEPLOYMENT_MODEL.value] = call.deployment_model
    if call.api_base:
        attrs[L.DEPLOYMENT_API_BASE.value] = call.api_base
    return attrs


def proxy_response(call: LLMCallFields) -> dict[str, Any]:
    """The attributes of ``call`` known once it ended: the response, its outcome and its timing."""
    attrs: dict[str, Any] = {}
    if call.http_status is not None:
        attrs[L.HTTP_STATUS.value] = call.http_status
    if call.latency_ms is not None:
        attrs[L.LATENCY_MS.value] = call.latency_ms
    if call.time_to_first_chunk_ms is not None:
        attrs[L.TIME_TO_FIRST_CHUNK_MS.value] = call.time_to_first_chunk_ms
    if call.client_disconnected:
        attrs[L.CLIENT_DISCONNECTED.value] = True
    if call.error_type:
        attrs[G.ERROR_TYPE.value] = call.error_type
    if call.error_message:
        attrs[L.ERROR_MESSAGE.value] = call.error_message
    if call.response_id:
        attrs[G.RESPONSE_ID.value] = call.response_id
    if call.response_model:
        attrs[G.RESPONSE_MODEL.value] = call.response_model
    if call.prompt_token_ids is not None:
        attrs[L.PROMPT_TOKEN_IDS.value] = call.prompt_token_ids
    if call.finish_reasons:
        attrs[G.RESPONSE_FINISH_REASONS.value] = call.finish_reasons
    if call.response_token_ids is not None:
        attrs[L.RESPONSE_TOKEN_IDS.value] = call.response_token_ids
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
        if call.usage.input_tokens is not None:
            attrs[G.USAGE_INPUT_TOKENS.value] = call.usage.input_tokens
        if call.usage.output_tokens is not None:
            attrs[G.USAGE_OUTPUT_TOKENS.value] = call.usage.output_tokens
    return attrs


def read_proxy(r: AttributeReader, record: type[CallT]) -> CallT:
    """The call recorded in the ``PROXY`` layout, as a ``record`` (:class:`~agl.types.semconv.LLMCall`)."""
    endpoint = r.text(L.ENDPOINT.value)
    if endpoint is None:
        endpoint = COMPLETIONS if r.attributes.get(G.OPERATION_NAME.value) == "text_completion" else CHAT
    call = record(
        endpoint=endpoint,
        system=r.text(G.SYSTEM.value),
        model=r.text(G.REQUEST_MODEL.value),
        stream=r.flag(L.STREAM.value),
        params=r.json(L.REQUEST_PARAMS.value, dict, "a JSON object") or {},
        messages=r.json_list(L.REQUEST_MESSAGES.value, "a JSON list of messages"),
        prompt=r.json(L.REQUEST_PROMPT.value),
        tools=r.json_list(L.REQUEST_TOOLS.value, "a JSON list of tools"),
        api_base=r.text(L.DEPLOYMENT_API_BASE.value),
        route=r.text(L.ROUTE.value),
        deployment_model=r.text(L.DEPLOYMENT_MODEL.value),
        http_status=r.integer(L.HTTP_STATUS.value),
        latency_ms=r.number(L.LATENCY_MS.value),
        time_to_first_chunk_ms=r.number(L.TIME_TO_FIRST_CHUNK_MS.value),
        client_disconnected=bool(r.flag(L.CLIENT_DISCONNECTED.value)),
        error_type=r.text(G.ERROR_TYPE.value),
        error_message=r.text(L.ERROR_MESSAGE.value),
        response_id=r.text(G.RESPONSE_ID.value),
        response_model=r.text(G.RESPONSE_MODEL.value),
        prompt_token_ids=r.ints(L.PROMPT_TOKEN_IDS.value),
        response_token_ids=r.ints(L.RESPONSE_TOKEN_IDS.value),
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
    usage = LLMUsage(
        input_tokens=r.integer(G.USAGE_INPUT_TOKENS.value),
        output_tokens=r.integer(G.USAGE_OUTPUT_TOKENS.value),
    )
    if usage.input_tokens is not None or usage.output_tokens is not None:
        call.usage = usage
    return call
