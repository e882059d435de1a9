"""ASGI middleware of the store server: bearer token, request-size cap, idempotent replays.

Written as plain ASGI callables (not Starlette ``BaseHTTPMiddleware``) so that they cost little per
request and can act before the body is read.
"""

from __future__ import annotations

import asyncio
import hmac
import json
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

from ._http_models import API_PREFIX, IDEMPOTENCY_HEADER
from ._http_replay import RecordedAnswer, ReplayCache

__all__ = ["BearerTokenMiddleware", "BodySizeLimitMiddleware", "IdempotencyMiddleware", "json_error"]

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

_HEALTH_PATH = API_PREFIX + "/health"


def json_error(
    status: int, detail: str, error_type: str, extra_headers: list[tuple[bytes, bytes]] | None = None
):
    """The ASGI start and body messages of a JSON error answer (same shape as the app's error handlers)."""
    body = json.dumps({"detail": detail, "error_type": error_type}).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    headers.extend(extra_headers or [])
    return (
        {"type": "http.response.start", "status": status, "headers": headers},
        {"type": "http.response.body", "body": body},
    )


async def _send_error(send: Send, status: int, detail: str, error_type: str, **kw: Any) -> None:
    start, body = json_error(status, detail, error_type, **kw)
    await send(start)
    await send(body)


def _header(scope: Scope, name: bytes) -> bytes | None:
    for key, value in scope["headers"]:
        if key == name:
            return value
    return None


class BearerTokenMiddleware:
    """Every path but the health check needs ``Authorization: Bearer <token>`` (401 otherwise)."""

    def __init__(self, app: ASGIApp, token: str) -> None:
        self.app = app
        self._expected = f"Bearer {token}".encode()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"] == _HEALTH_PATH or scope["method"] == "OPTIONS":
            await self.app(scope, receive, send)
            return
        given = _header(scope, b"authorization") or b""
        if not hmac.compare_digest(given, self._expected):
            reason = "missing Authorization header" if not given else "wrong bearer token"
            await _send_error(
                send,
                401,
                f"{reason}: this store needs 'Authorization: Bearer <token>' (the server's token or AGL_STORE_TOKEN)",
                "AuthenticationError",
                extra_headers=[(b"www-authenticate", b"Bearer")],
            )
            return
        await self.app(scope, receive, send)


class BodySizeLimitMiddleware:
    """Answer 413 as soon as a request body is known to exceed ``max_body_bytes``.

    A declared ``Content-Length`` is checked before anything is read; otherwise bytes are counted
    while they stream in, and the request is cut off at the first chunk past the cap.
    """

    def __init__(self, app: ASGIApp, max_body_bytes: int) -> None:
        self.app = app
        self.max_body_bytes = max_body_bytes

    def _message(self) -> str:
        return (
            f"request body exceeds the server's limit of {self.max_body_bytes} bytes; send smaller "
            "batches or start the server with a larger max_body_bytes"
        )

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = _header(scope, b"content-length")
        if declared is not None:
            try:
                too_big = int(declared) > self.max_body_bytes
            except ValueError:
                await _send_error(
                    send, 400, f"invalid Content-Length header {declared!r}", "InvalidRequestError"
                )
                return
            if too_big:
                await _send_error(send, 413, self._message(), "PayloadTooLarge")
                return

        received = 0
        rejected = False

        async def limited_receive() -> Message:
            nonlocal received, rejected
            if rejected:
                return {"type": "http.disconnect"}
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > self.max_body_bytes:
                    rejected = True
                    await _send_error(send, 413, self._message(), "PayloadTooLarge")
                    # The app sees a disconnect and stops reading; its own answer is dropped below.
                    return {"type": "http.disconnect"}
            return message

        async def guarded_send(message: Message) -> None:
            if not rejected:
                await send(message)

        try:
            await self.app(scope, limited_receive, guarded_send)
        except Exception:
            if not rejected:
                raise


class _Entry:
    __slots__ = ("created", "done", "response", "size")

    def __init__(self) -> None:
        self.created = time.monotonic()
        self.done = asyncio.Event()
        self.response: tuple[Message, list[Message]] | None = None
        self.size = 0


class IdempotencyMiddleware:
    """Replay the first answer to a request whose ``Idempotency-Key`` was seen recently.

    The client sends a fresh key with every write and the same key on its retries, so a write whose
    answer was lost (connection dropped, timeout) is applied exactly once. A retry that arrives while
    the first request is still running waits for it. Server faults (5xx) are not remembered, so they can
    be retried for real. The cache is bounded by ``max_entries``, ``max_bytes`` of answers and ``ttl_seconds``
    (oldest first), so a retry must come within those bounds: the client's back-off is seconds.
    """

    def __init__(
        self,
        app: ASGIApp,
        max_entries: int = 20_000,
        max_bytes: int = 64 * 1024 * 1024,
        ttl_seconds: float = 600.0,
        cache: ReplayCache | None = None,
    ) -> None:
        self.app = app
        self.cache = cache
        """Where answers are kept instead of this process's memory (e.g. shared by a server's workers)."""
        self.max_entries = max_entries
        self.max_bytes = max_bytes
        self.ttl_seconds = ttl_seconds
        self._entries: OrderedDict[bytes, _Entry] = OrderedDict()
        self._bytes = 0

    def _evict(self) -> None:
        now = time.monotonic()
        while self._entries:
            key, entry = next(iter(self._entries.items()))
            over = len(self._entries) > self.max_entries or self._bytes > self.max_bytes
            if over or now - entry.created > self.ttl_seconds:
                if not entry.done.is_set():
                    break  # never drop an entry whose request is still running
                del self._entries[key]
                self._bytes -= entry.size
            else:
                break

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        key = _header(scope, IDEMPOTENCY_HEADER.lower().encode()) if scope["type"] == "http" else None
        if key is None or scope["method"] != "POST":
            await self.app(scope, receive, send)
            return
        key = scope["path"].encode() + b"\x00" + key
        if self.cache is not None:
            await _through_cache(self.cache, key, self.app, scope, receive, send)
            return
        entry = self._entries.get(key)
        if entry is not None:
            await entry.done.wait()
            if entry.response is not None:
                start, bodies = entry.response
                headers = [*start["headers"], (b"agl-replayed", b"true")]
                await send({**start, "headers": headers})
                for body in bodies:
                    await send(body)
                return
            # The first try ended in a server fault or was cut off: run this one for real.
        entry = _Entry()
        self._entries[key] = entry
        self._evict()
        start_message: Message | None = None
        bodies: list[Message] = []

        async def recording_send(message: Message) -> None:
            nonlocal start_message
            if message["type"] == "http.response.start":
                start_message = message
            elif message["type"] == "http.response.body":
                bodies.append(message)
            await send(message)

        try:
            await self.app(scope, receive, recording_send)
        finally:
            complete = bodies and not bodies[-1].get("more_body", False)
            if start_message is not None and start_message["status"] < 500 and complete:
                entry.response = (start_message, bodies)
                entry.size = sum(len(b.get("body", b"")) for b in bodies)
                self._bytes += entry.size
            elif self._entries.get(key) is entry:
                del self._entries[key]
            entry.done.set()
            self._evict()


async def _through_cache(
    cache: ReplayCache, key: bytes, app: ASGIApp, scope: Scope, receive: Receive, send: Send
) -> None:
    """Answer from ``cache`` (a replay), or run ``app`` holding ``key`` and record its answer there."""
    found = await cache.claim(key)
    if found is not None:
        headers = [*found.headers, (b"agl-replayed", b"true")]
        await send({"type": "http.response.start", "status": found.status, "headers": headers})
        await send({"type": "http.response.body", "body": found.body})
        return
    start: Message | None = None
    bodies: list[bytes] = []
    complete = False

    async def recording_send(message: Message) -> None:
        nonlocal start, complete
        if message["type"] == "http.response.start":
            start = message
        elif message["type"] == "http.response.body":
            bodies.append(bytes(message.get("body", b"")))
            complete = not message.get("more_body", False)
        await send(message)

    answer: RecordedAnswer | None = None
    try:
        await app(scope, receive, recording_send)
    finally:
        if start is not None and start["status"] < 500 and complete:
            answer = RecordedAnswer(
                int(start["status"]),
                [(bytes(k), bytes(v)) for k, v in start.get("headers", [])],
                b"".join(bodies),
            )
        await asyncio.shield(cache.release(key, answer))
