"""OTLP/HTTP ingestion with the real OpenTelemetry SDK and its OTLP/HTTP exporter."""

from __future__ import annotations

import asyncio
import gzip
import http.client
from typing import Any

import pytest
from agl.store import InMemoryLightningStore, LightningStoreServer
from agl.store.otlp import rpc_status
from agl.testing.store.http import running_server
from opentelemetry.exporter.otlp.proto.http import Compression
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.trace import Status, StatusCode

TOKEN = "otlp-token"


@pytest.fixture
def served() -> Any:
    store = InMemoryLightningStore()
    with running_server(store, token=TOKEN, max_body_bytes=200_000) as server:
        yield store, server


def _provider(
    server: LightningStoreServer, resource: dict[str, Any], compression: Compression
) -> TracerProvider:
    exporter = OTLPSpanExporter(
        endpoint=server.otlp_traces_endpoint(),
        headers={"Authorization": f"Bearer {TOKEN}"},
        compression=compression,
        timeout=10,
    )
    provider = TracerProvider(resource=Resource.create(resource))
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return provider


@pytest.mark.parametrize("compression", [Compression.Gzip, Compression.NoCompression])
def test_real_exporter_spans_land_in_the_store(served: Any, compression: Compression) -> None:
    store, server = served
    rollout = asyncio.run(store.start_rollout({"q": 1}))
    rid, aid = rollout.rollout_id, rollout.attempt.attempt_id
    provider = _provider(
        server,
        {"agentlightning.rollout_id": rid, "agentlightning.attempt_id": aid, "service.name": "agent"},
        compression,
    )
    tracer = provider.get_tracer("test")
    with tracer.start_as_current_span("outer", attributes={"k": "v", "n": 3, "xs": [1, 2]}) as outer:
        with tracer.start_as_current_span("inner") as inner:
            inner.add_event("thought", {"text": "hmm"})
            inner.set_status(Status(StatusCode.ERROR, "bad"))
        outer.set_attribute("done", True)
    assert provider.force_flush(10_000)
    provider.shutdown()

    spans = asyncio.run(store.query_spans(rid))
    assert [s.name for s in spans] == ["inner", "outer"]  # export order; sequence ids allocated by the store
    assert [s.sequence_id for s in spans] == [1, 2]
    inner_span, outer_span = spans.items
    assert inner_span.parent_id == outer_span.span_id and outer_span.parent_id is None
    assert inner_span.trace_id == outer_span.trace_id and len(inner_span.trace_id) == 32
    assert (
        outer_span.attributes["k"] == "v"
        and outer_span.attributes["xs"] == [1, 2]
        and outer_span.attributes["done"] is True
    )
    assert inner_span.status.status_code == "ERROR" and inner_span.status.description == "bad"
    assert inner_span.events[0].name == "thought" and inner_span.events[0].attributes == {"text": "hmm"}
    assert outer_span.resource.attributes["service.name"] == "agent"
    assert outer_span.start_time is not None and outer_span.end_time is not None
    assert outer_span.start_time < 1e11  # seconds, not nanoseconds
    # The spans were a heartbeat of the attempt.
    attempt = asyncio.run(store.get_latest_attempt(rid))
    assert attempt is not None and attempt.status == "running"


def test_span_attributes_override_the_resource_and_set_sequence_ids(served: Any) -> None:
    store, server = served
    first = asyncio.run(store.start_rollout({"q": 1}))
    second = asyncio.run(store.start_rollout({"q": 2}))
    provider = _provider(
        server,
        {
            "agentlightning.rollout_id": first.rollout_id,
            "agentlightning.attempt_id": first.attempt.attempt_id,
        },
        Compression.Gzip,
    )
    tracer = provider.get_tracer("test")
    with tracer.start_as_current_span(
        "elsewhere",
        attributes={
            "agentlightning.rollout_id": second.rollout_id,
            "agentlightning.attempt_id": second.attempt.attempt_id,
            "agentlightning.span_sequence_id": 42,
        },
    ):
        pass
    with tracer.start_as_current_span("here"):
        pass
    provider.force_flush(10_000)
    provider.shutdown()
    moved = asyncio.run(store.query_spans(second.rollout_id))
    assert [(s.name, s.sequence_id) for s in moved] == [("elsewhere", 42)]
    assert [s.name for s in asyncio.run(store.query_spans(first.rollout_id))] == ["here"]


def _post(server: LightningStoreServer, body: bytes, headers: dict[str, str]) -> tuple[int, bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=10)
    try:
        conn.request("POST", "/v1/traces", body=body, headers={"Authorization": f"Bearer {TOKEN}", **headers})
        response = conn.getresponse()
        return response.status, response.read()
    finally:
        conn.close()


def _request_without_ids() -> bytes:
    request = ExportTraceServiceRequest()
    span = request.resource_spans.add().scope_spans.add().spans.add()
    span.name = "orphan"
    span.trace_id = b"\x01" * 16
    span.span_id = b"\x02" * 8
    return request.SerializeToString()


def test_spans_without_ids_are_reported_as_rejected(served: Any) -> None:
    _, server = served
    status, body = _post(server, _request_without_ids(), {"Content-Type": "application/x-protobuf"})
    assert status == 200
    answer = ExportTraceServiceResponse.FromString(body)
    assert answer.partial_success.rejected_spans == 1
    assert "agentlightning.rollout_id" in answer.partial_success.error_message


def test_empty_body_is_an_empty_request(served: Any) -> None:
    _, server = served
    status, body = _post(server, b"", {"Content-Type": "application/x-protobuf"})
    assert status == 200 and ExportTraceServiceResponse.FromString(body).partial_success.rejected_spans == 0


@pytest.mark.parametrize(
    ("body", "headers", "expected"),
    [
        (b"{}", {"Content-Type": "application/json"}, 415),
        (b"\xff\xff\xff\xff", {"Content-Type": "application/x-protobuf"}, 400),
        (b"not gzip", {"Content-Type": "application/x-protobuf", "Content-Encoding": "gzip"}, 400),
        (b"x", {"Content-Type": "application/x-protobuf", "Content-Encoding": "br"}, 415),
        # 10 MB of zeros compress to ~10 KB: refused once inflated past the cap, never fully inflated.
        (
            gzip.compress(b"\0" * 10_000_000),
            {"Content-Type": "application/x-protobuf", "Content-Encoding": "gzip"},
            413,
        ),
    ],
)
def test_bad_otlp_requests_get_a_4xx_status_message(
    served: Any, body: bytes, headers: dict[str, str], expected: int
) -> None:
    _, server = served
    status, answer = _post(server, body, headers)
    assert status == expected
    assert answer.startswith(b"\x08")  # a google.rpc.Status protobuf, as OTLP/HTTP prescribes
    status, _ = _post(server, b"", {"Content-Type": "application/x-protobuf"})
    assert status == 200


def test_unknown_rollout_is_404(served: Any) -> None:
    _, server = served
    request = ExportTraceServiceRequest()
    resource_spans = request.resource_spans.add()
    for key, value in (("agentlightning.rollout_id", "ro-nope"), ("agentlightning.attempt_id", "at-nope")):
        attribute = resource_spans.resource.attributes.add()
        attribute.key = key
        attribute.value.string_value = value
    span = resource_spans.scope_spans.add().spans.add()
    span.name = "lost"
    status, answer = _post(server, request.SerializeToString(), {"Content-Type": "application/x-protobuf"})
    assert status == 404 and b"ro-nope" in answer


def test_rpc_status_encoding() -> None:
    assert rpc_status(400, "hi") == b"\x08\x03\x12\x02hi"
    long = rpc_status(500, "x" * 200)
    assert long[:2] == b"\x08\x0d" and long[2:5] == b"\x12\xc8\x01"
