"""A uvicorn HTTP protocol that sends each small answer in one ``send()`` instead of two.

uvicorn writes a response's status line and headers, then its body, as two socket writes. For the store's
answers (a few hundred bytes each) that doubles the system calls and wake-ups of the peer on every
request. The transport wrapper below holds the header block until the body arrives, which for an ASGI app
that sends both back to back happens in the same event-loop iteration; anything still held at the end of
that iteration is flushed then, so nothing waits longer and the byte order never changes.
"""

from __future__ import annotations

import asyncio
from typing import Any

__all__ = ["coalescing_protocol_class"]


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


def coalescing_protocol_class(http: str) -> Any:
    """uvicorn's protocol class for ``http`` (``"httptools"`` or ``"h11"``), writing headers with the body."""
    if http == "httptools":
        from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol as Base
    else:
        from uvicorn.protocols.http.h11_impl import H11Protocol as Base

    class CoalescingProtocol(Base):  # type: ignore[valid-type,misc]
        def connection_made(self, transport: asyncio.BaseTransport) -> None:  # type: ignore[override]
            super().connection_made(_CoalescingTransport(transport, self.loop))  # type: ignore[arg-type]

    return CoalescingProtocol
