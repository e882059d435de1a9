"""Prometheus metrics of the store server (``GET /metrics``), also used by the LLM proxy's server.

This is the public import path; the code lives in :mod:`agl.store.http.server.metrics`.
"""

from .http.server.metrics import (
    METRICS_PATH,
    MULTIPROC_ENV,
    HttpMetrics,
    MetricsMiddleware,
    StoreFigures,
    exposition,
    http_metrics,
    multiprocess_enabled,
    route_template,
)

__all__ = [
    "METRICS_PATH",
    "MULTIPROC_ENV",
    "HttpMetrics",
    "MetricsMiddleware",
    "StoreFigures",
    "exposition",
    "http_metrics",
    "multiprocess_enabled",
    "route_template",
]
