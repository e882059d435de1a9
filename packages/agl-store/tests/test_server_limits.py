"""One client cannot exhaust the store server: a bounded replay cache and deadlines for stalled connections."""

from __future__ import annotations

import asyncio
import socket
import time
from typing import Any

import pytest
from agl.store import ConnectionLimits, InMemoryLightningStore, LightningStoreServer
from agl.store.http.server._hot import HotPath, HotPathMiddleware
from agl.store.http.server._ops import HotOps
from agl.store.http.server._options import AppOptions
from agl.store.http.server._replay import MemoryReplayCache, RecordedAnswer
from agl.store.http.server._routes import RouteTable
from agl.store.http.server.metrics import http_metrics
from agl.testing.sockets import closed_by_server
from agl.testing.store.http import running_server

# -- the idempotency replay cache ------------------------------------------------------------------


class _App:
    """A small ASGI app: ``/stuck`` answers only when released; every other path answers 1,000 bytes."""

    def __init__(self) -> None:
        self.release = asyncio.Event()
        self.calls: dict[str, int] = {}

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        key = dict(scope["headers"])[b"idempotency-key"].decode()
        self.calls[key] = self.calls.get(key, 0) + 1
        if scope["path"] == "/stuck":
            await self.release.wait()
        body = b"x" * 1000
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-length", b"1000")]})
        await send({"type": "http.response.body", "body": body})


def guarded(app: Any, cache: MemoryReplayCache) -> HotPathMiddleware:
    """``app`` behind the server's checks (no token, no hot routes), its answers replayed from ``cache``."""
    table = RouteTable(HotOps(InMemoryLightningStore(), AppOptions()), routes=())
    hot = HotPath(
        table, token=None, max_body_bytes=1 << 20, cache=cache, eager=False, metrics=http_metrics("t")
    )
    return HotPathMiddleware(app, hot)


async def _post(app: Any, path: str, key: str) -> list[dict[str, Any]]:
    sent: list[dict[str, Any]] = []
    scope = {"type": "http", "method": "POST", "path": path, "headers": [(b"idempotency-key", key.encode())]}

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b"{}", "more_body": False}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    await app(scope, receive, send)
    return sent


def _replayed(messages: list[dict[str, Any]]) -> bool:
    return (b"agl-replayed", b"true") in messages[0]["headers"]


async def test_an_unfinished_request_does_not_stop_eviction() -> None:
    app = _App()
    middleware = guarded(app, MemoryReplayCache(max_bytes=10_000))
    stuck = asyncio.ensure_future(_post(middleware, "/stuck", "stuck"))
    await asyncio.sleep(0)  # the stuck request now holds its key (oldest in the cache)
    for i in range(100):  # 100 answers of 1,000 bytes: ten times the bound
        assert not _replayed(await _post(middleware, "/write", f"k{i}"))
    # The oldest finished answers were evicted: a late retry of the first write runs for real.
    assert not _replayed(await _post(middleware, "/write", "k0"))
    assert app.calls["k0"] == 2
    # The newest are still replayed.
    assert _replayed(await _post(middleware, "/write", "k99"))
    assert app.calls["k99"] == 1
    app.release.set()
    assert not _replayed(await stuck)
    assert _replayed(await _post(middleware, "/stuck", "stuck"))


async def test_idempotency_cache_is_bounded_in_bytes() -> None:

    calls = 0

    async def app(scope: Any, receive: Any, send: Any) -> None:
        nonlocal calls
        calls += 1
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"x" * 100})

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b""}

    async def send(message: Any) -> None:
        pass

    def scope(key: bytes) -> dict[str, Any]:
        return {"type": "http", "method": "POST", "path": "/p", "headers": [(b"idempotency-key", key)]}

    cache = guarded(app, MemoryReplayCache(max_bytes=250))
    for key in (b"a", b"b", b"c"):
        await cache(scope(key), receive, send)
    assert calls == 3
    await cache(scope(b"c"), receive, send)  # recent: replayed
    assert calls == 3
    await cache(scope(b"a"), receive, send)  # evicted to stay under 250 bytes: runs again
    assert calls == 4


async def test_the_cache_stays_within_its_byte_bound_while_requests_run() -> None:
    cache = MemoryReplayCache(max_bytes=50_000)
    held = [f"running-{i}".encode() for i in range(50)]
    for key in held:
        assert await cache.claim(key) is None
    for i in range(1_000):
        key = f"done-{i}".encode()
        assert await cache.claim(key) is None
        await cache.release(key, RecordedAnswer(200, [(b"content-type", b"application/json")], b"y" * 500))
        assert cache.bytes <= 50_000
    assert cache.running == 50
    assert 0 < len(cache) < 100
    for key in held:
        await cache.release(key, None)
    assert cache.running == 0


async def test_a_retry_waits_for_the_first_try_and_a_fault_is_forgotten() -> None:
    cache = MemoryReplayCache()
    assert await cache.claim(b"k") is None
    waiter = asyncio.ensure_future(cache.claim(b"k"))
    await asyncio.sleep(0)
    assert not waiter.done()
    await cache.release(b"k", None)  # the first try ended in a server fault
    assert await waiter is None  # the retry now holds the key and runs for real
    answer = RecordedAnswer(201, [], b"{}")
    await cache.release(b"k", answer)
    assert await cache.claim(b"k") == answer


async def test_answers_expire_and_oversized_answers_are_not_kept() -> None:
    cache = MemoryReplayCache(max_bytes=2_000, ttl_seconds=0.0)
    assert await cache.claim(b"old") is None
    await cache.release(b"old", RecordedAnswer(200, [], b"{}"))
    assert await cache.claim(b"old") is None  # expired: runs again
    await cache.release(b"old", RecordedAnswer(200, [], b"z" * 5_000))
    assert len(cache) == 0 and cache.bytes == 0
    with pytest.raises(ValueError):
        MemoryReplayCache(max_bytes=-1)


# -- stalled connections ---------------------------------------------------------------------------

_LIMITS = ConnectionLimits(
    idle_seconds=0.5, header_seconds=0.5, body_seconds=0.5, body_min_rate=20, max_header_bytes=8192
)


def _connect(server: LightningStoreServer) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", server.port), timeout=5)
    sock.settimeout(0.05)
    return sock


def _head(verb: str, path: str, content_length: int | None = None) -> bytes:
    """A whole request head; with ``content_length``, the headers of a JSON body of that many bytes."""
    head = f"{verb} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n"
    if content_length is not None:
        head += f"Content-Type: application/json\r\nContent-Length: {content_length}\r\n"
    return (head + "\r\n").encode()


@pytest.fixture
def guarded_server() -> Any:
    with running_server(InMemoryLightningStore(), connection_limits=_LIMITS) as server:
        yield server


def test_a_connection_that_sends_nothing_is_closed(guarded_server: LightningStoreServer) -> None:
    with _connect(guarded_server) as sock:
        closed, data = closed_by_server(sock, within=5)
    assert closed and data == b""


def test_a_half_sent_head_is_closed_with_408(guarded_server: LightningStoreServer) -> None:
    with _connect(guarded_server) as sock:
        sock.sendall(b"GET /v1/agl/health HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ")
        started = time.monotonic()
        # Trickling bytes does not extend the deadline of a head.
        while time.monotonic() - started < 0.8:
            try:
                sock.sendall(b"a")
            except OSError:
                break
            time.sleep(0.05)
        closed, data = closed_by_server(sock, within=5)
    assert closed
    assert data.startswith(b"HTTP/1.1 408")


def test_a_half_sent_body_is_closed_with_408(guarded_server: LightningStoreServer) -> None:
    with _connect(guarded_server) as sock:
        sock.sendall(_head("POST", "/v1/agl/queues/rollouts/enqueue", 100) + b'{"rollouts": [')
        closed, data = closed_by_server(sock, within=5)
    assert closed
    assert data.startswith(b"HTTP/1.1 408")


def test_an_oversized_head_is_refused_with_431(guarded_server: LightningStoreServer) -> None:
    with _connect(guarded_server) as sock:
        sock.sendall(b"GET /v1/agl/health HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Big: " + b"a" * 10_000)
        closed, data = closed_by_server(sock, within=5)
    assert closed
    assert data.startswith(b"HTTP/1.1 431")


def test_an_idle_keep_alive_connection_is_closed_and_busy_ones_are_not(
    guarded_server: LightningStoreServer,
) -> None:
    with _connect(guarded_server) as sock:
        sock.sendall(_head("GET", "/v1/agl/health"))
        closed, data = closed_by_server(sock, within=5)
    assert closed and data.startswith(b"HTTP/1.1 200")
    # A long poll (the app holds the request longer than every deadline) is answered, not cut off.
    with _connect(guarded_server) as sock:
        body = b'{"limit": 1, "timeout": 1.2}'
        sock.sendall(_head("POST", "/v1/agl/queues/rollouts/dequeue", len(body)) + body)
        closed, data = closed_by_server(sock, within=5)
    assert data.startswith(b"HTTP/1.1 200") and data.endswith(b"[]")


def test_a_slow_but_moving_body_is_served(guarded_server: LightningStoreServer) -> None:
    body = b'{"rollouts": [{"input": "' + b"a" * 40 + b'"}]}'
    with _connect(guarded_server) as sock:
        sock.sendall(_head("POST", "/v1/agl/queues/rollouts/enqueue", len(body)))
        for i in range(0, len(body), 10):  # 0.8 s in all, each pause under the body deadline
            sock.sendall(body[i : i + 10])
            time.sleep(0.12)
        _, data = closed_by_server(sock, within=5)
    assert data.startswith(b"HTTP/1.1 201")


def test_a_drip_fed_body_is_closed_with_408(guarded_server: LightningStoreServer) -> None:
    """A byte now and then restarts the pause deadline; the body's average rate still has to hold."""
    with _connect(guarded_server) as sock:
        sock.sendall(_head("POST", "/v1/agl/queues/rollouts/enqueue", 100_000) + b"{")
        started = time.monotonic()
        closed, data = False, b""
        while time.monotonic() - started < 3:  # 10 bytes/s, under the 20 the limits ask for
            try:
                sock.sendall(b" ")
            except OSError:
                break
            closed, data = closed_by_server(sock, within=0.1)
            if closed:
                break
        else:
            closed, data = False, b""
    assert closed and data.startswith(b"HTTP/1.1 408")


def test_connections_past_the_cap_are_refused_with_503() -> None:
    limits = ConnectionLimits(max_connections=3)
    with running_server(InMemoryLightningStore(), connection_limits=limits) as server:
        held = [_connect(server) for _ in range(3)]
        try:
            for sock in held:  # each is served
                sock.sendall(_head("GET", "/v1/agl/health"))
                assert closed_by_server(sock, within=0.3)[1].startswith(b"HTTP/1.1 200")
            with _connect(server) as extra:
                closed, data = closed_by_server(extra, within=5)
            assert closed and data.startswith(b"HTTP/1.1 503")
        finally:
            for sock in held:
                sock.close()
        with _connect(server) as again:  # room again once they closed
            deadline = time.monotonic() + 5
            while True:
                again.sendall(_head("GET", "/v1/agl/health"))
                data = closed_by_server(again, within=0.3)[1]
                if data.startswith(b"HTTP/1.1 200") or time.monotonic() > deadline:
                    break
        assert data.startswith(b"HTTP/1.1 200")


def test_connection_limits_are_checked() -> None:
    with pytest.raises(ValueError, match="header_seconds"):
        ConnectionLimits(header_seconds=0)
    with pytest.raises(ValueError, match="body_min_rate"):
        ConnectionLimits(body_min_rate=-1)
    with pytest.raises(ValueError, match="max_connections"):
        ConnectionLimits(max_connections=0)
    with pytest.raises(TypeError):
        LightningStoreServer(InMemoryLightningStore(), connection_limits=3)  # pyright: ignore[reportArgumentType]
