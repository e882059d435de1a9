"""Prometheus metrics of the store server (``GET /metrics``), also used by the LLM proxy's server.

This is the public import path; the code lives in :mod:`agl.store.http.server.metrics`.
"""

from .http.server.metrics import *  # noqa: F403
from .http.server.metrics import __all__ as __all__
