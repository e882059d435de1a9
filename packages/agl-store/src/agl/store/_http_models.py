"""Request and response bodies of the store's REST API (``/v1/agl``), shared by server and client.

Each model mirrors the keyword arguments of one :class:`~agl.store.LightningStore` method. Update bodies
distinguish "absent" (leave the field alone) from an explicit ``null`` through ``model_fields_set``.
"""

from __future__ import annotations

from typing import Any, Literal, Union

from agl.types import (
    AttemptedRollout,
    AttemptStatus,
    EnqueueRolloutRequest,
    FilterLogic,
    Rollout,
    RolloutConfig,
    RolloutMode,
    RolloutStatus,
    SortOrder,
    Span,
    TaskInput,
    WorkerStatus,
)
from pydantic import BaseModel, ConfigDict, Field

__all__ = [
    "API_PREFIX",
    "IDEMPOTENCY_HEADER",
    "WAIT_COMPLETE_HEADER",
    "AddSpansRequest",
    "AddSpansResponse",
    "AttemptQuery",
    "DequeueRequest",
    "EnqueueRequest",
    "ErrorBody",
    "HealthBody",
    "NextSequenceIdRequest",
    "NextSequenceIdResponse",
    "NextSequenceIdsRequest",
    "NextSequenceIdsResponse",
    "ResourcesQuery",
    "RolloutOrAttempted",
    "RolloutQuery",
    "SpanQuery",
    "StartAttemptRequest",
    "StartRolloutRequest",
    "UpdateAttemptRequest",
    "UpdateRolloutRequest",
    "UpdateWorkerRequest",
    "WaitRequest",
    "WorkerQuery",
]

API_PREFIX = "/v1/agl"
IDEMPOTENCY_HEADER = "Idempotency-Key"
"""A client-chosen id on a write; a retry with the same id gets the first answer instead of a second write."""
WAIT_COMPLETE_HEADER = "AGL-Wait-Complete"
"""``true`` when a long poll ended because there was nothing left to wait for (not because time ran out)."""

RolloutOrAttempted = Union[AttemptedRollout, Rollout]  # noqa: UP007
"""A rollout with its latest attempt when it has one."""


class _Body(BaseModel):
    model_config = ConfigDict(extra="forbid")


class HealthBody(BaseModel):
    status: Literal["ok"] = "ok"


class ErrorBody(BaseModel):
    """Every 4xx/5xx answer of the API."""

    detail: str
    """What went wrong and, where possible, how to fix it."""
    error_type: str
    """The exception class, e.g. ``NotFoundError``, ``RequestValidationError``."""
    traceback: str | None = None
    """Only when the server runs with ``debug=True``."""
    errors: list[dict[str, Any]] | None = None
    """For 422: one entry per offending field (``loc``, ``msg``, ``type``)."""


class EnqueueRequest(_Body):
    rollouts: list[EnqueueRolloutRequest]


class DequeueRequest(_Body):
    limit: int = 1
    worker_id: str | None = None
    timeout: float = Field(default=0.0, ge=0)
    """Seconds to wait for work (long poll); the server caps it at its ``max_wait_seconds``."""


class StartRolloutRequest(_Body):
    input: TaskInput = None
    mode: RolloutMode | None = None
    resources_id: str | None = None
    config: RolloutConfig | None = None
    metadata: dict[str, Any] | None = None
    worker_id: str | None = None


class _Page(_Body):
    sort_order: SortOrder = "asc"
    limit: int = -1
    offset: int = 0


class RolloutQuery(_Page):
    status_in: list[RolloutStatus] | None = None
    rollout_id_in: list[str] | None = None
    rollout_id_contains: str | None = None
    filter_logic: FilterLogic = "and"
    sort_by: str | None = None


class UpdateRolloutRequest(_Body):
    """Only the fields present are written; ``input``, ``mode``, ``resources_id``, ``metadata`` may be ``null``."""

    input: TaskInput = None
    mode: RolloutMode | None = None
    resources_id: str | None = None
    status: RolloutStatus | None = None
    config: RolloutConfig | None = None
    metadata: dict[str, Any] | None = None


class StartAttemptRequest(_Body):
    worker_id: str | None = None


class AttemptQuery(_Page):
    sort_by: str | None = "sequence_id"


class UpdateAttemptRequest(_Body):
    """Only the fields present are written; none of them may be ``null``."""

    status: AttemptStatus | None = None
    worker_id: str | None = None
    last_heartbeat_time: float | None = None
    metadata: dict[str, Any] | None = None


class WaitRequest(_Body):
    rollout_ids: list[str]
    timeout: float | None = Field(default=None, ge=0)
    """Seconds; the server waits at most its ``max_wait_seconds`` per request (the client loops)."""


class ResourcesQuery(_Page):
    resources_id: str | None = None
    resources_id_contains: str | None = None
    sort_by: str | None = None


class AddSpansRequest(_Body):
    spans: list[Span]


class AddSpansResponse(BaseModel):
    stored: list[int]
    """Positions (in the request) of the spans that were stored; the others were duplicates."""


class SpanQuery(_Page):
    rollout_id: str
    attempt_id: str | None = None
    """An attempt id, ``"latest"``, or ``null`` for every attempt."""
    trace_id: str | None = None
    trace_id_contains: str | None = None
    span_id: str | None = None
    span_id_contains: str | None = None
    parent_id: str | None = None
    parent_id_contains: str | None = None
    name: str | None = None
    name_contains: str | None = None
    filter_logic: FilterLogic = "and"
    sort_by: str | None = "sequence_id"


class NextSequenceIdRequest(_Body):
    rollout_id: str
    attempt_id: str


class NextSequenceIdResponse(BaseModel):
    sequence_id: int


class NextSequenceIdsRequest(_Body):
    pairs: list[tuple[str, str]]
    """``[rollout_id, attempt_id]`` pairs; one sequence id each, in order."""


class NextSequenceIdsResponse(BaseModel):
    sequence_ids: list[int]


class WorkerQuery(_Page):
    status_in: list[WorkerStatus] | None = None
    worker_id_contains: str | None = None
    filter_logic: FilterLogic = "and"
    sort_by: str | None = None


class UpdateWorkerRequest(_Body):
    heartbeat_stats: dict[str, Any] | None = None
