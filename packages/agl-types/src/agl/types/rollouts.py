"""Rollouts and their attempts: the unit of work, its retry policy, and the updates the store accepts."""

from __future__ import annotations

from typing import Any, Literal, TypedDict

from pydantic import BaseModel, Field, model_validator

from .statuses import AttemptStatus, RolloutStatus

__all__ = [
    "Attempt",
    "AttemptUpdate",
    "AttemptedRollout",
    "EnqueueRolloutRequest",
    "Rollout",
    "RolloutConfig",
    "RolloutMode",
    "RolloutUpdate",
    "TaskInput",
]

RolloutMode = Literal["train", "val", "test"]
"""Which split a rollout's input comes from."""
TaskInput = Any
"""The input an agent runs on (whatever the dataset holds)."""


class RolloutConfig(BaseModel):
    """Retry and timeout policy of a rollout, enforced by the store."""

    timeout_seconds: float | None = Field(default=None, gt=0)
    """An attempt running longer than this becomes ``timeout``. ``None``: never."""
    unresponsive_seconds: float | None = Field(default=None, gt=0)
    """An attempt without a heartbeat for longer than this becomes ``unresponsive``. ``None``: never."""
    max_attempts: int = Field(default=1, ge=1)
    """Attempts allowed in total, counting the first one."""
    retry_condition: list[AttemptStatus] = Field(default_factory=list[AttemptStatus])
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
