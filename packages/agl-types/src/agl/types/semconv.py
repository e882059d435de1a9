"""Names of the spans and attributes that carry agl's meaning inside OpenTelemetry traces."""

from __future__ import annotations

from enum import Enum

from pydantic import BaseModel

__all__ = [
    "AGL_ANNOTATION",
    "AGL_EXCEPTION",
    "AGL_MESSAGE",
    "AGL_OBJECT",
    "AGL_OPERATION",
    "AGL_REWARD",
    "AGL_VIRTUAL",
    "LightningResourceAttributes",
    "LightningSpanAttributes",
    "LinkPydanticModel",
    "RewardPydanticModel",
]

AGL_ANNOTATION = "agentlightning.annotation"
AGL_MESSAGE = "agentlightning.message"
AGL_OBJECT = "agentlightning.object"
AGL_EXCEPTION = "agentlightning.exception"
AGL_OPERATION = "agentlightning.operation"
AGL_REWARD = "agentlightning.reward"
AGL_VIRTUAL = "agentlightning.virtual"
AGL_LLM_CALL = "agentlightning.llm_call"
"""Span name of one LLM call recorded by the agl LLM proxy."""


class LightningResourceAttributes(str, Enum):
    """OpenTelemetry resource attributes that attribute spans to a rollout and attempt."""

    ROLLOUT_ID = "agentlightning.rollout_id"
    ATTEMPT_ID = "agentlightning.attempt_id"
    SPAN_SEQUENCE_ID = "agentlightning.span_sequence_id"
    TRACER_NAME = "agentlightning.tracer.name"


class LightningSpanAttributes(str, Enum):
    """Span attributes written by emitters and read by adapters."""

    REWARD = "agentlightning.reward"
    """Prefix: ``.<i>.name`` / ``.<i>.value`` per dimension; the first one is primary."""
    LINK = "agentlightning.link"
    """Prefix: a list of ``{key_match, value_match}`` selecting the spans this one refers to."""
    TAG = "agentlightning.tag"
    MESSAGE_BODY = "agentlightning.message.body"
    OBJECT_TYPE = "agentlightning.object.type"
    OBJECT_LITERAL = "agentlightning.object.literal"
    OBJECT_JSON = "agentlightning.object.json"
    OPERATION_NAME = "agentlightning.operation.name"
    OPERATION_INPUT = "agentlightning.operation.input"
    OPERATION_OUTPUT = "agentlightning.operation.output"


class RewardPydanticModel(BaseModel):
    """One reward dimension."""

    name: str
    value: float


class LinkPydanticModel(BaseModel):
    """Selects target spans whose attribute ``key_match`` equals ``value_match``.

    The reserved keys ``trace_id`` and ``span_id`` match the span's own ids.
    """

    key_match: str
    value_match: str
