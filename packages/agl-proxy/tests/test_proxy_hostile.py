"""What a hostile or careless client sends the proxy is a 4xx naming the problem, never a 5xx or a cooldown."""

from __future__ import annotations

import asyncio
import socket

import httpx
import pytest
from agl.store import ConnectionLimits, InMemoryLightningStore
from agl.testing.openai_standin import StandinServer, serve_standin
from agl.testing.proxy import llm_spans, running_proxy
from agl.testing.sockets import closed_by_server

CHAT = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}


async def test_non_utf8_headers_are_client_errors(
    store: InMemoryLightningStore, standin: StandinServer
) -> None:
    rollout = await store.start_rollout(input=None)
    async with running_proxy(store, standin, auth_token="tok") as proxy, httpx.AsyncClient() as http:
        url = f"{proxy.endpoint}/v1/chat/completions"
        r = await http.post(url, json=CHAT, headers={"Authorization": b"Bearer \xff\xfe"})  # pyright: ignore[reportArgumentType]
        assert r.status_code == 401
        r = await http.post(url, json=CHAT, headers={"Authorization": "Bearer tok-but-longer"})
        assert r.status_code == 401
        ok = {"Authorization": "Bearer tok"}
        r = await http.post(url, json=CHAT, headers={**ok, "x-rollout-id": b"\xff", "x-attempt-id": b"a"})  # pyright: ignore[reportArgumentType]
        assert r.status_code == 400 and "x-rollout-id" in r.json()["error"]["message"]
        r = await http.post(url, json=CHAT, headers={**ok, "x-rollout-id": b"r", "x-attempt-id": b"\xc3"})  # pyright: ignore[reportArgumentType]
        assert r.status_code == 400 and "x-attempt-id" in r.json()["error"]["message"]
        # An unreadable traceparent is ignored (W3C trace context), the call is served and recorded.
        attributed = {
            **ok,
            "x-rollout-id": rollout.rollout_id,
            "x-attempt-id": rollout.attempt.attempt_id,
            "traceparent": b"00-\xff\xfe-\xff-01",
        }
        r = await http.post(url, json=CHAT, headers=attributed)
        assert r.status_code == 200
        await proxy.flush()
        assert len(await llm_spans(store, rollout, 1)) == 1


async def test_deeply_nested_bodies_are_400(store: InMemoryLightningStore, standin: StandinServer) -> None:
    async with running_proxy(store, standin) as proxy, httpx.AsyncClient() as http:
        for body in (b"[" * 100_000, b'{"a":' * 100_000):
            r = await http.post(f"{proxy.endpoint}/v1/chat/completions", content=body)
            assert r.status_code == 400 and "nested" in r.json()["error"]["message"]


async def test_a_dead_backend_on_the_litellm_route_is_502(store: InMemoryLightningStore) -> None:
    with serve_standin() as server:
        pass  # the port is now closed: a dead backend
    async with running_proxy(store, server, direct_forwarding=False) as proxy, httpx.AsyncClient() as http:
        r = await http.post(f"{proxy.endpoint}/v1/chat/completions", json=CHAT, timeout=60)
    assert r.status_code == 502, r.text


async def test_a_chunked_body_over_the_cap_is_answered_413(
    store: InMemoryLightningStore, standin: StandinServer
) -> None:
    def send_chunked(port: int) -> bytes:
        with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
            sock.sendall(
                b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nTransfer-Encoding: chunked\r\n\r\n"
            )
            for _ in range(8):  # 8 MB, far past the cap, sent without reading the answer
                sock.sendall(b"%x\r\n" % 1_000_000 + b" " * 1_000_000 + b"\r\n")
            sock.sendall(b"0\r\n\r\n")
            return sock.recv(100)

    async with running_proxy(store, standin, max_request_bytes=100_000) as proxy:
        answer = await asyncio.to_thread(send_chunked, int(proxy.endpoint.rsplit(":", 1)[1]))
    assert answer.startswith(b"HTTP/1.1 413")


@pytest.mark.parametrize(
    "bad",
    [
        {"stream": "yes"},
        {"messages": [1]},
        {"messages": [{"role": 5, "content": "x"}]},
        {"messages": [{"role": "user", "content": {"a": 1}}]},
        {"tools": 5},
        {"n": "two"},
        {"temperature": "hot"},
        {"api_base": "http://127.0.0.1:9/v1"},
        {"mock_response": "fake"},
    ],
    ids=lambda bad: "-".join(f"{k}={v}" for k, v in bad.items())[:40],
)
async def test_a_malformed_request_is_400_and_does_not_cool_the_backend_down(
    store: InMemoryLightningStore, standin: StandinServer, bad: dict[str, object]
) -> None:
    async with running_proxy(store, standin, direct_forwarding=False) as proxy, httpx.AsyncClient() as http:
        url = f"{proxy.endpoint}/v1/chat/completions"
        r = await http.post(url, json={**CHAT, **bad}, timeout=60)
        assert r.status_code == 400, r.text
        assert next(iter(bad)) in r.json()["error"]["message"]
        for _ in range(3):  # the other agents are still served
            r = await http.post(url, json=CHAT, timeout=60)
            assert r.status_code == 200, r.text


async def test_completions_fields_are_checked(store: InMemoryLightningStore, standin: StandinServer) -> None:
    async with running_proxy(store, standin) as proxy, httpx.AsyncClient() as http:
        url = f"{proxy.endpoint}/v1/completions"
        r = await http.post(url, json={"model": "m", "prompt": {"x": 1}})
        assert r.status_code == 400 and "prompt" in r.json()["error"]["message"]
        r = await http.post(url, json={"model": "m", "prompt": "hi", "logprobs": True})
        assert r.status_code == 400 and "logprobs" in r.json()["error"]["message"]
        r = await http.post(url, json={"model": "m", "prompt": "hi", "logprobs": 1})
        assert r.status_code == 200, r.text


async def test_stalled_connections_are_closed(store: InMemoryLightningStore, standin: StandinServer) -> None:
    limits = ConnectionLimits(idle_seconds=0.5, header_seconds=0.5, body_seconds=0.5)
    async with running_proxy(store, standin, connection_limits=limits) as proxy:
        port = int(proxy.endpoint.rsplit(":", 1)[1])

        def probe(data: bytes) -> tuple[bool, bytes]:
            with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
                sock.sendall(data)
                return closed_by_server(sock, within=5)

        idle = await asyncio.to_thread(probe, b"")
        head = await asyncio.to_thread(
            probe, b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nX-A: "
        )
        body = await asyncio.to_thread(
            probe, b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 50\r\n\r\n{"
        )
    assert idle == (True, b"")
    assert head[0] and head[1].startswith(b"HTTP/1.1 408")
    assert body[0] and body[1].startswith(b"HTTP/1.1 408")


async def test_a_rebound_name_is_refused_without_a_token(
    store: InMemoryLightningStore, standin: StandinServer
) -> None:
    """DNS rebinding: a web page must not reach a token-less proxy on loopback through its own name."""
    async with running_proxy(store, standin) as proxy, httpx.AsyncClient() as http:
        url = f"{proxy.endpoint}/v1/chat/completions"
        r = await http.post(url, json=CHAT, headers={"Host": "attacker.example"})
        assert r.status_code == 421 and "DNS rebinding" in r.json()["error"]["message"]
        assert (
            await http.get(f"{proxy.endpoint}/v1/models", headers={"Host": "attacker.example"})
        ).status_code == 421
        assert (await http.post(url, json=CHAT)).status_code == 200  # 127.0.0.1:port
        r = await http.post(url, json=CHAT, headers={"Host": f"localhost:{proxy.endpoint.rsplit(':', 1)[1]}"})
        assert r.status_code == 200
    async with running_proxy(store, standin, auth_token="tok") as proxy, httpx.AsyncClient() as http:
        headers = {"Host": "proxy.internal", "Authorization": "Bearer tok"}
        assert (
            await http.post(f"{proxy.endpoint}/v1/chat/completions", json=CHAT, headers=headers)
        ).status_code == 200
