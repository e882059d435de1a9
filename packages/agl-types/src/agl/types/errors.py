"""Errors shared by every agl package.

Each subclasses :class:`ValueError` as well, so code written for the reference system (which raised
plain ``ValueError`` for unknown ids) keeps working, while HTTP layers can map them precisely.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from pydantic import ValidationError

__all__ = ["AglError", "ConflictError", "InvalidRequestError", "NotFoundError", "validated"]

T = TypeVar("T")


class AglError(Exception):
    """Base class of every error raised on purpose by an agl package.

    The hierarchy (second bases in brackets: catching those keeps working too)::

        AglError
        ├── NotFoundError [ValueError]                  agl.types: an unknown id (HTTP 404)
        │   └── StoreNotFoundError [StoreClientError]   agl.store.errors: the same, over HTTP
        ├── ConflictError [ValueError]                  agl.types: conflicts with the state (HTTP 409)
        │   └── StoreConflictError [StoreClientError]
        ├── InvalidRequestError [ValueError]            agl.types: malformed request (HTTP 400)
        │   ├── StoreInvalidRequestError [StoreClientError]
        │   └── WeightsMismatch                         agl.algorithms.local: weights unlike the served model
        ├── StoreClientError                            agl.store.errors: a store call over HTTP failed
        │   ├── StoreNotFoundError, StoreConflictError, StoreInvalidRequestError (above)
        │   ├── StoreAuthenticationError                missing or wrong bearer token (401/403)
        │   ├── StoreServerError                        5xx through every retry
        │   └── StoreConnectionError [ConnectionError]  unreachable through every retry
        ├── MissingExtraError [ImportError]             agl.types.extras: an optional dependency is absent
        │   └── TrackerUnavailable                      agl.algorithms.trackers: a chosen tracker's library is absent
        ├── OTLPIngestError                             agl.store.errors: an OTLP/HTTP request refused
        ├── KeyReused                                   agl.store: an Idempotency-Key reused with another body (422)
        ├── StoreFullError                              agl.store.errors: a capped in-memory store is full (507)
        │   └── StoreFullClientError [StoreClientError] the same, over HTTP (not retried)
        ├── AllRolloutsFailed [RuntimeError]            agl.algorithms.apo: no rollout of a whole batch succeeded
        ├── LLMCallFailed                               agl.algorithms.apo: a critic/editor call gave up
        ├── NoTrainingSample [RuntimeError]             agl.algorithms.verl: a training rollout gave no sample
        ├── StrategyError [RuntimeError]                agl.runner: a runner or the algorithm failed
        ├── AttemptEnded                                agl.runner: the store ended an attempt mid-agent
        └── AgentCancelled                              agl.runner: raised in an abandoned sync agent's thread

    Bad arguments are still plain ``ValueError``/``TypeError`` as in the reference system. A few private
    exceptions carry control flow inside one module and never reach users.
    """


class NotFoundError(AglError, ValueError):
    """An id (rollout, attempt, resources, worker) does not exist. HTTP 404."""


class ConflictError(AglError, ValueError):
    """The request conflicts with the current state (e.g. a duplicate id). HTTP 409."""


class InvalidRequestError(AglError, ValueError):
    """The request is malformed (bad filter, sort field, limit...). HTTP 400."""


def validated(validate: Callable[[Any], T], value: Any, what: str) -> T:
    """``validate(value)`` (a pydantic validator), its ``ValidationError`` raised as an
    :class:`InvalidRequestError` that says what was invalid."""
    try:
        return validate(value)
    except ValidationError as exc:
        raise InvalidRequestError(f"invalid {what}: {exc}") from exc
