"""``ASGITransport``: the store client talking to an ASGI app in the same process, without sockets."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping, MutableMapping
from typing import Any
from urllib.parse import urlsplit

from agl.types.timeouts import wait_within

from ._conn import Headers, Response

__all__ = ["ASGITransport"]

_Message = MutableMapping[str, Any]
_App = Callable[
    [MutableMapping[str, Any], Callable[[], Awaitable[_Message]], Callable[[_Message], Awaitable[None]]],
    Awaitable[None],
]


class ASGITransport:
    """Answer the client's requests by calling ``app`` (an ASGI 3 app) in the calling event loop.

    For tests and embedding: ``LightningStoreClient("http://store", transport=ASGITransport(server.asgi_app))``
    runs the client's whole request path (retries, error mapping, idempotency keys) against the server's
    whole ASGI stack, with no port and no connection. An exception the app raises is a server fault
    (answered 500, as a server would). The transport is not pickled with the client.
    """

    def __init__(self, app: _App, *, client: tuple[str, int] = ("127.0.0.1", 50000)) -> None:
        self.app = app
        self.client = client
        self.closed = False

    async def request(
        self, verb: str, target: str, body: bytes | None, headers: Mapping[str, str], timeout: float
    ) -> Response:
        if self.closed:
            raise ConnectionError("this ASGITransport was closed")
        parts = urlsplit(target)
        raw_headers = [(k.lower().encode("latin-1"), v.encode("latin-1")) for k, v in headers.items()]
        if body is not None:
            raw_headers.append((b"content-length", str(len(body)).encode()))
        scope: dict[str, Any] = {
            "type": "http",
            "asgi": {"version": "3.0"},
            "http_version": "1.1",
            "method": verb,
            "scheme": "http",
            "path": parts.path,
            "raw_path": parts.path.encode(),
            "query_string": parts.query.encode(),
            "root_path": "",
            "headers": raw_headers,
            "server": ("asgi", 80),
            "client": self.client,
        }
        return await wait_within(self._exchange(scope, body or b""), timeout)

    async def _exchange(self, scope: dict[str, Any], body: bytes) -> Response:
        answered = asyncio.Event()
        sent_body = False
        status = 0
        headers: dict[str, str] = {}
        chunks: list[bytes] = []

        async def receive() -> _Message:
            nonlocal sent_body
            if not sent_body:
                sent_body = True
                return {"type": "http.request", "body": body, "more_body": False}
            await answered.wait()  # a long poll that watches for a disconnect waits like a live client
            return {"type": "http.disconnect"}

        async def send(message: _Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = int(message["status"])
                for name, value in message.get("headers", ()):
                    headers[bytes(name).decode("latin-1").lower()] = bytes(value).decode("latin-1")
            elif message["type"] == "http.response.body":
                chunks.append(bytes(message.get("body", b"")))
                if not message.get("more_body", False):
                    answered.set()

        try:
            await self.app(scope, receive, send)
        except Exception:
            if status:
                raise  # the answer had started: a broken connection, as a server would leave it
            return Response(500, Headers({"content-type": "text/plain"}), b"Internal Server Error")
        finally:
            answered.set()
        if not status:
            raise ConnectionError("the app returned without answering")
        return Response(status, Headers(headers), b"".join(chunks))

    def close(self) -> None:
        """Refuse further requests (the app is its owner's to stop)."""
        self.closed = True
