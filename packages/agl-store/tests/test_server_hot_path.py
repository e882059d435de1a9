"""The hot routes' single layer answers exactly as the general stack does (token, size cap, replay, faults)."""

from __future__ import annotations

import json
from typing import Any, cast

import pytest
from agl.store import InMemoryLightningStore, LightningStoreServer
from agl.testing.store.http import call, http_session, running_server
from agl.types import EnqueueRolloutRequest

HOT = "/v1/agl/queues/rollouts/enqueue"  # served by the single layer
GENERAL = "/v1/agl/resources"  # served by the general stack


@pytest.fixture
def server() -> Any:
    with running_server(InMemoryLightningStore(), token="tok", max_body_bytes=2_000) as server:
        yield server


def _same_error(a: tuple[int, Any, dict[str, str]], b: tuple[int, Any, dict[str, str]]) -> None:
    assert a[0] == b[0]
    assert a[1] == b[1]
    assert a[2].get("www-authenticate") == b[2].get("www-authenticate")


async def test_token_and_size_errors_match_the_general_stack(server: LightningStoreServer) -> None:
    async with http_session() as session:
        for token in (None, "wrong"):
            hot = await call(session, server, "POST", HOT, json_body={"rollouts": []}, token=token)
            general = await call(session, server, "POST", GENERAL, json_body={}, token=token)
            assert hot[0] == 401
            _same_error(hot, general)
        big = {"rollouts": [{"input": "x" * 3_000}]}
        hot = await call(session, server, "POST", HOT, json_body=big, token="tok")
        general = await call(session, server, "POST", GENERAL, json_body={"x": "x" * 3_000}, token="tok")
        assert hot[0] == 413
        _same_error(hot, general)

        # A streamed (chunked) body past the cap is cut off the same way.
        async def chunks() -> Any:
            for _ in range(3):
                yield b" " * 1_000

        for path in (HOT, GENERAL):
            headers = {"Authorization": "Bearer tok", "Content-Type": "application/json"}
            async with session.post(server.endpoint + path, data=chunks(), headers=headers) as response:
                assert response.status == 413
                assert json.loads(await response.read())["error_type"] == "PayloadTooLarge"
        assert (await call(session, server, "GET", "/v1/agl/health"))[0] == 200  # no token needed
        # An id that merely looks like 'health' still needs the token.
        assert (await call(session, server, "GET", "/v1/agl/rollouts/health"))[0] == 401


async def test_replays_are_shared_and_marked(server: LightningStoreServer) -> None:
    headers = {"Idempotency-Key": "k-1"}
    async with http_session() as session:
        first = await call(
            session, server, "POST", HOT, json_body={"rollouts": [{"input": 1}]}, headers=headers, token="tok"
        )
        again = await call(
            session, server, "POST", HOT, json_body={"rollouts": [{"input": 1}]}, headers=headers, token="tok"
        )
        assert first[0] == again[0] == 201 and first[1] == again[1]
        assert "agl-replayed" not in first[2] and again[2]["agl-replayed"] == "true"
        status, listed, _ = await call(session, server, "GET", "/v1/agl/rollouts", token="tok")
        assert status == 200 and len(listed["items"]) == 1  # applied once
        # The general stack's replays go through the same cache.
        body = {"p": {"resource_type": "prompt_template", "template": "t", "engine": "f-string"}}
        one = await call(session, server, "POST", GENERAL, json_body=body, headers=headers, token="tok")
        two = await call(session, server, "POST", GENERAL, json_body=body, headers=headers, token="tok")
        assert one[0] == two[0] == 201 and one[1] == two[1] and two[2]["agl-replayed"] == "true"


async def test_a_store_fault_on_a_hot_route_is_a_500_and_counted() -> None:
    class Broken(InMemoryLightningStore):
        async def enqueue_many_rollouts(self, *args: Any, **kwargs: Any) -> Any:
            raise RuntimeError("disk on fire")

    with running_server(Broken()) as server:
        async with http_session() as session:
            status, body, _ = await call(session, server, "POST", HOT, json_body={"rollouts": [{"input": 1}]})
            assert status == 500 and body["error_type"] == "RuntimeError"
            status, text, _ = await call(session, server, "GET", "/metrics")
    assert status == 200
    line = next(
        ln
        for ln in text.decode().splitlines()
        if ln.startswith("agl_store_http_requests_total") and 'route="/v1/agl/queues/rollouts/enqueue"' in ln
    )
    assert 'status="500"' in line and line.endswith(" 1.0")


# -- the hot routes served straight from the HTTP protocol ----------------------------------------------


def _raw_exchange(server: LightningStoreServer, data: bytes, answers: int, part: int = 0) -> list[bytes]:
    """Send ``data`` on one connection (in writes of ``part`` bytes, if given) and read ``answers`` whole
    answers (by Content-Length)."""
    import socket
    import time

    out: list[bytes] = []
    with socket.create_connection(("127.0.0.1", server.port), timeout=10) as sock:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        step = part or len(data)
        for i in range(0, len(data), step):
            sock.sendall(data[i : i + step])
            if part:
                time.sleep(0.001)  # separate reads on the server's side
        buffer = b""
        while len(out) < answers:
            while b"\r\n\r\n" not in buffer:
                chunk = sock.recv(65536)
                assert chunk, f"connection closed after {len(out)} answers"
                buffer += chunk
            head, _, rest = buffer.partition(b"\r\n\r\n")
            length = int(
                next(ln for ln in head.split(b"\r\n") if ln.lower().startswith(b"content-length:"))[15:]
            )
            while len(rest) < length:
                chunk = sock.recv(65536)
                assert chunk
                rest += chunk
            out.append(head + b"\r\n\r\n" + rest[:length])
            buffer = rest[length:]
    return out


def _post(path: str, body: bytes, *extra: bytes) -> bytes:
    lines = [b"POST " + path.encode() + b" HTTP/1.1", b"Host: 127.0.0.1", b"Authorization: Bearer tok"]
    lines += [b"Content-Type: application/json", b"Content-Length: " + str(len(body)).encode(), *extra]
    return b"\r\n".join(lines) + b"\r\n\r\n" + body


def test_pipelined_requests_are_answered_in_order(server: LightningStoreServer) -> None:
    """Two hot requests and a general one sent at once come back in order on the same connection."""
    first = _post(HOT, b'{"rollouts": [{"input": 1}]}')
    general = b"GET /v1/agl/statistics HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer tok\r\n\r\n"
    second = _post(HOT, b'{"rollouts": [{"input": 2}, {"input": 3}]}')
    one, stats, two = _raw_exchange(server, first + general + second, 3)
    assert one.startswith(b"HTTP/1.1 201") and len(json.loads(one.split(b"\r\n\r\n", 1)[1])) == 1
    assert stats.startswith(b"HTTP/1.1 200") and b"total_rollouts" in stats
    assert two.startswith(b"HTTP/1.1 201") and len(json.loads(two.split(b"\r\n\r\n", 1)[1])) == 2


def test_an_http_1_0_request_to_a_hot_route_closes_the_connection(server: LightningStoreServer) -> None:
    request = _post(HOT, b'{"rollouts": []}').replace(b"HTTP/1.1", b"HTTP/1.0", 1)
    (answer,) = _raw_exchange(server, request, 1)
    head = answer.split(b"\r\n\r\n", 1)[0].lower()
    assert head.startswith(b"http/1.1 201") and b"connection: close" in head


def test_a_body_sent_in_parts_is_read_whole(server: LightningStoreServer) -> None:
    body = b'{"rollouts": [{"input": "' + b"y" * 500 + b'"}]}'
    (answer,) = _raw_exchange(server, _post(HOT, body), 1, part=97)
    assert answer.startswith(b"HTTP/1.1 201") and b"y" * 500 in answer


def test_a_server_answers_its_hot_routes_without_importing_fastapi() -> None:
    """FastAPI (and SQLAlchemy) are imported only when a route outside the hot path is first asked for."""
    import subprocess
    import sys

    code = """
import sys, json, urllib.request
from agl.store import InMemoryLightningStore, LightningStoreServer
server = LightningStoreServer(InMemoryLightningStore(), port=0)
server.start()
def post(path, body):
    req = urllib.request.Request(server.endpoint + path, json.dumps(body).encode(), {"Content-Type": "application/json"})
    return urllib.request.urlopen(req, timeout=10).status
post("/v1/agl/queues/rollouts/enqueue", {"rollouts": [{"input": 1}]})
post("/v1/agl/queues/rollouts/claim", {"worker_id": "w"})
post("/v1/agl/workers/w", {"heartbeat_stats": {"cpu": 1}})
before = sorted(m for m in ("fastapi", "sqlalchemy") if m in sys.modules)
urllib.request.urlopen(server.endpoint + "/v1/agl/statistics", timeout=10).read()
after = "fastapi" in sys.modules
server.stop()
print(json.dumps([before, after]))
"""
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True
    )
    assert json.loads(done.stdout.strip().splitlines()[-1]) == [[], True]


async def test_a_backend_that_needs_a_task_before_its_first_wait_is_served() -> None:
    """A store whose call enters ``asyncio.timeout`` (as database drivers do) at once gets a task to run in."""
    import asyncio

    from agl.testing.store.http import serve_over_http

    class NeedsTask(InMemoryLightningStore):
        async def enqueue_many_rollouts(self, *args: Any, **kwargs: Any) -> Any:
            if asyncio.current_task() is None:  # what asyncio.timeout() refuses
                raise RuntimeError("Timeout should be used inside a task")
            await asyncio.sleep(0)
            return await super().enqueue_many_rollouts(*args, **kwargs)

    async with serve_over_http(NeedsTask()) as client:
        assert (
            len(await client.enqueue_many_rollouts(cast("list[EnqueueRolloutRequest]", [{"input": 1}]))) == 1
        )
