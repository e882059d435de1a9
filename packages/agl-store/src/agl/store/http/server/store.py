"""``LightningStoreServer``: serve any :class:`~agl.store.LightningStore` over HTTP.

The server is itself a ``LightningStore``. In the process that created it, its methods call the wrapped
store directly (hopping onto the server's event loop when the wrapped store is not thread-safe); after
being pickled into another process (or forked), the same methods talk HTTP to the parent through a
:class:`~agl.store.LightningStoreClient`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import socket
import sys
import threading
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable, Sequence
from types import FrameType
from typing import TYPE_CHECKING, Any, cast

from agl.types import InvalidRequestError
from agl.types.env import DEFAULT_STORE_PORT, STORE_TOKEN

from ..._forwarding import ForwardingStore
from ...base import LightningStore, LightningStoreCapabilities
from ...loop_bound import as_thread_safe
from .._models import API_PREFIX
from ._background import ServerThread, bind_listener, quiet_server
from ._done import COMPLETED, ServerCall, loop_running_here
from ._gc import serving_gc
from ._hosts import local_host_names
from ._loop import new_event_loop as _new_event_loop
from ._reference import reference_launch
from ._uvicorn import ConnectionLimits, server_protocol_class

if TYPE_CHECKING:
    import uvicorn
    from fastapi import FastAPI

    from ...sql import SqlLightningStore
    from ..client.store import LightningStoreClient
    from ._hot import HotPath
    from ._middleware import ASGIApp
    from ._options import AppOptions
    from ._stack import LazyApp

__all__ = ["DEFAULT_MAX_BODY_BYTES", "DEFAULT_PORT", "LightningStoreServer", "ServerCall"]

logger = logging.getLogger("agl.store.server")

DEFAULT_PORT = DEFAULT_STORE_PORT
DEFAULT_MAX_BODY_BYTES = 64 * 1024 * 1024
TOKEN_ENV = STORE_TOKEN.name


def _fast_http_impl() -> str:
    try:
        import httptools  # the C parser roughly doubles requests/s over h11
    except ImportError:
        return "h11"
    del httptools  # (only whether it imports matters here)
    return "httptools"


class LightningStoreServer(ForwardingStore):
    """Serve ``store`` at ``http://host:port/v1/agl`` (and OTLP/HTTP traces at ``/v1/traces``).

    Args:
        store: The store to serve. The server never closes it; its owner does.
        host: Interface to bind (default ``127.0.0.1``); another only if you mean to accept other machines.
        port: TCP port (default 4747); ``0`` picks a free one (read it back from :attr:`port` after :meth:`start`).
        token: Bearer token required on every route but ``/v1/agl/health``. ``None`` reads
            ``AGL_STORE_TOKEN``; empty or unset means no authentication.
        cors_allow_origins: Origins allowed by CORS (``"*"`` for any); none by default.
        max_body_bytes: Largest accepted request body (also the cap on decompressed OTLP bodies).
        max_wait_seconds: Longest a single long poll (dequeue with a timeout, ``wait_for_rollouts``)
            is held by the server; clients loop for longer waits.
        debug: Put tracebacks of server faults into 500 answers.
        access_host: Host name that clients should use (defaults to ``host``, or 127.0.0.1 when
            binding all interfaces).
        metrics_public: Serve Prometheus metrics at ``/metrics`` without the token (for a scraper that
            cannot send one); otherwise ``/metrics`` needs the same token as the API.
        connection_limits: How long a client may leave a connection idle or a request's head or body
            half-sent before the server closes it (see :class:`~agl.store.ConnectionLimits`).
        plain_http: Serve with uvicorn's own HTTP protocol: every request through ASGI, without the stall
            deadlines, the one-write answers and the hot routes answered by the protocol. Answers are
            the same, only slower; the switch for a uvicorn release that changed the internals the
            faster protocol relies on (see ``tests/test_server_uvicorn_internals.py``).
        launch_mode, launcher_args, n_workers, tracker: The reference's launch options, accepted for its users'
            programs: the host and port of ``launcher_args`` are used; the rest warn, as this server always
            serves from a thread of its own and keeps its figures at ``/metrics`` (``_reference.py``).

    The dashboard is served at ``/`` and ``/dashboard`` (its page asks for the token).

    :meth:`start`, :meth:`stop` and :meth:`run_forever` are plain calls whose result may also be awaited (or given
    to ``asyncio.run``), as the reference's coroutines were (``await server.start()``): start and stop have done
    their work when the call returns (under a second to start, the caller's loop blocked meanwhile) and return a
    finished :class:`~agl.store.http.server._done.ServerCall`; ``run_forever`` called on a thread whose event loop
    runs returns the serving still to do, to await.
    """

    def __init__(
        self,
        store: LightningStore,
        host: str | None = None,
        port: int | None = None,
        token: str | None = None,
        cors_allow_origins: str | Sequence[str] | None = None,
        max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
        max_wait_seconds: float = 30.0,
        debug: bool = False,
        access_host: str | None = None,
        metrics_public: bool = False,
        connection_limits: ConnectionLimits | None = None,
        plain_http: bool = False,
        *,
        launch_mode: str = "thread",
        launcher_args: Any = None,
        n_workers: int = 1,
        tracker: Any = None,
    ) -> None:
        host, port = reference_launch(host, port, launch_mode, launcher_args, n_workers, tracker)
        host = "127.0.0.1" if host is None else host
        port = DEFAULT_PORT if port is None else port
        if not isinstance(cast(object, store), LightningStore):  # callers may pass anything
            raise InvalidRequestError(
                f"LightningStoreServer serves a LightningStore (e.g. InMemoryLightningStore()), not {store!r}"
            )
        if isinstance(store, LightningStoreServer):
            raise ValueError(
                "LightningStoreServer cannot serve another LightningStoreServer; pass its inner store"
            )
        if max_body_bytes <= 0:
            raise ValueError(f"max_body_bytes must be positive, got {max_body_bytes}")
        if max_wait_seconds <= 0:
            raise ValueError(f"max_wait_seconds must be positive, got {max_wait_seconds}")
        self.store: LightningStore | None = store
        self.host = host
        self.port = port
        self.token = STORE_TOKEN.get(token)
        if isinstance(cors_allow_origins, str):
            cors_allow_origins = [cors_allow_origins]
        self.cors_allow_origins = [o.strip() for o in (cors_allow_origins or []) if o and o.strip()]
        self.max_body_bytes = max_body_bytes
        self.max_wait_seconds = max_wait_seconds
        self.debug = debug
        self.metrics_public = metrics_public
        if connection_limits is not None and not isinstance(
            cast(object, connection_limits), ConnectionLimits
        ):
            raise TypeError("connection_limits must be an agl.store.ConnectionLimits")
        self.connection_limits = connection_limits or ConnectionLimits()
        self.plain_http = plain_http
        self.access_host = access_host or (host if host not in ("0.0.0.0", "::", "") else "127.0.0.1")
        self._owner_pid = os.getpid()
        self._app: LazyApp | None = None
        self._options: AppOptions | None = None
        self._asgi: ASGIApp | None = None
        self._hot: HotPath | None = None
        self._uvicorn: uvicorn.Server | None = None
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._shutdown: asyncio.Event | None = None
        self._client: LightningStoreClient | None = None
        self._client_lock = threading.Lock()
        self._local: LightningStore | None = None
        # Set by `agl store --workers N` in each worker process, with serve_as_worker.
        self._prebound: socket.socket | None = None
        self._worker_index: int | None = None
        self._run_id = uuid.uuid4().hex

    def serve_as_worker(self, index: int, run_id: str, sock: socket.socket) -> None:
        """Make this server worker ``index`` of a multi-worker run (``agl store --workers N``), before it
        starts: it accepts on ``sock``, bound by the parent and shared by every worker, tags its answers
        with its index, and shares idempotent answers with the workers of ``run_id``."""
        self._worker_index = index
        self._run_id = run_id
        self._prebound = sock

    # -- addresses --------------------------------------------------------------------------------

    @property
    def endpoint(self) -> str:
        """Root URL of the server, e.g. ``http://127.0.0.1:4747``."""
        host = f"[{self.access_host}]" if ":" in self.access_host else self.access_host
        return f"http://{host}:{self.port}"

    def otlp_traces_endpoint(self) -> str:
        return self.endpoint + "/v1/traces"

    @property
    def capabilities(self) -> LightningStoreCapabilities:
        return LightningStoreCapabilities(thread_safe=True, async_safe=True, zero_copy=True, otlp_traces=True)

    @property
    def is_running(self) -> bool:
        return self._uvicorn is not None and self._uvicorn.started and not self._uvicorn.should_exit

    # -- the app ---------------------------------------------------------------------------------

    @property
    def app(self) -> FastAPI:
        """The FastAPI application (built on first use)."""
        return self._lazy_app().get()

    @property
    def asgi_app(self) -> ASGIApp:
        """The ASGI app this server serves, every layer included (metrics, dashboard, token, size cap,
        replays, the hot routes, FastAPI): e.g. for :class:`~agl.store.http.client.ASGITransport`."""
        _ = self._lazy_app()
        assert self._asgi is not None
        return self._asgi

    def _lazy_app(self) -> LazyApp:
        """The served app, whose FastAPI part is built on first use."""
        if self._app is None:
            if self.store is None:
                raise RuntimeError(
                    "this LightningStoreServer was unpickled in another process; it has no app"
                )
            from ._options import AppOptions
            from ._stack import create_asgi_app

            self._shutdown = None
            options = AppOptions(
                token=self.token,
                cors_allow_origins=self.cors_allow_origins,
                max_body_bytes=self.max_body_bytes,
                max_wait_seconds=self.max_wait_seconds,
                debug=self.debug,
                metrics_public=self.metrics_public,
                replay_cache=self._replay_cache(self.store),
                host_names=local_host_names(self.host, self.token, self.access_host),
            )
            self._options = options
            self._app, self._asgi, self._hot = create_asgi_app(self.store, options)
        return self._app

    def _replay_cache(self, store: LightningStore) -> Any:
        """Idempotent answers of a SQL store are kept in its database (shared by workers, kept across
        restarts); of other stores, in this process's memory (``None``). Holds of keys still being
        answered are rows only where workers share this run."""
        sql = sys.modules.get("agl.store.sql.store")  # not imported: not a SQL store (and no import cost)
        if sql is None or not isinstance(store, sql.SqlLightningStore):
            return None
        from ...sql._replay import SqlReplayCache

        shared = self._prebound is not None  # a worker of `agl store --workers N`
        return SqlReplayCache(cast("SqlLightningStore", store), self._run_id, shared_holds=shared)

    def _bind(self) -> socket.socket:
        if self._prebound is not None:  # a worker: the parent bound the socket every worker accepts on
            self.port = self._prebound.getsockname()[1]
            return self._prebound
        sock = bind_listener(self.host, self.port, what="the store server")
        self.port = sock.getsockname()[1]
        return sock

    def _make_uvicorn(self, on_started: Callable[[], None] | None = None) -> uvicorn.Server:
        import uvicorn

        asgi = self.asgi_app
        hot = self._hot
        if self._worker_index is not None:
            from ._worker_tag import WORKER_HEADER, tag_worker

            asgi = tag_worker(asgi, self._worker_index)
            if hot is not None:
                hot.extra_headers = [(WORKER_HEADER.encode(), str(self._worker_index).encode())]
        config = uvicorn.Config(
            asgi,
            log_level="warning",
            access_log=False,
            http=_fast_http_impl()
            if self.plain_http
            else server_protocol_class(_fast_http_impl(), limits=self.connection_limits, hot=hot),
            lifespan="off",
            ws="none",  # no WebSocket routes (and no import of a WebSocket library at start)
            proxy_headers=False,  # nothing reads X-Forwarded-*; uvicorn's check cost ~4% of a request
            timeout_graceful_shutdown=2,
            timeout_keep_alive=max(1, round(self.connection_limits.idle_seconds)),
        )
        return quiet_server(config, on_started)  # signals: run_forever's (Ctrl-C/SIGTERM end with a return)

    async def _serve(self, sock: socket.socket) -> None:
        server = self._uvicorn
        assert server is not None and self._options is not None
        self._loop = asyncio.get_running_loop()
        if self.store is not None:
            self._local = as_thread_safe(self.store, self._loop)
        self._shutdown = asyncio.Event()
        self._options.shutdown = self._shutdown
        prepare = getattr(self.store, "ensure_schema", None)  # SQL stores: schema ready before serving
        try:
            if prepare is not None:
                await prepare()
            await server.serve(sockets=[sock])
        finally:
            self._loop = None
            self._local = None
            if self.store is not None:  # this loop closes next: what the backend opened on it goes first
                try:
                    await self.store.release_loop_resources()
                except Exception:
                    logger.warning(
                        "could not release the store's connections of the server loop", exc_info=True
                    )

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        self._request_exit()

    def _request_exit(self) -> None:
        server, loop, shutdown = self._uvicorn, self._loop, self._shutdown
        if server is not None:
            server.should_exit = True
        if loop is not None and shutdown is not None and not loop.is_closed():
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(shutdown.set)

    # -- lifecycle -------------------------------------------------------------------------------

    def start(self, timeout: float = 10.0) -> ServerCall:
        """Serve in a background thread; return once ``/v1/agl/health`` answers (``await`` optional)."""
        self._check_owner("start")
        if self._thread is not None and self._thread.is_alive():
            raise RuntimeError(f"the store server is already running at {self.endpoint}")
        _ = self._lazy_app()
        sock = self._bind()
        server = self._uvicorn = self._make_uvicorn()

        async def serve() -> None:
            try:
                await self._serve(sock)
            finally:
                sock.close()

        background = ServerThread(serve, name=f"agl-store-server:{self.port}")
        self._thread = background.thread
        try:
            background.start(
                lambda: server.started and self._health_ok(), timeout=timeout, what="the store server"
            )
        except TimeoutError:
            self.stop()
            raise TimeoutError(
                f"the store server did not answer {API_PREFIX}/health within {timeout} s"
            ) from None
        logger.info("store server listening at %s", self.endpoint)
        return COMPLETED

    def _health_ok(self) -> bool:
        try:
            with urllib.request.urlopen(self.endpoint + API_PREFIX + "/health", timeout=1.0) as response:
                return response.status == 200
        except (OSError, urllib.error.URLError):
            return False

    def stop(self, timeout: float = 10.0) -> ServerCall:
        """Stop serving (in-flight long polls end early); the wrapped store stays open (``await`` optional)."""
        thread = self._thread
        if thread is None:
            return COMPLETED
        self._request_exit()
        thread.join(timeout)
        if thread.is_alive() and self._uvicorn is not None:
            self._uvicorn.force_exit = True
            thread.join(timeout)
        self._thread = None
        self._uvicorn = None
        return COMPLETED

    def run_forever(self, on_started: Callable[[], None] | None = None) -> ServerCall:
        """Serve in this thread until SIGINT/SIGTERM (or :meth:`stop` from another thread); then return.

        ``on_started`` is called (in the server's loop) once the server accepts requests.

        Called on a thread whose event loop runs (``await server.run_forever()`` in a coroutine, the
        reference's spelling), it returns the serving to await instead: from a background thread until it is
        cancelled (Ctrl+C under ``asyncio.run``), SIGTERM or :meth:`stop`, then the server stops;
        ``on_started`` is then called on the caller's loop. (``asyncio.run(server.run_forever())`` serves in
        the plain way: the argument is evaluated before any loop runs.)
        """
        self._check_owner("run_forever")
        if loop_running_here():
            return ServerCall(self._serve_until_stopped(on_started))
        self._run_here(on_started)
        return COMPLETED

    async def _serve_until_stopped(self, on_started: Callable[[], None] | None) -> None:
        await asyncio.to_thread(self.start)
        thread = self._thread
        restore = _exit_on_sigterm(self._request_exit)
        try:
            if on_started is not None:
                on_started()
            if thread is not None:
                await asyncio.to_thread(thread.join)  # until stop() or SIGTERM (cancelled: stopped below)
        finally:
            restore()
            await asyncio.to_thread(self.stop)

    def _run_here(self, on_started: Callable[[], None] | None) -> None:
        _ = self._lazy_app()
        sock = self._bind()
        self._uvicorn = self._make_uvicorn(on_started)
        in_main = threading.current_thread() is threading.main_thread()
        previous: dict[int, Any] = {}
        if in_main:
            for sig in (signal.SIGINT, signal.SIGTERM):
                previous[sig] = signal.signal(sig, self._on_signal)
        loop = _new_event_loop()
        self._thread = threading.current_thread()
        try:
            with serving_gc():  # this thread serves until stopped: the process is a server
                loop.run_until_complete(self._serve(sock))
        finally:
            loop.close()
            sock.close()
            self._thread = None
            self._uvicorn = None
            for sig, handler in previous.items():
                signal.signal(sig, handler)

    async def close(self) -> None:
        """Stop serving (in the owner process) or close the HTTP client (in a child process)."""
        if self._client is not None:
            await self._client.close()
            self._client = None
        if (
            os.getpid() == self._owner_pid
            and self._thread is not None
            and self._thread is not threading.current_thread()
        ):
            await asyncio.to_thread(self.stop)

    def _check_owner(self, what: str) -> None:
        if os.getpid() != self._owner_pid or self.store is None:
            raise RuntimeError(
                f"LightningStoreServer.{what}() can only be called in the process that created it"
            )

    # -- pickling: a child process talks HTTP to the parent ----------------------------------------

    def __getstate__(self) -> dict[str, Any]:
        return {
            "host": self.host,
            "port": self.port,
            "token": self.token,
            "access_host": self.access_host,
            "cors_allow_origins": self.cors_allow_origins,
            "max_body_bytes": self.max_body_bytes,
            "max_wait_seconds": self.max_wait_seconds,
            "debug": self.debug,
            "metrics_public": self.metrics_public,
            "connection_limits": self.connection_limits,
            "plain_http": self.plain_http,
            "_owner_pid": self._owner_pid,
        }

    def __setstate__(self, state: dict[str, Any]) -> None:
        for key, value in state.items():
            setattr(self, key, value)
        self.store = None
        self._app = None
        self._asgi = None
        self._hot = None
        self._options = None
        self._uvicorn = None
        self._thread = None
        self._loop = None
        self._shutdown = None
        self._client = None
        self._client_lock = threading.Lock()
        self._local = None
        self._prebound = None
        self._worker_index = None
        self._run_id = uuid.uuid4().hex

    def _remote(self) -> LightningStoreClient:
        with self._client_lock:
            if self._client is None:
                from ..client.store import LightningStoreClient

                self._client = LightningStoreClient(self.endpoint, token=self.token)
            return self._client

    async def _call(self, method: str, /, *args: Any, **kwargs: Any) -> Any:
        store = self.store
        if store is None or os.getpid() != self._owner_pid:
            return await getattr(self._remote(), method)(*args, **kwargs)
        # While serving, a store made for one loop is only ever used from the server's loop.
        local = self._local if self._local is not None else store
        return await getattr(local, method)(*args, **kwargs)


def _exit_on_sigterm(request_exit: Callable[[], None]) -> Callable[[], None]:
    """On the main thread's running loop, make SIGTERM call ``request_exit``; returns what undoes it."""
    if threading.current_thread() is not threading.main_thread() or not hasattr(signal, "SIGTERM"):
        return lambda: None
    loop = asyncio.get_running_loop()
    previous = signal.getsignal(signal.SIGTERM)
    try:
        loop.add_signal_handler(signal.SIGTERM, request_exit)
    except (NotImplementedError, RuntimeError, ValueError):  # no signal handlers on this loop (Windows)
        return lambda: None

    def restore() -> None:
        loop.remove_signal_handler(signal.SIGTERM)
        if previous is not None:  # (None: a handler not set from Python, which cannot be put back)
            signal.signal(signal.SIGTERM, previous)

    return restore
