"""Request and response bodies of the store's REST API (``/v1/agl``), shared by server and client.

Each model mirrors the keyword arguments of one :class:`~agl.store.LightningStore` method. Update bodies
distinguish "absent" (leave the field alone) from an explicit ``null`` through ``model_fields_set``.
"""

from __future__ import annotations

import types
from typing import Annotated, Any, Literal, Union, get_args, get_origin

from agl.types import (
    Attempt,
    AttemptedRollout,
    AttemptStatus,
    EnqueueRolloutRequest,
    FilterLogic,
    ResourcesUpdate,
    Rollout,
    RolloutConfig,
    RolloutMode,
    RolloutStatus,
    SortOrder,
    Span,
    TaskInput,
    Worker,
    WorkerStatus,
)
from pydantic import BaseModel, BeforeValidator, ConfigDict, Field

__all__ = [
    "API_PREFIX",
    "IDEMPOTENCY_HEADER",
    "WAIT_COMPLETE_HEADER",
    "AddSpansInOrderResponse",
    "AddSpansRequest",
    "AddSpansResponse",
    "AttemptQuery",
    "AttemptQueryParams",
    "DequeueRequest",
    "EnqueueRequest",
    "ErrorBody",
    "HealthBody",
    "NextSequenceIdRequest",
    "NextSequenceIdResponse",
    "NextSequenceIdsRequest",
    "NextSequenceIdsResponse",
    "ResourcesQuery",
    "ResourcesQueryParams",
    "RolloutOrAttempted",
    "RolloutQuery",
    "RolloutQueryParams",
    "SpanQuery",
    "SpanQueryParams",
    "StartAttemptRequest",
    "StartRolloutRequest",
    "UpdateAttemptRequest",
    "UpdateRolloutRequest",
    "UpdateWorkerRequest",
    "WaitRequest",
    "WorkerQuery",
    "WorkerQueryParams",
]

API_PREFIX = "/v1/agl"
IDEMPOTENCY_HEADER = "Idempotency-Key"
"""A client-chosen id on a write; a retry with the same id gets the first answer instead of a second write."""
WAIT_COMPLETE_HEADER = "AGL-Wait-Complete"
"""``true`` when a long poll ended because there was nothing left to wait for (not because time ran out)."""

RolloutOrAttempted = Union[AttemptedRollout, Rollout]  # noqa: UP007
"""A rollout with its latest attempt when it has one."""


_MAX_PAGE = 10**12


def _is_scalar(annotation: Any) -> bool:
    if annotation in (str, int, float, bool, type(None)):
        return True
    origin = get_origin(annotation)
    if origin is Literal:
        return True
    if origin in (Union, types.UnionType):
        return all(_is_scalar(arg) for arg in get_args(annotation))
    return False


def _sort_fields(model: type[BaseModel]) -> Any:
    """``Literal`` of the fields one can sort by (scalar ones), so the schema states and validates them exactly."""
    names = tuple(name for name, info in model.model_fields.items() if _is_scalar(info.annotation))
    return Literal[names]  # type: ignore[valid-type]


RolloutSortField = _sort_fields(Rollout)
AttemptSortField = _sort_fields(Attempt)
ResourcesSortField = _sort_fields(ResourcesUpdate)
SpanSortField = _sort_fields(Span)
WorkerSortField = _sort_fields(Worker)


def _json_integer(value: Any) -> Any:
    # JSON Schema's "integer" includes 3.0 but not true; strict validation alone would get both wrong.
    if isinstance(value, bool):
        raise ValueError("must be an integer, not a boolean")
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


JsonInt = Annotated[int, BeforeValidator(_json_integer)]


def _not_null(default: Any = None) -> Any:
    """An optional field that may be left out but not sent as ``null`` (the schema says so too)."""
    return Field(default=default, json_schema_extra=_drop_default)


def _drop_default(schema: dict[str, Any]) -> None:
    schema.pop("default", None)


class _Body(BaseModel):
    # Strict: JSON types must match the schema (``false`` is not a number, ``"3"`` is not an integer).
    model_config = ConfigDict(extra="forbid", strict=True)


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
    limit: JsonInt = Field(default=1, le=_MAX_PAGE)
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
    limit: JsonInt = Field(default=-1, ge=-1, le=_MAX_PAGE)
    """-1: no limit; 0: count only."""
    offset: JsonInt = Field(default=0, ge=0, le=_MAX_PAGE)


class RolloutQuery(_Page):
    status_in: list[RolloutStatus] | None = None
    rollout_id_in: list[str] | None = None
    rollout_id_contains: str | None = None
    filter_logic: FilterLogic = "and"
    sort_by: RolloutSortField | None = None  # type: ignore[valid-type]


class UpdateRolloutRequest(_Body):
    """Only the fields present are written; ``input``, ``mode``, ``resources_id``, ``metadata`` may be ``null``."""

    input: TaskInput = None
    mode: RolloutMode | None = None
    resources_id: str | None = None
    status: RolloutStatus = _not_null()
    config: RolloutConfig = _not_null()
    metadata: dict[str, Any] | None = None


class StartAttemptRequest(_Body):
    worker_id: str | None = None


class AttemptQuery(_Page):
    sort_by: AttemptSortField | None = "sequence_id"  # type: ignore[valid-type]


class UpdateAttemptRequest(_Body):
    """Only the fields present are written; none of them may be ``null``."""

    status: AttemptStatus = _not_null()
    worker_id: str = _not_null()
    last_heartbeat_time: float = _not_null()
    metadata: dict[str, Any] = _not_null()


class WaitRequest(_Body):
    rollout_ids: list[str]
    timeout: float | None = Field(default=None, ge=0)
    """Seconds; the server waits at most its ``max_wait_seconds`` per request (the client loops)."""


class ResourcesQuery(_Page):
    resources_id: str | None = None
    resources_id_contains: str | None = None
    sort_by: ResourcesSortField | None = None  # type: ignore[valid-type]


class AddSpansRequest(_Body):
    spans: list[Span]


class AddSpansResponse(BaseModel):
    stored: list[int]
    """Positions (in the request) of the spans that were stored; the others were duplicates."""


class AddSpansInOrderResponse(AddSpansResponse):
    sequence_ids: list[int]
    """The sequence id each stored span was given, in the order of ``stored``."""


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
    sort_by: SpanSortField | None = "sequence_id"  # type: ignore[valid-type]


class NextSequenceIdRequest(_Body):
    rollout_id: str
    attempt_id: str


class NextSequenceIdResponse(BaseModel):
    sequence_id: int


class NextSequenceIdsRequest(_Body):
    pairs: list[Annotated[list[str], Field(min_length=2, max_length=2)]]
    """``[rollout_id, attempt_id]`` pairs; one sequence id each, in order."""


class NextSequenceIdsResponse(BaseModel):
    sequence_ids: list[int]


class WorkerQuery(_Page):
    status_in: list[WorkerStatus] | None = None
    worker_id_contains: str | None = None
    filter_logic: FilterLogic = "and"
    sort_by: WorkerSortField | None = None  # type: ignore[valid-type]


class UpdateWorkerRequest(_Body):
    heartbeat_stats: dict[str, Any] = _not_null()


# Query-string variants of the search bodies for the GET routes: query values arrive as text, so these
# convert ("10" → 10) instead of validating strictly.
_LAX = ConfigDict(extra="forbid", strict=False)


class RolloutQueryParams(RolloutQuery):
    model_config = _LAX


class AttemptQueryParams(AttemptQuery):
    model_config = _LAX


class ResourcesQueryParams(ResourcesQuery):
    model_config = _LAX


class SpanQueryParams(SpanQuery):
    model_config = _LAX


class WorkerQueryParams(WorkerQuery):
    model_config = _LAX
