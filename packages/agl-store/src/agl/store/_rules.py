"""The status machine of rollouts, attempts and workers as pure functions, shared by every backend.

Backends keep the data; these functions decide what the data becomes. Keeping them here is what makes
the in-memory and SQL stores behave identically.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

from agl.types import (
    FINISHED_STATUSES,
    LIVE_ATTEMPT_STATUSES,
    Attempt,
    AttemptStatus,
    AttemptUpdate,
    InvalidRequestError,
    RolloutConfig,
    RolloutStatus,
    Worker,
)

__all__ = [
    "Sorted",
    "attempt_end_time",
    "attempt_status_after_span",
    "outcome_changes",
    "rollout_end_time",
    "rollout_promoted_by_span",
    "rollout_status_after_attempt",
    "rollout_status_from_attempt",
    "sort_field",
    "sort_key_none_last",
    "watchdog_verdict",
    "worker_after_attempt",
    "worker_after_empty_dequeue",
]

ATTEMPT_TERMINAL: frozenset[AttemptStatus] = frozenset({"succeeded", "failed", "timeout"})
"""Attempt statuses that end an attempt (``end_time`` is set). ``unresponsive`` may still recover."""


def rollout_status_from_attempt(
    status: AttemptStatus, sequence_id: int, config: RolloutConfig
) -> RolloutStatus:
    """The rollout status implied by the status of its latest attempt, retries included."""
    if status in ("preparing", "running", "succeeded"):
        return status
    if status in ("failed", "timeout", "unresponsive"):
        if status in config.retry_condition and sequence_id < config.max_attempts:
            return "requeuing"
        return "failed"
    raise InvalidRequestError(f"invalid attempt status {status!r}")


def rollout_status_after_attempt(
    rollout_status: RolloutStatus, status: AttemptStatus, sequence_id: int, config: RolloutConfig
) -> RolloutStatus | None:
    """The new status of a rollout whose latest attempt changed to ``status``, or ``None`` to keep it.

    A ``cancelled`` rollout stays cancelled: a runner finishing its attempt late must not revive it.
    """
    if rollout_status == "cancelled":
        return None
    new_status = rollout_status_from_attempt(status, sequence_id, config)
    return None if new_status == rollout_status else new_status


def outcome_changes(
    changes: AttemptUpdate, metadata: dict[str, Any] | None, *, is_latest: bool, rollout_status: RolloutStatus
) -> AttemptUpdate:
    """The fields :meth:`~agl.store.LightningStore.finish_attempt` writes: only the attempt that still holds
    its rollout can succeed.

    A runner may report success after the store gave up on its attempt and retried the rollout elsewhere,
    or after the rollout was cancelled. Decided in the same transaction as the write (a runner asking first
    would race the watchdog), such a result is dropped: the attempt becomes ``failed`` and its metadata's
    ``error`` says why, so a rollout never has two attempts that succeeded. ``metadata``: the attempt's
    current metadata, kept when ``changes`` bring none.
    """
    if changes.get("status") != "succeeded":
        return changes
    if rollout_status == "cancelled":
        reason = "its rollout was cancelled"
    elif not is_latest:
        reason = "a later attempt took over its rollout"
    else:
        return changes
    dropped = changes.copy()
    dropped["status"] = "failed"
    dropped["metadata"] = {
        **changes.get("metadata", metadata or {}),
        "error": {
            "type": "ResultDropped",
            "message": f"the agent finished, but {reason}: its result is dropped",
            "traceback": "",
        },
    }
    return dropped


def attempt_end_time(status: AttemptStatus, current_end_time: float | None, now: float) -> float | None:
    """``end_time`` after a status change: set when the attempt ends, kept otherwise."""
    if status in ATTEMPT_TERMINAL:
        return current_end_time if current_end_time is not None else now
    return current_end_time


def rollout_end_time(
    new_status: RolloutStatus, old_status: RolloutStatus, current_end_time: float | None, now: float
) -> float | None:
    """A rollout's ``end_time`` after its status was set: stamped when it becomes finished, kept while it
    stays finished, cleared when it is brought back to life (requeued, manual retry)."""
    if new_status in FINISHED_STATUSES:
        if new_status == old_status and current_end_time is not None:
            return current_end_time
        return now
    return None


def attempt_status_after_span(status: AttemptStatus) -> AttemptStatus:
    """A span is a heartbeat: a live attempt becomes ``running``; an ended attempt keeps its status."""
    return "running" if status in ("preparing", "unresponsive") else status


def rollout_promoted_by_span(
    rollout_status: RolloutStatus, attempt_status_before: AttemptStatus, is_latest: bool
) -> bool:
    """Whether a span for an attempt moves its rollout to ``running``.

    Only spans of the latest attempt, only while that attempt was live (a late span of a timed-out or
    failed attempt must not cancel a pending retry), and only from a not-yet-running, not-finished status.
    """
    return (
        is_latest
        and attempt_status_before in LIVE_ATTEMPT_STATUSES
        and rollout_status in ("queuing", "preparing", "requeuing")
    )


def watchdog_verdict(attempt: Attempt, config: RolloutConfig, now: float) -> AttemptStatus | None:
    """``timeout`` or ``unresponsive`` when a live attempt broke its rollout's limits, else ``None``."""
    if attempt.status not in ("preparing", "running"):
        return None
    if config.timeout_seconds is not None and now - attempt.start_time > config.timeout_seconds:
        return "timeout"
    if config.unresponsive_seconds is not None:
        last_sign_of_life = (
            attempt.last_heartbeat_time if attempt.last_heartbeat_time is not None else attempt.start_time
        )
        if now - last_sign_of_life > config.unresponsive_seconds:
            return "unresponsive"
    return None


def worker_after_attempt(worker: Worker, attempt: Attempt, now: float, *, dequeued: bool = False) -> Worker:
    """The worker's status and assignment after its attempt was created or changed status.

    Heartbeat fields are never touched here.
    """
    update: dict[str, Any]
    if attempt.status in ("succeeded", "failed", "timeout", "unresponsive"):
        # a lost attempt leaves its worker's state unknown
        status = "idle" if attempt.status in ("succeeded", "failed") else "unknown"
        update = {
            "status": status,
            "last_idle_time": now,
            "current_rollout_id": None,
            "current_attempt_id": None,
        }
    else:
        update = {
            "status": "busy",
            "last_busy_time": now,
            "current_rollout_id": attempt.rollout_id,
            "current_attempt_id": attempt.attempt_id,
        }
    if dequeued:
        update["last_dequeue_time"] = now
    return worker.model_copy(update=update)


def worker_after_empty_dequeue(worker: Worker, now: float) -> Worker:
    """A dequeue that found nothing: the worker is idle."""
    if worker.status == "idle":
        return worker.model_copy(update={"last_dequeue_time": now})
    return worker.model_copy(update={"status": "idle", "last_idle_time": now, "last_dequeue_time": now})


def is_finished_rollout(status: RolloutStatus) -> bool:
    return status in FINISHED_STATUSES


class Sorted(Protocol):
    """A query object, as far as sorting goes."""

    @property
    def sort_by(self) -> str | None: ...


def sort_field(query: Sorted) -> str | None:
    """The field ``query`` sorts by. (Each query class declares ``sort_by`` as a ``Literal`` of its rows' fields,
    built when :mod:`agl.types.query` is imported, which a type checker cannot read; this is its typed view.)"""
    return query.sort_by


def sort_key_none_last(value: Any) -> tuple[int, Any]:
    """Sort key that puts ``None`` after every value in ascending order (same rule in every backend)."""
    return (1, 0) if value is None else (0, value)


def as_list(values: Sequence[Any] | None) -> list[Any] | None:
    return None if values is None else list(values)
