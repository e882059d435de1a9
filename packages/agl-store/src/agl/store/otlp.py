"""OTLP/HTTP trace ingestion (``POST /v1/traces``): any OpenTelemetry exporter can send spans to the store.

This is the public import path; the code lives in :mod:`agl.store.http.server.otlp`.
"""

from .http.server.otlp import (
    OTLPIngestError,
    ingest_otlp_traces,
    install_otlp_routes,
    rpc_status,
    spans_from_proto,
)

__all__ = ["OTLPIngestError", "ingest_otlp_traces", "install_otlp_routes", "rpc_status", "spans_from_proto"]
