"""Adapter base classes: callables that turn what the store holds (spans) into training data."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from agl.types import Span, Triplet

if TYPE_CHECKING:
    from opentelemetry.sdk.trace import ReadableSpan

__all__ = ["Adapter", "OtelTraceAdapter", "TraceAdapter", "TraceToTripletBase"]

T_from = TypeVar("T_from")
T_to = TypeVar("T_to")


class Adapter(Generic[T_from, T_to]):
    """Turns a ``T_from`` into a ``T_to``; calling the adapter calls :meth:`adapt`."""

    def __call__(self, source: T_from, /) -> T_to:
        return self.adapt(source)

    def adapt(self, source: T_from, /) -> T_to:
        raise NotImplementedError(f"{type(self).__name__}.adapt is not implemented")


class OtelTraceAdapter(Adapter[Sequence["ReadableSpan"], T_to], Generic[T_to]):
    """An adapter over OpenTelemetry SDK spans."""


class TraceAdapter(Adapter[Sequence[Span], T_to], Generic[T_to]):
    """An adapter over stored spans."""


class TraceToTripletBase(TraceAdapter[list[Triplet]]):
    """Spans of one attempt → RL triplets. RL backends accept any instance of it."""

    def adapt(self, source: Sequence[Span], /) -> list[Triplet]:  # pragma: no cover - abstract
        raise NotImplementedError(f"{type(self).__name__}.adapt is not implemented")


def as_spans(spans: Sequence[Any]) -> list[Span]:
    """Stored spans as they are; OpenTelemetry ``ReadableSpan`` objects converted (with empty ids)."""
    out: list[Span] = []
    for i, span in enumerate(spans):
        if isinstance(span, Span):
            out.append(span)
        elif hasattr(span, "get_span_context"):
            out.append(Span.from_opentelemetry(span, rollout_id="", attempt_id="", sequence_id=i))
        else:
            raise TypeError(f"expected agl Span or OpenTelemetry ReadableSpan, got {type(span).__name__}")
    return out
