"""OTLP/HTTP trace ingestion: any OpenTelemetry exporter can send spans straight to the store.

``POST /v1/traces`` takes an ``ExportTraceServiceRequest`` (protobuf, optionally gzip-compressed).
Each span is attributed to a rollout and attempt through the resource attributes
``agentlightning.rollout_id`` / ``agentlightning.attempt_id`` (span attributes with the same keys win);
``agentlightning.span_sequence_id`` is optional, missing ones are allocated in one batch. Spans without
a rollout or attempt id are rejected and counted in the response's ``partial_success``.
"""

from __future__ import annotations

import logging
import zlib
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from agl.types import (
    AglError,
    ConflictError,
    Event,
    LightningResourceAttributes,
    Link,
    NotFoundError,
    OtelResource,
    Span,
    SpanContext,
    StatusCode,
    TraceStatus,
    normalize_timestamp,
)
from fastapi import FastAPI, Request
from fastapi.responses import Response

from ...errors import OTLPIngestError

if TYPE_CHECKING:
    from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue

    from ...base import LightningStore

__all__ = ["OTLPIngestError", "ingest_otlp_traces", "install_otlp_routes", "spans_from_proto"]

logger = logging.getLogger("agl.store.otlp")

_PROTOBUF = "application/x-protobuf"
_ROLLOUT = LightningResourceAttributes.ROLLOUT_ID.value
_ATTEMPT = LightningResourceAttributes.ATTEMPT_ID.value
_SEQUENCE = LightningResourceAttributes.SPAN_SEQUENCE_ID.value
_STATUS_CODES: dict[int, StatusCode] = {0: "UNSET", 1: "OK", 2: "ERROR"}
# google.rpc.Code values used in error bodies.
_RPC_CODE = {400: 3, 404: 5, 409: 6, 413: 8, 415: 3, 500: 13}


def _any_value(value: AnyValue) -> Any:
    kind = value.WhichOneof("value")
    if kind is None:
        return None
    if kind == "array_value":
        return [_any_value(v) for v in value.array_value.values]
    if kind == "kvlist_value":
        return {kv.key: _any_value(kv.value) for kv in value.kvlist_value.values}
    if kind == "bytes_value":
        return value.bytes_value.hex()
    return getattr(value, kind)


def _attributes(pairs: Iterable[KeyValue]) -> dict[str, Any]:
    return {kv.key: _any_value(kv.value) for kv in pairs}


def _hex(raw: bytes, width: int) -> str:
    return raw.hex() if raw else "0" * width


def _trace_state(text: str) -> dict[str, str]:
    state: dict[str, str] = {}
    for item in text.split(","):
        key, sep, value = item.strip().partition("=")
        if sep and key:
            state[key] = value
    return state


def _sequence_id(value: Any) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, str):
        try:
            value = int(value)
        except ValueError:
            return None
    if isinstance(value, int) and value >= 0:
        return value
    return None


def spans_from_proto(request: Any) -> tuple[list[tuple[Span, bool]], int]:
    """Convert an ``ExportTraceServiceRequest``: ``([(span, has_sequence_id)...], rejected_count)``.

    Spans lacking a sequence id carry ``sequence_id=0`` and ``False``; the caller allocates one.
    """
    out: list[tuple[Span, bool]] = []
    rejected = 0
    for resource_spans in request.resource_spans:
        resource_attrs = _attributes(resource_spans.resource.attributes)
        resource = OtelResource(attributes=resource_attrs, schema_url=resource_spans.schema_url or "")
        for scope_spans in resource_spans.scope_spans:
            for pb in scope_spans.spans:
                attrs = _attributes(pb.attributes)
                rollout_id = attrs.get(_ROLLOUT, resource_attrs.get(_ROLLOUT))
                attempt_id = attrs.get(_ATTEMPT, resource_attrs.get(_ATTEMPT))
                if (
                    not isinstance(rollout_id, str)
                    or not rollout_id
                    or not isinstance(attempt_id, str)
                    or not attempt_id
                ):
                    rejected += 1
                    continue
                sequence_id = _sequence_id(attrs.get(_SEQUENCE, resource_attrs.get(_SEQUENCE)))
                trace_id = _hex(pb.trace_id, 32)
                span_id = _hex(pb.span_id, 16)
                parent_id = pb.parent_span_id.hex() if pb.parent_span_id else None
                state = _trace_state(pb.trace_state)
                span = Span(
                    rollout_id=rollout_id,
                    attempt_id=attempt_id,
                    sequence_id=sequence_id or 0,
                    trace_id=trace_id,
                    span_id=span_id,
                    parent_id=parent_id,
                    name=pb.name,
                    status=TraceStatus(
                        status_code=_STATUS_CODES.get(pb.status.code, "UNSET"),
                        description=pb.status.message or None,
                    ),
                    attributes=attrs,
                    events=[
                        Event(
                            name=e.name,
                            attributes=_attributes(e.attributes),
                            timestamp=normalize_timestamp(e.time_unix_nano),
                        )
                        for e in pb.events
                    ],
                    links=[
                        Link(
                            context=SpanContext(
                                trace_id=_hex(link.trace_id, 32),
                                span_id=_hex(link.span_id, 16),
                                trace_state=_trace_state(link.trace_state),
                            ),
                            attributes=_attributes(link.attributes) or None,
                        )
                        for link in pb.links
                    ],
                    start_time=normalize_timestamp(pb.start_time_unix_nano),
                    end_time=normalize_timestamp(pb.end_time_unix_nano),
                    context=SpanContext(trace_id=trace_id, span_id=span_id, trace_state=state),
                    parent=SpanContext(trace_id=trace_id, span_id=parent_id) if parent_id else None,
                    resource=resource,
                )
                out.append((span, sequence_id is not None))
    return out, rejected


def _decompress(body: bytes, encoding: str, limit: int) -> bytes:
    encoding = encoding.strip().lower()
    if encoding in ("", "identity"):
        return body
    if encoding not in ("gzip", "deflate"):
        raise OTLPIngestError(415, f"unsupported Content-Encoding {encoding!r}; use gzip or none")
    inflater = zlib.decompressobj(zlib.MAX_WBITS | 32)  # gzip or zlib header, detected
    try:
        data = inflater.decompress(body, limit + 1)
    except zlib.error as exc:
        raise OTLPIngestError(400, f"body is not valid {encoding} data: {exc}") from exc
    if len(data) > limit or inflater.unconsumed_tail:
        raise OTLPIngestError(413, f"decompressed body exceeds the server's limit of {limit} bytes")
    return data


async def ingest_otlp_traces(
    store: LightningStore, body: bytes, *, content_type: str, content_encoding: str = "", max_bytes: int
) -> bytes:
    """Store the spans of one OTLP/HTTP request; returns the serialised ``ExportTraceServiceResponse``."""
    from google.protobuf.message import DecodeError
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
        ExportTraceServiceRequest,
        ExportTraceServiceResponse,
    )

    if content_type.split(";")[0].strip().lower() != _PROTOBUF:
        raise OTLPIngestError(
            415, f"unsupported Content-Type {content_type!r}; OTLP/HTTP traces must be sent as {_PROTOBUF}"
        )
    data = _decompress(body, content_encoding, max_bytes)
    request = ExportTraceServiceRequest()
    try:
        request.ParseFromString(data)
    except DecodeError as exc:
        raise OTLPIngestError(400, f"body is not a valid ExportTraceServiceRequest: {exc}") from exc

    converted, rejected = spans_from_proto(request)
    numbered = [span for span, has_id in converted if has_id]
    missing = [span for span, has_id in converted if not has_id]
    if converted:
        try:
            if numbered:
                await store.add_many_spans(numbered)
            if missing:
                await store.add_spans_in_order(missing)
        except NotFoundError as exc:
            raise OTLPIngestError(404, str(exc)) from exc
        except ConflictError as exc:
            raise OTLPIngestError(409, str(exc)) from exc
        except (AglError, ValueError) as exc:
            raise OTLPIngestError(400, str(exc)) from exc
    response = ExportTraceServiceResponse()
    if rejected:
        logger.warning("OTLP: rejected %d span(s) without %s / %s attributes", rejected, _ROLLOUT, _ATTEMPT)
        response.partial_success.rejected_spans = rejected
        response.partial_success.error_message = (
            f"{rejected} span(s) carry no {_ROLLOUT} / {_ATTEMPT} resource or span attributes"
        )
    return response.SerializeToString()


def _varint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def rpc_status(http_status: int, message: str) -> bytes:
    """A serialised ``google.rpc.Status`` (the error body OTLP/HTTP prescribes)."""
    text = message.encode()
    return b"\x08" + _varint(_RPC_CODE.get(http_status, 2)) + b"\x12" + _varint(len(text)) + text


def install_otlp_routes(app: FastAPI, store: LightningStore, *, max_decompressed_bytes: int) -> None:
    """Add ``POST /v1/traces`` (and 501 answers for the OTLP signals the store does not take)."""
    body_schema = {
        "requestBody": {
            "required": True,
            "content": {_PROTOBUF: {"schema": {"type": "string", "format": "binary"}}},
        }
    }
    binary = {"content": {_PROTOBUF: {"schema": {"type": "string", "format": "binary"}}}}

    @app.post(
        "/v1/traces",
        tags=["otlp"],
        summary="OTLP/HTTP trace export",
        openapi_extra=body_schema,
        response_class=Response,
        responses={
            200: {"description": "ExportTraceServiceResponse", **binary},
            400: {"description": "Body is not a valid request (google.rpc.Status)", **binary},
            404: {"description": "A span names an unknown rollout or attempt (google.rpc.Status)", **binary},
            413: {"description": "Body too large (google.rpc.Status)", **binary},
            415: {"description": "Wrong Content-Type or Content-Encoding (google.rpc.Status)", **binary},
        },
    )
    async def export_traces(request: Request) -> Response:
        body = await request.body()
        try:
            payload = await ingest_otlp_traces(
                store,
                body,
                content_type=request.headers.get("content-type", ""),
                content_encoding=request.headers.get("content-encoding", ""),
                max_bytes=max_decompressed_bytes,
            )
        except OTLPIngestError as exc:
            return Response(rpc_status(exc.status, str(exc)), status_code=exc.status, media_type=_PROTOBUF)
        return Response(payload, media_type=_PROTOBUF)

    def not_implemented(signal: str) -> Any:
        async def endpoint() -> Response:
            message = f"this store accepts OTLP traces only; {signal} are not stored"
            return Response(rpc_status(501, message), status_code=501, media_type=_PROTOBUF)

        return endpoint

    for signal in ("metrics", "logs"):
        app.add_api_route(f"/v1/{signal}", not_implemented(signal), methods=["POST"], include_in_schema=False)
