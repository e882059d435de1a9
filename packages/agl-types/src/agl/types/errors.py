"""Errors shared by every agl package.

Each subclasses :class:`ValueError` as well, so code written for the reference system (which raised
plain ``ValueError`` for unknown ids) keeps working, while HTTP layers can map them precisely.
"""

from __future__ import annotations

__all__ = ["AglError", "ConflictError", "InvalidRequestError", "NotFoundError"]


class AglError(Exception):
    """Base class of every error raised on purpose by an agl package."""


class NotFoundError(AglError, ValueError):
    """An id (rollout, attempt, resources, worker) does not exist. HTTP 404."""


class ConflictError(AglError, ValueError):
    """The request conflicts with the current state (e.g. a duplicate id). HTTP 409."""


class InvalidRequestError(AglError, ValueError):
    """The request is malformed (bad filter, sort field, limit...). HTTP 400."""
