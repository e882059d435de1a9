"""A uvicorn HTTP protocol that times out stalled clients and sends each small answer in one ``send()``.

uvicorn writes a response's status line and headers, then its body, as two socket writes. For the store's
answers (a few hundred bytes each) that doubles the system calls and wake-ups of the peer on every
request. The transport wrapper below holds the header block until the body arrives, which for an ASGI app
that sends both back to back happens in the same event-loop iteration; anything still held at the end of
that iteration is flushed then, so nothing waits longer and the byte order never changes.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, cast

__all__ = ["ConnectionLimits", "coalescing_protocol_class", "server_protocol_class"]


class _CoalescingTransport:
    __slots__ = ("_held", "_loop", "_transport")

    def __init__(self, transport: asyncio.Transport, loop: asyncio.AbstractEventLoop) -> None:
        self._transport = transport
        self._loop = loop
        self._held: bytes | None = None

    def write(self, data: bytes | bytearray | memoryview) -> None:
        held = self._held
        if held is not None:
            self._held = None
            self._transport.write(held + bytes(data))
            return
        # A header block (but not an interim "100 Continue", which the client waits for on its own).
        if bytes(data[:9]) == b"HTTP/1.1 " and bytes(data[9:10]) != b"1":
            self._held = bytes(data)
            self._loop.call_soon(self._flush)
            return
        self._transport.write(data)

    def write_whole(self, data: bytes) -> None:
        """Write a whole answer (head and body) at once, after anything still held."""
        held = self._held
        if held is not None:
            self._held = None
            data = held + data
        self._transport.write(data)

    def _flush(self) -> None:
        held = self._held
        if held is not None:
            self._held = None
            if not self._transport.is_closing():
                self._transport.write(held)

    def close(self) -> None:
        self._flush()
        self._transport.close()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._transport, name)


@dataclass(frozen=True)
class ConnectionLimits:
    """How long a client may stall a connection, and how large its request head may be.

    uvicorn closes an idle keep-alive connection only after a first answer, and has no deadline for a
    request's head or body, so a client that connects and sends nothing, half a header block, or half a body
    would hold its connection (and a task waiting for the body) forever. These limits close such a
    connection, answering ``408`` (``431`` for an oversized head) where no answer was started yet.
    """

    idle_seconds: float = 30.0
    """Longest wait for the first byte of a request, on a new connection or between requests."""
    header_seconds: float = 10.0
    """Longest a request's head (request line and headers) may take once its first byte arrived."""
    body_seconds: float = 30.0
    """Longest pause between two parts of a request body that is still arriving."""
    body_min_rate: float = 1024.0
    """Bytes per second a body still arriving must average once it has taken longer than ``body_seconds``
    (so that a client dripping a byte now and then cannot hold its connection forever)."""
    max_header_bytes: int = 64 * 1024
    """Largest request head accepted."""
    max_connections: int = 4096
    """Most connections open at once; one more is answered ``503`` and closed."""

    def __post_init__(self) -> None:
        for name in ("idle_seconds", "header_seconds", "body_seconds", "body_min_rate"):
            value = getattr(self, name)
            if not value > 0:
                raise ValueError(f"{name} must be a positive number, got {value!r}")
        for name in ("max_header_bytes", "max_connections"):
            value = getattr(self, name)
            if not isinstance(value, int) or value <= 0:
                raise ValueError(f"{name} must be a positive integer, got {value!r}")


_IDLE, _HEAD, _BODY, _APP = range(4)


class _Cycle(Protocol):
    """The parts of uvicorn's ``RequestResponseCycle`` read here."""

    response_started: bool
    response_complete: bool
    more_body: bool


class _Flow(Protocol):
    """The parts of uvicorn's ``FlowControl`` read here."""

    read_paused: bool


if TYPE_CHECKING:
    from ._hot import HotCycle, HotPath

    class _UvicornHttp(asyncio.Protocol):
        """The parts of uvicorn's HTTP protocols (``HttpToolsProtocol``, ``H11Protocol``) used here: the two
        share them, but not a base class that declares them."""

        loop: asyncio.AbstractEventLoop
        transport: asyncio.Transport
        cycle: _Cycle | None
        flow: _Flow
        url: bytes
        headers: list[tuple[bytes, bytes]]
        expect_100_continue: bool
        limit_concurrency: int | None
        parser: Any
        server_state: Any
        tasks: set[asyncio.Task[None]]

        def on_response_complete(self) -> None: ...
        def on_headers_complete(self) -> None: ...
        def on_body(self, body: bytes) -> None: ...
        def on_message_complete(self) -> None: ...


def _plain_answer(status: bytes, text: bytes) -> bytes:
    return (
        b"HTTP/1.1 " + status + b"\r\ncontent-type: text/plain; charset=utf-8\r\n"
        b"content-length: " + str(len(text)).encode() + b"\r\nconnection: close\r\n\r\n" + text
    )


_TIMEOUT_408 = _plain_answer(b"408 Request Timeout", b"request not received in time; connection closed")
_HEAD_431 = _plain_answer(
    b"431 Request Header Fields Too Large", b"request head too large; connection closed"
)
_BUSY_503 = _plain_answer(b"503 Service Unavailable", b"too many connections open; retry later")


def server_protocol_class(  # noqa: C901  # one subclass closed over its settings: its methods count here
    http: str,
    *,
    coalesce: bool = True,
    limits: ConnectionLimits | None = None,
    hot: HotPath | None = None,
) -> type[asyncio.Protocol]:
    """uvicorn's protocol class for ``http`` (``"httptools"`` or ``"h11"``) with stall deadlines (``limits``)
    and, with ``coalesce``, each answer's header block written together with its body.

    ``hot`` (httptools only) serves the requests it takes straight from the protocol, without ASGI; a request
    that arrives while another is still answered (pipelined) or that expects ``100 Continue`` goes to ASGI.
    """
    from httptools import parse_url as httptools_parse_url

    base: type[_UvicornHttp]
    if http != "httptools":
        hot = None
    if http == "httptools":
        from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

        base = cast("type[_UvicornHttp]", HttpToolsProtocol)
    else:
        from uvicorn.protocols.http.h11_impl import H11Protocol

        base = cast("type[_UvicornHttp]", H11Protocol)
    lim = limits or ConnectionLimits()
    defaults: list[Any] = [None, b""]  # uvicorn's default headers (a new list each second) and their bytes

    class GuardedProtocol(base):
        # The connection's phase is read off uvicorn's request cycle after each read: no cycle in progress
        # means waiting for (the rest of) a head; a cycle whose body is still arriving means a body; else the
        # app has the request and no deadline applies (long polls last as long as the app says).
        def connection_made(self, transport: asyncio.BaseTransport) -> None:
            self._agl_write = cast(asyncio.Transport, transport).write
            if coalesce:  # the wrapper stands in for the socket's transport, forwarding what it does not do
                wrapper = _CoalescingTransport(cast(asyncio.Transport, transport), self.loop)
                self._agl_write = wrapper.write_whole
                transport = cast(asyncio.Transport, wrapper)
            super().connection_made(transport)
            self._agl_hot: HotCycle | None = None
            self._agl_feeding = False
            self._agl_answered = False  # an answer completed while the last read was parsed
            self._agl_phase = _IDLE
            self._agl_head_bytes = 0
            self._agl_body_started = 0.0
            self._agl_body_bytes = 0
            self._agl_timer: asyncio.TimerHandle | None = None
            if len(self.server_state.connections) > lim.max_connections:
                self._agl_close(_BUSY_503)
                return
            self._agl_arm(lim.idle_seconds)

        def _agl_arm(self, seconds: float) -> None:
            if self._agl_timer is not None:
                self._agl_timer.cancel()
            self._agl_timer = self.loop.call_later(seconds, self._agl_expired)

        def _agl_disarm(self) -> None:
            if self._agl_timer is not None:
                self._agl_timer.cancel()
                self._agl_timer = None

        def _agl_busy_cycle(self) -> _Cycle | None:
            """The request cycle still receiving its body or being answered, if any."""
            cycle = self.cycle
            if cycle is None or (cycle.response_complete and not cycle.more_body):
                return None
            return cycle

        # -- the hot routes, served here (see HotPath.start_cycle) --------------------------------------------

        def on_headers_complete(self) -> None:
            cycle = self.cycle
            if (
                hot is not None
                and (cycle is None or cycle.response_complete)
                and not self.expect_100_continue
                and self.limit_concurrency is None
            ):
                parser = self.parser
                raw_path: bytes = httptools_parse_url(self.url).path
                if b"%" not in raw_path and not parser.should_upgrade():
                    try:
                        path, method = raw_path.decode("ascii"), parser.get_method().decode("ascii")
                    except UnicodeDecodeError:
                        path = method = ""
                    keep_alive = parser.get_http_version() != "1.0" and parser.should_keep_alive()
                    hot_cycle = (
                        hot.start_cycle(self, method, path, self.headers, keep_alive) if path else None
                    )
                    if hot_cycle is not None:
                        self._agl_hot = hot_cycle
                        self.cycle = hot_cycle
                        return
            self._agl_hot = None
            super().on_headers_complete()

        def on_body(self, body: bytes) -> None:
            cycle = self._agl_hot
            if cycle is not None and cycle is self.cycle:
                cycle.on_body(body)
                return
            super().on_body(body)

        def on_message_complete(self) -> None:
            cycle = self._agl_hot
            if cycle is not None and cycle is self.cycle:
                cycle.on_message_complete()
                return
            super().on_message_complete()

        def hot_write(self, data: bytes) -> None:
            self._agl_write(data)

        def hot_close(self) -> None:
            self.transport.close()

        def hot_default_headers(self) -> bytes:
            current = self.server_state.default_headers
            if current is not defaults[0]:
                defaults[1] = b"".join(name + b": " + value + b"\r\n" for name, value in current)
                defaults[0] = current
            return defaults[1]

        def hot_track(self, task: asyncio.Task[Any]) -> None:
            self.tasks.add(task)
            task.add_done_callback(self.tasks.discard)

        # -- stall deadlines ---------------------------------------------------------------------------

        def data_received(self, data: bytes) -> None:
            self._agl_feeding, self._agl_answered = True, False
            try:
                super().data_received(data)
            finally:
                self._agl_feeding = False
            if self.transport.is_closing():
                self._agl_disarm()
                return
            cycle = self._agl_busy_cycle()
            if cycle is not None:
                self._agl_head_bytes = 0
                if cycle.more_body:  # (also the rest of a body after an early answer, read and dropped)
                    if self._agl_body_too_slow(len(data)):
                        self._agl_close(None if cycle.response_started else _TIMEOUT_408)
                        return
                    self._agl_arm(lim.body_seconds)  # restarted by every part that arrives
                elif self._agl_phase != _APP:
                    self._agl_phase = _APP
                    self._agl_disarm()
                return
            if self._agl_phase in (_BODY, _APP) or self._agl_answered:
                # this read ended a body that was answered early, or a request answered at once
                self._agl_phase = _IDLE
                self._agl_head_bytes = 0
                self._agl_arm(lim.idle_seconds)
                return
            self._agl_head_bytes += len(data)
            if self._agl_head_bytes > lim.max_header_bytes:
                self._agl_close(_HEAD_431)
                return
            if self._agl_phase != _HEAD:
                self._agl_phase = _HEAD
                self._agl_arm(lim.header_seconds)  # counted from the head's first byte, not restarted

        def _agl_body_too_slow(self, received: int) -> bool:
            """Count a part of a body; whether the body, arriving for longer than ``body_seconds``, averaged
            less than ``body_min_rate`` (counted from the read after its head's, which holds the head too)."""
            now = self.loop.time()
            if self._agl_phase != _BODY:
                self._agl_phase = _BODY
                self._agl_body_started, self._agl_body_bytes = now, 0
                return False
            self._agl_body_bytes += received
            elapsed = now - self._agl_body_started
            return elapsed > lim.body_seconds and self._agl_body_bytes < lim.body_min_rate * elapsed

        def on_response_complete(self) -> None:
            super().on_response_complete()
            if self._agl_feeding:  # answered while a read is parsed: data_received re-arms after it
                self._agl_answered = True
                return
            if not self.transport.is_closing() and self._agl_busy_cycle() is None:
                self._agl_phase = _IDLE
                self._agl_head_bytes = 0
                self._agl_arm(lim.idle_seconds)

        def _agl_expired(self) -> None:
            self._agl_timer = None
            if self.transport.is_closing():
                return
            phase = self._agl_phase
            if phase == _BODY and self.flow.read_paused:  # the app is slow to read, not the client to send
                self._agl_arm(lim.body_seconds)
                return
            if phase == _APP:
                return
            cycle = self.cycle
            started = cycle is not None and cycle.response_started and not cycle.response_complete
            self._agl_close(None if phase == _IDLE or started else _TIMEOUT_408)

        def _agl_close(self, answer: bytes | None) -> None:
            self._agl_disarm()
            if answer is not None:
                self.transport.write(answer)
            self.transport.close()

        def connection_lost(self, exc: Exception | None) -> None:
            self._agl_disarm()
            super().connection_lost(exc)

    return GuardedProtocol


def coalescing_protocol_class(http: str) -> type[asyncio.Protocol]:
    """uvicorn's protocol class for ``http`` writing headers with the body (and the default stall limits)."""
    return server_protocol_class(http)
