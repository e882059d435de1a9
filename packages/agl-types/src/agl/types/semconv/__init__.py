"""Names of the spans and attributes that carry agl's meaning inside OpenTelemetry traces, and the typed
LLM-call record (:class:`LLMCall`) that proxy, tracer instrumentation and adapters write and read.

Where each part lives: ``_names`` (span names, attribute enums, metadata keys), ``_llm_call`` (the record and
its two layouts' entry points), ``_proxy_layout`` / ``_genai_layout`` (writing and reading each layout) and
``_attribute_reader`` (decoding what is read). Import from ``agl.types.semconv``.
"""

from ._llm_call import MAX_JSON_DEPTH, LLMCall, LLMCallFormat, LLMChoice, LLMUsage, parse_json_text
from ._names import (
    AGL_ANNOTATION,
    AGL_EXCEPTION,
    AGL_LLM_CALL,
    AGL_MESSAGE,
    AGL_OBJECT,
    AGL_OPERATION,
    AGL_REWARD,
    AGL_VIRTUAL,
    FINAL_REWARD_METADATA_KEY,
    GenAIAttributes,
    InstrumentedLLMAttributes,
    LightningResourceAttributes,
    LightningSpanAttributes,
    LinkPydanticModel,
    LLMCallAttributes,
    RewardPydanticModel,
)

__all__ = [
    "AGL_ANNOTATION",
    "AGL_EXCEPTION",
    "AGL_LLM_CALL",
    "AGL_MESSAGE",
    "AGL_OBJECT",
    "AGL_OPERATION",
    "AGL_REWARD",
    "AGL_VIRTUAL",
    "FINAL_REWARD_METADATA_KEY",
    "MAX_JSON_DEPTH",
    "GenAIAttributes",
    "InstrumentedLLMAttributes",
    "LLMCall",
    "LLMCallAttributes",
    "LLMCallFormat",
    "LLMChoice",
    "LLMUsage",
    "LightningResourceAttributes",
    "LightningSpanAttributes",
    "LinkPydanticModel",
    "RewardPydanticModel",
    "parse_json_text",
]
