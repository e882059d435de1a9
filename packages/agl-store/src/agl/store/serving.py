"""Plumbing shared by agl's HTTP servers (the store server, the LLM proxy, the local model server, the tests'
stand-ins): one way to serve in the background (:func:`bind_listener`, :func:`quiet_server`,
:class:`ServerThread`), DNS-rebinding protection of a server without a token (:func:`local_host_names`,
:func:`host_allowed`, :func:`misdirected_reason`), stall deadlines and one-write answers (see :class:`ConnectionLimits`; the code lives in
:mod:`agl.store.http.server._uvicorn`), the garbage collector's thresholds while serving (:func:`serving_gc`),
and the event loop to serve on (:func:`run_fast`: uvloop where installed).

Why here: agl-store is the lowest layer that serves HTTP (its server needs all of this), and every package that
serves (the proxy, the algorithms' model server, the runner's store process) already depends on it; a separate
package would hold only this module.
"""

from .http.server._background import ServerThread, bind_listener, quiet_server
from .http.server._gc import SERVING_GC_THRESHOLD, serving_gc
from .http.server._hosts import host_allowed, local_host_names, misdirected_reason
from .http.server._loop import run_fast
from .http.server._uvicorn import ConnectionLimits, server_protocol_class

__all__ = [
    "SERVING_GC_THRESHOLD",
    "ConnectionLimits",
    "ServerThread",
    "bind_listener",
    "host_allowed",
    "local_host_names",
    "misdirected_reason",
    "quiet_server",
    "run_fast",
    "server_protocol_class",
    "serving_gc",
]
