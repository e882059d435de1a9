"""The data of one LLM call: its attribute layouts (:class:`LLMCallFormat`), token usage, choices, and every
field of :class:`~agl.types.semconv.LLMCall` (:class:`LLMCallFields`).

The layouts (``_proxy_layout``, ``_genai_layout``) read and write these; :class:`~agl.types.semconv.LLMCall`
(in ``_llm_call``) adds the methods that pick a layout.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import Any

__all__ = ["CHAT", "COMPLETIONS", "LLMCallFields", "LLMCallFormat", "LLMChoice", "LLMUsage"]

CHAT = "chat.completions"
COMPLETIONS = "completions"


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
class LLMCallFields:
    """Everything agl records about one LLM call (the fields of :class:`~agl.types.semconv.LLMCall`).

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
    system_fingerprint: str | None = None
    """The backend's ``system_fingerprint`` (the proxy layout only)."""
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
