"""Turn OpenAI-format responses (whole or as SSE chunks) into one assembled result to record."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from agl.types.narrow import as_dict, list_of_any

__all__ = ["ChoiceState", "ResponseAssembler", "SSEParser"]


@dataclass
class ChoiceState:
    """One choice being assembled."""

    index: int
    role: str = "assistant"
    content: list[str] = field(default_factory=list[str])
    text: list[str] = field(default_factory=list[str])
    tool_calls: dict[int, dict[str, Any]] = field(default_factory=dict[int, dict[str, Any]])
    finish_reason: str | None = None
    token_ids: list[int] | None = None
    logprobs: list[float] | None = None
    logprob_tokens: list[str] | None = None

    def add_token_ids(self, ids: Any) -> None:
        items = list_of_any(ids)
        if items is not None:
            if self.token_ids is None:
                self.token_ids = []
            self.token_ids.extend(int(i) for i in items)

    def add_chat_logprobs(self, logprobs: Any) -> None:
        found = as_dict(logprobs)
        content = list_of_any(found.get("content")) if found is not None else None
        if content is None:
            return
        if self.logprobs is None:
            self.logprobs, self.logprob_tokens = [], []
        for item in content:
            entry = as_dict(item)
            if entry is not None and "logprob" in entry:
                self.logprobs.append(float(entry["logprob"]))
                assert self.logprob_tokens is not None
                self.logprob_tokens.append(str(entry.get("token", "")))

    def add_completion_logprobs(self, logprobs: Any) -> None:
        found = as_dict(logprobs)
        values = list_of_any(found.get("token_logprobs")) if found is not None else None
        if found is None or values is None:
            return
        if self.logprobs is None:
            self.logprobs, self.logprob_tokens = [], []
        assert self.logprob_tokens is not None
        self.logprobs.extend(float(v) if v is not None else 0.0 for v in values)
        tokens = list_of_any(found.get("tokens"))
        if tokens is not None:
            self.logprob_tokens.extend(str(t) for t in tokens)

    def message(self) -> dict[str, Any]:
        """The assembled assistant message in OpenAI's format."""
        message: dict[str, Any] = {"role": self.role, "content": "".join(self.content) or None}
        if self.tool_calls:
            message["tool_calls"] = [
                {
                    "id": call.get("id"),
                    "type": call.get("type") or "function",
                    "function": {"name": call.get("name"), "arguments": "".join(call.get("arguments", []))},
                }
                for _, call in sorted(self.tool_calls.items())
            ]
        return message


class ResponseAssembler:
    """Accumulates a chat or text completion from a whole response or from stream chunks."""

    def __init__(self, endpoint: str) -> None:
        self.endpoint = endpoint
        self.id: str | None = None
        self.model: str | None = None
        self.system_fingerprint: str | None = None
        self.prompt_token_ids: list[int] | None = None
        self.usage: dict[str, Any] | None = None
        self.choices: dict[int, ChoiceState] = {}
        self.chunks = 0

    def _choice(self, index: int) -> ChoiceState:
        state = self.choices.get(index)
        if state is None:
            state = self.choices[index] = ChoiceState(index=index)
        return state

    def _common(self, payload: dict[str, Any]) -> None:
        if self.id is None and isinstance(payload.get("id"), str):
            self.id = payload["id"]
        if self.model is None and isinstance(payload.get("model"), str):
            self.model = payload["model"]
        if isinstance(payload.get("system_fingerprint"), str):  # the last one seen: a stream's final version
            self.system_fingerprint = payload["system_fingerprint"]
        prompt_ids = list_of_any(payload.get("prompt_token_ids"))
        if prompt_ids is not None and self.prompt_token_ids is None:
            self.prompt_token_ids = [int(i) for i in prompt_ids]
        usage = as_dict(payload.get("usage"))
        if usage is not None:
            self.usage = usage

    def _choices_of(self, payload: dict[str, Any]) -> Iterator[tuple[dict[str, Any], ChoiceState]]:
        """Reads the fields common to a response and a chunk, then yields each choice object of ``payload``
        with the state of its index."""
        self._common(payload)
        for item in payload.get("choices") or ():
            raw = as_dict(item)
            if raw is not None:
                yield raw, self._choice(int(raw.get("index", 0)))

    def add_response(self, payload: dict[str, Any]) -> None:
        """A whole (non-streamed) response."""
        for raw, state in self._choices_of(payload):
            state.finish_reason = raw.get("finish_reason")
            state.add_token_ids(raw.get("token_ids") or _provider_token_ids(raw))
            self._choice_prompt_ids(raw)
            if self.endpoint == "completions":
                state.text.append(str(raw.get("text") or ""))
                state.add_completion_logprobs(raw.get("logprobs"))
                continue
            message: Any = raw.get("message") or {}  # JSON from the backend
            state.role = message.get("role") or "assistant"
            if message.get("content") is not None:
                state.content.append(_text(message["content"]))
            for i, call in enumerate(message.get("tool_calls") or ()):
                fn: Any = call.get("function") or {}
                state.tool_calls[i] = {
                    "id": call.get("id"),
                    "type": call.get("type"),
                    "name": fn.get("name"),
                    "arguments": [fn.get("arguments") or ""],
                }
            state.add_chat_logprobs(raw.get("logprobs"))

    def add_chunk(self, payload: dict[str, Any]) -> None:
        """One streamed chunk."""
        self.chunks += 1
        for raw, state in self._choices_of(payload):
            if raw.get("finish_reason"):
                state.finish_reason = raw["finish_reason"]
            state.add_token_ids(raw.get("token_ids"))
            self._choice_prompt_ids(raw)
            if self.endpoint == "completions":
                if raw.get("text"):
                    state.text.append(str(raw["text"]))
                state.add_completion_logprobs(raw.get("logprobs"))
                continue
            delta: Any = raw.get("delta") or {}
            if delta.get("role"):
                state.role = delta["role"]
            if delta.get("content"):
                state.content.append(_text(delta["content"]))
            for call in delta.get("tool_calls") or ():
                index = int(call.get("index", 0))
                slot = state.tool_calls.setdefault(index, {"arguments": []})
                if call.get("id"):
                    slot["id"] = call["id"]
                if call.get("type"):
                    slot["type"] = call["type"]
                fn: Any = call.get("function") or {}
                if fn.get("name"):
                    slot["name"] = fn["name"]
                if fn.get("arguments"):
                    slot["arguments"].append(fn["arguments"])
            state.add_chat_logprobs(raw.get("logprobs"))

    def _choice_prompt_ids(self, choice: dict[str, Any]) -> None:
        # some servers put the prompt's token ids on the choice rather than the response
        prompt_ids = list_of_any(choice.get("prompt_token_ids"))
        if self.prompt_token_ids is None and prompt_ids is not None:
            self.prompt_token_ids = [int(i) for i in prompt_ids]

    def ordered_choices(self) -> list[ChoiceState]:
        return [self.choices[i] for i in sorted(self.choices)]


def _provider_token_ids(choice: dict[str, Any]) -> Any:
    fields = as_dict(choice.get("provider_specific_fields"))
    return fields.get("token_ids") if fields is not None else None


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    return json.dumps(content)


class SSEParser:
    """Splits a byte stream of server-sent events into the JSON payloads of their ``data:`` lines."""

    def __init__(self) -> None:
        self._buffer = b""
        self.done = False

    def feed(self, data: bytes) -> list[dict[str, Any]]:
        self._buffer += data
        out: list[dict[str, Any]] = []
        while True:
            cut = self._buffer.find(b"\n\n")
            if cut < 0:
                if b"\r\n\r\n" not in self._buffer:
                    break
                cut = self._buffer.find(b"\r\n\r\n")
                event, self._buffer = self._buffer[:cut], self._buffer[cut + 4 :]
            else:
                event, self._buffer = self._buffer[:cut], self._buffer[cut + 2 :]
            for line in event.splitlines():
                if not line.startswith(b"data:"):
                    continue
                body = line[5:].strip()
                if body == b"[DONE]":
                    self.done = True
                    continue
                try:
                    payload = json.loads(body)
                except ValueError:
                    continue
                event_payload = as_dict(payload)
                if event_payload is not None:
                    out.append(event_payload)
        return out
