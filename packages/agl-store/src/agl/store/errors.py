"""The errors a store raises that users catch (see :class:`agl.types.AglError` for the whole hierarchy).

In-process stores raise :class:`~agl.types.NotFoundError`, :class:`~agl.types.ConflictError` and
:class:`~agl.types.InvalidRequestError` (each also a ``ValueError``). Over HTTP,
:class:`~agl.store.LightningStoreClient` raises the ``Store*Error`` classes below, which keep those in-process
types (a :class:`StoreNotFoundError` is a ``NotFoundError``), so one ``except`` serves every backend.
:class:`OTLPIngestError` is what OTLP/HTTP trace ingestion refuses a request with.
"""

from __future__ import annotations

from agl.types import AglError, ConflictError, InvalidRequestError, NotFoundError

__all__ = [
    "AglError",
    "ConflictError",
    "InvalidRequestError",
    "NotFoundError",
    "OTLPIngestError",
    "StoreAuthenticationError",
    "StoreClientError",
    "StoreConflictError",
    "StoreConnectionError",
    "StoreFullClientError",
    "StoreFullError",
    "StoreInvalidRequestError",
    "StoreNotFoundError",
    "StoreServerError",
]


class StoreFullError(AglError):
    """An in-memory store with a cap (``max_rollouts``/``max_bytes``) is full and has no finished rollout
    left to evict. HTTP 507 (Insufficient Storage)."""


class StoreClientError(AglError):
    """A store call over HTTP failed. ``method`` is the store method, ``status`` the HTTP status (if any)."""

    def __init__(
        self,
        message: str,
        *,
        method: str,
        status: int | None = None,
        server_message: str | None = None,
        error_type: str | None = None,
    ) -> None:
        super().__init__(message)
        self.method = method
        self.status = status
        self.server_message = server_message
        self.error_type = error_type


class StoreNotFoundError(StoreClientError, NotFoundError):
    """HTTP 404: an unknown id."""


class StoreConflictError(StoreClientError, ConflictError):
    """HTTP 409: the request conflicts with the store's state."""


class StoreInvalidRequestError(StoreClientError, InvalidRequestError):
    """HTTP 400, 413 or 422: the request is malformed, too large or does not match the schema."""


class StoreAuthenticationError(StoreClientError):
    """HTTP 401/403: missing or wrong bearer token."""


class StoreServerError(StoreClientError):
    """HTTP 5xx (or 408) that persisted through every retry."""


class StoreFullClientError(StoreClientError, StoreFullError):
    """HTTP 507: the server's capped in-memory store is full (not retried: waiting will not free room)."""


class StoreConnectionError(StoreClientError, ConnectionError):
    """The server could not be reached (or timed out) through every retry."""


class OTLPIngestError(AglError):
    """An OTLP/HTTP request that cannot be ingested; ``status`` is the HTTP status to answer with."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
