"""The store client's HTTP/1.1 connections against small real servers: keep-alive, stale connections,
chunked answers, timeouts."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager

import pytest
from agl.store import LightningStoreClient, StoreConnectionError
from agl.store.http.client._conn import ConnectionPool


@asynccontextmanager
async def _server(
    answer: Callable[[int], bytes | None], close_after: bool = False
) -> AsyncIterator[tuple[str, list[int]]]:
    """A server answering the n-th request (counted over all connections) with ``answer(n)`` (``None``: never).
    Yields its address and the number of connections accepted so far."""
    count = [0]
    connections = [0]
    handlers: set[asyncio.Task[None]] = set()

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        connections[0] += 1
        task = asyncio.current_task()
        assert task is not None
        handlers.add(task)
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = 0
                for line in head.split(b"\r\n"):
                    if line.lower().startswith(b"content-length:"):
                        length = int(line.split(b":", 1)[1])
                if length:
                    await reader.readexactly(length)
                count[0] += 1
                reply = answer(count[0])
                if reply is None:
                    await asyncio.sleep(3600)
                assert reply is not None
                writer.write(reply)
                await writer.drain()
                if close_after:
                    writer.close()
                    return
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()  # every connection is closed on this loop, before it closes
            handlers.discard(task)

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        yield f"http://127.0.0.1:{port}", connections
    finally:
        server.close()
        for task in list(handlers):  # those still waiting (an answer that never comes, a kept-alive client)
            task.cancel()
        await asyncio.gather(*handlers, return_exceptions=True)
        await server.wait_closed()


def _ok(body: bytes = b'{"sequence_id":7}') -> bytes:
    return b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s" % (
        len(body),
        body,
    )


async def test_keep_alive_reuses_one_connection() -> None:
    async with _server(lambda n: _ok()) as (address, connections):
        pool = ConnectionPool(address, connection_timeout=5)
        for _ in range(5):
            response = await pool.request("POST", "/x", b"{}", {"Content-Type": "application/json"}, 5)
            assert response.status == 200 and response.body == b'{"sequence_id":7}'
            assert (
                response.headers["content-type"] == response.headers.get("Content-Type") == "application/json"
            )
        assert connections[0] == 1
        pool.close()


async def test_a_connection_the_server_closed_while_idle_is_replaced_transparently() -> None:
    async with _server(lambda n: _ok(), close_after=True) as (address, connections):
        client = LightningStoreClient(address, retry_delays=())  # no retries: the pool itself must cope
        for _ in range(3):
            assert await client.get_next_span_sequence_id("ro", "at") == 7
        assert connections[0] == 3
        await client.close()


async def test_chunked_answers_are_joined() -> None:
    chunked = (
        b'HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\n{"seq\r\nc\r\nuence_id":9}\r\n0\r\n\r\n'
    )
    async with _server(lambda n: chunked) as (address, _):
        client = LightningStoreClient(address, retry_delays=())
        assert await client.get_next_span_sequence_id("ro", "at") == 9
        await client.close()


async def test_no_answer_in_time_is_a_connection_error_then_a_retry_succeeds() -> None:
    async with _server(lambda n: None if n == 1 else _ok()) as (address, _):
        client = LightningStoreClient(
            address, request_timeout=0.2, retry_delays=(0.01,), health_retry_delays=()
        )
        started = time.monotonic()
        assert await client.get_next_span_sequence_id("ro", "at") == 7  # the health probe is request 2
        assert time.monotonic() - started < 5
        await client.close()
    async with _server(lambda n: None) as (address, _):
        client = LightningStoreClient(address, request_timeout=0.2, retry_delays=())
        with pytest.raises(StoreConnectionError, match="cannot reach the store"):
            await client.get_next_span_sequence_id("ro", "at")
        await client.close()


async def test_a_malformed_answer_is_a_connection_error() -> None:
    async with _server(lambda n: b"NOT HTTP AT ALL\r\n\r\n") as (address, _):
        client = LightningStoreClient(address, retry_delays=())
        with pytest.raises(StoreConnectionError, match="malformed HTTP answer"):
            await client.get_next_span_sequence_id("ro", "at")
        await client.close()


def test_works_on_uvloop() -> None:
    uvloop = pytest.importorskip("uvloop")

    async def main() -> int:
        async with _server(lambda n: _ok()) as (address, _):
            client = LightningStoreClient(address, retry_delays=())
            try:
                return await client.get_next_span_sequence_id("ro", "at")
            finally:
                await client.close()

    loop = uvloop.new_event_loop()
    try:
        assert loop.run_until_complete(main()) == 7
    finally:
        loop.close()
