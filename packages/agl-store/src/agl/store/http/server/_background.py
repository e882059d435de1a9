"""One way to run an HTTP server in the background: bind now, serve on a loop of its own in a daemon thread,
return once it is ready (or say why it is not), stop on request.

The store server, the LLM proxy, the local model server and the tests' OpenAI stand-in all serve this way.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import threading
import time
from collections.abc import Callable, Coroutine, Generator
from typing import TYPE_CHECKING, Any

from ._loop import new_event_loop

if TYPE_CHECKING:
    import uvicorn

__all__ = ["ServerThread", "bind_listener", "quiet_server"]


def bind_listener(
    host: str, port: int | None, *, what: str, backlog: int = 2048, nodelay: bool = False
) -> socket.socket:
    """A TCP socket bound to ``host:port`` (``0``/``None``: a free port) and listening, inheritable by child
    processes; ``OSError`` naming ``what`` and the address when it cannot bind.

    ``nodelay``: set ``TCP_NODELAY``, which accepted connections inherit (Linux), for a server that writes a
    response in several parts: without it the second part meets Nagle's algorithm and the client's delayed ACK
    (a ~40 ms stall). The store server answers in one write and does not need it."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if nodelay:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sock.bind((host, port or 0))
        sock.listen(backlog)
    except OSError as exc:
        sock.close()
        raise OSError(exc.errno, f"{what} cannot listen on {host}:{port}: {exc.strerror}") from exc
    sock.set_inheritable(True)
    return sock


def quiet_server(config: uvicorn.Config, on_started: Callable[[], None] | None = None) -> uvicorn.Server:
    """A uvicorn server that leaves the process's signal handlers alone (agl's servers are libraries: their
    owner decides what a signal does), and calls ``on_started`` (on its loop) once it accepts connections."""
    import uvicorn

    class QuietServer(uvicorn.Server):
        @contextlib.contextmanager
        def capture_signals(self) -> Generator[None, None, None]:
            yield

        async def startup(self, sockets: list[socket.socket] | None = None) -> None:
            await super().startup(sockets)
            if self.started and on_started is not None:
                on_started()

    return QuietServer(config)


class ServerThread:
    """Runs ``serve()`` on a new event loop (uvloop where installed) in a daemon thread named ``name``.

    :meth:`start` returns once ``ready()`` is true; it raises ``RuntimeError`` with the thread's error when
    the thread ends first, and ``TimeoutError`` when ``timeout`` passes. Stopping is the server's business
    (``server.should_exit = True``); :meth:`join` waits for the thread.
    """

    def __init__(self, serve: Callable[[], Coroutine[Any, Any, object]], *, name: str) -> None:
        self._serve = serve
        self.error: BaseException | None = None
        self.loop: asyncio.AbstractEventLoop | None = None
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)

    @classmethod
    def of_uvicorn(cls, server: uvicorn.Server, sock: socket.socket, *, name: str) -> ServerThread:
        """``server`` serving on ``sock`` (closed when it stops)."""

        async def serve() -> None:
            try:
                await server.serve(sockets=[sock])
            finally:
                sock.close()

        return cls(serve, name=name)

    def _run(self) -> None:
        loop = self.loop = new_event_loop()
        asyncio.set_event_loop(loop)
        try:
            loop.run_until_complete(self._serve())
        except BaseException as exc:  # reported by start()
            self.error = exc
        finally:
            with contextlib.suppress(Exception):
                loop.run_until_complete(loop.shutdown_asyncgens())
            loop.close()

    @property
    def thread(self) -> threading.Thread:
        return self._thread

    def start(self, ready: Callable[[], bool], *, timeout: float, what: str) -> None:
        """Start the thread and wait until ``ready()`` (polled every 2 ms) or a failure."""
        self._thread.start()
        deadline = time.monotonic() + timeout
        while not ready():
            if not self._thread.is_alive():
                raise RuntimeError(f"{what} failed to start: {self.error!r}") from self.error
            if time.monotonic() > deadline:
                raise TimeoutError(f"{what} did not start within {timeout} s")
            time.sleep(0.002)

    def join(self, timeout: float | None = None) -> None:
        """Wait for the thread to end (at most ``timeout`` seconds)."""
        self._thread.join(timeout)
