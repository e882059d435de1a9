"""Tracing for agl: OpenTelemetry tracer, emitters, span pipeline to the store."""
