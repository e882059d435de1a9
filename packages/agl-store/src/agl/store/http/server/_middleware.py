"""The ASGI types of the store server's layers, and the early error answers (401, 413, 400, 422) of its checks.

The checks themselves (token, size cap, idempotent replay, fault barrier) are one implementation, in
:mod:`._hot`.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

__all__ = [
    "ASGIApp",
    "Message",
    "Receive",
    "Scope",
    "Send",
    "bad_content_length",
    "json_error",
    "key_reused",
    "too_large",
    "unauthorized",
]

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]


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


def key_reused(path: str, key: bytes) -> tuple[Message, Message]:
    """The 422 answer to ``Idempotency-Key: key`` sent again to ``path`` with another body than its first
    request's: not a retry (which repeats its request exactly), so neither replayed nor applied."""
    shown = key.decode("latin-1")
    return json_error(
        422,
        f"Idempotency-Key {shown!r} was already used for a different request body to POST {path}: a retry "
        "must repeat its request exactly, and a new request needs a new key",
        "IdempotencyKeyReused",
    )
