"""Spans: OpenTelemetry spans as stored by agl, attributed to a rollout, an attempt and a sequence id."""

from __future__ import annotations

import json
import time
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Literal, Protocol, Union, cast

from pydantic import BaseModel, ConfigDict, Field

from .ids import new_span_id, new_trace_id
from .semconv import AGL_VIRTUAL, LightningResourceAttributes

if TYPE_CHECKING:
    from opentelemetry.sdk.trace import ReadableSpan

__all__ = [
    "AttributeValue",
    "Attributes",
    "Event",
    "Link",
    "OtelResource",
    "Span",
    "SpanContext",
    "SpanCoreFields",
    "SpanRecordingContext",
    "StatusCode",
    "TraceStatus",
    "attempt_resource",
    "normalize_timestamp",
]

AttributeValue = Union[str, bool, int, float, Sequence[str], Sequence[bool], Sequence[int], Sequence[float]]  # noqa: UP007
Attributes = dict[str, Any]
StatusCode = Literal["UNSET", "OK", "ERROR"]


class SpanContext(BaseModel):
    model_config = ConfigDict(extra="allow")

    trace_id: str
    span_id: str
    is_remote: bool = False
    trace_state: dict[str, str] = Field(default_factory=dict)


class TraceStatus(BaseModel):
    model_config = ConfigDict(extra="allow")

    status_code: StatusCode = "UNSET"
    description: str | None = None


class Event(BaseModel):
    model_config = ConfigDict(extra="allow")

    name: str
    attributes: Attributes = Field(default_factory=dict)
    timestamp: float | None = None


class Link(BaseModel):
    model_config = ConfigDict(extra="allow")

    context: SpanContext
    attributes: Attributes | None = None


class OtelResource(BaseModel):
    """The OpenTelemetry resource of a span (named so to avoid clashing with tunable resources)."""

    attributes: Attributes = Field(default_factory=dict)
    schema_url: str = ""


class SpanCoreFields(BaseModel):
    """The lightweight product of emitters and ``Tracer.create_span``."""

    name: str
    status: TraceStatus = Field(default_factory=TraceStatus)
    attributes: Attributes = Field(default_factory=dict)
    start_time: float | None = None
    end_time: float | None = None


class SpanRecordingContext(Protocol):
    """Handle given inside ``Tracer.operation_context`` to record on the current span."""

    def record_exception(self, exception: BaseException) -> None: ...

    def record_attributes(self, attributes: Mapping[str, Any]) -> None: ...

    def record_status(self, status_code: StatusCode, description: str | None = None) -> None: ...

    def get_recorded_span(self) -> SpanCoreFields: ...


def normalize_timestamp(value: float | int | None) -> float | None:
    """Seconds since the epoch. Falsy → ``None``; values above 1e12 are nanoseconds."""
    if not value:
        return None
    return value / 1e9 if value > 1e12 else float(value)


class Span(BaseModel):
    """A span as stored: OpenTelemetry content plus rollout, attempt and sequence id.

    Extra fields of the source span are kept (``extra="allow"``). ``sequence_id`` is at most 2**53 - 1 (exact
    in every JSON parser, and in the 64-bit integer column of every database). NaN and infinite numbers are dumped as the JSON constants
    ``NaN``/``Infinity`` (not silently as ``null``), so stores and JSON parsers can refuse them.
    """

    model_config = ConfigDict(extra="allow", ser_json_inf_nan="constants")

    rollout_id: str
    attempt_id: str
    sequence_id: int = Field(ge=0, le=2**53 - 1)
    trace_id: str
    span_id: str
    parent_id: str | None = None
    name: str
    status: TraceStatus = Field(default_factory=TraceStatus)
    attributes: Attributes = Field(default_factory=dict)
    events: list[Event] = Field(default_factory=list[Event])
    links: list[Link] = Field(default_factory=list[Link])
    start_time: float | None = None
    end_time: float | None = None
    context: SpanContext | None = None
    parent: SpanContext | None = None
    resource: OtelResource = Field(default_factory=OtelResource)

    def with_sequence_id(self, sequence_id: int) -> Span:
        """A copy numbered ``sequence_id``; a span attributed to its attempt (its resource names the rollout, as
        :func:`attempt_resource` writes it) also gets ``agentlightning.span_sequence_id`` in its resource."""
        update: dict[str, Any] = {"sequence_id": sequence_id}
        attributes = self.resource.attributes
        if LightningResourceAttributes.ROLLOUT_ID.value in attributes:
            numbered = {**attributes, LightningResourceAttributes.SPAN_SEQUENCE_ID.value: sequence_id}
            update["resource"] = OtelResource(attributes=numbered, schema_url=self.resource.schema_url)
        return self.model_copy(update=update)

    @classmethod
    def from_attributes(
        cls,
        *,
        attributes: Attributes,
        rollout_id: str | None = None,
        attempt_id: str | None = None,
        sequence_id: int | None = None,
        name: str | None = None,
        trace_id: str | None = None,
        span_id: str | None = None,
        parent_id: str | None = None,
        start_time: float | None = None,
        end_time: float | None = None,
        resource: OtelResource | None = None,
        status: TraceStatus | None = None,
    ) -> Span:
        """A synthetic span: missing ids are generated, status defaults to OK."""
        trace_id = trace_id or new_trace_id()
        span_id = span_id or new_span_id()
        return cls(
            rollout_id=rollout_id or "",
            attempt_id=attempt_id or "",
            sequence_id=sequence_id or 0,
            trace_id=trace_id,
            span_id=span_id,
            parent_id=parent_id,
            name=name or AGL_VIRTUAL,
            status=status or TraceStatus(status_code="OK"),
            attributes=dict(attributes),
            start_time=start_time,
            end_time=end_time,
            context=SpanContext(trace_id=trace_id, span_id=span_id),
            parent=SpanContext(trace_id=trace_id, span_id=parent_id) if parent_id else None,
            resource=resource or OtelResource(),
        )

    @classmethod
    def from_core_fields(
        cls,
        core: SpanCoreFields,
        *,
        rollout_id: str | None = None,
        attempt_id: str | None = None,
        sequence_id: int | None = None,
    ) -> Span:
        """A span from what an emitter produced; a missing start time becomes now."""
        return cls.from_attributes(
            attributes=core.attributes,
            rollout_id=rollout_id,
            attempt_id=attempt_id,
            sequence_id=sequence_id,
            name=core.name,
            status=core.status,
            start_time=core.start_time if core.start_time is not None else time.time(),
            end_time=core.end_time,
        )

    @classmethod
    def from_item(
        cls,
        item: Span | SpanCoreFields | ReadableSpan,
        *,
        rollout_id: str,
        attempt_id: str,
        sequence_id: int = 0,
    ) -> Span:
        """Any span-like thing a tracer, an emitter or an agent produces, as a ``Span`` of this attempt.

        A ``Span`` is copied with the new ids; :class:`SpanCoreFields` go through :meth:`from_core_fields`;
        anything else is taken for an OpenTelemetry ``ReadableSpan``. ``sequence_id=0`` is the placeholder
        for spans whose id the store assigns (``LightningStore.add_spans_in_order``). The resource names the
        rollout and attempt (and a given sequence id), as the reference's exported spans do
        (:class:`~agl.types.semconv.LightningResourceAttributes`).
        """
        if isinstance(item, Span):
            span = item.model_copy(
                update={"rollout_id": rollout_id, "attempt_id": attempt_id, "sequence_id": sequence_id}
            )
        elif isinstance(item, SpanCoreFields):
            span = cls.from_core_fields(
                item, rollout_id=rollout_id, attempt_id=attempt_id, sequence_id=sequence_id
            )
        else:
            span = cls.from_opentelemetry(item, rollout_id, attempt_id, sequence_id)
        span.resource = attempt_resource(span.resource, rollout_id, attempt_id, sequence_id)
        return span

    @classmethod
    def from_opentelemetry(
        cls, src: ReadableSpan, rollout_id: str, attempt_id: str, sequence_id: int
    ) -> Span:
        """Convert an OpenTelemetry SDK ``ReadableSpan`` (needs ``opentelemetry-sdk``, extra ``otel``)."""
        ctx = src.get_span_context()
        trace_id = format(ctx.trace_id, "032x") if ctx is not None else "0" * 32
        span_id = format(ctx.span_id, "016x") if ctx is not None else "0" * 16
        parent = src.parent
        status = src.status
        return cls(
            rollout_id=rollout_id,
            attempt_id=attempt_id,
            sequence_id=sequence_id,
            trace_id=trace_id,
            span_id=span_id,
            parent_id=format(parent.span_id, "016x") if parent is not None else None,
            name=src.name,
            status=TraceStatus(
                status_code=status.status_code.name,
                description=status.description,
            ),
            attributes=_jsonable_attributes(src.attributes),
            events=[
                Event(
                    name=e.name,
                    attributes=_jsonable_attributes(e.attributes),
                    timestamp=normalize_timestamp(e.timestamp),
                )
                for e in src.events
            ],
            links=[
                Link(
                    context=_otel_context(link.context),
                    attributes=_jsonable_attributes(link.attributes) or None,
                )
                for link in src.links
            ],
            start_time=normalize_timestamp(src.start_time),
            end_time=normalize_timestamp(src.end_time),
            context=_otel_context(ctx) if ctx is not None else None,
            parent=_otel_context(parent) if parent is not None else None,
            resource=OtelResource(
                attributes=_jsonable_attributes(src.resource.attributes),
                schema_url=src.resource.schema_url or "",
            ),
        )


def attempt_resource(
    resource: OtelResource, rollout_id: str, attempt_id: str, sequence_id: int = 0
) -> OtelResource:
    """``resource`` (a copy) with the ``agentlightning.rollout_id/attempt_id`` attributes (and
    ``agentlightning.span_sequence_id`` when ``sequence_id`` is set) that attribute a span to its attempt."""
    attributes = dict(resource.attributes)
    attributes[LightningResourceAttributes.ROLLOUT_ID.value] = rollout_id
    attributes[LightningResourceAttributes.ATTEMPT_ID.value] = attempt_id
    if sequence_id:
        attributes[LightningResourceAttributes.SPAN_SEQUENCE_ID.value] = sequence_id
    return OtelResource(attributes=attributes, schema_url=resource.schema_url)


def _otel_context(ctx: Any) -> SpanContext:
    return SpanContext(
        trace_id=format(ctx.trace_id, "032x"),
        span_id=format(ctx.span_id, "016x"),
        is_remote=bool(ctx.is_remote),
        trace_state=dict(ctx.trace_state or {}),
    )


def _jsonable_attributes(attributes: Mapping[str, Any] | None) -> Attributes:
    if not attributes:
        return {}
    out: Attributes = {}
    for key, value in attributes.items():
        if isinstance(value, (str, bool, int, float)) or value is None:
            out[key] = value
        elif isinstance(value, (tuple, list)):
            out[key] = list(cast("Sequence[Any]", value))
        else:
            try:
                out[key] = json.loads(json.dumps(value))
            except (TypeError, ValueError):
                out[key] = str(value)
    return out
