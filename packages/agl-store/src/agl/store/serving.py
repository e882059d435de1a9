"""uvicorn plumbing shared by agl's HTTP servers (the store server, the LLM proxy): stall deadlines and
one-write answers. See :class:`ConnectionLimits`. The code lives in :mod:`agl.store.http.server._uvicorn`."""

from .http.server._uvicorn import ConnectionLimits, server_protocol_class

__all__ = ["ConnectionLimits", "server_protocol_class"]
