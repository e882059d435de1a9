"""``DummyTracer``: spans in plain Python, no OpenTelemetry.

Emitters called with ``propagate=False`` use a throwaway ``DummyTracer`` to build their span without exporting
it. Used as a runner's tracer it is also a light real tracer: spans created inside ``trace_context`` go
through the same pipeline to the store as ``OtelTracer``'s.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Generator, Mapping
from typing import Any

from agl.types import SpanCoreFields, SpanRecordingContext, TraceStatus

from .base import OpenSpan, RecordedSpan, Tracer

__all__ = ["DummyTracer"]

logger = logging.getLogger(__name__)


class DummyTracer(Tracer):
    """A tracer without a backend."""

    def _create_span(
        self, name: str, attributes: Mapping[str, Any], when: float, status: TraceStatus | None
    ) -> SpanCoreFields:
        span = RecordedSpan(name, attributes, start_time=when)
        span.record_status(*(("OK", None) if status is None else (status.status_code, status.description)))
        core = span.end(when)
        self._submit(core)
        return core

    def start_span(self, name: str, attributes: Mapping[str, Any] | None = None) -> OpenSpan:
        return RecordedSpan(name, attributes, on_end=self._submit)

    @contextlib.contextmanager
    def _operation_context(
        self, name: str, attributes: Mapping[str, Any], start_time: float | None, end_time: float | None
    ) -> Generator[SpanRecordingContext, None, None]:
        span = RecordedSpan(name, attributes, start_time=start_time, on_end=self._submit)
        try:
            yield span
        except BaseException as exc:
            span.record_exception(exc)
            span.record_status("ERROR", str(exc))
            raise
        else:
            if span.get_recorded_span().status.status_code == "UNSET":
                span.record_status("OK")
        finally:
            span.end(end_time)
