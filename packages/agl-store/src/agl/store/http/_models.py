"""Request and response bodies of the store's REST API (``/v1/agl``), shared by server and client.

Each model mirrors the keyword arguments of one :class:`~agl.store.LightningStore` method; the queries are
the query objects of :mod:`agl.types.query` themselves (and their query-string variants for ``GET``).
Update bodies distinguish "absent" (leave the field alone) from an explicit ``null`` through
``model_fields_set``.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal, Union

from agl.types import (
    Attempt,
    AttemptedRollout,
    AttemptStatus,
    EnqueueRolloutRequest,
    ResourcesUpdate,
    Rollout,
    RolloutConfig,
    RolloutMode,
    RolloutStatus,
    Span,
    TaskInput,
)
from agl.types.query import (
    MAX_PAGE,
    AttemptQuery,
    PageInt,
    ResourcesQuery,
    RolloutQuery,
    SpanQuery,
    StoreQuery,
    WorkerQuery,
)
from pydantic import BaseModel, ConfigDict, Field, create_model

__all__ = [
    "API_PREFIX",
    "IDEMPOTENCY_HEADER",
    "WAIT_COMPLETE_HEADER",
    "AddSpansInOrderResponse",
    "AddSpansRequest",
    "AddSpansResponse",
    "AttemptQuery",
    "AttemptQueryBody",
    "AttemptQueryParams",
    "ClaimNext",
    "ClaimRequest",
    "ClaimResponse",
    "DequeueRequest",
    "EnqueueRequest",
    "ErrorBody",
    "FinishAttemptRequest",
    "FinishAttemptResponse",
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


_MAX_PAGE = MAX_PAGE


JsonInt = PageInt


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


class ClaimRequest(_Body):
    """Claim one rollout together with the resources it runs with (``POST /queues/rollouts/claim``)."""

    worker_id: str | None = None
    timeout: float = Field(default=0.0, ge=0)
    """Seconds to wait for work (long poll); the server caps it at its ``max_wait_seconds``."""
    known_resources: dict[str, JsonInt] = Field(default_factory=dict)
    """``resources_id → version`` the client already holds: those are not sent again."""


class ClaimResponse(BaseModel):
    """The claimed rollout (``null``: none came) and its resources: those named by its ``resources_id``, else
    the latest. ``resources`` is ``null`` when the client's known version is current (or there are none)."""

    rollout: AttemptedRollout | None = None
    resources_id: str | None = None
    """The snapshot the rollout runs with; ``null``: none (its ``resources_id`` is unknown, or no resources
    were ever added)."""
    resources_version: int | None = None
    resources: ResourcesUpdate | None = None


class StartRolloutRequest(_Body):
    input: TaskInput = None
    mode: RolloutMode | None = None
    resources_id: str | None = None
    config: RolloutConfig | None = None
    metadata: dict[str, Any] | None = None
    worker_id: str | None = None


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


class UpdateAttemptRequest(_Body):
    """Only the fields present are written; none of them may be ``null``."""

    status: AttemptStatus = _not_null()
    worker_id: str = _not_null()
    last_heartbeat_time: float = _not_null()
    metadata: dict[str, Any] = _not_null()


class ClaimNext(_Body):
    """Claim the worker's next rollout in the same request (as ``/queues/rollouts/claim``, without waiting)."""

    worker_id: str
    known_resources: dict[str, JsonInt] = Field(default_factory=dict)
    """``resources_id → version`` the client already holds: those are not sent again."""


class FinishAttemptRequest(UpdateAttemptRequest):
    """The attempt's last spans (numbered in order, as ``/spans/in-order``), then its fields (as an update)."""

    spans: list[Span] = Field(default_factory=list[Span])
    claim: ClaimNext = _not_null()


class WaitRequest(_Body):
    rollout_ids: list[str]
    timeout: float | None = Field(default=None, ge=0)
    """Seconds; the server waits at most its ``max_wait_seconds`` per request (the client loops)."""


class AddSpansRequest(_Body):
    spans: list[Span]


class AddSpansResponse(BaseModel):
    stored: list[int]
    """Positions (in the request) of the spans that were stored; the others were duplicates."""


class AddSpansInOrderResponse(AddSpansResponse):
    sequence_ids: list[int]
    """The sequence id each stored span was given, in the order of ``stored``."""


class FinishAttemptResponse(AddSpansInOrderResponse):
    attempt: Attempt
    """The attempt as written."""
    next: ClaimResponse | None = None
    """The claim asked for with ``claim`` (its ``rollout`` is ``null`` when none was queued)."""


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


class UpdateWorkerRequest(_Body):
    heartbeat_stats: dict[str, Any] = _not_null()


# Query-string variants of the query objects for the GET routes: query values arrive as text, so these
# convert ("10" → 10) instead of validating strictly. Fields, filters and checks are the query objects'.
_LAX = ConfigDict(extra="forbid", strict=False)


def _without(model: type[StoreQuery], name: str, *fields: str, config: ConfigDict) -> type[BaseModel]:
    """``model`` less ``fields`` (given by the path of the route instead)."""
    kept: dict[str, Any] = {
        n: (info.annotation, info) for n, info in model.model_fields.items() if n not in fields
    }
    return create_model(name, __config__=config, __module__=__name__, **kept)


class RolloutQueryParams(RolloutQuery):
    model_config = _LAX


class ResourcesQueryParams(ResourcesQuery):
    model_config = _LAX


class SpanQueryParams(SpanQuery):
    model_config = _LAX


class WorkerQueryParams(WorkerQuery):
    model_config = _LAX


AttemptQueryBody = _without(AttemptQuery, "AttemptQueryBody", "rollout_id", config=AttemptQuery.model_config)
"""Body of ``POST /rollouts/{rollout_id}/attempts/search``: an :class:`AttemptQuery` less its rollout."""
AttemptQueryParams = _without(AttemptQuery, "AttemptQueryParams", "rollout_id", config=_LAX)
