"""Tracing for agl: tracers, the span pipeline to the store, emitters and reward readers.

``OtelTracer``, ``AgentOpsTracer`` and ``LightningSpanProcessor`` are imported on first use, so importing
``agl.tracer`` stays cheap (no OpenTelemetry SDK, AgentOps or OpenAI at import time).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from agl.types.lazy import lazy_exports

from . import base, dummy, emitters, rewards
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
from .base import *  # noqa: F403
from .dummy import *  # noqa: F403
from .emitters import *  # noqa: F403
from .rewards import *  # noqa: F403

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
    "LightningSpanProcessor",
    "OtelTracer",
    "extract_links_from_attributes",
    "extract_tags_from_attributes",
    "filter_and_unflatten_attributes",
    "filter_attributes",
    "flatten_attributes",
    "instrument_openai",
    "make_link_attributes",
    "make_tag_attributes",
    "query_linked_spans",
    "sanitize_attributes",
    "unflatten_attributes",
    "uninstrument_openai",
]
__all__ += base.__all__
__all__ += dummy.__all__
__all__ += emitters.__all__
__all__ += rewards.__all__
