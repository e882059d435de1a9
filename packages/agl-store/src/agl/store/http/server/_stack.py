"""The stack of ASGI layers the store server serves, in front of the FastAPI app (built on first use).

The hot routes never reach FastAPI, so a runner's requests are answered before FastAPI is even imported: a
server starts in a fraction of the time, and the app is built (importing FastAPI, declaring every route) on
the first request for another route, or when :attr:`LightningStoreServer.app` is read.
"""

from __future__ import annotations

import logging
import threading
from typing import TYPE_CHECKING, Any

from ...base import LightningStore
from ._hot import HotPathMiddleware, HotRoutes
from ._middleware import (
    ASGIApp,
    BearerTokenMiddleware,
    BodySizeLimitMiddleware,
    IdempotencyMiddleware,
    Message,
    Receive,
    Scope,
    Send,
)
from ._ops import FastPathMiddleware, HotOps, error_reply, fault_reply, send_reply
from ._options import AppOptions
from ._replay import MemoryReplayCache

if TYPE_CHECKING:
    from fastapi import FastAPI

__all__ = ["LazyApp", "create_asgi_app"]

logger = logging.getLogger("agl.store.server")


class LazyApp:
    """The FastAPI app over a store, built when first called or read (:meth:`get`)."""

    def __init__(self, store: LightningStore, options: AppOptions) -> None:
        self._store = store
        self._options = options
        self._app: FastAPI | None = None
        self._lock = threading.Lock()

    @property
    def built(self) -> bool:
        """Whether the FastAPI app exists yet."""
        return self._app is not None

    def get(self) -> FastAPI:
        """The FastAPI app (built now if it was not)."""
        app = self._app
        if app is None:
            with self._lock:
                if self._app is None:
                    from ._app import create_app

                    self._app = create_app(self._store, self._options)
                app = self._app
        return app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await self.get()(scope, receive, send)


class _FaultMiddleware:
    """Last line of defence: log a server fault once and answer 500 if nothing was answered yet."""

    def __init__(self, app: Any, debug: bool) -> None:
        self.app = app
        self.debug = debug

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        started = False

        async def tracking_send(message: Message) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        try:
            await self.app(scope, receive, tracking_send)
        except Exception as exc:
            mapped = error_reply(exc)  # a database error on the fast path: 4xx or 503, not a fault
            if mapped is None:
                logger.exception("store server fault on %s %s", scope.get("method"), scope.get("path"))
            if not started:
                await send_reply(send, mapped if mapped is not None else fault_reply(exc, self.debug))


def create_asgi_app(store: LightningStore, options: AppOptions) -> tuple[LazyApp, ASGIApp, HotRoutes | None]:
    """The FastAPI app over ``store`` (routes, OpenAPI schema; built on first use), the ASGI app to serve, and
    the hot routes for the HTTP protocol to serve itself (``None`` when every request must go through the
    ASGI app: CORS).

    Served stack, outermost first: CORS → hot path (the hot routes, in one pass: :mod:`._hot`) →
    metrics (``/metrics``, request counts) → dashboard (static files) → bearer token → size cap →
    idempotent replay → fault barrier → fast path for the hot routes → FastAPI.
    """
    from .dashboard import DashboardMiddleware
    from .metrics import MetricsMiddleware, StoreFigures

    app = LazyApp(store, options)
    cache = options.replay_cache or MemoryReplayCache()
    fast = FastPathMiddleware(app, HotOps(store, options))
    asgi: ASGIApp = _FaultMiddleware(fast, debug=options.debug)
    asgi = IdempotencyMiddleware(asgi, cache=cache)
    asgi = BodySizeLimitMiddleware(asgi, max_body_bytes=options.max_body_bytes)
    if options.token:
        asgi = BearerTokenMiddleware(asgi, token=options.token)
    asgi = DashboardMiddleware(asgi)
    metrics = MetricsMiddleware(
        asgi,
        namespace="agl_store",
        token=options.token,
        public=options.metrics_public,
        figures=StoreFigures(store),
        include_default=True,
    )
    routes = HotRoutes(
        fast,
        token=options.token,
        max_body_bytes=options.max_body_bytes,
        cache=cache,
        metrics=metrics,
        debug=options.debug,
    )
    asgi = HotPathMiddleware(metrics, routes)
    origins = [o.strip() for o in options.cors_allow_origins if o and o.strip()]
    if origins:
        from starlette.middleware.cors import CORSMiddleware

        asgi = CORSMiddleware(
            asgi,
            allow_origins=origins,
            allow_methods=["*"],
            allow_headers=["*"],
            allow_credentials="*" not in origins,
            expose_headers=["*"],
        )  # (imports Starlette, not FastAPI)
        return app, asgi, None  # CORS headers are added in ASGI: every request goes through it
    return app, asgi, routes
