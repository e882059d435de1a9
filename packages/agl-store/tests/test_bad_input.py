"""Hand-written bad input for what schemathesis cannot reach: raw JSON text (escapes, nesting, huge numbers)
on the hot and the FastAPI routes, and the OTLP/HTTP protobuf route. Every answer is a 4xx naming the
problem, never a 5xx, and a refused write leaves nothing behind. Runs on memory, SQLite and PostgreSQL."""

from __future__ import annotations

import gzip
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from agl.store import InMemoryLightningStore, LightningStoreServer, SqlLightningStore
from agl.store.http.server._ops import error_reply
from agl.testing.store.http import call, http_session, running_server
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from sqlalchemy import exc as sa_exc

P = "/v1/agl"
_JSON = {"Content-Type": "application/json"}
_PROTOBUF = {"Content-Type": "application/x-protobuf"}


@pytest.fixture(params=["memory", "sqlite", "postgres"])
async def server(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[LightningStoreServer]:
    if request.param == "memory":
        store: Any = InMemoryLightningStore()
    elif request.param == "sqlite":
        store = SqlLightningStore(f"sqlite:///{tmp_path / 'store.sqlite'}")
    else:
        from agl.testing.postgres import fresh_postgres_store, require_postgres

        store = await fresh_postgres_store(require_postgres(), __import__("time").time)
    try:
        with running_server(store, max_body_bytes=4_000_000) as srv:
            yield srv
    finally:
        await store.close()


async def _raw(server: LightningStoreServer, verb: str, path: str, body: bytes, headers: Any = None) -> Any:
    async with http_session() as session:
        return await call(session, server, verb, path, data=body, headers=headers or _JSON)


async def _nothing_stored(server: LightningStoreServer) -> None:
    async with http_session() as session:
        status, body, _ = await call(session, server, "GET", P + "/rollouts")
        assert status == 200, body
        assert body["total"] == 0, body
        status, body, _ = await call(session, server, "POST", P + "/queues/rollouts/dequeue", json_body={})
        assert (status, body) == (200, []), body


_UNSTORABLE_INPUTS = {
    "lone surrogate": b'"\\ud800"',
    "300 nested lists": b"[" * 300 + b"]" * 300,
    "huge number": b"1e400",
    "negative huge number": b'{"x": -1e999}',
    "NaN constant": b"NaN",
    "Infinity constant": b"[Infinity]",
}


@pytest.mark.parametrize("value", list(_UNSTORABLE_INPUTS.values()), ids=list(_UNSTORABLE_INPUTS))
async def test_an_unstorable_input_is_refused_and_leaves_nothing(
    server: LightningStoreServer, value: bytes
) -> None:
    for path, body in [
        (P + "/queues/rollouts/enqueue", b'{"rollouts": [{"input": ' + value + b"}]}"),
        (P + "/rollouts", b'{"input": ' + value + b"}"),
        (P + "/queues/rollouts/enqueue", b'{"rollouts": [{"input": 1, "metadata": {"m": ' + value + b"}}]}"),
    ]:
        status, answer, _ = await _raw(server, "POST", path, body)
        assert 400 <= status < 500, (path, status, answer)
        assert answer["detail"], answer
    await _nothing_stored(server)


_HOT_AND_FASTAPI_ROUTES = [
    ("POST", P + "/queues/rollouts/enqueue"),
    ("POST", P + "/queues/rollouts/dequeue"),
    ("POST", P + "/rollouts"),
    ("POST", P + "/spans"),
    ("POST", P + "/spans/batch"),
    ("POST", P + "/spans/in-order"),
    ("POST", P + "/spans/next"),
    ("POST", P + "/spans/next/batch"),
    ("POST", P + "/rollouts/ro-x/attempts/at-x"),
    ("POST", P + "/rollouts/search"),
    ("POST", P + "/rollouts/ro-x"),
    ("POST", P + "/waits/rollouts"),
    ("POST", P + "/resources"),
    ("POST", P + "/workers/w"),
]


@pytest.mark.parametrize("depth", [1_000, 100_000])
async def test_json_nested_deep_is_a_4xx_on_every_route(server: LightningStoreServer, depth: int) -> None:
    bodies = [b"[" * depth + b"]" * depth, b'{"rollouts": [{"input": ' + b"[" * depth + b"]" * depth + b"}]}"]
    for verb, path in _HOT_AND_FASTAPI_ROUTES:
        for body in bodies:
            status, answer, _ = await _raw(server, verb, path, body)
            assert 400 <= status < 500, (path, status, answer)
    await _nothing_stored(server)


async def _claimed(server: LightningStoreServer) -> tuple[str, str]:
    async with http_session() as session:
        status, body, _ = await call(session, server, "POST", P + "/rollouts", json_body={"input": "x"})
        assert status == 201, body
        return body["rollout_id"], body["attempt"]["attempt_id"]


def _span(rollout_id: str, attempt_id: str, **fields: Any) -> dict[str, Any]:
    span = {
        "rollout_id": rollout_id,
        "attempt_id": attempt_id,
        "sequence_id": 1,
        "trace_id": "t" * 32,
        "span_id": "s" * 16,
        "name": "n",
    }
    return {**span, **fields}


async def test_bad_spans_are_4xx_and_not_stored(server: LightningStoreServer) -> None:
    import json

    rollout_id, attempt_id = await _claimed(server)
    bad = [
        _span(rollout_id, attempt_id, sequence_id=2**63),
        _span(rollout_id, attempt_id, sequence_id=2**64 + 1),
        _span(rollout_id, attempt_id, sequence_id=-1),
        _span(rollout_id, attempt_id, span_id="s\x00"),
        _span(rollout_id, attempt_id, name="\ud800"),
        _span(rollout_id + "\x00", attempt_id),
        _span(rollout_id, attempt_id, attributes={"x": "\ud800"}),
        _span(
            rollout_id,
            attempt_id,
            attributes={"x": [[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]} | {},
        ),
    ]
    deep: Any = []
    for _ in range(150):
        deep = [deep]
    bad.append(_span(rollout_id, attempt_id, attributes={"x": deep}))
    texts = [json.dumps(s).encode() for s in bad]
    texts.append(
        json.dumps(_span(rollout_id, attempt_id))
        .encode()
        .replace(b'"name": "n"', b'"name": "n", "attributes": {"x": 1e400}')
    )
    texts.append(
        json.dumps(_span(rollout_id, attempt_id))
        .encode()
        .replace(b'"name": "n"', b'"name": "n", "attributes": {"x": NaN}')
    )
    for text in texts[:7] + texts[8:]:
        for path, body in [
            (P + "/spans", text),
            (P + "/spans/batch", b'{"spans": [' + text + b"]}"),
            (P + "/spans/in-order", b'{"spans": [' + text + b"]}"),
        ]:
            status, answer, _ = await _raw(server, "POST", path, body)
            assert 400 <= status < 500, (path, text[:120], status, answer)
    async with http_session() as session:
        status, body, _ = await call(session, server, "GET", P + f"/spans?rollout_id={rollout_id}")
        assert status == 200 and body["total"] == 0, body


async def test_nul_and_lone_surrogates_in_ids_are_4xx(server: LightningStoreServer) -> None:
    rollout_id, attempt_id = await _claimed(server)
    requests = [
        ("POST", P + "/queues/rollouts/dequeue", b'{"worker_id": "w\\u0000"}'),
        ("POST", P + "/queues/rollouts/dequeue", b'{"worker_id": "\\udc00"}'),
        ("POST", P + "/rollouts", b'{"input": 1, "worker_id": "w\\u0000"}'),
        ("POST", P + "/rollouts", b'{"input": 1, "resources_id": "\\ud800"}'),
        ("POST", P + f"/rollouts/{rollout_id}/attempts/{attempt_id}", b'{"worker_id": "w\\u0000"}'),
        ("POST", P + f"/rollouts/{rollout_id}/attempts/{attempt_id}", b'{"metadata": {"a": "\\ud800"}}'),
        ("POST", P + "/spans/next", b'{"rollout_id": "r\\u0000", "attempt_id": "a"}'),
        ("POST", P + "/waits/rollouts", b'{"rollout_ids": ["r\\u0000"], "timeout": 0}'),
        ("POST", P + "/rollouts/search", b'{"rollout_id_in": ["r\\u0000"]}'),
        ("POST", P + "/rollouts/search", b'{"rollout_id_contains": "\\ud800"}'),
        ("POST", P + "/workers/search", b'{"worker_id_contains": "\\u0000"}'),
        ("GET", P + "/rollouts/a%00b", b""),
        ("GET", P + "/rollouts/a%ED%A0%80b", b""),
        ("GET", P + "/rollouts/a%00b/attempts", b""),
        ("GET", P + "/workers/w%00", b""),
        ("POST", P + "/workers/w%00", b"{}"),
        ("POST", P + "/resources/r%00", b'{"resources": {}}'),
        ("GET", P + "/spans?rollout_id=a%00b", b""),
        ("GET", P + "/rollouts?status_in=bogus", b""),
    ]
    for verb, path, body in requests:
        status, answer, _ = await _raw(server, verb, path, body)
        assert status < 500, (verb, path, body, status, answer)
    for verb, path, body in requests[:7]:  # the writes are refused outright
        status, answer, _ = await _raw(server, verb, path, body)
        assert 400 <= status < 500, (verb, path, body, status, answer)


# -- OTLP/HTTP ---------------------------------------------------------------------------------------


def _otlp(attributes: dict[str, Any], **span_fields: Any) -> bytes:
    request = ExportTraceServiceRequest()
    span = request.resource_spans.add().scope_spans.add().spans.add()
    span.trace_id = b"\x01" * 16
    span.span_id = span_fields.pop("span_id", b"\x02" * 8)
    span.name = "s"
    raw_tail = b""
    for key, value in attributes.items():
        if isinstance(value, _RawAnyValue):  # appended as encoded bytes: Span.attributes is field 9
            pair = b"\x0a" + _varint(len(key)) + key.encode() + b"\x12" + _varint(len(value.raw)) + value.raw
            raw_tail += b"\x4a" + _varint(len(pair)) + pair
        else:
            span.attributes.append(KeyValue(key=key, value=value))
    if not raw_tail:
        return request.SerializeToString()
    # re-wrap: Span in ScopeSpans (field 2) in ResourceSpans (field 2) in the request (field 1)
    span_bytes = span.SerializeToString() + raw_tail
    scope = b"\x12" + _varint(len(span_bytes)) + span_bytes
    resource = b"\x12" + _varint(len(scope)) + scope
    return b"\x0a" + _varint(len(resource)) + resource


def _ids(rollout_id: str, attempt_id: str) -> dict[str, AnyValue]:
    return {
        "agentlightning.rollout_id": AnyValue(string_value=rollout_id),
        "agentlightning.attempt_id": AnyValue(string_value=attempt_id),
    }


def _nested_value(depth: int) -> Any:
    """An AnyValue of arrays nested ``depth`` deep, parsed lazily from hand-encoded bytes (the protobuf
    runtime cannot build one deeper than its recursion limit)."""
    raw = AnyValue(string_value="leaf").SerializeToString()
    for _ in range(depth):
        array = b"\x0a" + _varint(len(raw)) + raw  # ArrayValue.values (field 1)
        raw = b"\x2a" + _varint(len(array)) + array  # AnyValue.array_value (field 5)
    return _RawAnyValue(raw)


class _RawAnyValue:
    """An attribute value given as its encoded bytes."""

    def __init__(self, raw: bytes) -> None:
        self.raw = raw


def _varint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        out.append(byte | (0x80 if value else 0))
        if not value:
            return bytes(out)


async def test_bad_otlp_requests_are_4xx(server: LightningStoreServer) -> None:
    rollout_id, attempt_id = await _claimed(server)
    ids = _ids(rollout_id, attempt_id)
    good = _otlp(ids)
    bodies: list[tuple[str, bytes, dict[str, str]]] = [
        ("garbage", b"\xff\xfe\x00garbage" * 50, _PROTOBUF),
        ("truncated", good[: len(good) // 2], _PROTOBUF),
        ("json", b'{"resourceSpans": []}', _JSON),
        ("no content type", good, {}),
        ("wrong content type", good, {"Content-Type": "text/plain"}),
        ("bad gzip", b"not gzip", {**_PROTOBUF, "Content-Encoding": "gzip"}),
        ("gzip garbage", gzip.compress(b"\xff" * 1000), {**_PROTOBUF, "Content-Encoding": "gzip"}),
        ("unknown encoding", good, {**_PROTOBUF, "Content-Encoding": "br"}),
        ("nested 90 deep", _otlp({**ids, "x": _nested_value(90)}), _PROTOBUF),
        ("nested 5000 deep", _otlp({**ids, "x": _nested_value(5000)}), _PROTOBUF),
        ("NaN attribute", _otlp({**ids, "x": AnyValue(double_value=float("nan"))}), _PROTOBUF),
        ("infinite attribute", _otlp({**ids, "x": AnyValue(double_value=float("inf"))}), _PROTOBUF),
        (
            "huge sequence id",
            _otlp({**ids, "agentlightning.sequence_id": AnyValue(int_value=2**62)}),
            _PROTOBUF,
        ),
        ("NUL rollout id", _otlp(_ids(rollout_id + "\x00", attempt_id)), _PROTOBUF),
        ("unknown rollout", _otlp(_ids("ro-unknown", attempt_id)), _PROTOBUF),
        ("bad utf-8", good.replace(b"s", b"\xff", 1), _PROTOBUF),
    ]
    for name, body, headers in bodies:
        status, answer, _ = await _raw(server, "POST", "/v1/traces", body, headers)
        assert 400 <= status < 500 or status == 200, (name, status, answer)
        assert status != 200 or name in ("nested 90 deep", "huge sequence id", "bad utf-8"), (name, answer)
    status, answer, _ = await _raw(server, "POST", "/v1/traces", good, _PROTOBUF)
    assert status == 200, answer


# -- database errors ----------------------------------------------------------------------------------


def test_database_errors_are_mapped_to_a_4xx_or_503() -> None:
    orig = Exception("boom")
    cases = [
        (sa_exc.DataError("INSERT", {}, orig), 400),
        (sa_exc.IntegrityError("INSERT", {}, orig), 409),
        (sa_exc.OperationalError("SELECT", {}, orig), 503),
        (sa_exc.InterfaceError("SELECT", {}, orig), 503),
        (sa_exc.DBAPIError("SELECT", {}, orig), 503),
        (sa_exc.TimeoutError("pool exhausted"), 503),
        (RecursionError("maximum recursion depth exceeded"), 400),
        (OverflowError("Python int too large to convert to SQLite INTEGER"), 400),
    ]
    for exc, expected in cases:
        reply = error_reply(exc)
        assert reply is not None and reply[0] == expected, (exc, reply)
        assert b"boom" not in reply[1]  # the database's message (it may quote data) stays in the log
        if expected == 503:
            assert reply[2] == {"Retry-After": "1"}
