"""The store's HTTP server: :class:`LightningStoreServer` and everything it serves.

- ``store.py``: :class:`LightningStoreServer` (a ``LightningStore`` that serves another one);
- ``_stack.py``: the served ASGI stack (the FastAPI app built on first use); ``_app.py``: the FastAPI
  application; ``_routes.py``: the hot routes, declared once; ``_ops.py``: their operations and the API's
  error answers; ``_hot.py``: the token, size cap, replay and fault checks of every request, and the hot
  routes answered from the HTTP protocol or in ASGI; ``_eager.py``: a coroutine run at once;
- ``_middleware.py``: ASGI types and the early error answers; ``_replay.py``: the replay cache;
  ``_options.py``: how the app behaves (auth, CORS, limits);
- ``metrics.py``: Prometheus metrics; ``otlp.py``: OTLP/HTTP trace ingestion; ``dashboard/``: the dashboard;
- ``_uvicorn.py``: stall deadlines, one-write answers and the hot routes' hook (public as
  :mod:`agl.store.serving`); ``_gc.py``: the garbage collector's thresholds while serving;
- ``_workers.py``, ``_worker_tag.py``: ``agl store --workers N``.
"""

from typing import TYPE_CHECKING

from agl.types.lazy import lazy_exports

if TYPE_CHECKING:
    from .store import DEFAULT_MAX_BODY_BYTES, DEFAULT_PORT, LightningStoreServer

# Imported on first use, so that importing one of the modules here (metrics, the uvicorn plumbing) stays cheap.
__getattr__, __dir__ = lazy_exports(
    __name__,
    {"DEFAULT_MAX_BODY_BYTES": ".store", "DEFAULT_PORT": ".store", "LightningStoreServer": ".store"},
    globals(),
)

__all__ = ["DEFAULT_MAX_BODY_BYTES", "DEFAULT_PORT", "LightningStoreServer"]
