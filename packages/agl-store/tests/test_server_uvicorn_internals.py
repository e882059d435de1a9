"""The uvicorn and httptools internals the store server's HTTP protocol relies on, named one by one.

``agl.store.http.server._uvicorn`` subclasses uvicorn's private ``HttpToolsProtocol`` (stall deadlines,
one-write answers, the hot routes answered by the protocol). agl-store pins uvicorn and httptools to the
ranges tested; when an upgrade changes one of these names, this file fails first and says which, and
``LightningStoreServer(plain_http=True)`` (``agl store --plain-http``) serves with uvicorn's own protocol
meanwhile: the second half of this file checks that it answers as the fast one does.
"""

from __future__ import annotations

import inspect
from typing import Any

import pytest
from agl.store import InMemoryLightningStore, LightningStoreServer
from agl.testing.store.http import call, http_session, running_server

# Methods of HttpToolsProtocol the subclass overrides or calls.
PROTOCOL_METHODS = (
    "connection_made",
    "data_received",
    "connection_lost",
    "on_headers_complete",
    "on_body",
    "on_message_complete",
    "on_response_complete",
)
# Attributes of a protocol instance the subclass reads (set by uvicorn's __init__ or connection_made).
PROTOCOL_ATTRIBUTES = (
    "loop",
    "transport",
    "cycle",
    "flow",
    "url",
    "headers",
    "expect_100_continue",
    "limit_concurrency",
    "parser",
    "server_state",
    "tasks",
)
# Attributes of uvicorn's request cycle that the protocol and the stall deadlines read off a cycle (the
# hot path's HotCycle carries the same ones).
CYCLE_ATTRIBUTES = (
    "response_started",
    "response_complete",
    "more_body",
    "keep_alive",
    "disconnected",
    "message_event",
)


def _source(cls: type) -> str:
    return "".join(inspect.getsource(c) for c in cls.__mro__ if c.__module__.startswith("uvicorn"))


def test_the_httptools_protocol_has_what_the_subclass_uses() -> None:
    from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol, RequestResponseCycle

    missing = [name for name in PROTOCOL_METHODS if not callable(getattr(HttpToolsProtocol, name, None))]
    assert not missing, f"uvicorn's HttpToolsProtocol lost methods the store server overrides: {missing}"
    source = _source(HttpToolsProtocol)
    missing = [name for name in PROTOCOL_ATTRIBUTES if f"self.{name} =" not in source]
    assert not missing, f"uvicorn's HttpToolsProtocol no longer sets: {missing}"
    source = _source(RequestResponseCycle)
    missing = [name for name in CYCLE_ATTRIBUTES if f"self.{name} =" not in source]
    assert not missing, f"uvicorn's RequestResponseCycle no longer sets: {missing}"


def test_the_h11_protocol_has_what_the_subclass_uses() -> None:
    from uvicorn.protocols.http.h11_impl import H11Protocol

    missing = [name for name in PROTOCOL_METHODS[:3] if not callable(getattr(H11Protocol, name, None))]
    assert not missing, f"uvicorn's H11Protocol lost: {missing}"
    source = _source(H11Protocol)
    missing = [name for name in ("loop", "transport", "cycle", "flow") if f"self.{name} =" not in source]
    assert not missing, f"uvicorn's H11Protocol no longer sets: {missing}"


def test_server_state_flow_control_and_httptools_parser() -> None:
    import httptools
    from uvicorn.protocols.http.flow_control import FlowControl
    from uvicorn.server import ServerState

    assert "self.default_headers" in inspect.getsource(ServerState)
    assert "self.connections" in inspect.getsource(ServerState)  # (the connection cap counts them)
    assert "self.read_paused =" in inspect.getsource(FlowControl)
    assert callable(httptools.parse_url)
    parser = httptools.HttpRequestParser(object())
    for name in ("should_upgrade", "get_method", "get_http_version", "should_keep_alive"):
        assert callable(getattr(parser, name, None)), f"httptools' parser lost {name}()"


# -- plain uvicorn answers as the fast protocol does ---------------------------------------------------

ENQUEUE = "/v1/agl/queues/rollouts/enqueue"
SCRIPT: list[tuple[str, str, Any, str | None]] = [
    ("GET", "/v1/agl/health", None, None),
    ("POST", ENQUEUE, {"rollouts": [{"input": 1}]}, None),  # 401
    ("POST", ENQUEUE, {"rollouts": [{"input": 1}]}, "wrong"),  # 401
    ("POST", ENQUEUE, {"rollouts": "x"}, "tok"),  # 422
    ("POST", ENQUEUE, {"rollouts": [{"input": "x" * 3_000}]}, "tok"),  # 413
    ("POST", ENQUEUE, {"rollouts": [{"input": 1}, {"input": 2}]}, "tok"),
    ("POST", "/v1/agl/queues/rollouts/dequeue", {"limit": 1}, "tok"),
    ("GET", "/v1/agl/rollouts/no-such-rollout", None, "tok"),
    ("POST", "/v1/agl/rollouts/no-such/attempts/no-such", {"status": "running"}, "tok"),  # 404
    ("GET", "/v1/agl/rollouts", None, "tok"),
    ("POST", "/v1/agl/workers/w-1", {}, "tok"),
    ("GET", "/v1/agl/workers/w-1", None, "tok"),
]


async def _play(server: LightningStoreServer) -> list[tuple[int, Any]]:
    seen: list[tuple[int, Any]] = []
    async with http_session() as session:
        for verb, path, body, token in SCRIPT:
            status, answer, _ = await call(session, server, verb, path, json_body=body, token=token)
            shape = sorted(answer) if isinstance(answer, dict) else type(answer).__name__
            error = answer.get("error_type") if isinstance(answer, dict) else None
            seen.append((status, (shape, error)))
        key = {"Idempotency-Key": "k-1"}
        for _ in range(2):
            status, _, headers = await call(
                session, server, "POST", ENQUEUE, json_body={"rollouts": []}, headers=key, token="tok"
            )
            seen.append((status, headers.get("agl-replayed")))
    return seen


@pytest.mark.parametrize("plain", [False, True], ids=["agl-protocol", "plain-uvicorn"])
async def test_plain_uvicorn_answers_as_the_fast_protocol(plain: bool) -> None:
    with running_server(InMemoryLightningStore(), token="tok", max_body_bytes=2_000) as fast:
        expected = await _play(fast)
    with running_server(
        InMemoryLightningStore(), token="tok", max_body_bytes=2_000, plain_http=plain
    ) as server:
        protocol = server._uvicorn.config.http if server._uvicorn is not None else None
        assert isinstance(protocol, str) == plain  # uvicorn's own protocol, named, or the subclass
        assert await _play(server) == expected
    assert [status for status, _ in expected] == [
        *(200, 401, 401, 422, 413, 201, 200, 200, 404, 200, 200, 200),
        *(201, 201),
    ]
    assert expected[-1][1] == "true" and expected[-2][1] is None
