"""Chat messages in, prompt text out; generated text in, OpenAI assistant message out (hermes tool calls)."""

from __future__ import annotations

import json
import re
import uuid
from typing import Any

from .._json import is_dict, is_list

__all__ = ["normalize_messages", "parse_tool_calls", "render_prompt"]

_TOOL_CALL = re.compile(r"<tool_call>\s*(.*?)\s*</tool_call>", re.DOTALL)
_TOOL_CALL_OPEN = "<tool_call>"


def _text_of(content: Any) -> str:
    """OpenAI content may be a string, ``None`` or a list of parts; only text parts are supported."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if is_list(content):
        texts: list[str] = []
        for part in content:
            if is_dict(part) and part.get("type") == "text":
                texts.append(str(part.get("text", "")))
            elif isinstance(part, str):
                texts.append(part)
            else:
                raise ValueError(
                    f"only text content parts are supported by this model server, got {part!r:.80}"
                )
        return "".join(texts)
    raise ValueError(
        f"message content must be a string or a list of text parts, got {type(content).__name__}"
    )


def normalize_messages(messages: list[Any]) -> list[dict[str, Any]]:
    """Messages in the shape chat templates expect: string content, tool-call arguments as JSON text."""
    if not messages:
        raise ValueError("messages must not be empty")
    out: list[dict[str, Any]] = []
    for i, message in enumerate(messages):
        if not is_dict(message) or not isinstance(message.get("role"), str):
            raise ValueError(f"messages[{i}] must be an object with a string 'role'")
        role = message["role"]
        if role not in ("system", "developer", "user", "assistant", "tool"):
            raise ValueError(f"messages[{i}].role {role!r} is not one of system, user, assistant, tool")
        clean: dict[str, Any] = {
            "role": "system" if role == "developer" else role,
            "content": _text_of(message.get("content")),
        }
        calls = message.get("tool_calls")
        if role == "assistant" and calls:
            tool_calls: list[dict[str, Any]] = []
            clean["tool_calls"] = tool_calls
            for call in calls:
                fn = call.get("function") if is_dict(call) else None
                if not is_dict(fn) or not isinstance(fn.get("name"), str):
                    raise ValueError(f"messages[{i}].tool_calls entries need function.name")
                arguments = fn.get("arguments", "{}")
                if not isinstance(arguments, str):
                    arguments = json.dumps(arguments)
                tool_calls.append(
                    {
                        "id": call.get("id"),
                        "type": "function",
                        "function": {"name": fn["name"], "arguments": arguments},
                    }
                )
        if role == "tool" and message.get("tool_call_id") is not None:
            clean["tool_call_id"] = message["tool_call_id"]
        out.append(clean)
    return out


def render_prompt(tokenizer: Any, messages: list[Any], tools: list[dict[str, Any]] | None) -> str:
    """The prompt text for the next assistant turn, through the model's own chat template."""
    if getattr(tokenizer, "chat_template", None) is None:
        raise ValueError("the model's tokenizer has no chat template; /v1/chat/completions needs one")
    return tokenizer.apply_chat_template(
        normalize_messages(messages), tools=tools or None, tokenize=False, add_generation_prompt=True
    )


def parse_tool_calls(text: str) -> tuple[str | None, list[dict[str, Any]]]:
    """Split generated text into content and OpenAI ``tool_calls`` (hermes ``<tool_call>{json}</tool_call>``).

    A block that is not valid JSON with a string ``name`` is left in the content, so the caller sees what
    the model wrote instead of losing it.
    """
    calls: list[dict[str, Any]] = []
    kept: list[str] = []
    last = 0
    for match in _TOOL_CALL.finditer(text):
        try:
            body = json.loads(match.group(1))
        except json.JSONDecodeError:
            continue
        if not is_dict(body) or not isinstance(body.get("name"), str):
            continue
        arguments = body.get("arguments", {})
        calls.append(
            {
                "id": f"call_{uuid.uuid4().hex[:24]}",
                "type": "function",
                "function": {
                    "name": body["name"],
                    "arguments": arguments if isinstance(arguments, str) else json.dumps(arguments),
                },
            }
        )
        kept.append(text[last : match.start()])
        last = match.end()
    kept.append(text[last:])
    content = "".join(kept).strip() if calls else text
    return (content or None) if calls else content, calls


def visible_prefix(text: str) -> str:
    """The part of a partly generated text that can be streamed as content (before any tool call)."""
    cut = text.find(_TOOL_CALL_OPEN)
    if cut >= 0:
        return text[:cut]
    # Hold back a tail that could be the start of "<tool_call>".
    for k in range(min(len(_TOOL_CALL_OPEN) - 1, len(text)), 0, -1):
        if _TOOL_CALL_OPEN.startswith(text[-k:]):
            return text[:-k]
    return text
