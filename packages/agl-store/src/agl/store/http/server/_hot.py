"""One layer between the socket and the store for the hot routes.

The general stack (metrics → dashboard → token → size cap → idempotent replay → fault barrier → fast path)
costs a coroutine and a ``send`` wrapper per layer and per message; on the routes a runner calls for every
rollout that was more than the store's own work. :class:`HotPathMiddleware` does the same checks in one
pass for those routes (one header scan, one ``send`` wrapper) and hands every other request to the general
stack, so both behave alike: same answers, same metrics, same replay cache.
"""

from __future__ import annotations

import hmac
import logging
import time
from typing import TYPE_CHECKING, Any

from .._models import API_PREFIX
from ._middleware import (
    ASGIApp,
    Message,
    Receive,
    Scope,
    Send,
    bad_content_length,
    replay_key,
    send_pair,
    send_replay,
    too_large,
    unauthorized,
)
from ._ops import FastPathMiddleware, error_reply, fault_reply, send_reply
from ._replay import RecordedAnswer, ReplayCache

if TYPE_CHECKING:
    from .metrics import MetricsMiddleware

__all__ = ["HotPathMiddleware"]

logger = logging.getLogger("agl.store.server")

_HEALTH_PATH = API_PREFIX + "/health"


class HotPathMiddleware:
    """Serve the hot routes with auth, size cap, idempotency, fault barrier and metrics in one pass.

    Args:
        app: The general stack, for every other request.
        fast: The fast path that answers the hot routes (its fallback app is never reached from here).
        token: The bearer token, or ``None`` for none.
        max_body_bytes: The request-size cap.
        cache: The replay cache (shared with the general stack's idempotency layer).
        metrics: The general stack's metrics layer, whose request counters this layer feeds.
        debug: Put tracebacks into 500 answers.
    """

    def __init__(
        self,
        app: ASGIApp,
        fast: FastPathMiddleware,
        *,
        token: str | None,
        max_body_bytes: int,
        cache: ReplayCache,
        metrics: MetricsMiddleware,
        debug: bool = False,
    ) -> None:
        from .metrics import route_template

        self.app = app
        self.fast = fast
        self._expected = f"Bearer {token}".encode() if token else None
        self.max_body_bytes = max_body_bytes
        self.cache = cache
        self._observe = metrics.http.observe
        self._template = route_template
        self.debug = debug

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        method: str = scope["method"]
        path: str = scope["path"]
        if not self.fast.serves(method, path):
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        status = 500
        try:
            status = await self._serve(scope, receive, send, method, path)
        finally:
            self._observe(method, self._template(path), status, time.perf_counter() - started)

    async def _serve(self, scope: Scope, receive: Receive, send: Send, method: str, path: str) -> int:
        auth = length = key = None
        for name, value in scope["headers"]:  # the first of each, as the general stack reads them
            if name == b"authorization":
                if auth is None:
                    auth = value
            elif name == b"content-length":
                if length is None:
                    length = value
            elif name == b"idempotency-key" and key is None:
                key = value
        if self._expected is not None and path != _HEALTH_PATH:
            given = auth or b""
            if not hmac.compare_digest(given, self._expected):
                await send_pair(send, unauthorized(given))
                return 401
        limit = self.max_body_bytes
        if length is not None:
            try:
                too_big = int(length) > limit
            except ValueError:
                await send_pair(send, bad_content_length(length))
                return 400
            if too_big:
                await send_pair(send, too_large(limit))
                return 413

        # The whole body, counted against the cap as it arrives.
        body = b""
        if method == "POST":
            chunks: list[bytes] = []
            size = 0
            while True:
                message = await receive()
                if message["type"] == "http.disconnect":
                    return 500  # gone before the body was in: nobody to answer (counted as the stack does)
                chunk = message.get("body", b"")
                size += len(chunk)
                if size > limit:
                    await send_pair(send, too_large(limit))
                    return 413
                chunks.append(chunk)
                if not message.get("more_body", False):
                    break
            body = chunks[0] if len(chunks) == 1 else b"".join(chunks)
        delivered = False

        async def body_receive() -> Message:
            nonlocal delivered
            if not delivered:
                delivered = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        cache_key = replay_key(scope, key) if key is not None and method == "POST" else None
        if cache_key is not None:
            answer = await self.cache.claim(cache_key)
            if answer is not None:
                await send_replay(send, answer)
                return answer.status

        # One wrapper for all that needs the answer: metrics (status), fault barrier (started?), replay.
        state: list[Any] = [0, None, []]  # status, headers, bodies
        recording = cache_key is not None
        complete = False

        async def tracking_send(message: Message) -> None:
            nonlocal complete
            if message["type"] == "http.response.start":
                state[0] = message["status"]
                if recording:
                    state[1] = list(message.get("headers", ()))
            elif recording:
                state[2].append(message.get("body", b""))
                complete = not message.get("more_body", False)
            await send(message)

        recorded: RecordedAnswer | None = None
        try:
            try:
                await self.fast(scope, body_receive, tracking_send)
            except Exception as exc:
                mapped = error_reply(exc)  # a database error: 4xx or 503, not a fault
                if mapped is None:
                    logger.exception("store server fault on %s %s", method, path)
                if not state[0]:
                    await send_reply(
                        tracking_send, mapped if mapped is not None else fault_reply(exc, self.debug)
                    )
            if recording and state[0] and state[0] < 500 and complete:
                recorded = RecordedAnswer(state[0], state[1] or [], b"".join(state[2]))
        finally:
            if cache_key is not None:
                await self.cache.release(cache_key, recorded)
        return state[0] or 500
