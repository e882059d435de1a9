"""One LLM call as span attributes: the typed record, its writer and its reader.

agl records an LLM call in one of two attribute layouts (:class:`LLMCallFormat`):

- ``PROXY``: the agl LLM proxy's ``agentlightning.llm.*`` attributes (JSON payloads in OpenAI's wire format,
  token id lists) plus the GenAI scalars (:class:`~agl.types.semconv.GenAIAttributes`);
- ``GEN_AI``: GenAI attributes flattened per message (``gen_ai.prompt.<i>.role`` ...), as agl's OpenAI
  instrumentation, OpenLLMetry and AgentOps write them, plus the reference's token id names
  (:class:`~agl.types.semconv.InstrumentedLLMAttributes`).

:meth:`LLMCall.to_attributes` writes either layout and :meth:`LLMCall.from_attributes` reads either back
(detecting which). Each layout carries only some fields (listed on :class:`LLMCall`); for a call whose
fields the layout carries, ``LLMCall.from_attributes(call.to_attributes(fmt)) == call``.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from ._names import GenAIAttributes as G
from ._names import InstrumentedLLMAttributes as I
from ._names import LLMCallAttributes as L

__all__ = ["MAX_JSON_DEPTH", "LLMCall", "LLMCallFormat", "LLMChoice", "LLMUsage", "parse_json_text"]

logger = logging.getLogger(__name__)

MAX_JSON_DEPTH = 128
"""JSON payloads nested deeper than this are not decoded: deeper values break recursive consumers (pydantic
serialises at most about 250 levels, Python's ``json`` about 1000)."""

CHAT = "chat.completions"
COMPLETIONS = "completions"

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
_PROXY_PREFIX = "agentlightning.llm."


class LLMCallFormat(str, Enum):
    """The attribute layout of an LLM-call span."""

    PROXY = "proxy"
    """The agl LLM proxy's ``agentlightning.llm.*`` layout (span :data:`~agl.types.semconv.AGL_LLM_CALL`)."""
    GEN_AI = "gen_ai"
    """Flattened GenAI attributes (span ``openai.chat.completion`` of agl's OpenAI instrumentation)."""


@dataclass
class LLMUsage:
    """Token counts reported by the backend."""

    input_tokens: int | None = None
    output_tokens: int | None = None
    total_tokens: int | None = None
    """``GEN_AI`` only."""


@dataclass
class LLMChoice:
    """One choice of the response."""

    index: int = 0
    """``PROXY`` stores it only when the response has several choices (a lone choice reads back as 0)."""
    message: dict[str, Any] = field(default_factory=dict)
    """The assistant message in OpenAI's format: ``role``, ``content``, ``tool_calls`` (``GEN_AI`` keeps the
    role, a text content and each tool call's ``id`` / ``function.name`` / ``function.arguments``)."""
    finish_reason: str | None = None
    token_ids: list[int] | None = None
    """Completion token ids (``PROXY``: of the first choice only, unless there are several choices)."""
    logprobs: list[float] | None = None
    """Per-token log-probabilities (``GEN_AI``: derived from :attr:`logprobs_content` of the first choice)."""
    logprobs_content: list[dict[str, Any]] | None = None
    """OpenAI's ``choice.logprobs.content`` entries (``GEN_AI`` only, first choice only)."""


@dataclass
class LLMCall:
    """Everything agl records about one LLM call.

    Fields both layouts carry: ``endpoint``, ``system``, ``model``, ``stream``, ``params`` (``GEN_AI``: scalars
    and lists of strings only), ``messages``, ``tools``, ``api_base``, ``response_id``, ``response_model``,
    ``choices``, ``prompt_token_ids``, ``response_token_ids``, ``usage`` (input and output), ``error_type``.
    ``PROXY`` only: ``prompt``, ``route``, ``deployment_model``, ``http_status``, ``latency_ms``,
    ``time_to_first_chunk_ms``, ``client_disconnected``, ``error_message``.
    """

    endpoint: str = CHAT
    """``chat.completions`` or ``completions``."""
    system: str | None = None
    """The provider (``gen_ai.system``)."""
    model: str | None = None
    """The model the client asked for."""
    stream: bool | None = None
    params: dict[str, Any] = field(default_factory=dict)
    """Every other request field (sampling parameters and the like)."""
    messages: list[Any] | None = None
    """The request's chat messages in OpenAI's format."""
    prompt: Any = None
    """The prompt of a legacy ``/completions`` request."""
    tools: list[Any] | None = None
    """The tool definitions offered to the model, in OpenAI's format."""
    api_base: str | None = None
    """Where the request was sent (the proxy's backend, or the instrumented client's base URL)."""
    route: str | None = None
    deployment_model: str | None = None
    http_status: int | None = None
    latency_ms: float | None = None
    time_to_first_chunk_ms: float | None = None
    client_disconnected: bool = False
    error_type: str | None = None
    error_message: str | None = None
    response_id: str | None = None
    response_model: str | None = None
    choices: list[LLMChoice] = field(default_factory=list)
    prompt_token_ids: list[int] | None = None
    response_token_ids: list[int] | None = None
    """Completion token ids of the first choice (the training data of the call)."""
    usage: LLMUsage | None = None

    @property
    def operation_name(self) -> str:
        """``gen_ai.operation.name`` of the call: ``chat`` or ``text_completion``."""
        return "chat" if self.endpoint == CHAT else "text_completion"

    @property
    def logprobs(self) -> list[float] | None:
        """Per-token log-probabilities of the first choice."""
        return self.choices[0].logprobs if self.choices else None

    @property
    def finish_reasons(self) -> list[str]:
        """The choices' finish reasons, those that have one, in choice order."""
        return [c.finish_reason for c in self.choices if c.finish_reason]

    # -- writing ------------------------------------------------------------------------------------

    def to_attributes(self, format: LLMCallFormat = LLMCallFormat.PROXY) -> dict[str, Any]:
        """The span attributes recording this call in ``format``."""
        return {**self.request_attributes(format), **self.response_attributes(format)}

    def request_attributes(self, format: LLMCallFormat = LLMCallFormat.PROXY) -> dict[str, Any]:
        """The attributes known when the request is sent (a span's start)."""
        if format is LLMCallFormat.PROXY:
            return _proxy_request(self)
        return _genai_request(self)

    def response_attributes(self, format: LLMCallFormat = LLMCallFormat.PROXY) -> dict[str, Any]:
        """The attributes known once the call ended: the response, its outcome and its timing."""
        if format is LLMCallFormat.PROXY:
            return _proxy_response(self)
        return _genai_response(self)

    # -- reading ------------------------------------------------------------------------------------

    @staticmethod
    def detect_format(attributes: Mapping[str, Any]) -> LLMCallFormat:
        """``PROXY`` when any ``agentlightning.llm.*`` attribute is present, else ``GEN_AI``."""
        if any(isinstance(k, str) and k.startswith(_PROXY_PREFIX) for k in attributes):
            return LLMCallFormat.PROXY
        return LLMCallFormat.GEN_AI

    @classmethod
    def from_attributes(
        cls,
        attributes: Mapping[str, Any],
        format: LLMCallFormat | None = None,
        *,
        strict: bool = False,
    ) -> LLMCall:
        """The call recorded in ``attributes`` (``format`` detected when ``None``).

        A malformed payload (invalid or too deeply nested JSON, a wrong type) raises ``ValueError`` naming
        the attribute when ``strict``; otherwise it is skipped with a warning and its field left empty.
        """
        reader = _Reader(attributes, strict)
        if (format or cls.detect_format(attributes)) is LLMCallFormat.PROXY:
            return _proxy_read(reader)
        return _genai_read(reader)


# -- shared helpers --------------------------------------------------------------------------------


def parse_json_text(value: Any) -> Any:
    """``value`` decoded as JSON when it is a string that holds JSON; otherwise ``value`` unchanged.

    JSON nested deeper than :data:`MAX_JSON_DEPTH` counts as text (never a ``RecursionError``).
    """
    if isinstance(value, str):
        try:
            decoded = json.loads(value)
        except (ValueError, RecursionError):
            return value
        return value if _too_deep(decoded) else decoded
    return value


def _too_deep(value: Any, limit: int = MAX_JSON_DEPTH) -> bool:
    """Whether ``value`` nests lists/dicts more than ``limit`` levels (iterative: no recursion)."""
    stack: list[tuple[Any, int]] = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, (list, dict)):
            if depth >= limit:
                return True
            children = item.values() if isinstance(item, dict) else item
            stack.extend((child, depth + 1) for child in children)
    return False


def _dumps(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, default=str)


def _text(content: Any) -> str:
    return content if isinstance(content, str) else json.dumps(content, default=str)


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _int_list(value: Any) -> list[int] | None:
    if isinstance(value, (list, tuple)) and all(
        isinstance(v, int) and not isinstance(v, bool) for v in value
    ):
        return list(value)
    return None


def _str_or_none(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def _floats(value: Any) -> list[float] | None:
    if isinstance(value, (list, tuple)) and all(_is_number(x) for x in value):
        return [float(x) for x in value]
    return None


class _Reader:
    """Typed access to one span's attributes; malformed values are reported (strict) or skipped."""

    def __init__(self, attributes: Mapping[str, Any], strict: bool) -> None:
        self.attributes = attributes
        self.strict = strict

    def problem(self, key: str, what: str) -> None:
        message = f"span attribute {key!r} {what}"
        if self.strict:
            raise ValueError(message)
        logger.warning("%s; ignoring it", message)

    def get(self, key: str, kind: type | tuple[type, ...], what: str) -> Any:
        value = self.attributes.get(key)
        if value is None:
            return None
        if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
            self.problem(key, f"must be {what}, got {type(value).__name__}")
            return None
        return value

    def text(self, key: str) -> str | None:
        return self.get(key, str, "a string")

    def integer(self, key: str) -> int | None:
        return self.get(key, int, "an integer")

    def number(self, key: str) -> float | None:
        value = self.get(key, (int, float), "a number")
        return None if value is None or isinstance(value, bool) else float(value)

    def flag(self, key: str) -> bool | None:
        return self.get(key, bool, "a boolean")

    def ints(self, key: str) -> list[int] | None:
        value = self.attributes.get(key)
        if value is None:
            return None
        if isinstance(value, str):
            value = self.json(key, list, "a JSON list of integers")
            if value is None:
                return None
        ids = _int_list(value)
        if ids is None:
            self.problem(key, "must be a list of integers")
        return ids

    def json(self, key: str, kind: type | None = None, what: str = "") -> Any:
        raw = self.attributes.get(key)
        if raw is None:
            return None
        value = raw
        if isinstance(raw, str):
            try:
                value = json.loads(raw)
            except RecursionError:
                self.problem(key, "holds JSON nested too deeply to decode")
                return None
            except ValueError as exc:
                self.problem(key, f"is not valid JSON ({exc})")
                return None
            if _too_deep(value):
                self.problem(key, f"holds JSON nested too deeply (more than {MAX_JSON_DEPTH} levels)")
                return None
        if kind is not None and not isinstance(value, kind):
            self.problem(key, f"must be {what}, got {type(value).__name__}")
            return None
        return value

    def under(self, prefix: str) -> dict[str, Any]:
        """``{rest: value}`` of the attributes ``<prefix>.<rest>``."""
        dotted = prefix + "."
        return {
            k[len(dotted) :]: v
            for k, v in self.attributes.items()
            if isinstance(k, str) and k.startswith(dotted)
        }


def _indexed(flat: Mapping[str, Any]) -> list[tuple[int, dict[str, Any]]]:
    """``{"0.role": r, "1.content": c}`` → ``[(0, {"role": r}), (1, {"content": c})]`` by index."""
    groups: dict[int, dict[str, Any]] = {}
    for key, value in flat.items():
        head, _, rest = key.partition(".")
        if head.isdigit() and rest:
            groups.setdefault(int(head), {})[rest] = value
    return sorted(groups.items())


# -- PROXY layout ----------------------------------------------------------------------------------


def _proxy_request(call: LLMCall) -> dict[str, Any]:
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
        if _is_number(value):
            attrs[name.value] = value
    stop = call.params.get("stop")
    if isinstance(stop, str):
        attrs[G.REQUEST_STOP_SEQUENCES.value] = [stop]
    elif isinstance(stop, list) and all(isinstance(s, str) for s in stop):
        attrs[G.REQUEST_STOP_SEQUENCES.value] = stop
    if call.messages is not None:
        attrs[L.REQUEST_MESSAGES.value] = _dumps(call.messages)
    if call.prompt is not None:
        attrs[L.REQUEST_PROMPT.value] = _dumps(call.prompt)
    if call.tools:
        attrs[L.REQUEST_TOOLS.value] = _dumps(call.tools)
    if call.params:
        attrs[L.REQUEST_PARAMS.value] = _dumps(call.params)
    if call.deployment_model:
        attrs[L.DEPLOYMENT_MODEL.value] = call.deployment_model
    if call.api_base:
        attrs[L.DEPLOYMENT_API_BASE.value] = call.api_base
    return attrs


def _proxy_response(call: LLMCall) -> dict[str, Any]:
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
        attrs[L.RESPONSE_MESSAGES.value] = _dumps([c.message for c in call.choices])
        if len(call.choices) > 1:
            attrs[L.RESPONSE_CHOICES.value] = _dumps(
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


def _proxy_read(r: _Reader) -> LLMCall:
    endpoint = r.text(L.ENDPOINT.value)
    if endpoint is None:
        endpoint = COMPLETIONS if r.attributes.get(G.OPERATION_NAME.value) == "text_completion" else CHAT
    call = LLMCall(
        endpoint=endpoint,
        system=r.text(G.SYSTEM.value),
        model=r.text(G.REQUEST_MODEL.value),
        stream=r.flag(L.STREAM.value),
        params=r.json(L.REQUEST_PARAMS.value, dict, "a JSON object") or {},
        messages=r.json(L.REQUEST_MESSAGES.value, list, "a JSON list of messages"),
        prompt=r.json(L.REQUEST_PROMPT.value),
        tools=r.json(L.REQUEST_TOOLS.value, list, "a JSON list of tools"),
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
    messages = r.json(L.RESPONSE_MESSAGES.value, list, "a JSON list of messages") or []
    details = r.json(L.RESPONSE_CHOICES.value, list, "a JSON list of choices")
    if details:
        for i, detail in enumerate(details):
            if not isinstance(detail, Mapping):
                r.problem(L.RESPONSE_CHOICES.value, f"item {i} must be an object")
                continue
            index = detail.get("index")
            call.choices.append(
                LLMChoice(
                    index=index if isinstance(index, int) else i,
                    message=messages[i] if i < len(messages) and isinstance(messages[i], dict) else {},
                    finish_reason=_str_or_none(detail.get("finish_reason")),
                    token_ids=_int_list(detail.get("token_ids")),
                    logprobs=_floats(detail.get("logprobs")),
                )
            )
    else:
        finish = r.get(G.RESPONSE_FINISH_REASONS.value, (list, tuple), "a list of strings") or []
        for i, message in enumerate(messages):
            if not isinstance(message, dict):
                r.problem(L.RESPONSE_MESSAGES.value, f"item {i} must be a message object")
            call.choices.append(
                LLMChoice(
                    index=i,
                    message=message if isinstance(message, dict) else {},
                    finish_reason=finish[i] if i < len(finish) and isinstance(finish[i], str) else None,
                )
            )
        if call.choices:
            call.choices[0].token_ids = call.response_token_ids
            call.choices[0].logprobs = _floats(
                r.get(L.RESPONSE_LOGPROBS.value, (list, tuple), "a list of numbers")
            )
    usage = LLMUsage(
        input_tokens=r.integer(G.USAGE_INPUT_TOKENS.value),
        output_tokens=r.integer(G.USAGE_OUTPUT_TOKENS.value),
    )
    if usage.input_tokens is not None or usage.output_tokens is not None:
        call.usage = usage
    return call


# -- GEN_AI layout ---------------------------------------------------------------------------------


def _set_str(attrs: dict[str, Any], key: str, value: Any) -> None:
    """``attrs[key] = str(value)`` unless ``value`` is missing or empty."""
    if value:
        attrs[key] = str(value)


def _set_text(attrs: dict[str, Any], key: str, value: Any) -> None:
    """``value`` as text (JSON for structures) at ``key`` unless it is ``None``."""
    if value is not None:
        attrs[key] = _text(value)


def _genai_tool_calls(prefix: str, tool_calls: Sequence[Any]) -> dict[str, Any]:
    attrs: dict[str, Any] = {}
    for j, tool_call in enumerate(tool_calls):
        if not isinstance(tool_call, Mapping):
            continue
        function = tool_call.get("function") or {}
        function = function if isinstance(function, Mapping) else {}
        call_prefix = f"{prefix}.tool_calls.{j}"
        _set_str(attrs, f"{call_prefix}.id", tool_call.get("id"))
        _set_str(attrs, f"{call_prefix}.name", function.get("name"))
        _set_text(attrs, f"{call_prefix}.arguments", function.get("arguments"))
    return attrs


def _genai_request(call: LLMCall) -> dict[str, Any]:
    attrs: dict[str, Any] = {}
    if call.system:
        attrs[G.SYSTEM.value] = call.system
    attrs[G.OPERATION_NAME.value] = call.operation_name
    attrs[I.REQUEST_TYPE.value] = "chat" if call.endpoint == CHAT else "completion"
    if call.api_base:
        attrs[G.OPENAI_API_BASE.value] = call.api_base
    if call.model is not None:
        attrs[G.REQUEST_MODEL.value] = call.model
    request = G.REQUEST.value
    for key, value in call.params.items():
        if isinstance(value, (str, bool, int, float)):
            attrs[f"{request}.{key}"] = value
        elif isinstance(value, (list, tuple)) and value and all(isinstance(v, str) for v in value):
            attrs[f"{request}.{key}"] = list(value)
    if call.stream is not None:
        attrs[f"{request}.stream"] = call.stream
    for i, message in enumerate(call.messages or []):
        if not isinstance(message, Mapping):
            continue
        prefix = f"{G.PROMPT.value}.{i}"
        if message.get("role") is not None:
            attrs[f"{prefix}.role"] = str(message["role"])
        _set_text(attrs, f"{prefix}.content", message.get("content"))
        for key in ("name", "tool_call_id"):
            _set_str(attrs, f"{prefix}.{key}", message.get(key))
        if message.get("tool_calls"):
            attrs.update(_genai_tool_calls(prefix, message["tool_calls"]))
    for i, tool in enumerate(call.tools or []):
        function = tool.get("function") if isinstance(tool, Mapping) else None
        if not isinstance(function, Mapping):
            continue
        prefix = f"{G.REQUEST_FUNCTIONS.value}.{i}"
        _set_str(attrs, f"{prefix}.name", function.get("name"))
        _set_str(attrs, f"{prefix}.description", function.get("description"))
        _set_text(attrs, f"{prefix}.parameters", function.get("parameters"))
    return attrs


def _genai_response(call: LLMCall) -> dict[str, Any]:
    attrs: dict[str, Any] = {}
    if call.error_type:
        attrs[G.ERROR_TYPE.value] = call.error_type
    if call.response_id:
        attrs[G.RESPONSE_ID.value] = call.response_id
    if call.response_model:
        attrs[G.RESPONSE_MODEL.value] = call.response_model
    for choice in call.choices:
        prefix = f"{G.COMPLETION.value}.{choice.index}"
        message = choice.message
        attrs[f"{prefix}.role"] = str(message.get("role") or "assistant")
        _set_text(attrs, f"{prefix}.content", message.get("content"))
        if message.get("tool_calls"):
            attrs.update(_genai_tool_calls(prefix, message["tool_calls"]))
        if choice.finish_reason:
            attrs[f"{prefix}.finish_reason"] = choice.finish_reason
        if choice.token_ids is not None:
            attrs[f"{prefix}.token_ids"] = choice.token_ids
    if call.choices and call.choices[0].logprobs_content:
        attrs[I.LOGPROBS_CONTENT.value] = json.dumps(call.choices[0].logprobs_content)
    if call.finish_reasons:
        attrs[G.RESPONSE_FINISH_REASONS.value] = call.finish_reasons
    if call.prompt_token_ids is not None:
        attrs[I.PROMPT_TOKEN_IDS.value] = call.prompt_token_ids
    if call.response_token_ids is not None:
        attrs[I.RESPONSE_TOKEN_IDS.value] = call.response_token_ids
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
    return attrs


def _genai_message(fields: Mapping[str, Any]) -> dict[str, Any]:
    message: dict[str, Any] = {}
    for key in ("role", "content", "name", "tool_call_id"):
        if key in fields:
            message[key] = fields[key]
    calls = []
    for _, call in _indexed(
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


def _genai_read(r: _Reader) -> LLMCall:
    operation = r.attributes.get(G.OPERATION_NAME.value)
    call = LLMCall(
        endpoint=COMPLETIONS if operation == "text_completion" else CHAT,
        system=r.text(G.SYSTEM.value),
        model=r.text(G.REQUEST_MODEL.value),
        api_base=r.text(G.OPENAI_API_BASE.value),
        error_type=r.text(G.ERROR_TYPE.value),
        response_id=r.text(G.RESPONSE_ID.value),
        response_model=r.text(G.RESPONSE_MODEL.value),
        prompt_token_ids=r.ints(I.PROMPT_TOKEN_IDS.value),
        response_token_ids=r.ints(I.RESPONSE_TOKEN_IDS.value),
    )
    functions = G.REQUEST_FUNCTIONS.value.removeprefix(G.REQUEST.value + ".") + "."
    for key, value in r.under(G.REQUEST.value).items():
        if key == "model" or key.startswith(functions):
            continue
        if key == "stream":
            call.stream = value if isinstance(value, bool) else None
        else:
            call.params[key] = value
    prompt = _indexed(r.under(G.PROMPT.value))
    if prompt:
        call.messages = [_genai_message(fields) for _, fields in prompt]
    tools = []
    for _, fields in _indexed(r.under(G.REQUEST_FUNCTIONS.value)):
        function = {k: fields[k] for k in ("name", "description") if k in fields}
        if "parameters" in fields:
            function["parameters"] = parse_json_text(fields["parameters"])
        tools.append({"type": "function", "function": function})
    if tools:
        call.tools = tools
    for index, fields in _indexed(r.under(G.COMPLETION.value)):
        finish = fields.get("finish_reason")
        call.choices.append(
            LLMChoice(
                index=index,
                message=_genai_message(fields),
                finish_reason=finish if isinstance(finish, str) else None,
                token_ids=_int_list(fields.get("token_ids")),
            )
        )
    content = r.json(I.LOGPROBS_CONTENT.value, list, "a JSON list of logprob entries")
    if content is not None and call.choices:
        entries = [e for e in content if isinstance(e, dict)]
        call.choices[0].logprobs_content = entries
        call.choices[0].logprobs = [float(e["logprob"]) for e in entries if _is_number(e.get("logprob"))]
    usage = LLMUsage(
        input_tokens=_first_int(r, G.USAGE_INPUT_TOKENS, G.USAGE_PROMPT_TOKENS),
        output_tokens=_first_int(r, G.USAGE_OUTPUT_TOKENS, G.USAGE_COMPLETION_TOKENS),
        total_tokens=r.integer(I.USAGE_TOTAL_TOKENS.value),
    )
    if usage != LLMUsage():
        call.usage = usage
    return call


def _first_int(r: _Reader, *keys: G) -> int | None:
    for key in keys:
        value = r.integer(key.value)
        if value is not None:
            return value
    return None
