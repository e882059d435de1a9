"""Rollouts, attempts, their statuses and retry policy, workers and triplets."""

from __future__ import annotations

from typing import Any, Literal, Protocol, TypedDict, TypeVar, get_args

from pydantic import BaseModel, ConfigDict, Field, model_validator

__all__ = [
    "FINISHED_STATUSES",
    "LIVE_ATTEMPT_STATUSES",
    "QUEUED_STATUSES",
    "RUNNING_STATUSES",
    "Attempt",
    "AttemptStatus",
    "AttemptUpdate",
    "AttemptedRollout",
    "Dataset",
    "EnqueueRolloutRequest",
    "Rollout",
    "RolloutConfig",
    "RolloutMode",
    "RolloutStatus",
    "RolloutUpdate",
    "StatusCounts",
    "TaskInput",
    "Triplet",
    "Worker",
    "WorkerStatus",
    "is_finished",
    "is_queued",
    "is_running",
]

T_co = TypeVar("T_co", covariant=True)

RolloutStatus = Literal["queuing", "preparing", "running", "failed", "succeeded", "cancelled", "requeuing"]
"""Outside view of a rollout. ``queuing`` is the initial status of an enqueued rollout."""

AttemptStatus = Literal["preparing", "running", "failed", "succeeded", "unresponsive", "timeout"]
"""Status of one execution try. ``unresponsive``: heartbeats stopped; ``timeout``: ran too long."""

RolloutMode = Literal["train", "val", "test"]
WorkerStatus = Literal["idle", "busy", "unknown"]
TaskInput = Any

QUEUED_STATUSES: frozenset[RolloutStatus] = frozenset({"queuing", "requeuing"})
RUNNING_STATUSES: frozenset[RolloutStatus] = frozenset({"preparing", "running"})
FINISHED_STATUSES: frozenset[RolloutStatus] = frozenset({"failed", "succeeded", "cancelled"})
LIVE_ATTEMPT_STATUSES: frozenset[AttemptStatus] = frozenset({"preparing", "running", "unresponsive"})
"""Attempt statuses from which a span may still bring the attempt (back) to ``running``."""

ROLLOUT_STATUSES: tuple[RolloutStatus, ...] = get_args(RolloutStatus)
ATTEMPT_STATUSES: tuple[AttemptStatus, ...] = get_args(AttemptStatus)


def is_queued(status: RolloutStatus) -> bool:
    """Waiting in the queue for a runner (``queuing`` or ``requeuing``)."""
    return status in QUEUED_STATUSES


def is_running(status: RolloutStatus) -> bool:
    """Claimed by a runner (``preparing`` or ``running``)."""
    return status in RUNNING_STATUSES


def is_finished(status: RolloutStatus) -> bool:
    """Terminal: ``failed``, ``succeeded`` or ``cancelled``."""
    return status in FINISHED_STATUSES


class RolloutConfig(BaseModel):
    """Retry and timeout policy of a rollout, enforced by the store."""

    timeout_seconds: float | None = Field(default=None, gt=0)
    """An attempt running longer than this becomes ``timeout``. ``None``: never."""
    unresponsive_seconds: float | None = Field(default=None, gt=0)
    """An attempt without a heartbeat for longer than this becomes ``unresponsive``. ``None``: never."""
    max_attempts: int = Field(default=1, ge=1)
    """Attempts allowed in total, counting the first one."""
    retry_condition: list[AttemptStatus] = Field(default_factory=list)
    """Attempt statuses that allow a retry (e.g. ``["failed", "timeout"]``)."""


class Attempt(BaseModel):
    """One execution try of a rollout."""

    rollout_id: str
    attempt_id: str
    sequence_id: int = Field(ge=1)
    """1-based ordinal of the attempt within its rollout."""
    start_time: float
    end_time: float | None = None
    status: AttemptStatus = "preparing"
    worker_id: str | None = None
    last_heartbeat_time: float | None = None
    metadata: dict[str, Any] | None = None


class Rollout(BaseModel):
    """One unit of work: a task input to run an agent on, and what became of it."""

    rollout_id: str
    input: TaskInput = None
    start_time: float
    end_time: float | None = None
    mode: RolloutMode | None = None
    resources_id: str | None = None
    status: RolloutStatus = "queuing"
    config: RolloutConfig = Field(default_factory=RolloutConfig)
    metadata: dict[str, Any] | None = None


class AttemptedRollout(Rollout):
    """A rollout together with its current (latest) attempt."""

    attempt: Attempt

    @model_validator(mode="after")
    def _attempt_belongs_to_rollout(self) -> AttemptedRollout:
        if self.attempt.rollout_id != self.rollout_id:
            raise ValueError(
                f"attempt.rollout_id {self.attempt.rollout_id!r} does not match rollout_id {self.rollout_id!r}"
            )
        return self


class EnqueueRolloutRequest(BaseModel):
    """One item of a batch enqueue."""

    input: TaskInput
    mode: RolloutMode | None = None
    resources_id: str | None = None
    config: RolloutConfig | None = None
    metadata: dict[str, Any] | None = None


class RolloutUpdate(TypedDict, total=False):
    """The fields an ``update_rollout`` call writes (only those present; the store checks them first)."""

    input: TaskInput
    mode: RolloutMode | None
    resources_id: str | None
    status: RolloutStatus
    config: RolloutConfig
    metadata: dict[str, Any] | None


class AttemptUpdate(TypedDict, total=False):
    """The fields an ``update_attempt`` call writes (only those present; the store checks them first)."""

    status: AttemptStatus
    worker_id: str
    last_heartbeat_time: float
    metadata: dict[str, Any]


class StatusCounts:
    """Mixin of rollout tallies: ``succeeded`` and ``failed`` read from the class's ``by_status`` counts."""

    by_status: dict[str, int]

    @property
    def succeeded(self) -> int:
        return self.by_status.get("succeeded", 0)

    @property
    def failed(self) -> int:
        return self.by_status.get("failed", 0)


class Worker(BaseModel):
    """What the store knows about a runner."""

    worker_id: str
    status: WorkerStatus = "unknown"
    heartbeat_stats: dict[str, Any] | None = None
    last_heartbeat_time: float | None = None
    last_dequeue_time: float | None = None
    last_busy_time: float | None = None
    last_idle_time: float | None = None
    current_rollout_id: str | None = None
    current_attempt_id: str | None = None


class Triplet(BaseModel):
    """One RL transition: a prompt, the model's response and its reward.

    By convention ``prompt`` and ``response`` are dicts with at least ``token_ids``; the response
    may carry ``logprobs``. ``metadata`` holds what is needed to group by rollout and turn.
    """

    model_config = ConfigDict(extra="forbid")

    prompt: Any
    response: Any
    reward: float | None = None
    metadata: dict[str, Any] = Field(default_factory=dict)


class Dataset(Protocol[T_co]):
    """Anything indexable with a length; plain lists qualify."""

    def __getitem__(self, index: int, /) -> T_co: ...

    def __len__(self) -> int: ...
