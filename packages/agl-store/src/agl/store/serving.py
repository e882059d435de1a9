"""Plumbing shared by agl's HTTP servers (the store server, the LLM proxy): stall deadlines and one-write
answers (see :class:`ConnectionLimits`; the code lives in :mod:`agl.store.http.server._uvicorn`), and the
garbage collector's thresholds while serving (:func:`serving_gc`), and the event loop to serve on
(:func:`run_fast`: uvloop where installed)."""

from .http.server._gc import SERVING_GC_THRESHOLD, serving_gc
from .http.server._loop import run_fast
from .http.server._uvicorn import ConnectionLimits, server_protocol_class

__all__ = ["SERVING_GC_THRESHOLD", "ConnectionLimits", "run_fast", "server_protocol_class", "serving_gc"]
