"""The statuses of rollouts, attempts and workers, the groups they fall into, and status tallies."""

from __future__ import annotations

from typing import Literal, get_args

__all__ = [
    "ATTEMPT_STATUSES",
    "FINISHED_STATUSES",
    "LIVE_ATTEMPT_STATUSES",
    "QUEUED_STATUSES",
    "ROLLOUT_STATUSES",
    "RUNNING_STATUSES",
    "AttemptStatus",
    "RolloutStatus",
    "StatusCounts",
    "WorkerStatus",
    "is_finished",
    "is_queued",
    "is_running",
]

RolloutStatus = Literal["queuing", "preparing", "running", "failed", "succeeded", "cancelled", "requeuing"]
"""Outside view of a rollout. ``queuing`` is the initial status of an enqueued rollout."""

AttemptStatus = Literal["preparing", "running", "failed", "succeeded", "unresponsive", "timeout"]
"""Status of one execution try. ``unresponsive``: heartbeats stopped; ``timeout``: ran too long."""

WorkerStatus = Literal["idle", "busy", "unknown"]
"""What a runner is doing, as the store last heard."""

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


class StatusCounts:
    """Mixin of rollout tallies: ``succeeded`` and ``failed`` read from the class's ``by_status`` counts."""

    by_status: dict[str, int]

    @property
    def succeeded(self) -> int:
        return self.by_status.get("succeeded", 0)

    @property
    def failed(self) -> int:
        return self.by_status.get("failed", 0)
