"""The checks every API request passes, in one implementation, and the hot routes answered there.

:class:`HotPath` holds the token check, the size cap, idempotent replay and the fault barrier, and answers
the hot routes from the route table (:mod:`._routes`). It is served two ways, alike in every answer,
metric and replay:

- :class:`HotCycle`, straight from the HTTP protocol (:func:`~._uvicorn.server_protocol_class` with
  ``hot=``), for the hot routes: no ASGI scope, messages or task per request; the request's coroutine
  runs at once and only becomes a task when it has to wait (a long poll, a replayed key still running, a
  database);
- :class:`HotPathMiddleware`, in ASGI, for every other API request (answered by the FastAPI app behind
  it) and for the hot requests the protocol leaves to uvicorn (a pipelined request, an
  ``Expect: 100-continue``, the h11 parser, CORS, plain uvicorn).
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Any, Protocol

from .._models import API_PREFIX
from ._eager import start
from ._hosts import host_allowed, misdirected
from ._middleware import (
    ASGIApp,
    Message,
    Receive,
    Scope,
    Send,
    bad_content_length,
    key_reused,
    too_large,
    unauthorized,
)
from ._ops import error_reply, fault_reply, reply_headers
from ._replay import KeyReused, MemoryReplayCache, RecordedAnswer, ReplayCache, current_writes
from ._routes import RouteMatch, RouteTable, answer

if TYPE_CHECKING:
    from .metrics import HttpMetrics

__all__ = ["Answer", "HotCycle", "HotPath", "HotPathMiddleware", "replay_key_of"]

logger = logging.getLogger("agl.store.server")

_HEALTH_PATH = API_PREFIX + "/health"
_REPLAYED = (b"agl-replayed", b"true")
_READ_HEADERS = frozenset({b"authorization", b"content-length", b"idempotency-key", b"content-type", b"host"})

Answer = tuple[int, list[tuple[bytes, bytes]], bytes]
"""Status, header pairs, body: an answer as sent (and as the replay cache keeps it)."""


def _early(pair: tuple[Message, Message]) -> Answer:
    start, body = pair
    return start["status"], list(start["headers"]), body["body"]


def replay_key_of(path: str, key: bytes) -> bytes:
    """The replay cache's key of a request to ``path`` with ``Idempotency-Key: key``."""
    return path.encode() + b"\x00" + key


class HotPath:
    """Token, size cap, idempotent replay and fault barrier of the API; the hot routes' answers.

    Args:
        table: The hot routes, bound to the store's operations.
        token: The bearer token, or ``None`` for none.
        max_body_bytes: The request-size cap.
        cache: The replay cache.
        eager: Whether a hot request's coroutine may start outside a task (see :func:`._eager.eager_safe`).
        metrics: Where requests answered straight from the protocol are counted (ASGI requests are counted
            by the metrics layer around the ASGI app).
        debug: Put tracebacks into 500 answers.
        extra_headers: Added to every answer served straight from the protocol (``agl-server-worker`` of a
            worker; in ASGI, the worker's wrapper adds it).
        host_names: The ``Host`` names answered besides IP addresses (:mod:`._hosts`); ``None``: any.
    """

    def __init__(
        self,
        table: RouteTable,
        *,
        token: str | None,
        max_body_bytes: int,
        cache: ReplayCache,
        eager: bool,
        metrics: HttpMetrics,
        debug: bool = False,
        extra_headers: Sequence[tuple[bytes, bytes]] = (),
        host_names: frozenset[str] | None = None,
    ) -> None:
        self.table = table
        self.host_names = host_names
        self._expected = f"Bearer {token}".encode() if token else None
        self.max_body_bytes = max_body_bytes
        self.cache = cache
        self.observe = metrics.observe
        self.debug = debug
        self.extra_headers = list(extra_headers)
        self.eager = eager and isinstance(cache, MemoryReplayCache)

    def start_cycle(
        self,
        proto: HotProtocol,
        method: str,
        path: str,
        headers: list[tuple[bytes, bytes]],
        keep_alive: bool,
    ) -> HotCycle | None:
        """The protocol's hook: serve a hot route's request there (``None``: leave it to ASGI)."""
        match = self.table.match(method, path)
        if match is None:
            return None
        return HotCycle(proto, self, match, method, path, headers, keep_alive)

    def check(
        self, method: str, path: str, headers: Sequence[tuple[bytes, bytes]]
    ) -> tuple[Answer | None, bytes | None, str]:
        """What the head alone decides: an early answer (421, 401, 400, 413) or ``None``; the idempotency
        key; the content type. The first of each header counts."""
        found: dict[bytes, bytes] = {}
        for name, value in headers:
            if name in _READ_HEADERS and name not in found:
                found[name] = value
        key, ctype, host = found.get(b"idempotency-key"), found.get(b"content-type"), found.get(b"host")
        content_type = ctype.decode("latin-1").lower() if ctype else ""
        if self.host_names is not None and not host_allowed(host, self.host_names):
            return _early(misdirected(host or b"")), key, content_type
        if self._expected is not None and path != _HEALTH_PATH and method != "OPTIONS":
            given = found.get(b"authorization", b"")
            if not hmac.compare_digest(given, self._expected):
                return _early(unauthorized(given)), key, content_type
        length = found.get(b"content-length")
        if length is not None:
            try:
                too_big = int(length) > self.max_body_bytes
            except ValueError:
                return _early(bad_content_length(length)), key, content_type
            if too_big:
                return self.too_large(), key, content_type
        return None, key, content_type

    def too_large(self) -> Answer:
        """The 413 answer to a body past the cap."""
        return _early(too_large(self.max_body_bytes))

    async def respond(
        self,
        method: str,
        path: str,
        key: bytes | None,
        body: bytes,
        produce: Callable[..., Awaitable[Answer]],
        *args: Any,
    ) -> Answer:
        """The answer to a whole request (``body``) that passed :meth:`check`: a replay, a 422 for a key
        reused with another body, or ``produce(*args)``'s answer (remembered under the request's
        idempotency key, unless it is a server fault; its writes log their results under the key while
        it runs, where the cache keeps a :class:`~._replay.WriteLog`)."""
        if key is None or method != "POST":
            return await self._barrier(method, path, produce(*args))
        cache_key = replay_key_of(path, key)
        try:
            recorded = await self.cache.claim(cache_key, hashlib.sha256(body).hexdigest())
        except KeyReused:
            return _early(key_reused(path, key))
        if isinstance(recorded, RecordedAnswer):
            return recorded.status, [*recorded.headers, _REPLAYED], recorded.body
        keep: RecordedAnswer | None = None
        if recorded is not None:
            current_writes.set(recorded)
        try:
            reply = await self._barrier(method, path, produce(*args))
            if reply[0] < 500:  # server faults are not remembered: a retry runs for real
                keep = RecordedAnswer(*reply)
        finally:
            if recorded is not None:
                current_writes.set(None)
            await self.cache.release(cache_key, keep)
        return reply

    async def answer_route(self, match: RouteMatch, content_type: str, body: bytes) -> Answer:
        """A hot route's answer (from the store's operations)."""
        reply = await answer(match, body, content_type)
        return reply[0], reply_headers(reply), reply[1]

    async def _barrier(self, method: str, path: str, call: Awaitable[Answer]) -> Answer:
        """The fault barrier: an exception becomes its mapped answer (4xx, 503) or a logged 500."""
        try:
            return await call
        except Exception as exc:
            mapped = error_reply(exc)  # a database error: 4xx or 503, not a fault
            if mapped is None:
                logger.exception("store server fault on %s %s", method, path)
            reply = mapped if mapped is not None else fault_reply(exc, self.debug)
            return reply[0], reply_headers(reply), reply[1]


class HotPathMiddleware:
    """Every API request through :class:`HotPath`'s checks; a hot route answered from the route table,
    any other by ``app`` (the FastAPI app), whose answer is collected, so that it can be replayed."""

    def __init__(self, app: ASGIApp, hot: HotPath) -> None:
        self.app = app
        self.hot = hot

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        hot = self.hot
        method: str = scope["method"]
        path: str = scope["path"]
        early, key, content_type = hot.check(method, path, scope["headers"])
        if early is not None:
            await _send_answer(send, early)
            return
        body = await _read_body(receive, hot.max_body_bytes)
        if body is None:
            return  # gone before the body was in: nobody to answer
        if isinstance(body, _TooLarge):
            await _send_answer(send, hot.too_large())
            return
        match = hot.table.match(method, path)
        if match is not None:
            reply = await hot.respond(method, path, key, body, hot.answer_route, match, content_type, body)
        else:
            reply = await hot.respond(
                method, path, key, body, _collect, self.app, scope, _replaying(body, receive)
            )
        await _send_answer(send, reply)


class _TooLarge:
    """What :func:`_read_body` returns for a body past the cap."""


_TOO_LARGE = _TooLarge()


async def _read_body(receive: Receive, cap: int) -> bytes | _TooLarge | None:
    """The whole request body, counted against ``cap`` as it arrives (``_TOO_LARGE`` past it; ``None``
    when the client went away first)."""
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return None
        chunk: bytes = message.get("body", b"")
        size += len(chunk)
        if size > cap:
            return _TOO_LARGE
        chunks.append(chunk)
        if not message.get("more_body", False):
            return chunks[0] if len(chunks) == 1 else b"".join(chunks)


def _replaying(body: bytes, receive: Receive) -> Receive:
    """A ``receive`` that hands the app the body already read, then waits as ``receive`` does."""
    sent = False

    async def replay() -> Message:
        nonlocal sent
        if sent:
            return await receive()
        sent = True
        return {"type": "http.request", "body": body, "more_body": False}

    return replay


async def _collect(app: ASGIApp, scope: Scope, receive: Receive) -> Answer:
    """Run ``app`` on the request and collect its whole answer."""
    status = 0
    headers: list[tuple[bytes, bytes]] = []
    chunks: list[bytes] = []

    async def collect(message: Message) -> None:
        nonlocal status, headers
        if message["type"] == "http.response.start":
            status, headers = message["status"], list(message.get("headers", ()))
        elif message["type"] == "http.response.body":
            chunks.append(message.get("body", b""))

    await app(scope, receive, collect)
    if not status:
        raise RuntimeError("the app returned without answering")
    return status, headers, b"".join(chunks)


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
        "_hot",
        "_key",
        "_match",
        "_method",
        "_path",
        "_proto",
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
        hot: HotPath,
        match: RouteMatch,
        method: str,
        path: str,
        headers: Sequence[tuple[bytes, bytes]],
        keep_alive: bool,
    ) -> None:
        self._started = time.perf_counter()
        self._proto = proto
        self._hot = hot
        self._match = match
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
        early, self._key, self._content_type = hot.check(method, path, headers)
        if early is not None:
            self._finish(early)  # the rest of the body is read and dropped

    def on_body(self, body: bytes) -> None:
        if self.response_complete:
            return
        self._size += len(body)
        if self._size > self._hot.max_body_bytes:
            self._body = []
            self._finish(self._hot.too_large())
            return
        self._body.append(body)

    def on_message_complete(self) -> None:
        self.more_body = False
        if self.response_complete:
            return
        parts = self._body
        body = parts[0] if len(parts) == 1 else b"".join(parts)
        self._body = []
        hot = self._hot
        coro = hot.respond(
            self._method, self._path, self._key, body, hot.answer_route, self._match, self._content_type, body
        )
        try:
            done, reply, task = start(coro, self._proto.loop, hot.eager)
        except Exception as exc:  # (respond maps the store's errors; this is the replay cache failing)
            logger.exception("store server fault on %s %s", self._method, self._path)
            self._finish(_fault(exc, hot.debug))
            return
        if done:
            self._finish(reply)
            return
        assert task is not None
        task.add_done_callback(self._task_done)
        self._proto.hot_track(task)

    def _task_done(self, task: asyncio.Task[Answer]) -> None:
        if self.response_complete:
            return
        if task.cancelled():  # the server stopped and gave up waiting
            self._finish(_fault(asyncio.CancelledError(), self._hot.debug))
            return
        exc = task.exception()
        if exc is not None:  # respond() maps every Exception: this is a BaseException
            logger.error("store server fault on %s %s", self._method, self._path, exc_info=exc)
            self._finish(_fault(exc, self._hot.debug))
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
            for name, value in self._hot.extra_headers:
                parts += (name, b": ", value, b"\r\n")
            if not self.keep_alive:
                parts.append(b"connection: close\r\n")
            parts += (b"\r\n", body)
            proto.hot_write(b"".join(parts))
            if not self.keep_alive:
                proto.hot_close()
            proto.on_response_complete()
        self._hot.observe(self._method, self._match.label, status, time.perf_counter() - self._started)


def _fault(exc: BaseException, debug: bool) -> Answer:
    reply = fault_reply(exc, debug)
    return reply[0], reply_headers(reply), reply[1]
