"""ASGI middleware of the store server: bearer token, request-size cap, idempotent replays.

Written as plain ASGI callables (not Starlette ``BaseHTTPMiddleware``) so that they cost little per
request and can act before the body is read.
"""

from __future__ import annotations

import hmac
import json
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

from .._models import API_PREFIX, IDEMPOTENCY_HEADER
from ._replay import MemoryReplayCache, RecordedAnswer, ReplayCache

__all__ = [
    "BearerTokenMiddleware",
    "BodySizeLimitMiddleware",
    "IdempotencyMiddleware",
    "bad_content_length",
    "json_error",
    "replay_key",
    "send_pair",
    "send_replay",
    "serve_idempotent",
    "too_large",
    "unauthorized",
]

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


def unauthorized(given: bytes) -> tuple[Message, Message]:
    """The 401 answer to a request whose ``Authorization`` header is ``given`` (empty: none)."""
    reason = "missing Authorization header" if not given else "wrong bearer token"
    return json_error(
        401,
        f"{reason}: this store needs 'Authorization: Bearer <token>' (the server's token or AGL_STORE_TOKEN)",
        "AuthenticationError",
        extra_headers=[(b"www-authenticate", b"Bearer")],
    )


def too_large(max_body_bytes: int) -> tuple[Message, Message]:
    """The 413 answer to a body over ``max_body_bytes``."""
    return json_error(
        413,
        f"request body exceeds the server's limit of {max_body_bytes} bytes; send smaller "
        "batches or start the server with a larger max_body_bytes",
        "PayloadTooLarge",
    )


def bad_content_length(declared: bytes) -> tuple[Message, Message]:
    return json_error(400, f"invalid Content-Length header {declared!r}", "InvalidRequestError")


async def send_pair(send: Send, answer: tuple[Message, Message]) -> None:
    await send(answer[0])
    await send(answer[1])


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
            await send_pair(send, unauthorized(given))
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

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = _header(scope, b"content-length")
        if declared is not None:
            try:
                too_big = int(declared) > self.max_body_bytes
            except ValueError:
                await send_pair(send, bad_content_length(declared))
                return
            if too_big:
                await send_pair(send, too_large(self.max_body_bytes))
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
                    await send_pair(send, too_large(self.max_body_bytes))
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


class IdempotencyMiddleware:
    """Replay the first answer to a request whose ``Idempotency-Key`` was seen recently.

    The client sends a fresh key with every write and the same key on its retries, so a write whose
    answer was lost (connection dropped, timeout) is applied exactly once. A retry that arrives while
    the first request is still running waits for it. Server faults (5xx) are not remembered, so they can
    be retried for real. Answers are kept in ``cache`` (by default a :class:`MemoryReplayCache` bounded by
    ``max_entries``, ``max_bytes`` of answers and ``ttl_seconds``, oldest first), so a retry must come within
    those bounds: the client's back-off is seconds.
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
        self.cache: ReplayCache = cache or MemoryReplayCache(max_entries, max_bytes, ttl_seconds)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        key = _header(scope, _IDEMPOTENCY) if scope["type"] == "http" else None
        if key is None or scope["method"] != "POST":
            await self.app(scope, receive, send)
            return
        await serve_idempotent(self.cache, replay_key(scope, key), self.app, scope, receive, send)


_IDEMPOTENCY = IDEMPOTENCY_HEADER.lower().encode()
_REPLAYED = (b"agl-replayed", b"true")


def replay_key(scope: Scope, key: bytes) -> bytes:
    """The cache key of a request: its path and its ``Idempotency-Key``."""
    return scope["path"].encode() + b"\x00" + key


async def send_replay(send: Send, answer: RecordedAnswer) -> None:
    """Send a remembered answer again, marked ``agl-replayed: true``."""
    headers = [*answer.headers, _REPLAYED]
    await send({"type": "http.response.start", "status": answer.status, "headers": headers})
    await send({"type": "http.response.body", "body": answer.body})


async def serve_idempotent(
    cache: ReplayCache, key: bytes, app: ASGIApp, scope: Scope, receive: Receive, send: Send
) -> None:
    """Replay the answer remembered under ``key``, or run ``app`` and remember its answer (not a 5xx)."""
    answer = await cache.claim(key)
    if answer is not None:
        await send_replay(send, answer)
        return
    status = 0
    headers: list[tuple[bytes, bytes]] = []
    bodies: list[bytes] = []
    complete = False

    async def recording_send(message: Message) -> None:
        nonlocal status, headers, complete
        kind = message["type"]
        if kind == "http.response.start":
            status, headers = message["status"], list(message.get("headers", ()))
        elif kind == "http.response.body":
            bodies.append(message.get("body", b""))
            complete = not message.get("more_body", False)
        await send(message)

    recorded: RecordedAnswer | None = None
    try:
        await app(scope, receive, recording_send)
        if status and status < 500 and complete:
            recorded = RecordedAnswer(status, headers, b"".join(bodies))
    finally:
        await cache.release(key, recorded)
