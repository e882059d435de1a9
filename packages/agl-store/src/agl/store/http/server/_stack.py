"""The stack of ASGI layers the store server serves, in front of the FastAPI app (built on first use).

The hot routes never reach FastAPI, so a runner's requests are answered before FastAPI is even imported: a
server starts in a fraction of the time, and the app is built (importing FastAPI, declaring every route) on
the first request for another route, or when :attr:`LightningStoreServer.app` is read.
"""

from __future__ import annotations

import logging
import threading
from typing import TYPE_CHECKING

from ...base import LightningStore
from ._hot import HotPath, HotPathMiddleware
from ._middleware import ASGIApp, Receive, Scope, Send
from ._ops import HotOps
from ._options import AppOptions
from ._replay import MemoryReplayCache
from ._routes import RouteTable

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


def create_asgi_app(store: LightningStore, options: AppOptions) -> tuple[LazyApp, ASGIApp, HotPath | None]:
    """The FastAPI app over ``store`` (routes, OpenAPI schema; built on first use), the ASGI app to serve, and
    the hot path for the HTTP protocol to serve the hot routes itself (``None`` when every request must go
    through the ASGI app: CORS).

    Served stack, outermost first: CORS → metrics (``/metrics``, request counts) → dashboard (static files)
    → the hot path (token, size cap, idempotent replay, fault barrier; the hot routes answered from the
    route table: :mod:`._hot`) → FastAPI.
    """
    from .dashboard import DashboardMiddleware
    from .metrics import MetricsMiddleware, StoreFigures, http_metrics

    app = LazyApp(store, options)
    ops = HotOps(store, options)
    counters = http_metrics("agl_store")
    hot = HotPath(
        RouteTable(ops),
        token=options.token,
        max_body_bytes=options.max_body_bytes,
        cache=options.replay_cache or MemoryReplayCache(),
        eager=ops.eager,
        metrics=counters,
        debug=options.debug,
        host_names=options.host_names,
    )
    asgi: ASGIApp = MetricsMiddleware(
        DashboardMiddleware(HotPathMiddleware(app, hot)),
        namespace="agl_store",
        http=counters,
        token=options.token,
        public=options.metrics_public,
        figures=StoreFigures(store),
        include_default=True,
    )
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
    return app, asgi, hot
