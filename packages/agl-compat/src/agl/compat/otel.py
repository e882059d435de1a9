"""The reference's ``utils.otel`` helpers that the agl packages do not offer under the same name.

The attribute helpers (``make_tag_attributes``, ``query_linked_spans``...) are :mod:`agl.tracer`'s; these give
the OpenTelemetry tracer provider and tracer that an agl tracer installed (``OtelTracer``, ``AgentOpsTracer``).
"""

from __future__ import annotations

import logging

from agl.tracer import OtelTracer, get_active_tracer
from opentelemetry import trace as trace_api
from opentelemetry.sdk.trace import TracerProvider

__all__ = ["full_qualified_name", "get_tracer", "get_tracer_provider"]

logger = logging.getLogger(__name__)


def full_qualified_name(obj: type) -> str:
    """``module.QualName`` of a class (just the name for builtins)."""
    if obj.__module__ == "builtins":
        return obj.__qualname__
    return f"{obj.__module__}.{obj.__qualname__}"


def get_tracer_provider(inspect: bool = True) -> TracerProvider:
    """The OpenTelemetry SDK tracer provider spans go through: the active agl tracer's (an ``OtelTracer`` or
    ``AgentOpsTracer`` inside ``lifespan`` / ``trace_context``), else the process-global one.

    Args:
        inspect: Log (at DEBUG, on ``agl.compat.otel``) the provider's span processors.

    Raises:
        RuntimeError: No SDK tracer provider is installed (no tracer was started in this process).
    """
    active = get_active_tracer()
    provider = active.provider if isinstance(active, OtelTracer) else trace_api.get_tracer_provider()
    if not isinstance(provider, TracerProvider):
        raise RuntimeError(
            f"no OpenTelemetry SDK tracer provider is installed (found {full_qualified_name(type(provider))}): "
            "call it inside a tracer's lifespan() or trace_context()"
        )
    if inspect and logger.isEnabledFor(logging.DEBUG):
        processors = getattr(provider, "_active_span_processor", None)
        found: tuple[object, ...] = getattr(processors, "_span_processors", ())
        for processor in found:
            logger.debug("span processor: %s", full_qualified_name(type(processor)))
    return provider


def get_tracer(use_active_span_processor: bool = True) -> trace_api.Tracer:
    """A tracer named ``agentlightning`` from :func:`get_tracer_provider` (its spans go where the agl tracer's go).

    Args:
        use_active_span_processor: Kept for the reference's signature; spans always use the provider's
            processors here.
    """
    return get_tracer_provider(inspect=False).get_tracer("agentlightning")
