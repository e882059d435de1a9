"""One layer between the socket and the store for the hot routes.

The general stack (metrics → dashboard → token → size cap → idempotent replay → fault barrier → fast path)
costs a coroutine and a ``send`` wrapper per layer and per message; on the routes a runner calls for every
rollout that was more than the store's own work. :class:`HotRoutes` does the same checks in one pass for
those routes (one header scan, one answer): token, size cap, idempotent replay, fault barrier, metrics.

It is served two ways, alike in every answer, metric and replay:

- :class:`HotCycle`, straight from the HTTP protocol (:func:`~._uvicorn.server_protocol_class` with
  ``hot=``): no ASGI scope, messages or task per request; the request's coroutine runs at once and only
  becomes a task when it has to wait (a long poll, a replayed key still running, a database);
- :class:`HotPathMiddleware`, in ASGI, for the cases the protocol leaves to uvicorn (a pipelined request, an
  ``Expect: 100-continue``, the h11 parser, CORS) and for apps served some other way.
"""

from __future__ import annotations

import asyncio
import hmac
import logging
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Protocol

from .._models import API_PREFIX
from ._eager import start
from ._middleware import (
    ASGIApp,
    Message,
    Receive,
    Scope,
    Send,
    bad_content_length,
    too_large,
    unauthorized,
)
from ._ops import FastPathMiddleware, HotRoute, error_reply, fault_reply, reply_headers
from ._replay import MemoryReplayCache, RecordedAnswer, ReplayCache

if TYPE_CHECKING:
    from .metrics import MetricsMiddleware

__all__ = ["HotCycle", "HotPathMiddleware", "HotRoutes"]

logger = logging.getLogger("agl.store.server")

_HEALTH_PATH = API_PREFIX + "/health"
_REPLAYED = (b"agl-replayed", b"true")

Answer = tuple[int, list[tuple[bytes, bytes]], bytes]
"""Status, header pairs, body: an answer as sent (and as the replay cache keeps it)."""


def _early(pair: tuple[Message, Message]) -> Answer:
    start, body = pair
    return start["status"], list(start["headers"]), body["body"]


class HotRoutes:
    """Token, size cap, idempotent replay, fault barrier and metrics for the hot routes, in one pass.

    Args:
        fast: The fast path whose routes and answers these are.
        token: The bearer token, or ``None`` for none.
        max_body_bytes: The request-size cap.
        cache: The replay cache (shared with the general stack's idempotency layer).
        metrics: The general stack's metrics layer, whose request counters this layer feeds.
        debug: Put tracebacks into 500 answers.
        extra_headers: Added to every answer served straight from the protocol (``agl-server-worker`` of a
            worker; in ASGI, the worker's wrapper adds it).
    """

    def __init__(
        self,
        fast: FastPathMiddleware,
        *,
        token: str | None,
        max_body_bytes: int,
        cache: ReplayCache,
        metrics: MetricsMiddleware,
        debug: bool = False,
        extra_headers: Sequence[tuple[bytes, bytes]] = (),
    ) -> None:
        self.fast = fast
        self._expected = f"Bearer {token}".encode() if token else None
        self.max_body_bytes = max_body_bytes
        self.cache = cache
        self.observe = metrics.http.observe
        self.debug = debug
        self.extra_headers = list(extra_headers)
        # A request's coroutine runs at once (no task) where nothing in it needs one: see _eager.eager_safe.
        self.eager = fast.ops.eager and isinstance(cache, MemoryReplayCache)

    def match(self, method: str, path: str) -> HotRoute | None:
        """The hot route of ``method path``, or ``None`` for the general stack's."""
        return self.fast.match(method, path)

    def start_cycle(
        self,
        proto: HotProtocol,
        method: str,
        path: str,
        headers: list[tuple[bytes, bytes]],
        keep_alive: bool,
    ) -> HotCycle | None:
        """The protocol's hook (:class:`~._uvicorn.HotServing`): serve a hot route's request there."""
        route = self.fast.match(method, path)
        if route is None:
            return None
        return HotCycle(proto, self, route, method, path, headers, keep_alive)

    def check(
        self, path: str, headers: Sequence[tuple[bytes, bytes]]
    ) -> tuple[Answer | None, bytes | None, str]:
        """What the head alone decides: an early answer (401, 400, 413) or ``None``; the idempotency key;
        the content type. The first of each header counts, as the general stack reads them."""
        auth = length = key = ctype = None
        for name, value in headers:
            if name == b"authorization":
                if auth is None:
                    auth = value
            elif name == b"content-length":
                if length is None:
                    length = value
            elif name == b"idempotency-key":
                if key is None:
                    key = value
            elif name == b"content-type" and ctype is None:
                ctype = value
        content_type = ctype.decode("latin-1").lower() if ctype else ""
        if self._expected is not None and path != _HEALTH_PATH:
            given = auth or b""
            if not hmac.compare_digest(given, self._expected):
                return _early(unauthorized(given)), key, content_type
        if length is not None:
            try:
                too_big = int(length) > self.max_body_bytes
            except ValueError:
                return _early(bad_content_length(length)), key, content_type
            if too_big:
                return _early(too_large(self.max_body_bytes)), key, content_type
        return None, key, content_type

    def too_large(self) -> Answer:
        """The 413 answer to a body that grew past the cap while it arrived."""
        return _early(too_large(self.max_body_bytes))

    async def respond(
        self, route: HotRoute, method: str, path: str, key: bytes | None, content_type: str, body: bytes
    ) -> Answer:
        """The answer to a whole request that passed :meth:`check` (a replay, or the store's answer)."""
        cache_key = replay_key_of(path, key) if key is not None and method == "POST" else None
        if cache_key is None:
            return await self._answer(route, method, path, content_type, body)
        recorded = await self.cache.claim(cache_key)
        if recorded is not None:
            return recorded.status, [*recorded.headers, _REPLAYED], recorded.body
        keep: RecordedAnswer | None = None
        try:
            answer = await self._answer(route, method, path, content_type, body)
            if answer[0] < 500:  # server faults are not remembered: a retry runs for real
                keep = RecordedAnswer(*answer)
        finally:
            await self.cache.release(cache_key, keep)
        return answer

    async def _answer(
        self, route: HotRoute, method: str, path: str, content_type: str, body: bytes
    ) -> Answer:
        try:
            reply = await self.fast.answer(route, body, content_type)
        except Exception as exc:  # the fault barrier
            mapped = error_reply(exc)  # a database error: 4xx or 503, not a fault
            if mapped is None:
                logger.exception("store server fault on %s %s", method, path)
            reply = mapped if mapped is not None else fault_reply(exc, self.debug)
        return reply[0], reply_headers(reply), reply[1]


def replay_key_of(path: str, key: bytes) -> bytes:
    """The replay cache's key of a request to ``path`` with ``Idempotency-Key: key``."""
    return path.encode() + b"\x00" + key


class HotPathMiddleware:
    """Serve the hot routes (:class:`HotRoutes`) in ASGI; hand every other request to ``app``."""

    def __init__(self, app: ASGIApp, routes: HotRoutes) -> None:
        self.app = app
        self.routes = routes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        route = self.routes.match(scope["method"], scope["path"]) if scope["type"] == "http" else None
        if route is None:
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        status = 500
        try:
            status = await self._serve(scope, receive, send, route)
        finally:
            self.routes.observe(scope["method"], route.template, status, time.perf_counter() - started)

    async def _serve(self, scope: Scope, receive: Receive, send: Send, route: HotRoute) -> int:
        routes = self.routes
        path: str = scope["path"]
        early, key, content_type = routes.check(path, scope["headers"])
        if early is not None:
            await _send_answer(send, early)
            return early[0]
        body = b""
        if scope["method"] == "POST":  # the whole body, counted against the cap as it arrives
            chunks: list[bytes] = []
            size = 0
            while True:
                message = await receive()
                if message["type"] == "http.disconnect":
                    return 500  # gone before the body was in: nobody to answer (counted as the stack does)
                chunk = message.get("body", b"")
                size += len(chunk)
                if size > routes.max_body_bytes:
                    answer = routes.too_large()
                    await _send_answer(send, answer)
                    return answer[0]
                chunks.append(chunk)
                if not message.get("more_body", False):
                    break
            body = chunks[0] if len(chunks) == 1 else b"".join(chunks)
        answer = await routes.respond(route, scope["method"], path, key, content_type, body)
        await _send_answer(send, answer)
        return answer[0]


async def _send_answer(send: Send, answer: Answer) -> None:
    await send({"type": "http.response.start", "status": answer[0], "headers": answer[1]})
    await send({"type": "http.response.body", "body": answer[2]})


# -- straight from the HTTP protocol ---------------------------------------------------------------


class HotProtocol(Protocol):
    """What :class:`HotCycle` needs of the HTTP protocol whose request it serves (uvicorn's, subclassed)."""

    @property
    def loop(self) -> asyncio.AbstractEventLoop: ...
    def hot_write(self, data: bytes) -> None: ...
    def hot_close(self) -> None: ...
    def hot_default_headers(self) -> bytes: ...
    def hot_track(self, task: asyncio.Task[Any]) -> None: ...
    def on_response_complete(self) -> None: ...


_STATUS_LINES: dict[int, bytes] = {}


def _status_line(status: int) -> bytes:
    line = _STATUS_LINES.get(status)
    if line is None:
        from http import HTTPStatus

        try:
            phrase = HTTPStatus(status).phrase.encode()
        except ValueError:
            phrase = b""
        line = _STATUS_LINES[status] = b"HTTP/1.1 %d %s\r\n" % (status, phrase)
    return line


class _NoEvent:
    """Stands in for the ``message_event`` uvicorn sets on a request cycle (nothing waits on it here)."""

    __slots__ = ()

    def set(self) -> None:
        pass


_NO_EVENT = _NoEvent()


class HotCycle:
    """One request to a hot route, read and answered by the protocol itself.

    It carries the attributes uvicorn's protocol and the stall deadlines read off a request cycle
    (``more_body``, ``response_started``, ``response_complete``, ``keep_alive``, ``disconnected``,
    ``message_event``), so that connection handling (keep-alive, pipelining, shutdown, deadlines) is
    uvicorn's own.
    """

    __slots__ = (
        "_body",
        "_content_type",
        "_key",
        "_method",
        "_path",
        "_proto",
        "_route",
        "_routes",
        "_size",
        "_started",
        "disconnected",
        "keep_alive",
        "message_event",
        "more_body",
        "response_complete",
        "response_started",
    )

    def __init__(
        self,
        proto: HotProtocol,
        routes: HotRoutes,
        route: HotRoute,
        method: str,
        path: str,
        headers: Sequence[tuple[bytes, bytes]],
        keep_alive: bool,
    ) -> None:
        self._started = time.perf_counter()
        self._proto = proto
        self._routes = routes
        self._route = route
        self._method = method
        self._path = path
        self._body: list[bytes] = []
        self._size = 0
        self.keep_alive = keep_alive
        self.disconnected = False
        self.more_body = True
        self.response_started = False
        self.response_complete = False
        self.message_event = _NO_EVENT
        early, self._key, self._content_type = routes.check(path, headers)
        if early is not None:
            self._finish(early)  # the rest of the body is read and dropped

    def on_body(self, body: bytes) -> None:
        if self.response_complete:
            return
        self._size += len(body)
        if self._size > self._routes.max_body_bytes:
            self._body = []
            self._finish(self._routes.too_large())
            return
        self._body.append(body)

    def on_message_complete(self) -> None:
        self.more_body = False
        if self.response_complete:
            return
        parts = self._body
        body = parts[0] if len(parts) == 1 else b"".join(parts)
        self._body = []
        routes = self._routes
        coro = routes.respond(self._route, self._method, self._path, self._key, self._content_type, body)
        try:
            done, answer, task = start(coro, self._proto.loop, routes.eager)
        except Exception as exc:  # (respond maps the store's errors; this is the replay cache failing)
            logger.exception("store server fault on %s %s", self._method, self._path)
            self._finish(_fault(exc, routes.debug))
            return
        if done:
            self._finish(answer)
            return
        assert task is not None
        task.add_done_callback(self._task_done)
        self._proto.hot_track(task)

    def _task_done(self, task: asyncio.Task[Answer]) -> None:
        if self.response_complete:
            return
        if task.cancelled():  # the server stopped and gave up waiting
            self._finish(_fault(asyncio.CancelledError(), self._routes.debug))
            return
        exc = task.exception()
        if exc is not None:  # respond() maps every Exception: this is a BaseException
            logger.error("store server fault on %s %s", self._method, self._path, exc_info=exc)
            self._finish(_fault(exc, self._routes.debug))
            return
        self._finish(task.result())

    def _finish(self, answer: Answer) -> None:
        proto = self._proto
        status, headers, body = answer
        self.response_started = True
        self.response_complete = True
        if not self.disconnected:
            parts = [_status_line(status), proto.hot_default_headers()]
            for name, value in headers:
                parts += (name, b": ", value, b"\r\n")
            for name, value in self._routes.extra_headers:
                parts += (name, b": ", value, b"\r\n")
            if not self.keep_alive:
                parts.append(b"connection: close\r\n")
            parts += (b"\r\n", body)
            proto.hot_write(b"".join(parts))
            if not self.keep_alive:
                proto.hot_close()
            proto.on_response_complete()
        self._routes.observe(self._method, self._route.template, status, time.perf_counter() - self._started)


def _fault(exc: BaseException, debug: bool) -> Answer:
    reply = fault_reply(exc, debug)
    return reply[0], reply_headers(reply), reply[1]
