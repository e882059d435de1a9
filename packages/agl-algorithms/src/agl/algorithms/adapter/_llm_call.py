"""Read one LLM call out of a span, whichever instrumentation wrote it.

Three shapes are understood:

- the agl LLM proxy (``agentlightning.llm.*``: JSON payloads, token id lists);
- GenAI attributes flattened per message (``gen_ai.prompt.<i>.role`` ...), as written by agl's OpenAI
  instrumentation and AgentOps, with ``prompt_token_ids`` / ``response_token_ids``;
- operation spans (``agentlightning.operation.input.*`` / ``.output.*``, e.g. Weave);

plus the reference proxy's ``llm.hosted_vllm.*`` payloads (Python-literal strings).

The first two are agl's own layouts: their fields are read with :meth:`agl.types.semconv.LLMCall.from_attributes`
(the one reader of what the proxy and the OpenAI instrumentation write). The GenAI prompt, completion and
request groups are passed on as recorded (raw), since other instrumentations put more in them than agl does.
A malformed payload (invalid JSON, JSON nested too deeply, a wrong type) is skipped with a warning.
"""

from __future__ import annotations

import ast
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, cast

from agl.tracer import filter_and_unflatten_attributes, filter_attributes
from agl.types.semconv import GenAIAttributes as G
from agl.types.semconv import LLMCall as LLMCallRecord
from agl.types.semconv import LLMCallFormat, parse_json_text

from .._json import is_dict, is_list, is_mapping

__all__ = ["LLMCall", "extract_llm_call", "image_urls", "int_list", "parse_json_text", "response_id_of"]

_OP_IN = "agentlightning.operation.input"
_OP_OUT = "agentlightning.operation.output"


@dataclass
class LLMCall:
    """What an adapter needs of one LLM call (the span's typed record is :class:`agl.types.semconv.LLMCall`)."""

    prompt_token_ids: list[int] = field(default_factory=list[int])
    response_token_ids: list[int] = field(default_factory=list[int])
    logprobs: list[float] | None = None
    prompt_messages: Any = None
    completion: Any = None
    tools: list[Any] | None = None
    request: dict[str, Any] = field(default_factory=dict[str, Any])
    response: dict[str, Any] = field(default_factory=dict[str, Any])
    response_id: str | None = None


def int_list(value: Any) -> list[int] | None:
    """``value`` as a list of ints (Python-literal or JSON strings parsed), else ``None``."""
    if isinstance(value, str):
        value = _literal(value)
    if isinstance(value, (list, tuple)):
        items = cast("Sequence[object]", value)
        if all(isinstance(v, int) and not isinstance(v, bool) for v in items):
            return cast("list[int]", list(items))
    return None


def _literal(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        pass
    except RecursionError:
        return None
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        return None


def _group(attributes: Mapping[str, Any], prefix: str) -> Any:
    if not filter_attributes(attributes, prefix):
        return None
    try:
        return filter_and_unflatten_attributes(attributes, prefix)
    except ValueError:
        return attributes.get(prefix)


def response_id_of(attributes: Mapping[str, Any]) -> str | None:
    """The response id of the call in ``attributes`` (GenAI, operation span or reference proxy), if any."""
    for key in (G.RESPONSE_ID.value, f"{_OP_OUT}.id", "llm.hosted_vllm.id"):
        value = attributes.get(key)
        if isinstance(value, str) and value:
            return value
    return None


def extract_llm_call(attributes: Mapping[str, Any]) -> LLMCall:
    """Everything recognisable about the LLM call recorded in ``attributes``."""
    layout = LLMCallRecord.detect_format(attributes)
    record = LLMCallRecord.from_attributes(attributes, layout)
    if layout is LLMCallFormat.PROXY:
        return _from_proxy(record)
    call = LLMCall(response_id=response_id_of(attributes))
    call.prompt_token_ids = (
        record.prompt_token_ids
        or int_list(attributes.get(f"{_OP_OUT}.prompt_token_ids"))
        or int_list(attributes.get("llm.hosted_vllm.prompt_token_ids"))
        or []
    )
    call.response_token_ids = _response_ids(attributes, record)
    call.logprobs = record.logprobs
    prompt = _group(attributes, G.PROMPT.value)
    call.prompt_messages = prompt if prompt is not None else _group(attributes, f"{_OP_IN}.messages")
    completion = _group(attributes, G.COMPLETION.value)
    call.completion = completion if completion is not None else _group(attributes, f"{_OP_OUT}.choices")
    request = _group(attributes, G.REQUEST.value)
    if not is_dict(request):
        request = _group(attributes, _OP_IN)
    call.request = {k: v for k, v in request.items() if k != "messages"} if is_dict(request) else {}
    functions = call.request.get("functions")
    if isinstance(functions, list):
        call.tools = functions
    response = _group(attributes, "gen_ai.response")
    if not is_dict(response):
        response = _group(attributes, _OP_OUT)
    drop = {"choices", "prompt_token_ids", "response_token_ids"}
    call.response = {k: v for k, v in response.items() if k not in drop} if is_dict(response) else {}
    return call


def _response_ids(attributes: Mapping[str, Any], record: LLMCallRecord) -> list[int]:
    if record.response_token_ids is not None:
        return record.response_token_ids
    for key in (
        f"{_OP_OUT}.response_token_ids.0",
        f"{_OP_OUT}.response_token_ids",
        f"{_OP_OUT}.choices.0.token_ids",
        f"{_OP_OUT}.choices.0.provider_specific_fields.token_ids",
    ):
        ids = int_list(attributes.get(key))
        if ids is not None:
            return ids
    first = next((c for c in record.choices if c.index == 0), None)
    if first is not None and first.token_ids is not None:
        return first.token_ids
    raw = attributes.get("llm.hosted_vllm.response_token_ids")
    if isinstance(raw, str):
        raw = _literal(raw)
    if isinstance(raw, list) and raw and int_list(raw[0]) is not None:
        return int_list(raw[0]) or []
    choices = attributes.get("llm.hosted_vllm.choices")
    if isinstance(choices, str):
        choices = _literal(choices)
    if is_list(choices) and choices and is_mapping(first_choice := choices[0]):
        return int_list(first_choice.get("token_ids")) or []
    return []


def _from_proxy(record: LLMCallRecord) -> LLMCall:
    request = dict(record.params)
    if record.model is not None:
        request["model"] = record.model
    response: dict[str, Any] = {}
    if record.response_id:
        response["id"] = record.response_id
    if record.response_model:
        response["model"] = record.response_model
    if record.finish_reasons:
        response["finish_reasons"] = record.finish_reasons
    if record.usage is not None:
        if record.usage.input_tokens is not None:
            response["usage.input_tokens"] = record.usage.input_tokens
        if record.usage.output_tokens is not None:
            response["usage.output_tokens"] = record.usage.output_tokens
    messages = record.messages
    if messages is None and record.prompt is not None:
        messages = [{"role": "user", "content": record.prompt}]
    return LLMCall(
        prompt_token_ids=record.prompt_token_ids or [],
        response_token_ids=record.response_token_ids or [],
        logprobs=record.logprobs,
        prompt_messages=messages,
        completion=[c.message for c in record.choices] or None,
        tools=record.tools,
        request=request,
        response=response,
        response_id=record.response_id,
    )


def image_urls(messages: Any) -> list[str]:
    """Image URLs in the content parts of ``messages`` (a list, a numeric-keyed dict or one message)."""
    if is_mapping(messages):
        if "role" in messages or "content" in messages:
            messages = [messages]
        else:
            keys = [k for k in messages if str(k).isdigit()]
            messages = [messages[k] for k in sorted(keys, key=int)]
    if not is_list(messages):
        return []
    urls: list[str] = []
    for message in messages:
        if not is_mapping(message):
            continue
        content = parse_json_text(message.get("content"))
        if not is_list(content):
            continue
        for part in content:
            if is_mapping(part) and part.get("type") == "image_url":
                image = part.get("image_url")
                url = image.get("url") if is_mapping(image) else image
                if isinstance(url, str):
                    urls.append(url)
    return urls
