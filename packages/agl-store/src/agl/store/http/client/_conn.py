"""A lean HTTP/1.1 keep-alive client for the store client: one asyncio protocol per connection, responses
parsed by ``httptools`` (llhttp), idle connections pooled per event loop.

It does only what the store's API needs: ``GET``/``POST`` with a JSON body, ``Content-Length`` or chunked
answers, keep-alive. Measured against aiohttp on a localhost round trip it costs a fraction of the CPU per
request (``benchmarks/client_floor_bench.py``). Retries, back-off and error mapping stay in
:mod:`._transport`; this module raises ``OSError`` (``ConnectionError``) for a broken connection and
``TimeoutError`` when an answer does not come in time.
"""

from __future__ import annotations

import asyncio
import ssl as ssl_module
from collections.abc import Iterator, Mapping
from typing import Protocol, TypeVar, cast, overload
from urllib.parse import urlsplit

import httptools
from agl.types.timeouts import wait_within

__all__ = ["ConnectionPool", "Headers", "Response", "Transport"]

T = TypeVar("T")


class Headers(Mapping[str, str]):
    """Response headers, looked up case-insensitively (the last value of a repeated header wins)."""

    __slots__ = ("_items",)

    def __init__(self, items: dict[str, str]) -> None:
        self._items = items  # lower-case names

    def __getitem__(self, key: str) -> str:
        return self._items[key.lower()]

    @overload
    def get(self, key: str, /) -> str | None: ...
    @overload
    def get(self, key: str, /, default: str | T) -> str | T: ...
    def get(self, key: str, /, default: object = None) -> object:
        return self._items.get(key.lower(), default)

    def __iter__(self) -> Iterator[str]:
        return iter(self._items)

    def __len__(self) -> int:
        return len(self._items)

    def __repr__(self) -> str:
        return f"Headers({self._items!r})"


class Response:
    """Status, headers and the whole body of one answer."""

    __slots__ = ("body", "headers", "status")

    def __init__(self, status: int, headers: Headers, body: bytes) -> None:
        self.status = status
        self.headers = headers
        self.body = body


class Transport(Protocol):
    """What :class:`~agl.store.LightningStoreClient` sends its requests through: by default a
    :class:`ConnectionPool` per event loop; given as ``transport=``, anything that answers requests (such as
    :class:`~agl.store.http.client.ASGITransport`, a server's ASGI app called in-process)."""

    @property
    def closed(self) -> bool: ...

    async def request(
        self, verb: str, target: str, body: bytes | None, headers: Mapping[str, str], timeout: float
    ) -> Response:
        """Send one request (``target``: path and query) and return its whole answer; raise ``OSError``
        when the server cannot be reached and ``TimeoutError`` when no answer comes within ``timeout``."""
        ...

    def close(self) -> None: ...


class _Connection(asyncio.Protocol):
    """One keep-alive connection: at most one request in flight."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.parser = httptools.HttpResponseParser(self)
        self.waiter: asyncio.Future[Response] | None = None
        self.headers: dict[str, str] = {}
        self.body: list[bytes] = []
        self.received = False  # any byte of the current answer
        self.closed = False
        self.keep_alive = True

    # -- asyncio.Protocol ------------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's transports are not asyncio subclasses

    def data_received(self, data: bytes) -> None:
        self.received = True
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserUpgrade:  # pragma: no cover - the store never upgrades
            self._fail(ConnectionError("unexpected protocol upgrade from the store"))
        except httptools.HttpParserError as exc:
            self._fail(ConnectionError(f"malformed HTTP answer from the store: {exc}"))

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        if self.waiter is not None and not self.waiter.done():
            reason = f" ({exc})" if exc else ""
            self.waiter.set_exception(ConnectionResetError(f"the store closed the connection{reason}"))

    # -- httptools callbacks ---------------------------------------------------------------------

    def on_header(self, name: bytes, value: bytes) -> None:
        self.headers[name.decode("latin-1").lower()] = value.decode("latin-1")

    def on_body(self, body: bytes) -> None:
        self.body.append(body)

    def on_message_complete(self) -> None:
        self.keep_alive = self.parser.should_keep_alive()
        waiter = self.waiter
        if waiter is not None and not waiter.done():
            status = self.parser.get_status_code()
            waiter.set_result(Response(status, Headers(self.headers), b"".join(self.body)))

    # -- use -------------------------------------------------------------------------------------

    def _fail(self, exc: Exception) -> None:
        if self.waiter is not None and not self.waiter.done():
            self.waiter.set_exception(exc)
        self.close()

    def send(self, data: bytes) -> asyncio.Future[Response]:
        assert self.transport is not None
        self.headers = {}
        self.body = []
        self.received = False
        self.waiter = asyncio.get_running_loop().create_future()
        self.transport.write(data)
        return self.waiter

    @property
    def reusable(self) -> bool:
        return (
            not self.closed
            and self.keep_alive
            and self.transport is not None
            and not self.transport.is_closing()
        )

    def close(self) -> None:
        self.closed = True
        if self.transport is not None:
            self.transport.close()


def _expire(waiter: asyncio.Future[Response], timeout: float) -> None:
    if not waiter.done():
        waiter.set_exception(asyncio.TimeoutError(f"no answer within {timeout:g} s"))


class ConnectionPool:
    """Keep-alive connections to one origin, for one event loop (not thread-safe: one loop uses it)."""

    def __init__(self, address: str, *, connection_timeout: float, max_idle: int = 64) -> None:
        parts = urlsplit(address)
        self.secure = parts.scheme == "https"
        self.host = parts.hostname or "127.0.0.1"
        self.port = parts.port or (443 if self.secure else 80)
        self.base_path = parts.path.rstrip("/")
        default_port = (self.secure and self.port == 443) or (not self.secure and self.port == 80)
        host_header = self.host if default_port else f"{self.host}:{self.port}"
        if ":" in self.host and not default_port:  # IPv6 literal
            host_header = f"[{self.host}]:{self.port}"
        self.host_header = host_header.encode("ascii")
        self.connection_timeout = connection_timeout
        self.max_idle = max_idle
        self._idle: list[_Connection] = []
        self._ssl: ssl_module.SSLContext | None = None
        self.closed = False

    async def _connect(self) -> _Connection:
        loop = asyncio.get_running_loop()
        if self.secure and self._ssl is None:
            self._ssl = ssl_module.create_default_context()
        connect = loop.create_connection(
            _Connection, self.host, self.port, ssl=self._ssl if self.secure else None
        )
        _, conn = await wait_within(connect, self.connection_timeout)
        return conn

    def _build(self, verb: str, target: str, body: bytes | None, headers: Mapping[str, str]) -> bytes:
        lines = [f"{verb} {self.base_path}{target} HTTP/1.1".encode("ascii"), b"Host: " + self.host_header]
        for name, value in headers.items():
            lines.append(f"{name}: {value}".encode("latin-1"))
        if body is not None:
            lines.append(b"Content-Length: " + str(len(body)).encode("ascii"))
        elif verb == "POST":
            lines.append(b"Content-Length: 0")
        head = b"\r\n".join(lines) + b"\r\n\r\n"
        return head + body if body else head

    async def request(
        self, verb: str, target: str, body: bytes | None, headers: Mapping[str, str], timeout: float
    ) -> Response:
        """Send one request and read its whole answer (on an idle connection when there is one).

        A reused connection that the server closed while idle (nothing of the answer came back) is retried
        once on a fresh connection: the request never reached the store's handler.
        """
        if self.closed:
            raise ConnectionError("the client's connections for this event loop were closed")
        data = self._build(verb, target, body, headers)
        while self._idle:
            conn = self._idle.pop()
            if not conn.reusable:
                conn.close()
                continue
            try:
                return await self._exchange(conn, data, timeout)
            except ConnectionError:
                if conn.received:
                    raise
                # Closed while idle: try again (another idle one, or a fresh one).
        return await self._exchange(await self._connect(), data, timeout)

    async def _exchange(self, conn: _Connection, data: bytes, timeout: float) -> Response:
        waiter = conn.send(data)
        expiry = asyncio.get_running_loop().call_later(timeout, _expire, waiter, timeout)
        try:
            response = await waiter
        except BaseException:
            conn.close()  # an answer may still be under way: this connection cannot be reused
            raise
        finally:
            expiry.cancel()
        if conn.reusable and not self.closed and len(self._idle) < self.max_idle:
            self._idle.append(conn)
        else:
            conn.close()
        return response

    def close(self) -> None:
        """Close every idle connection; requests in flight finish, their connections are not kept."""
        self.closed = True
        idle, self._idle = self._idle, []
        for conn in idle:
            conn.close()
