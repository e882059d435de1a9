"""The store client alone against a minimal HTTP/1.1 server: how close is it to a raw keep-alive round trip?

A minimal server (a separate process: an asyncio protocol on uvloop, ``httptools`` parsing, one fixed JSON
answer, keep-alive) takes the server out of the picture. Against it, one coroutine sends ``--calls``
sequential ``POST`` requests with a small JSON body through:

- ``raw``: pre-built request bytes on an asyncio protocol, reading the known answer length: the floor;
- ``aiohttp``: a ``ClientSession`` as the store client used before;
- ``httpx``: an ``AsyncClient``;
- ``agl _http_conn``: the store client's connection pool alone;
- ``agl client``: ``LightningStoreClient.get_next_span_sequence_id``, the whole client path (JSON body,
  idempotency key, retry loop, answer validation).

Figures: µs per call (wall) and client CPU µs per call (this process), median of ``--rounds``.

    uv run benchmarks/client_floor_bench.py --calls 5000 --rounds 3
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import os
import socket
import statistics
import time
from collections.abc import Awaitable, Callable
from typing import Any

ANSWER_BODY = b'{"sequence_id":1}'
ANSWER = (
    b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: "
    + str(len(ANSWER_BODY)).encode()
    + b"\r\n\r\n"
    + ANSWER_BODY
)
PATH = "/v1/agl/spans/next"
BODY = json.dumps({"rollout_id": "ro-0123456789ab", "attempt_id": "at-0123456789ab"}).encode()


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _serve(port: int, ready: Any) -> None:
    import httptools

    try:
        import uvloop

        uvloop.install()
    except ImportError:  # pragma: no cover
        pass

    class Answer(asyncio.Protocol):
        def connection_made(self, transport: Any) -> None:
            self.transport = transport
            self.parser = httptools.HttpRequestParser(self)

        def data_received(self, data: bytes) -> None:
            self.parser.feed_data(data)

        def on_message_complete(self) -> None:
            self.transport.write(ANSWER)

    async def main() -> None:
        server = await asyncio.get_running_loop().create_server(Answer, "127.0.0.1", port)
        ready.set()
        async with server:
            await server.serve_forever()

    asyncio.run(main())


class _Raw(asyncio.Protocol):
    def __init__(self) -> None:
        self.got = 0
        self.waiter: asyncio.Future[None] | None = None

    def connection_made(self, transport: Any) -> None:
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        self.got += len(data)
        if self.got >= len(ANSWER) and self.waiter is not None:
            self.got -= len(ANSWER)
            self.waiter.set_result(None)


async def _raw_client(port: int) -> tuple[Callable[[], Awaitable[Any]], Callable[[], Awaitable[None]]]:
    loop = asyncio.get_running_loop()
    transport, proto = await loop.create_connection(_Raw, "127.0.0.1", port)
    request = (
        f"POST {PATH} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(BODY)}\r\n\r\n"
    ).encode() + BODY

    async def one() -> None:
        proto.waiter = loop.create_future()
        transport.write(request)
        await proto.waiter

    async def close() -> None:
        transport.close()

    return one, close


async def _aiohttp_client(port: int) -> tuple[Callable[[], Awaitable[Any]], Callable[[], Awaitable[None]]]:
    import aiohttp

    session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=False))
    url = f"http://127.0.0.1:{port}{PATH}"
    headers = {"Content-Type": "application/json"}

    async def one() -> bytes:
        async with session.post(url, data=BODY, headers=headers) as response:
            return await response.read()

    return one, session.close


async def _httpx_client(port: int) -> tuple[Callable[[], Awaitable[Any]], Callable[[], Awaitable[None]]]:
    import httpx

    client = httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}")
    headers = {"Content-Type": "application/json"}

    async def one() -> bytes:
        return (await client.post(PATH, content=BODY, headers=headers)).content

    return one, client.aclose


async def _pool_client(port: int) -> tuple[Callable[[], Awaitable[Any]], Callable[[], Awaitable[None]]]:
    from agl.store.http.client._conn import ConnectionPool

    pool = ConnectionPool(f"http://127.0.0.1:{port}", connection_timeout=5.0)
    headers = {"Content-Type": "application/json"}

    async def one() -> bytes:
        return (await pool.request("POST", PATH, BODY, headers, 30.0)).body

    async def close() -> None:
        pool.close()

    return one, close


async def _store_client(port: int) -> tuple[Callable[[], Awaitable[Any]], Callable[[], Awaitable[None]]]:
    from agl.store import LightningStoreClient

    client = LightningStoreClient(f"http://127.0.0.1:{port}")

    async def one() -> int:
        return await client.get_next_span_sequence_id("ro-0123456789ab", "at-0123456789ab")

    return one, client.close


CLIENTS = {
    "raw": _raw_client,
    "aiohttp": _aiohttp_client,
    "httpx": _httpx_client,
    "agl _http_conn": _pool_client,
    "agl client": _store_client,
}


async def _measure(make: Any, port: int, calls: int) -> tuple[float, float]:
    one, close = await make(port)
    try:
        for _ in range(min(200, calls)):  # warm up: connection, caches
            await one()
        cpu0, wall0 = time.process_time(), time.perf_counter()
        for _ in range(calls):
            await one()
        wall, cpu = time.perf_counter() - wall0, time.process_time() - cpu0
    finally:
        await close()
    return wall / calls * 1e6, cpu / calls * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--calls", type=int, default=5000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--clients", nargs="+", default=list(CLIENTS), choices=list(CLIENTS))
    args = parser.parse_args()

    port = _free_port()
    ready = multiprocessing.get_context("spawn").Event()
    server = multiprocessing.get_context("spawn").Process(target=_serve, args=(port, ready), daemon=True)
    server.start()
    try:
        if not ready.wait(30):
            raise SystemExit("the minimal server did not start")
        results: dict[str, list[tuple[float, float]]] = {name: [] for name in args.clients}
        for _ in range(args.rounds):  # interleaved, so that load drifts hit every client alike
            for name in args.clients:
                results[name].append(asyncio.run(_measure(CLIENTS[name], port, args.calls)))
        print(
            f"client alone vs a minimal HTTP/1.1 server, {args.calls} sequential POSTs, median of {args.rounds}"
        )
        print(f"load: {os.getloadavg()[0]:.2f}")
        floor = statistics.median(w for w, _ in results["raw"]) if "raw" in results else None
        print(f"{'client':>16} {'µs/call':>9} {'cpu µs/call':>12} {'calls/s':>9} {'x floor':>8}")
        for name, figures in results.items():
            wall = statistics.median(w for w, _ in figures)
            cpu = statistics.median(c for _, c in figures)
            ratio = f"{wall / floor:8.2f}" if floor else ""
            print(f"{name:>16} {wall:9.1f} {cpu:12.1f} {1e6 / wall:9.0f} {ratio}")
    finally:
        server.terminate()
        server.join(5)


if __name__ == "__main__":
    main()
