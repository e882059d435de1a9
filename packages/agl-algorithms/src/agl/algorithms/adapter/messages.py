"""Spans → OpenAI chat records ``{"messages": [...], "tools": [...] | None}`` for APO and fine-tuning."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, TypedDict, cast

from agl.types import Span
from agl.types.semconv import LLMCall as LLMCallRecord
from agl.types.semconv import LLMCallAttributes, LLMCallFormat

from .._json import is_dict, is_list, is_mapping
from ._llm_call import parse_json_text, response_id_of
from .base import TraceAdapter, as_spans

__all__ = ["OpenAIMessages", "TraceToMessages", "group_genai_dict"]

_PROXY_KEYS = (LLMCallAttributes.REQUEST_MESSAGES.value, LLMCallAttributes.RESPONSE_MESSAGES.value)
_GENAI_PREFIXES = ("gen_ai.prompt", "gen_ai.completion", "gen_ai.request", "gen_ai.response")
_PART_TYPES = frozenset({"text", "image_url", "input_audio", "file", "refusal"})


class OpenAIMessages(TypedDict):
    """One conversation in OpenAI's fine-tuning format."""

    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]] | None


def group_genai_dict(attributes: Mapping[str, Any], prefix: str) -> Any:
    """Regroup dotted attributes under ``prefix`` into dicts; a level whose keys are all numbers becomes a
    list ordered by index. ``None`` when nothing is under the prefix."""
    dotted = prefix + "."
    flat = {k[len(dotted) :]: v for k, v in attributes.items() if k.startswith(dotted)}
    if not flat:
        return attributes.get(prefix)
    return _group(flat)


def _group(flat: Mapping[str, Any]) -> Any:
    tree: dict[str, Any] = {}
    for key, value in flat.items():
        head, _, rest = key.partition(".")
        if rest:
            tree.setdefault(head, {})
            if is_dict(branch := tree[head]):
                branch[rest] = value
        elif head not in tree:
            tree[head] = value
    grouped = {k: _group(v) if is_dict(v) else v for k, v in tree.items()}
    if grouped and all(k.isdigit() for k in grouped):
        return [grouped[k] for k in sorted(grouped, key=int)]
    return grouped


def _tool_call(call: Mapping[str, Any]) -> dict[str, Any]:
    function = call.get("function")
    if is_mapping(function):
        name, arguments = function.get("name"), function.get("arguments")
    else:
        name, arguments = call.get("name"), call.get("arguments")
    if not isinstance(arguments, str):
        arguments = json.dumps(arguments if arguments is not None else {})
    return {
        "id": str(call.get("id") or ""),
        "type": "function",
        "function": {"name": str(name), "arguments": arguments},
    }


def _content(content: Any, decode_parts: bool) -> Any:
    """Message content as the model saw it: text stays text, even when it looks like JSON (a tool result
    ``'{"rooms": ...}'``), as in the reference. With ``decode_parts``, JSON text holding a list of OpenAI content
    parts (which the GenAI layout can only record as text) becomes that list again."""
    if not decode_parts or not isinstance(content, str) or content[:1] != "[":
        return content
    parts = parse_json_text(content)
    if is_list(parts) and parts and all(is_mapping(p) and p.get("type") in _PART_TYPES for p in parts):
        return parts
    return content


def _message(entry: Any, where: str, *, decode_parts: bool = False) -> dict[str, Any]:
    if not is_mapping(entry):
        raise ValueError(f"{where} must be a message object, got {type(entry).__name__}")
    role = entry.get("role")
    if role not in ("system", "user", "assistant", "tool", "developer", "function"):
        raise ValueError(f"{where} has no valid role (got {role!r})")
    message: dict[str, Any] = {"role": role}
    message["content"] = _content(entry.get("content"), decode_parts)
    calls = entry.get("tool_calls")
    if role == "assistant" and calls:
        if is_mapping(calls):
            calls = [calls[k] for k in sorted(calls, key=lambda x: int(x) if str(x).isdigit() else 0)]
        message["tool_calls"] = [_tool_call(c) for c in cast("Iterable[Any]", calls) if is_mapping(c)]
    if role == "tool":
        message["tool_call_id"] = str(entry.get("tool_call_id") or "")
    if entry.get("name"):
        message["name"] = str(entry["name"])
    return message


def _tools(functions: Any) -> list[dict[str, Any]] | None:
    if functions is None:
        return None
    if not is_list(functions):
        raise ValueError("the request's tools/functions must be a list")
    tools: list[dict[str, Any]] = []
    for fn in functions:
        if not is_mapping(fn):
            raise ValueError(f"each tool must be an object, got {type(fn).__name__}")
        if fn.get("type") == "function" and is_mapping(fn.get("function")):
            tools.append(dict(fn))
            continue
        definition: dict[str, Any] = {"name": fn.get("name")}
        if fn.get("description"):
            definition["description"] = fn["description"]
        if fn.get("parameters") is not None:
            definition["parameters"] = parse_json_text(fn["parameters"])
        tools.append({"type": "function", "function": definition})
    return tools


class TraceToMessages(TraceAdapter[list[OpenAIMessages]]):
    """One record per LLM-call span: the prompt messages followed by the assistant's answer, and the tools.

    Reads the LLM proxy's spans and GenAI-instrumented spans (``gen_ai.prompt/completion/request``); an
    answer whose tool calls were recorded as child ``tool.*`` spans gets them attached (first in, first out).
    A call recorded twice (the traced client's span and the proxy's span, same response id) gives one record.
    Text content stays text, JSON-looking or not (as in the reference). Malformed payloads raise
    ``ValueError`` saying what is wrong.
    """

    def adapt(self, source: Sequence[Any], /) -> list[OpenAIMessages]:
        spans = as_spans(source)
        children: dict[str, list[Span]] = {}
        for span in spans:
            if span.parent_id:
                children.setdefault(span.parent_id, []).append(span)
        # One record per call: a call recorded both by the traced client and by the LLM proxy (same response
        # id) keeps its first place and the proxy's record, which holds exactly what the model received.
        records: list[OpenAIMessages] = []
        place_of: dict[str, tuple[int, bool]] = {}
        for span in spans:
            a = span.attributes
            from_proxy = any(k in a for k in _PROXY_KEYS)
            if from_proxy:
                record = self._from_proxy(span)
            elif any(k == p or k.startswith(p + ".") for k in a for p in _GENAI_PREFIXES):
                record = self._from_genai(span, children.get(span.span_id, []))
            else:
                continue
            response_id = response_id_of(a)
            if response_id is None:
                records.append(record)
            elif response_id not in place_of:
                place_of[response_id] = (len(records), from_proxy)
                records.append(record)
            elif from_proxy and not place_of[response_id][1]:
                index = place_of[response_id][0]
                records[index] = record
                place_of[response_id] = (index, True)
        return records

    def _from_proxy(self, span: Span) -> OpenAIMessages:
        try:
            call = LLMCallRecord.from_attributes(span.attributes, LLMCallFormat.PROXY, strict=True)
        except ValueError as exc:
            raise ValueError(f"span {span.span_id}: {exc}") from None
        prompt = call.messages
        if prompt is None:
            prompt = [{"role": "user", "content": call.prompt}] if call.prompt is not None else []
        messages = [_message(m, f"span {span.span_id} prompt message {i}") for i, m in enumerate(prompt)]
        if call.choices:
            messages.append(_message(call.choices[0].message, f"span {span.span_id} answer"))
        return OpenAIMessages(messages=messages, tools=_tools(call.tools))

    def _from_genai(self, span: Span, children: list[Span]) -> OpenAIMessages:
        a = span.attributes
        prompt: Any = group_genai_dict(a, "gen_ai.prompt") or []
        if not is_list(prompt):
            raise ValueError(f"span {span.span_id}: gen_ai.prompt must be a list of messages")
        messages = [
            _message(m, f"span {span.span_id} gen_ai.prompt.{i}", decode_parts=True)
            for i, m in enumerate(prompt)
        ]
        completion: Any = group_genai_dict(a, "gen_ai.completion") or []
        if not is_list(completion):
            raise ValueError(f"span {span.span_id}: gen_ai.completion must be a list")
        tool_spans = [
            c for c in sorted(children, key=lambda s: s.start_time or 0.0) if "tool.name" in c.attributes
        ]
        for i, entry in enumerate(completion):
            if not is_mapping(entry) or entry.get("role", "assistant") != "assistant":
                continue
            message = _message(
                {"role": "assistant", **entry},
                f"span {span.span_id} gen_ai.completion.{i}",
                decode_parts=True,
            )
            if "tool_calls" not in message and tool_spans:
                message["tool_calls"] = [
                    _tool_call(
                        {
                            "id": t.attributes.get("tool.call.id"),
                            "name": t.attributes.get("tool.name"),
                            "arguments": t.attributes.get("tool.parameters"),
                        }
                    )
                    for t in tool_spans
                ]
                tool_spans = []
            messages.append(message)
        request: Any = group_genai_dict(a, "gen_ai.request")
        if request is None:
            request = {}
        elif not is_mapping(request):
            raise ValueError(f"span {span.span_id}: gen_ai.request must be an object")
        return OpenAIMessages(messages=messages, tools=_tools(request.get("functions")))
