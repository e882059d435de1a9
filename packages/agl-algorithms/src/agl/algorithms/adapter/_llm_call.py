"""Read one LLM call out of a span, whichever instrumentation wrote it.

Three shapes are understood:

- the agl LLM proxy (``agentlightning.llm.*``: JSON payloads, token id lists);
- GenAI attributes flattened per message (``gen_ai.prompt.<i>.role`` ...), as written by agl's OpenAI
  instrumentation and AgentOps, with ``prompt_token_ids`` / ``response_token_ids``;
- operation spans (``agentlightning.operation.input.*`` / ``.output.*``, e.g. Weave);

plus the reference proxy's ``llm.hosted_vllm.*`` payloads (Python-literal strings).
"""

from __future__ import annotations

import ast
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from agl.tracer import filter_and_unflatten_attributes, filter_attributes
from agl.types.semconv import LLMCallAttributes

__all__ = ["LLMCall", "extract_llm_call", "image_urls", "int_list", "response_id_of"]

_L = {m.name: m.value for m in LLMCallAttributes}
_OP_IN = "agentlightning.operation.input"
_OP_OUT = "agentlightning.operation.output"


@dataclass
class LLMCall:
    """What an adapter needs of one LLM call."""

    prompt_token_ids: list[int] = field(default_factory=list)
    response_token_ids: list[int] = field(default_factory=list)
    logprobs: list[float] | None = None
    prompt_messages: Any = None
    completion: Any = None
    tools: list[Any] | None = None
    request: dict[str, Any] = field(default_factory=dict)
    response: dict[str, Any] = field(default_factory=dict)
    response_id: str | None = None


def int_list(value: Any) -> list[int] | None:
    """``value`` as a list of ints (Python-literal or JSON strings parsed), else ``None``."""
    if isinstance(value, str):
        value = _literal(value)
    if isinstance(value, (list, tuple)) and all(
        isinstance(v, int) and not isinstance(v, bool) for v in value
    ):
        return list(value)
    return None


def _literal(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        pass
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        return None


def parse_json_text(value: Any) -> Any:
    """``value`` decoded as JSON when it is a string that holds JSON; otherwise ``value`` unchanged."""
    if isinstance(value, str):
        try:
            return json.loads(value)
        except ValueError:
            return value
    return value


def _group(attributes: Mapping[str, Any], prefix: str) -> Any:
    if not filter_attributes(attributes, prefix):
        return None
    try:
        return filter_and_unflatten_attributes(attributes, prefix)
    except ValueError:
        return attributes.get(prefix)


def response_id_of(attributes: Mapping[str, Any]) -> str | None:
    for key in ("gen_ai.response.id", f"{_OP_OUT}.id", "llm.hosted_vllm.id"):
        value = attributes.get(key)
        if isinstance(value, str) and value:
            return value
    return None


def extract_llm_call(attributes: Mapping[str, Any]) -> LLMCall:
    """Everything recognisable about the LLM call recorded in ``attributes``."""
    if (
        _L["RESPONSE_MESSAGES"] in attributes
        or _L["REQUEST_MESSAGES"] in attributes
        or _L["PROMPT_TOKEN_IDS"] in attributes
    ):
        return _from_proxy(attributes)
    call = LLMCall(response_id=response_id_of(attributes))
    call.prompt_token_ids = (
        int_list(attributes.get("prompt_token_ids"))
        or int_list(attributes.get(f"{_OP_OUT}.prompt_token_ids"))
        or int_list(attributes.get("llm.hosted_vllm.prompt_token_ids"))
        or []
    )
    call.response_token_ids = _response_ids(attributes)
    logprobs = attributes.get("logprobs.content")
    if logprobs is not None:
        parsed = parse_json_text(logprobs)
        if isinstance(parsed, list):
            call.logprobs = [float(e["logprob"]) for e in parsed if isinstance(e, Mapping) and "logprob" in e]
    prompt = _group(attributes, "gen_ai.prompt")
    call.prompt_messages = prompt if prompt is not None else _group(attributes, f"{_OP_IN}.messages")
    completion = _group(attributes, "gen_ai.completion")
    call.completion = completion if completion is not None else _group(attributes, f"{_OP_OUT}.choices")
    request = _group(attributes, "gen_ai.request")
    if not isinstance(request, dict):
        request = _group(attributes, _OP_IN)
    call.request = (
        {k: v for k, v in (request or {}).items() if k != "messages"} if isinstance(request, dict) else {}
    )
    functions = call.request.get("functions")
    if isinstance(functions, list):
        call.tools = functions
    response = _group(attributes, "gen_ai.response")
    if not isinstance(response, dict):
        response = _group(attributes, _OP_OUT)
    drop = {"choices", "prompt_token_ids", "response_token_ids"}
    call.response = {k: v for k, v in response.items() if k not in drop} if isinstance(response, dict) else {}
    return call


def _response_ids(attributes: Mapping[str, Any]) -> list[int]:
    for key in (
        "response_token_ids",
        f"{_OP_OUT}.response_token_ids.0",
        f"{_OP_OUT}.response_token_ids",
        f"{_OP_OUT}.choices.0.token_ids",
        f"{_OP_OUT}.choices.0.provider_specific_fields.token_ids",
        "gen_ai.completion.0.token_ids",
    ):
        ids = int_list(attributes.get(key))
        if ids is not None:
            return ids
    raw = attributes.get("llm.hosted_vllm.response_token_ids")
    if isinstance(raw, str):
        raw = _literal(raw)
    if isinstance(raw, list) and raw and int_list(raw[0]) is not None:
        return int_list(raw[0]) or []
    choices = attributes.get("llm.hosted_vllm.choices")
    if isinstance(choices, str):
        choices = _literal(choices)
    if isinstance(choices, list) and choices and isinstance(choices[0], Mapping):
        return int_list(choices[0].get("token_ids")) or []
    return []


def _from_proxy(attributes: Mapping[str, Any]) -> LLMCall:
    params = parse_json_text(attributes.get(_L["REQUEST_PARAMS"])) or {}
    request = dict(params) if isinstance(params, dict) else {}
    for key in ("gen_ai.request.model",):
        if key in attributes:
            request["model"] = attributes[key]
    response = {
        k.removeprefix("gen_ai.response."): v
        for k, v in attributes.items()
        if k.startswith("gen_ai.response.")
    }
    for key in ("gen_ai.usage.input_tokens", "gen_ai.usage.output_tokens"):
        if key in attributes:
            response[key.removeprefix("gen_ai.")] = attributes[key]
    logprobs = attributes.get(_L["RESPONSE_LOGPROBS"])
    tools = parse_json_text(attributes.get(_L["REQUEST_TOOLS"]))
    messages = parse_json_text(attributes.get(_L["REQUEST_MESSAGES"]))
    if messages is None and _L["REQUEST_PROMPT"] in attributes:
        messages = [{"role": "user", "content": parse_json_text(attributes[_L["REQUEST_PROMPT"]])}]
    return LLMCall(
        prompt_token_ids=int_list(attributes.get(_L["PROMPT_TOKEN_IDS"])) or [],
        response_token_ids=int_list(attributes.get(_L["RESPONSE_TOKEN_IDS"])) or [],
        logprobs=[float(x) for x in logprobs] if isinstance(logprobs, list) else None,
        prompt_messages=messages,
        completion=parse_json_text(attributes.get(_L["RESPONSE_MESSAGES"])),
        tools=tools if isinstance(tools, list) else None,
        request=request,
        response=response,
        response_id=response_id_of(attributes),
    )


def image_urls(messages: Any) -> list[str]:
    """Image URLs in the content parts of ``messages`` (a list, a numeric-keyed dict or one message)."""
    if isinstance(messages, Mapping):
        if "role" in messages or "content" in messages:
            messages = [messages]
        else:
            keys = [k for k in messages if str(k).isdigit()]
            messages = [messages[k] for k in sorted(keys, key=int)]
    if not isinstance(messages, list):
        return []
    urls: list[str] = []
    for message in messages:
        if not isinstance(message, Mapping):
            continue
        content = parse_json_text(message.get("content"))
        if not isinstance(content, list):
            continue
        for part in content:
            if isinstance(part, Mapping) and part.get("type") == "image_url":
                image = part.get("image_url")
                url = image.get("url") if isinstance(image, Mapping) else image
                if isinstance(url, str):
                    urls.append(url)
    return urls
