"""The ``agl-server-worker`` header: which worker of ``agl store --workers N`` answered."""

from __future__ import annotations

from ._middleware import ASGIApp, Message, Receive, Scope, Send

__all__ = ["WORKER_HEADER", "tag_worker"]

WORKER_HEADER = "agl-server-worker"


class _TagWorker:
    """Adds ``agl-server-worker: <index>`` to every answer."""

    def __init__(self, app: ASGIApp, index: int) -> None:
        self.app = app
        self._header = (WORKER_HEADER.encode(), str(index).encode())

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def tagged(message: Message) -> None:
            if message["type"] == "http.response.start":
                message = {**message, "headers": [*message.get("headers", []), self._header]}
            await send(message)

        await self.app(scope, receive, tagged)


def tag_worker(app: ASGIApp, index: int) -> ASGIApp:
    """``app`` answering with the ``agl-server-worker`` header of worker ``index``."""
    return _TagWorker(app, index)
