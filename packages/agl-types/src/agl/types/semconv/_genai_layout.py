"""The ``GEN_AI`` attribute layout of an LLM call: GenAI attributes flattened per message
(``gen_ai.prompt.<i>.role`` ...), as agl's OpenAI instrumentation, OpenLLMetry and AgentOps write them, plus
the reference's token id names."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any, TypeVar

from ..narrow import as_dict, as_int_list, as_list, as_mapping
from ._attribute_reader import AttributeReader, indexed, is_number, parse_json_text, text
from ._fields import Field, read_fields, write_fields
from ._llm_record import CHAT, COMPLETIONS, LLMCallFields, LLMChoice, LLMUsage
from ._names import GenAIAttributes as G
from ._names import InstrumentedLLMAttributes as I

__all__ = ["genai_request", "genai_response", "read_genai"]

CallT = TypeVar("CallT", bound=LLMCallFields)

_NOT_PARAMS = ("model", "type")
"""Keys under ``gen_ai.request`` that are not request parameters."""

_REQUEST_FIELDS = (
    Field("system", G.SYSTEM.value, AttributeReader.text, skip_empty=True),
    Field("api_base", G.OPENAI_API_BASE.value, AttributeReader.text, skip_empty=True),
    Field("model", G.REQUEST_MODEL.value, AttributeReader.text),
)
_RESPONSE_FIELDS = (
    Field("error_type", G.ERROR_TYPE.value, AttributeReader.text, skip_empty=True),
    Field("response_id", G.RESPONSE_ID.value, AttributeReader.text, skip_empty=True),
    Field("response_model", G.RESPONSE_MODEL.value, AttributeReader.text, skip_empty=True),
    Field("prompt_token_ids", I.PROMPT_TOKEN_IDS.value, AttributeReader.ints),
    Field("response_token_ids", I.RESPONSE_TOKEN_IDS.value, AttributeReader.ints),
)


def _set_str(attrs: dict[str, Any], key: str, value: Any) -> None:
    """``attrs[key] = str(value)`` unless ``value`` is missing or empty."""
    if value:
        attrs[key] = str(value)


def _set_text(attrs: dict[str, Any], key: str, value: Any) -> None:
    """``value`` as text (JSON for structures) at ``key`` unless it is ``None``."""
    if value is not None:
        attrs[key] = text(value)


def _set_all(
    attrs: dict[str, Any],
    prefix: str,
    source: Mapping[str, Any],
    strings: Sequence[str],
    texts: Sequence[str],
) -> None:
    """``<prefix>.<key>`` for each of ``strings`` (:func:`_set_str`) and ``texts`` (:func:`_set_text`) of
    ``source``."""
    for key in strings:
        _set_str(attrs, f"{prefix}.{key}", source.get(key))
    for key in texts:
        _set_text(attrs, f"{prefix}.{key}", source.get(key))


def _tool_calls(prefix: str, tool_calls: Sequence[Any]) -> dict[str, Any]:
    attrs: dict[str, Any] = {}
    for j, item in enumerate(tool_calls):
        tool_call = as_mapping(item)
        if tool_call is None:
            continue
        function = as_mapping(tool_call.get("function") or {}) or {}
        call_prefix = f"{prefix}.tool_calls.{j}"
        _set_str(attrs, f"{call_prefix}.id", tool_call.get("id"))
        _set_all(attrs, call_prefix, function, strings=("name",), texts=("arguments",))
    return attrs


def genai_request(call: LLMCallFields) -> dict[str, Any]:
    """The attributes of ``call`` known when the request is sent."""
    request_type = "chat" if call.endpoint == CHAT else "completion"
    attrs: dict[str, Any] = {
        G.OPERATION_NAME.value: call.operation_name,
        I.REQUEST_TYPE.value: request_type,
        G.REQUEST_TYPE.value: request_type,
    }
    write_fields(call, _REQUEST_FIELDS, attrs)
    request = G.REQUEST.value
    for key, value in call.params.items():
        if isinstance(value, (str, bool, int, float)):
            attrs[f"{request}.{key}"] = value
        else:
            strings = as_list(value)
            if strings and all(isinstance(v, str) for v in strings):
                attrs[f"{request}.{key}"] = strings
    if call.stream is not None:
        attrs[f"{request}.stream"] = call.stream
        attrs[G.REQUEST_STREAMING.value] = call.stream
    for i, item in enumerate(call.messages or []):
        message = as_mapping(item)
        if message is None:
            continue
        prefix = f"{G.PROMPT.value}.{i}"
        if message.get("role") is not None:
            attrs[f"{prefix}.role"] = str(message["role"])
        _set_all(attrs, prefix, message, strings=("name", "tool_call_id"), texts=("content",))
        if message.get("tool_calls"):
            attrs.update(_tool_calls(prefix, message["tool_calls"]))
    for i, item in enumerate(call.tools or []):
        tool = as_mapping(item)
        function = as_mapping(tool.get("function")) if tool is not None else None
        if function is None:
            continue
        prefix = f"{G.REQUEST_FUNCTIONS.value}.{i}"
        _set_all(attrs, prefix, function, strings=("name", "description"), texts=("parameters",))
    return attrs


def genai_response(call: LLMCallFields) -> dict[str, Any]:
    """The attributes of ``call`` known once it ended: the response and its token counts."""
    attrs: dict[str, Any] = {}
    write_fields(call, _RESPONSE_FIELDS, attrs)
    for choice in call.choices:
        prefix = f"{G.COMPLETION.value}.{choice.index}"
        message = choice.message
        attrs[f"{prefix}.role"] = str(message.get("role") or "assistant")
        _set_text(attrs, f"{prefix}.content", message.get("content"))
        if message.get("tool_calls"):
            attrs.update(_tool_calls(prefix, message["tool_calls"]))
        if choice.finish_reason:
            attrs[f"{prefix}.finish_reason"] = choice.finish_reason
        if choice.token_ids is not None:
            attrs[f"{prefix}.token_ids"] = choice.token_ids
    if call.choices and call.choices[0].logprobs_content:
        attrs[I.LOGPROBS_CONTENT.value] = json.dumps(call.choices[0].logprobs_content)
    if call.finish_reasons:
        attrs[G.RESPONSE_FINISH_REASONS.value] = call.finish_reasons
    usage = call.usage
    if usage is not None:
        if usage.input_tokens is not None:
            attrs[G.USAGE_PROMPT_TOKENS.value] = usage.input_tokens
            attrs[G.USAGE_INPUT_TOKENS.value] = usage.input_tokens
        if usage.output_tokens is not None:
            attrs[G.USAGE_COMPLETION_TOKENS.value] = usage.output_tokens
            attrs[G.USAGE_OUTPUT_TOKENS.value] = usage.output_tokens
        if usage.total_tokens is not None:
            attrs[I.USAGE_TOTAL_TOKENS.value] = usage.total_tokens
            attrs[G.USAGE_TOTAL_TOKENS.value] = usage.total_tokens
    return attrs


def _message(fields: Mapping[str, Any]) -> dict[str, Any]:
    message: dict[str, Any] = {}
    for key in ("role", "content", "name", "tool_call_id"):
        if key in fields:
            message[key] = fields[key]
    calls: list[dict[str, Any]] = []
    for _, call in indexed(
        {k.removeprefix("tool_calls."): v for k, v in fields.items() if k.startswith("tool_calls.")}
    ):
        calls.append(
            {
                "id": call.get("id"),
                "type": "function",
                "function": {"name": call.get("name"), "arguments": call.get("arguments")},
            }
        )
    if calls:
        message["tool_calls"] = calls
    return message


def read_genai(r: AttributeReader, record: type[CallT]) -> CallT:
    """The call recorded in the ``GEN_AI`` layout, as a ``record`` (:class:`~agl.types.semconv.LLMCall`)."""
    operation = r.attributes.get(G.OPERATION_NAME.value)
    call = record(
        endpoint=COMPLETIONS if operation == "text_completion" else CHAT,
        **read_fields(r, (*_REQUEST_FIELDS, *_RESPONSE_FIELDS)),
    )
    functions = G.REQUEST_FUNCTIONS.value.removeprefix(G.REQUEST.value + ".") + "."
    for key, value in r.under(G.REQUEST.value).items():
        if key in _NOT_PARAMS or key.startswith(functions):
            continue
        if key in ("stream", "streaming"):
            call.stream = value if isinstance(value, bool) else call.stream
        else:
            call.params[key] = value
    prompt = indexed(r.under(G.PROMPT.value))
    if prompt:
        call.messages = [_message(fields) for _, fields in prompt]
    tools: list[Any] = []
    for _, fields in indexed(r.under(G.REQUEST_FUNCTIONS.value)):
        function = {k: fields[k] for k in ("name", "description") if k in fields}
        if "parameters" in fields:
            function["parameters"] = parse_json_text(fields["parameters"])
        tools.append({"type": "function", "function": function})
    if tools:
        call.tools = tools
    for index, fields in indexed(r.under(G.COMPLETION.value)):
        finish = fields.get("finish_reason")
        call.choices.append(
            LLMChoice(
                index=index,
                message=_message(fields),
                finish_reason=finish if isinstance(finish, str) else None,
                token_ids=as_int_list(fields.get("token_ids")),
            )
        )
    content = r.json_list(I.LOGPROBS_CONTENT.value, "a JSON list of logprob entries")
    if content is not None and call.choices:
        entries = [entry for e in content if (entry := as_dict(e)) is not None]
        call.choices[0].logprobs_content = entries
        call.choices[0].logprobs = [float(e["logprob"]) for e in entries if is_number(e.get("logprob"))]
    usage = LLMUsage(
        input_tokens=_first_int(r, G.USAGE_INPUT_TOKENS, G.USAGE_PROMPT_TOKENS),
        output_tokens=_first_int(r, G.USAGE_OUTPUT_TOKENS, G.USAGE_COMPLETION_TOKENS),
        total_tokens=_first_int(r, G.USAGE_TOTAL_TOKENS, I.USAGE_TOTAL_TOKENS),
    )
    if usage != LLMUsage():
        call.usage = usage
    return call


def _first_int(r: AttributeReader, *keys: G | I) -> int | None:
    for key in keys:
        value = r.integer(key.value)
        if value is not None:
            return value
    return None
