"""Tracing for agl: tracers, the span pipeline to the store, emitters and reward readers.

``OtelTracer``, ``AgentOpsTracer`` and ``LightningSpanProcessor`` are imported on first use, so importing
``agl.tracer`` stays cheap (no OpenTelemetry SDK, AgentOps or OpenAI at import time).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from agl.types._lazy import lazy_exports

from .attributes import (
    extract_links_from_attributes,
    extract_tags_from_attributes,
    filter_and_unflatten_attributes,
    filter_attributes,
    flatten_attributes,
    make_link_attributes,
    make_tag_attributes,
    query_linked_spans,
    sanitize_attributes,
    unflatten_attributes,
)
from .base import OpenSpan, Tracer, clear_active_tracer, get_active_tracer, set_active_tracer
from .dummy import DummyTracer
from .emitters import (
    OperationContext,
    emit_annotation,
    emit_exception,
    emit_message,
    emit_object,
    emit_reward,
    operation,
    reward,
)
from .rewards import (
    final_reward_of,
    find_final_reward,
    find_reward_spans,
    get_message_value,
    get_object_value,
    get_reward_value,
    get_rewards_from_span,
    is_reward_span,
    recorded_final_reward,
)

if TYPE_CHECKING:
    from .agentops import AgentOpsTracer
    from .instrumentation import instrument_openai, uninstrument_openai
    from .otel import LightningSpanProcessor, OtelTracer

__version__ = "0.1.0"

__getattr__, __dir__ = lazy_exports(
    __name__,
    {
        "OtelTracer": ".otel",
        "LightningSpanProcessor": ".otel",
        "AgentOpsTracer": ".agentops",
        "instrument_openai": ".instrumentation",
        "uninstrument_openai": ".instrumentation",
    },
    globals(),
)

__all__ = [
    "AgentOpsTracer",
    "DummyTracer",
    "LightningSpanProcessor",
    "OpenSpan",
    "OperationContext",
    "OtelTracer",
    "Tracer",
    "clear_active_tracer",
    "emit_annotation",
    "emit_exception",
    "emit_message",
    "emit_object",
    "emit_reward",
    "extract_links_from_attributes",
    "extract_tags_from_attributes",
    "filter_and_unflatten_attributes",
    "filter_attributes",
    "final_reward_of",
    "find_final_reward",
    "find_reward_spans",
    "flatten_attributes",
    "get_active_tracer",
    "get_message_value",
    "get_object_value",
    "get_reward_value",
    "get_rewards_from_span",
    "instrument_openai",
    "is_reward_span",
    "make_link_attributes",
    "make_tag_attributes",
    "operation",
    "query_linked_spans",
    "recorded_final_reward",
    "reward",
    "sanitize_attributes",
    "set_active_tracer",
    "unflatten_attributes",
    "uninstrument_openai",
]
