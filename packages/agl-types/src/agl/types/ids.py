"""Identifier formats: ``ro-`` + 12 hex for rollouts, ``at-`` + 8 hex for attempts, ``rs-`` + 12 hex for resources."""

from __future__ import annotations

import secrets

__all__ = [
    "generate_id",
    "new_attempt_id",
    "new_resources_id",
    "new_rollout_id",
    "new_span_id",
    "new_trace_id",
]


def generate_id(length: int) -> str:
    """Random lowercase hex string of ``length`` characters."""
    return secrets.token_hex((length + 1) // 2)[:length]


def new_rollout_id() -> str:
    return "ro-" + generate_id(12)


def new_attempt_id() -> str:
    return "at-" + generate_id(8)


def new_resources_id() -> str:
    return "rs-" + generate_id(12)


def new_trace_id() -> str:
    """OpenTelemetry-style trace id: 32 hex characters."""
    return generate_id(32)


def new_span_id() -> str:
    """OpenTelemetry-style span id: 16 hex characters."""
    return generate_id(16)
