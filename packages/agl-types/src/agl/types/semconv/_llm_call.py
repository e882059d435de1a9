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

Where the parts live: the fields in ``_llm_record``; writing and reading each layout in ``_proxy_layout`` and
``_genai_layout``; decoding what both read in ``_attribute_reader``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ._attribute_reader import MAX_JSON_DEPTH, AttributeReader, parse_json_text
from ._genai_layout import genai_request, genai_response, read_genai
from ._llm_record import LLMCallFields, LLMCallFormat, LLMChoice, LLMUsage
from ._proxy_layout import proxy_request, proxy_response, read_proxy

__all__ = ["MAX_JSON_DEPTH", "LLMCall", "LLMCallFormat", "LLMChoice", "LLMUsage", "parse_json_text"]

_PROXY_PREFIX = "agentlightning.llm."


@dataclass
class LLMCall(LLMCallFields):
    """Everything agl records about one LLM call, and its span attributes in either layout.

    The fields (see :class:`~agl.types.semconv._llm_record.LLMCallFields`) both layouts carry: ``endpoint``,
    ``system``, ``model``, ``stream``, ``params`` (``GEN_AI``: scalars and lists of strings only), ``messages``,
    ``tools``, ``api_base``, ``response_id``, ``response_model``, ``choices``, ``prompt_token_ids``,
    ``response_token_ids``, ``usage`` (input and output), ``error_type``. ``PROXY`` only: ``prompt``, ``route``,
    ``deployment_model``, ``http_status``, ``latency_ms``, ``time_to_first_chunk_ms``, ``client_disconnected``,
    ``error_message``.
    """

    # -- writing ------------------------------------------------------------------------------------

    def to_attributes(self, format: LLMCallFormat = LLMCallFormat.PROXY) -> dict[str, Any]:
        """The span attributes recording this call in ``format``."""
        return {**self.request_attributes(format), **self.response_attributes(format)}

    def request_attributes(self, format: LLMCallFormat = LLMCallFormat.PROXY) -> dict[str, Any]:
        """The attributes known when the request is sent (a span's start)."""
        return proxy_request(self) if format is LLMCallFormat.PROXY else genai_request(self)

    def response_attributes(self, format: LLMCallFormat = LLMCallFormat.PROXY) -> dict[str, Any]:
        """The attributes known once the call ended: the response, its outcome and its timing."""
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
        reader = AttributeReader(attributes, strict)
        if (format or cls.detect_format(attributes)) is LLMCallFormat.PROXY:
            return read_proxy(reader, cls)
        return read_genai(reader, cls)
