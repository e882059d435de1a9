"""The store's HTTP server: :class:`LightningStoreServer` and everything it serves.

- ``store.py``: :class:`LightningStoreServer` (a ``LightningStore`` that serves another one);
- ``_stack.py``: the served ASGI stack (the FastAPI app built on first use); ``_app.py``: the FastAPI
  application; ``_ops.py``: the hot operations and their ASGI fast path; ``_hot.py``: the single layer in
  front of the hot routes, served straight from the HTTP protocol; ``_eager.py``: a coroutine run at once;
- ``_middleware.py``: bearer token, size cap, idempotent replays; ``_replay.py``: the replay cache;
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
