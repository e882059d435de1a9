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

This module holds the record; ``_proxy_layout`` and ``_genai_layout`` write and read the two layouts, and
``_attribute_reader`` decodes what both read.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from ._attribute_reader import MAX_JSON_DEPTH, AttributeReader, parse_json_text

__all__ = ["MAX_JSON_DEPTH", "LLMCall", "LLMCallFormat", "LLMChoice", "LLMUsage", "parse_json_text"]

CHAT = "chat.completions"
COMPLETIONS = "completions"

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
    message: dict[str, Any] = field(default_factory=dict[str, Any])
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
    params: dict[str, Any] = field(default_factory=dict[str, Any])
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
    choices: list[LLMChoice] = field(default_factory=list[LLMChoice])
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
        # The layouts build LLMCall objects when reading, hence imported here rather than at the top.
        from ._genai_layout import genai_request
        from ._proxy_layout import proxy_request

        return proxy_request(self) if format is LLMCallFormat.PROXY else genai_request(self)

    def response_attributes(self, format: LLMCallFormat = LLMCallFormat.PROXY) -> dict[str, Any]:
        """The attributes known once the call ended: the response, its outcome and its timing."""
        from ._genai_layout import genai_response
        from ._proxy_layout import proxy_response

        return proxy_response(self) if format is LLMCallFormat.PROXY else genai_response(self)

    # -- reading ------------------------------------------------------------------------------------

    @staticmethod
    def detect_format(attributes: Mapping[str, Any]) -> LLMCallFormat:
        """``PROXY`` when any ``agentlightning.llm.*`` attribute is present, else ``GEN_AI``."""
        if any(isinstance(k, str) and k.startswith(_PROXY_PREFIX) for k in attributes):  # pyright: ignore[reportUnnecessaryIsInstance]  # attributes from outside may hold non-string keys
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
        from ._genai_layout import read_genai
        from ._proxy_layout import read_proxy

        reader = AttributeReader(attributes, strict)
        if (format or cls.detect_format(attributes)) is LLMCallFormat.PROXY:
            return read_proxy(reader)
        return read_genai(reader)
